// The CUDA kernels' entry points (*_kernels.cu): each launches one plan (unpool_plan.h,
// pool_plan.h) on `stream` and returns the first CUDA error of its launches, without
// synchronising. The handlers (*.cc) call them; nothing here needs the XLA headers.
//
// What crosses from the kernels to the handlers -- here and in kernel_registry.h -- is
// plain: CUDA types, built-in types, plain structs. The release wheels compile the .cu
// files with nvcc and GCC (libstdc++) but the .cc files with clang and LLVM's libc++, which
// the module carries (tools/build-wheels): a standard-library type in this interface
// (std::vector, std::atomic, ...) would be two types, and the .cu code may call nothing of
// the standard library that is not inline (the wheels' build checks the objects).
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
cudaError_t LaunchWindowIndices(cudaStream_t stream, const WindowIndicesLaunch& launch);

}  // namespace cuda
}  // namespace jax_unpool
