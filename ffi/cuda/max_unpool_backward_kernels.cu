// The backward's gather and the checked calls' index search (unpool_elements.h).
#include "cuda/device_launcher.cuh"
#include "cuda/kernels.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchGather(cudaStream_t stream, const GatherLaunch& launch) {
  DeviceLauncher device(stream);
  RunGather(device, launch);
  return device.error();
}

cudaError_t LaunchFindFirstBad(cudaStream_t stream, const FirstBadLaunch& launch) {
  DeviceLauncher device(stream);
  RunFindFirstBad(device, launch);
  return device.error();
}

}  // namespace cuda
}  // namespace jax_unpool
