// The forward's kernels (unpool_elements.h), launched by its plan (unpool_plan.h).
#include "cuda/grid_launcher.cuh"
#include "cuda/kernels.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchForward(cudaStream_t stream, const ForwardLaunch& launch) {
  GridLauncher launcher(stream);
  RunForward(launcher, launch);
  return launcher.error();
}

}  // namespace cuda
}  // namespace jax_unpool
