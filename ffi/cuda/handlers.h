// The CUDA handlers (XLA FFI, platform "CUDA"), registered by jax_unpool/backends/cuda.py
// from the capsules of the _jax_unpool_cuda module:
//   MaxUnpoolCuda(+Checked)          jax_unpool_cuda_max_unpool(_checked)_v1
//   MaxUnpoolBackwardCuda(+Checked)  jax_unpool_cuda_max_unpool_backward(_checked)_v1
//   MaxPoolCuda                      jax_unpool_cuda_max_pool_v1
// and on window offsets (common/window_offsets.h), the pool's window as attributes:
//   MaxPoolWindowCuda                jax_unpool_cuda_max_pool_window_v1
//   MaxUnpoolWindowCuda(+Checked)    jax_unpool_cuda_max_unpool_window(_checked)_v1
//   MaxUnpoolBackwardWindowCuda(+Checked)
//                                    jax_unpool_cuda_max_unpool_backward_window(_checked)_v1
//   WindowIndicesCuda                jax_unpool_cuda_window_offsets_v1
// Semantics and calling conventions: unpool_call.h and pool_call.h. LoadCudaKernels is the
// instantiate stage of every target (kernel_registry.h): it loads the kernels on every
// device before XLA runs, or captures, any call.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jax_unpool {
namespace cuda {

XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolCheckedCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolBackwardCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolBackwardCheckedCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPoolCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPoolWindowCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolWindowCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolWindowCheckedCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolBackwardWindowCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolBackwardWindowCheckedCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(WindowIndicesCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(LoadCudaKernels);

}  // namespace cuda
}  // namespace jax_unpool
