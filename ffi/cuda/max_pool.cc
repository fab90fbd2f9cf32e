// CUDA max pool with indices: x -> (values, indices), flat or window offsets; semantics in
// pool_call.h, the kernel in pool_elements.h.
#include "cuda/gpu_stream.h"
#include "cuda/handlers.h"
#include "cuda/pool_call.h"

namespace jax_unpool {
namespace cuda {
namespace {

template <IndexFormat kFormat>
ffi::Error MaxPool(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> values,
                   ffi::Result<ffi::AnyBuffer> indices, bool channels_last,
                   ffi::Span<const int64_t> kernel_size, ffi::Span<const int64_t> stride,
                   ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                   bool ceil_mode) {
  return NoThrow("max_pool", [&] {
    GpuStream device(stream);
    return MaxPoolCall(device, x, *values, *indices, channels_last, kernel_size, stride,
                       padding, dilation, ceil_mode, kFormat);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    MaxPoolCuda, MaxPool<IndexFormat::kFlat>,
    BindPoolOperands(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
    {ffi::Traits::kCmdBufferCompatible});
// The same pool with window offsets (uint8) for indices.
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    MaxPoolWindowCuda, MaxPool<IndexFormat::kWindow>,
    BindPoolOperands(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
    {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jax_unpool
