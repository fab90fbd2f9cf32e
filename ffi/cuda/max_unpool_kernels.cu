// The forward's kernels (unpool_elements.h), launched by its plan (unpool_plan.h).
#include "cuda/device_launcher.cuh"
#include "cuda/kernels.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchForward(cudaStream_t stream, const ForwardLaunch& launch) {
  DeviceLauncher device(stream);
  RunForward(device, launch);
  return device.error();
}

}  // namespace cuda
}  // namespace jax_unpool
