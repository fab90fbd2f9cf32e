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

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolBackwardCuda, MaxUnpoolBackward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // grad_output
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<bool>("channels_last")
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

}  // namespace cuda
}  // namespace jax_unpool
