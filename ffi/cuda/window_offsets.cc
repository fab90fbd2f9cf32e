// CUDA window_indices handler: flat indices -> uint8 window offsets; semantics in
// unpool_call.h (WindowIndicesCall), the kernel in unpool_elements.h (FlatToOffsets).
#include "cuda/gpu_stream.h"
#include "cuda/handlers.h"
#include "cuda/unpool_call.h"

namespace jax_unpool {
namespace cuda {
namespace {

ffi::Error WindowIndices(cudaStream_t stream, ffi::AnyBuffer indices,
                         ffi::Result<ffi::AnyBuffer> offsets, bool channels_last,
                         ffi::Span<const int64_t> kernel_size, ffi::Span<const int64_t> stride,
                         ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                         bool ceil_mode, ffi::Span<const int64_t> input_size) {
  return NoThrow("window_indices", [&] {
    GpuStream device(stream);
    return WindowIndicesCall(device, indices, *offsets, channels_last, kernel_size, stride,
                             padding, dilation, ceil_mode, input_size);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(WindowIndicesCuda, WindowIndices,
                              BindPoolWindow(ffi::Ffi::Bind()
                                                 .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                 .Arg<ffi::AnyBuffer>()   // flat indices
                                                 .Ret<ffi::AnyBuffer>())  // offsets: uint8
                                  .Attr<ffi::Span<const int64_t>>("input_size"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jax_unpool
