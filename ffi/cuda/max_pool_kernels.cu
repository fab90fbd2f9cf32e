// The pool's kernel (pool_elements.h), one per value order and index type.
#include "cuda/grid_launcher.cuh"
#include "cuda/kernels.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchPool(cudaStream_t stream, const PoolLaunch& launch) {
  GridLauncher launcher(stream);
  RunPool(launcher, launch);
  return launcher.error();
}

}  // namespace cuda
}  // namespace jax_unpool
