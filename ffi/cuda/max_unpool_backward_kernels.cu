// The backward's gather and the checked calls' index search (unpool_elements.h).
#include "cuda/grid_launcher.cuh"
#include "cuda/kernels.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchGather(cudaStream_t stream, const GatherLaunch& launch) {
  GridLauncher launcher(stream);
  RunGather(launcher, launch);
  return launcher.error();
}

cudaError_t LaunchFindFirstBad(cudaStream_t stream, const FirstBadLaunch& launch) {
  GridLauncher launcher(stream);
  RunFindFirstBad(launcher, launch);
  return launcher.error();
}

}  // namespace cuda
}  // namespace jax_unpool
