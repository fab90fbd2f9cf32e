// The CUDA kernels' entry points (kernels.cu): each launches one plan (unpool_plan.h,
// pool_plan.h) on `stream` and returns the first CUDA error of its launches, without
// synchronising. The handlers (*.cc) call them; nothing here needs the XLA headers.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/pool_plan.h"
#include "cuda/unpool_plan.h"

namespace jax_unpool {
namespace cuda {

cudaError_t LaunchForward(cudaStream_t stream, const ForwardLaunch& launch);
cudaError_t LaunchGather(cudaStream_t stream, const GatherLaunch& launch);
cudaError_t LaunchFindFirstBad(cudaStream_t stream, const FirstBadLaunch& launch);
cudaError_t LaunchPool(cudaStream_t stream, const PoolLaunch& launch);

}  // namespace cuda
}  // namespace jax_unpool
