// A max pool's sizes and window per axis (D, H, W); a 1-D or 2-D pool has leading axes of
// size 1 with a window of 1. The checked call (common/pool_geometry.h), the CUDA launch and
// the CUDA kernel's arithmetic (cuda/pool_plan.h, cuda/pool_elements.h) each carry it, and
// copy it from one to the next, with the window arithmetic they share. No XLA headers:
// CUDA device code uses it.
#pragma once

#include <cstdint>

namespace jax_unpool {

// Host and device code alike (nvcc); plain C++ elsewhere.
#ifdef __CUDACC__
#define JU_AXES_FN __host__ __device__
#else
#define JU_AXES_FN
#endif

// T is the arithmetic's type: int64_t everywhere (PoolAxes), except in the CUDA kernels of
// calls whose every coordinate fits in int32_t (cuda/pool_plan.h): GPUs divide 64-bit
// integers in a called routine, 32-bit ones inline.
template <typename T>
struct BasicPoolAxes {
  T in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  T kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};

  // Input coordinate of tap t of window o along axis a (may lie in the padding).
  JU_AXES_FN T Tap(int a, T o, T t) const { return o * stride[a] - pad[a] + t * dil[a]; }
  // The taps of window o along axis a that land inside the input are [FirstTap, EndTap)
  // (none if FirstTap >= EndTap), computed rather than searched: a window costs its part
  // inside the input, not its kernel size (which may be 2^31 - 1 taps, nearly all padding).
  // Per window, in the kernels' loops: no division without dilation, the common case.
  JU_AXES_FN T FirstTap(int a, T o) const {
    const T start = o * stride[a] - pad[a];
    if (start >= 0) return 0;
    return dil[a] == 1 ? -start : (-start + dil[a] - 1) / dil[a];
  }
  JU_AXES_FN T EndTap(int a, T o) const {
    const T start = o * stride[a] - pad[a];
    if (start >= in[a]) return 0;
    const T end = dil[a] == 1 ? in[a] - start : (in[a] - 1 - start) / dil[a] + 1;
    return end < kernel[a] ? end : kernel[a];
  }
  // PyTorch's initial argmax coordinate: the first tap inside the input; past the input
  // when a ceil_mode window holds only padding.
  JU_AXES_FN T First(int a, T o) const { return Tap(a, o, FirstTap(a, o)); }
};

using PoolAxes = BasicPoolAxes<int64_t>;

}  // namespace jax_unpool
