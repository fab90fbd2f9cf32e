// CUDA forward handlers: (x, indices) -> (out, workspace); semantics in unpool_call.h, the
// kernels in unpool_elements.h. The default target never waits for the GPU and is safe to
// capture in a CUDA graph; the checked one waits for its index check's answer.
#include "cuda/gpu_stream.h"
#include "cuda/handlers.h"
#include "cuda/unpool_call.h"

namespace jax_unpool {
namespace cuda {
namespace {

template <bool kChecked>
ffi::Error MaxUnpool(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer indices,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> workspace,
                     bool channels_last, int64_t k, ffi::Span<const int64_t> window_extent,
                     ffi::Span<const int64_t> window_stride,
                     ffi::Span<const int64_t> window_padding) {
  return NoThrow("max_unpool", [&] {
    GpuStream device(stream);
    return MaxUnpoolCall(device, kChecked, x, indices, *out, *workspace, channels_last, k,
                         window_extent, window_stride, window_padding);
  });
}

template <bool kChecked>
ffi::Error MaxUnpoolWindow(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer offsets,
                           ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> workspace,
                           bool channels_last, ffi::Span<const int64_t> kernel_size,
                           ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                           ffi::Span<const int64_t> dilation, bool ceil_mode) {
  return NoThrow("max_unpool", [&] {
    GpuStream device(stream);
    return MaxUnpoolWindowCall(device, kChecked, x, offsets, *out, *workspace, channels_last,
                               kernel_size, stride, padding, dilation, ceil_mode);
  });
}

}  // namespace

#define JAX_UNPOOL_MAX_UNPOOL_BINDING                                                      \
  ffi::Ffi::Bind()                                                                         \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()                                            \
      .Arg<ffi::AnyBuffer>()                            /* x */                            \
      .Arg<ffi::AnyBuffer>()                            /* indices */                      \
      .Ret<ffi::AnyBuffer>()                            /* out */                          \
      .Ret<ffi::AnyBuffer>()                            /* workspace (unpool_plan.h) */    \
      .Attr<bool>("channels_last")                                                         \
      .Attr<int64_t>("spatial_rank")                                                       \
      .Attr<ffi::Span<const int64_t>>("window_extent")  /* the hint, or all three empty */ \
      .Attr<ffi::Span<const int64_t>>("window_stride")                                     \
      .Attr<ffi::Span<const int64_t>>("window_padding")

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolCuda, MaxUnpool<false>, JAX_UNPOOL_MAX_UNPOOL_BINDING,
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolCheckedCuda, MaxUnpool<true>,
                              JAX_UNPOOL_MAX_UNPOOL_BINDING);

// On window offsets: the pool's window as attributes, the same workspace.
#define JAX_UNPOOL_MAX_UNPOOL_WINDOW_BINDING                          \
  BindPoolWindow(ffi::Ffi::Bind()                                     \
                     .Ctx<ffi::PlatformStream<cudaStream_t>>()        \
                     .Arg<ffi::AnyBuffer>() /* x */                   \
                     .Arg<ffi::AnyBuffer>() /* offsets, uint8 */      \
                     .Ret<ffi::AnyBuffer>() /* out */                 \
                     .Ret<ffi::AnyBuffer>() /* workspace */)

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolWindowCuda, MaxUnpoolWindow<false>,
                              JAX_UNPOOL_MAX_UNPOOL_WINDOW_BINDING,
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolWindowCheckedCuda, MaxUnpoolWindow<true>,
                              JAX_UNPOOL_MAX_UNPOOL_WINDOW_BINDING);

}  // namespace cuda
}  // namespace jax_unpool
