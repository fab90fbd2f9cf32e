// The launcher of the plans on a GPU (unpool_plan.h, pool_plan.h): each functor runs as a
// grid-stride kernel on XLA's stream, its grid sized from its occupancy (kernel_registry.h);
// nothing synchronises. The first failed launch or memset is kept.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/kernel_registry.h"
#include "cuda/unpool_plan.h"

namespace jax_unpool {
namespace cuda {

// Runs f(t) for every t < n; nothing when `guard` is non-null and *guard == 0 (the
// general pass after a windowed one that found every index in its box).
template <typename Index, typename F>
__global__ void __launch_bounds__(256) RunElements(F f, Index n, const uint32_t* guard) {
  if (guard != nullptr && *guard == 0) return;
  const Index step = static_cast<Index>(blockDim.x) * gridDim.x;
  for (Index t = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step)
    f(t);
}

// RunElements<Index, F>'s entry in the registry, added when the module loads: Run names
// `registered`, which instantiates it with the kernel. `entry` has no initialiser (zero at
// load): `registered`'s initialiser fills it, whichever of the two the loader reaches first.
template <typename Index, typename F>
struct Kernel {
  static KernelEntry entry;
  static const bool registered;
};
template <typename Index, typename F>
KernelEntry Kernel<Index, F>::entry;
template <typename Index, typename F>
const bool Kernel<Index, F>::registered = RegisterKernel(
    &Kernel<Index, F>::entry, reinterpret_cast<const void*>(&RunElements<Index, F>));

class GridLauncher {
 public:
  explicit GridLauncher(cudaStream_t stream) : stream_(stream) {}

  template <typename Index, typename F>
  void Run(Index n, const F& f, const uint32_t* guard) {
    if (n == 0 || error_ != cudaSuccess) return;
    // One wave of resident blocks (occupancy x multiprocessors), each thread striding over
    // the rest: no partial last wave; fewer blocks where there are fewer elements.
    static_assert(kThreadsPerBlock == 256, "RunElements is bounded for 256 threads");
    (void)Kernel<Index, F>::registered;
    const uint64_t wanted = (static_cast<uint64_t>(n) + kThreadsPerBlock - 1) / kThreadsPerBlock;
    const unsigned blocks = static_cast<unsigned>(
        std::min<uint64_t>(wanted, ResidentBlocks(&Kernel<Index, F>::entry)));
    RunElements<<<blocks, kThreadsPerBlock, 0, stream_>>>(f, n, guard);
    Note(cudaGetLastError());
  }
  template <typename F>
  void VisitOffsets(int64_t largest, F&& f) {
    VisitOffsetType(largest, f);
  }
  bool PlaneKernels() const { return true; }
  void Zero(void* p, size_t bytes) { Fill(p, 0, bytes); }
  void Fill(void* p, int byte, size_t bytes) {
    if (error_ == cudaSuccess) Note(cudaMemsetAsync(p, byte, bytes, stream_));
  }
  // cudaGetLastError also reports an earlier asynchronous failure on this device: it
  // fails this call too, as in jax's own CUDA FFI example.
  cudaError_t error() const { return error_; }

 private:
  void Note(cudaError_t e) {
    if (error_ == cudaSuccess) error_ = e;
  }
  cudaStream_t stream_;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace cuda
}  // namespace jax_unpool
