// window_indices' kernel (unpool_elements.h's FlatToOffsets), one per index type.
#include "cuda/grid_launcher.cuh"
#include "cuda/kernels.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchWindowIndices(cudaStream_t stream, const WindowIndicesLaunch& launch) {
  GridLauncher launcher(stream);
  RunWindowIndices(launcher, launch);
  return launcher.error();
}

}  // namespace cuda
}  // namespace jax_unpool
