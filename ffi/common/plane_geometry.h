// The unpool ops' plane geometry in both layouts, on any platform: what a kernel needs to
// find plane position i of plane (n, c) on either side of the op.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/value_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// A tensor pair seen as N images of C planes: `L` positions per plane on the input side
// (x, indices, the backward's result) and `Lo` per plane on the output side (the
// forward's result, grad_output). A plane is the k spatial dims (W; H, W; or D, H, W)
// flattened. NCHW keeps a plane contiguous; NHWC interleaves the C planes of one image.
// Indices are flat positions inside a plane in both layouts.
struct PlaneGeometry {
  int64_t N = 0, C = 0, L = 0, Lo = 0;
  int k = 2;                  // spatial rank
  int64_t in_sizes[3] = {};   // the input side's k spatial sizes
  int64_t out_sizes[3] = {};  // the output side's k spatial sizes
  bool channels_last = false;

  int64_t units() const { return N * C; }  // one unit of work = one (n, c) plane
  // Element offsets of plane position i (input side) / o (output side) of plane (n, c).
  int64_t in_offset(int64_t n, int64_t c, int64_t i) const {
    return channels_last ? (n * L + i) * C + c : (n * C + c) * L + i;
  }
  int64_t out_offset(int64_t n, int64_t c, int64_t o) const {
    return channels_last ? (n * Lo + o) * C + c : (n * C + c) * Lo + o;
  }
};

// Reads the geometry of spatial rank k from the dims of an input-side buffer and an
// output-side buffer, which buffer_checks.h found to be of rank k + 1 or k + 2, of equal
// rank, N and C.
inline PlaneGeometry ReadGeometry(ffi::Span<const int64_t> in, ffi::Span<const int64_t> out,
                                  bool channels_last, int k) {
  const size_t rank = in.size();
  const size_t s = rank - k - (channels_last ? 1 : 0);  // position of the first spatial dim
  PlaneGeometry g;
  g.channels_last = channels_last;
  g.k = k;
  g.N = rank == static_cast<size_t>(k) + 2 ? in[0] : 1;
  g.C = in[channels_last ? rank - 1 : rank - 1 - k];
  g.L = g.Lo = 1;
  for (int d = 0; d < k; ++d) {
    g.in_sizes[d] = in[s + d];
    g.L *= in[s + d];
    g.out_sizes[d] = out[s + d];
    g.Lo *= out[s + d];
  }
  return g;
}

}  // namespace jax_unpool
