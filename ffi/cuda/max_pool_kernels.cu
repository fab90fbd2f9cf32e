// The pool's kernel (pool_elements.h), one per value order and index type.
#include "cuda/device_launcher.cuh"
#include "cuda/kernels.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchPool(cudaStream_t stream, const PoolLaunch& launch) {
  DeviceLauncher device(stream);
  RunPool(device, launch);
  return device.error();
}

}  // namespace cuda
}  // namespace jax_unpool
