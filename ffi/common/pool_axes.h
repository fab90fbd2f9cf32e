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

struct PoolAxes {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};

  // Input coordinate of tap t of window o along axis a (may lie in the padding).
  JU_AXES_FN int64_t Tap(int a, int64_t o, int64_t t) const {
    return o * stride[a] - pad[a] + t * dil[a];
  }
  // The taps of window o along axis a that land inside the input are [FirstTap, EndTap)
  // (none if FirstTap >= EndTap), computed rather than searched: a window costs its part
  // inside the input, not its kernel size (which may be 2^31 - 1 taps, nearly all padding).
  JU_AXES_FN int64_t FirstTap(int a, int64_t o) const {
    const int64_t start = o * stride[a] - pad[a];
    return start >= 0 ? 0 : (-start + dil[a] - 1) / dil[a];
  }
  JU_AXES_FN int64_t EndTap(int a, int64_t o) const {
    const int64_t start = o * stride[a] - pad[a];
    if (start >= in[a]) return 0;
    // Per window, in the kernels' loops: no division without dilation, the common case.
    const int64_t end = dil[a] == 1 ? in[a] - start : (in[a] - 1 - start) / dil[a] + 1;
    return end < kernel[a] ? end : kernel[a];
  }
  // PyTorch's initial argmax coordinate: the first tap inside the input; past the input
  // when a ceil_mode window holds only padding.
  JU_AXES_FN int64_t First(int a, int64_t o) const { return Tap(a, o, FirstTap(a, o)); }
};

}  // namespace jax_unpool
