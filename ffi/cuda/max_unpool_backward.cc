// CUDA backward handlers, a gather: (grad_output, indices) -> out, and the checked one
// -> (out, workspace); semantics in unpool_call.h.
#include "cuda/gpu_stream.h"
#include "cuda/handlers.h"
#include "cuda/unpool_call.h"

namespace jax_unpool {
namespace cuda {
namespace {

ffi::Error MaxUnpoolBackward(cudaStream_t stream, ffi::AnyBuffer grad_output,
                             ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                             bool channels_last, int64_t k) {
  return NoThrow("max_unpool_backward", [&] {
    GpuStream device(stream);
    return MaxUnpoolBackwardCall(device, grad_output, indices, *out, nullptr, channels_last, k);
  });
}

ffi::Error MaxUnpoolBackwardChecked(cudaStream_t stream, ffi::AnyBuffer grad_output,
                                    ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                                    ffi::Result<ffi::AnyBuffer> workspace, bool channels_last,
                                    int64_t k) {
  return NoThrow("max_unpool_backward", [&] {
    GpuStream device(stream);
    const ffi::AnyBuffer ws = *workspace;
    return MaxUnpoolBackwardCall(device, grad_output, indices, *out, &ws, channels_last, k);
  });
}

ffi::Error MaxUnpoolBackwardWindow(cudaStream_t stream, ffi::AnyBuffer grad_output,
                                   ffi::AnyBuffer offsets, ffi::Result<ffi::AnyBuffer> out,
                                   bool channels_last, ffi::Span<const int64_t> kernel_size,
                                   ffi::Span<const int64_t> stride,
                                   ffi::Span<const int64_t> padding,
                                   ffi::Span<const int64_t> dilation, bool ceil_mode) {
  return NoThrow("max_unpool_backward", [&] {
    GpuStream device(stream);
    return MaxUnpoolBackwardWindowCall(device, grad_output, offsets, *out, nullptr, channels_last,
                                       kernel_size, stride, padding, dilation, ceil_mode);
  });
}

ffi::Error MaxUnpoolBackwardWindowChecked(cudaStream_t stream, ffi::AnyBuffer grad_output,
                                          ffi::AnyBuffer offsets, ffi::Result<ffi::AnyBuffer> out,
                                          ffi::Result<ffi::AnyBuffer> workspace,
                                          bool channels_last,
                                          ffi::Span<const int64_t> kernel_size,
                                          ffi::Span<const int64_t> stride,
                                          ffi::Span<const int64_t> padding,
                                          ffi::Span<const int64_t> dilation, bool ceil_mode) {
  return NoThrow("max_unpool_backward", [&] {
    GpuStream device(stream);
    const ffi::AnyBuffer ws = *workspace;
    return MaxUnpoolBackwardWindowCall(device, grad_output, offsets, *out, &ws, channels_last,
                                       kernel_size, stride, padding, dilation, ceil_mode);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolBackwardCuda, MaxUnpoolBackward,
                              BindUnpoolOperands(
                                  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>())
                                  .Attr<int64_t>("spatial_rank"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolBackwardCheckedCuda, MaxUnpoolBackwardChecked,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // grad_output
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Ret<ffi::AnyBuffer>()  // workspace (unpool_plan.h)
                                  .Attr<bool>("channels_last")
                                  .Attr<int64_t>("spatial_rank"));

// On window offsets: the pool's window as attributes.
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolBackwardWindowCuda, MaxUnpoolBackwardWindow,
                              BindPoolWindow(ffi::Ffi::Bind()
                                                 .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                 .Arg<ffi::AnyBuffer>()    // grad_output
                                                 .Arg<ffi::AnyBuffer>()    // offsets, uint8
                                                 .Ret<ffi::AnyBuffer>()),  // out
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolBackwardWindowCheckedCuda, MaxUnpoolBackwardWindowChecked,
                              BindPoolWindow(ffi::Ffi::Bind()
                                                 .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                 .Arg<ffi::AnyBuffer>()     // grad_output
                                                 .Arg<ffi::AnyBuffer>()     // offsets, uint8
                                                 .Ret<ffi::AnyBuffer>()     // out
                                                 .Ret<ffi::AnyBuffer>()));  // workspace

}  // namespace cuda
}  // namespace jax_unpool
