// The geometry of every call, on every platform: sizes per spatial axis in one convention,
// (D, H, W), where a 1-D or 2-D call has leading axes of size 1 (and a pool's window of 1
// there); N images of C planes; the layout. A plane is one (n, c)'s spatial positions
// flattened, and indices are flat positions inside a plane in both layouts. The checks
// (common/unpool_checks.h, common/pool_checks.h) build it, every kernel reads it. No XLA
// header: the CUDA kernels' device code uses Axes.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace jax_unpool {

// Per axis (D, H, W), in the arithmetic's type T: the input and output sizes and a pool's
// window. T is int64_t (Geometry), or a 32-bit type in the CUDA kernels of calls whose
// every coordinate fits (cuda/pool_plan.h): GPUs divide 64-bit integers in a called
// routine, 32-bit ones inline.
template <typename T>
struct Axes {
  T in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  T kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};

  // Input coordinate of tap t of window o along axis a (may lie in the padding).
  JU_HD T Tap(int a, T o, T t) const { return o * stride[a] - pad[a] + t * dil[a]; }
  // The taps of window o along axis a that land inside the input are [FirstTap, EndTap)
  // (none if FirstTap >= EndTap), computed rather than searched: a window costs its part
  // inside the input, not its kernel size (which may be 2^31 - 1 taps, nearly all padding).
  // Per window, in the kernels' loops: no division without dilation, the common case.
  JU_HD T FirstTap(int a, T o) const {
    const T start = o * stride[a] - pad[a];
    if (start >= 0) return 0;
    return dil[a] == 1 ? -start : (-start + dil[a] - 1) / dil[a];
  }
  JU_HD T EndTap(int a, T o) const {
    const T start = o * stride[a] - pad[a];
    if (start >= in[a]) return 0;
    const T end = dil[a] == 1 ? in[a] - start : (in[a] - 1 - start) / dil[a] + 1;
    return end < kernel[a] ? end : kernel[a];
  }
  // PyTorch's initial argmax coordinate: the first tap inside the input; past the input
  // when a ceil_mode window holds only padding.
  JU_HD T First(int a, T o) const { return Tap(a, o, FirstTap(a, o)); }
};

// A call's geometry. The input side is the pool's x, and the unpool's x, indices and
// backward result; the output side the pool's results, and the unpool's forward result and
// grad_output (the plane the indices address). NCHW keeps a plane contiguous, NHWC
// interleaves the C planes of one image: a tensor is `outer()` slabs of positions x
// `inner()` elements.
struct Geometry : Axes<int64_t> {
  int k = 2;  // spatial rank: the last k of the three axes
  bool channels_last = false;
  int64_t N = 1, C = 1;

  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  int64_t planes() const { return N * C; }
  int64_t outer() const { return channels_last ? N : N * C; }
  int64_t inner() const { return channels_last ? C : 1; }
  int64_t in_count() const { return planes() * in_plane(); }
  int64_t out_count() const { return planes() * out_plane(); }
  // Element offsets of position i of plane (n, c) on the input side, o on the output side.
  int64_t in_offset(int64_t n, int64_t c, int64_t i) const {
    return channels_last ? (n * in_plane() + i) * C + c : (n * C + c) * in_plane() + i;
  }
  int64_t out_offset(int64_t n, int64_t c, int64_t o) const {
    return channels_last ? (n * out_plane() + o) * C + c : (n * C + c) * out_plane() + o;
  }
};

}  // namespace jax_unpool
