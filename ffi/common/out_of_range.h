// An index outside its output plane, on any platform: the largest valid index of an index
// type, where the first bad index is (in flat order over the indices buffer), and the
// OUT_OF_RANGE error that names it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "common/buffer_checks.h"
#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// Largest valid index, as the unsigned type of I. For int32 indices a plane of more than
// 2^31 positions is clamped: no int32 can exceed it anyway.
template <typename I>
std::make_unsigned_t<I> LastValidIndex(int64_t Lo) {
  using U = std::make_unsigned_t<I>;
  const uint64_t cap = static_cast<uint64_t>(std::numeric_limits<I>::max()) + 1;
  return static_cast<U>(std::min<uint64_t>(static_cast<uint64_t>(Lo), cap) - 1);
}

// An out-of-range index; `flat` is its element offset in the indices buffer, so the
// smallest one over all the parts of a call is the first in flat order, whichever part
// (thread, chunk, block) found it.
struct BadIndex {
  int64_t flat = std::numeric_limits<int64_t>::max();
  int64_t value = 0, n = 0, c = 0, i = 0;
  bool window_offset = false;  // value is a window offset naming no tap (window_offsets.h)
  bool found() const { return flat != std::numeric_limits<int64_t>::max(); }
};

// The bad index `value` at element offset `flat` of a non-empty indices buffer (the input
// side of g), with its plane (n, c) and position i.
inline BadIndex BadIndexAt(const Geometry& g, int64_t flat, int64_t value) {
  BadIndex b;
  b.flat = flat;
  b.value = value;
  const int64_t L = g.in_plane();
  if (g.channels_last) {
    b.c = flat % g.C;
    b.i = flat / g.C % L;
    b.n = flat / g.C / L;
  } else {
    b.i = flat % L;
    b.c = flat / L % g.C;
    b.n = flat / L / g.C;
  }
  return b;
}

// OUT_OF_RANGE: the index is well-typed, its value is outside the plane ("an output
// plane of 4x4"; a row of 8 for k = 1, a volume of 2x4x4 for k = 3). A forward's index
// past the plane most often comes from a pool of an input that the default output size
// does not give back (an odd size with stride 2): the message says to pass output_size.
inline ffi::Error OutOfRangeError(const char* op, const Geometry& g, const BadIndex& b) {
  std::string sizes;
  for (int a = 3 - g.k; a < 3; ++a) sizes += (a > 3 - g.k ? "x" : "") + std::to_string(g.out[a]);
  const char* what = g.k == 1 ? "row" : g.k == 2 ? "plane" : "volume";
  const bool forward = std::string(op).find("_backward") == std::string::npos;
  std::string hint =
      forward && b.value >= g.out_plane()
          ? std::string("; if the indices come from a max pool, pass the pool's input size "
                        "as output_size (the default output size can be smaller, e.g. for "
                        "an odd input size with stride 2)")
          : "";
  // Read in the other layout, the same buffer has other spatial dims: C and every spatial
  // dim but the last (channels-first read as channels-last), or every spatial dim but the
  // first and C. Where the index fits that plane, scaled as this call scales its plane,
  // the data most likely has the other layout (NHWC data unpooled as NCHW, the default).
  if (forward && b.value >= g.out_plane() && g.in_plane() > 0) {
    int64_t other_in = g.C;
    for (int a = g.channels_last ? 4 - g.k : 3 - g.k; a < (g.channels_last ? 3 : 2); ++a)
      other_in *= g.in[a];
    const double scale = static_cast<double>(g.out_plane()) / static_cast<double>(g.in_plane());
    if (static_cast<double>(b.value) < static_cast<double>(other_in) * scale) {
      const std::string other = buffer_checks::LayoutName(!g.channels_last, g.k);
      hint = "; it fits the " + std::string(g.channels_last ? "channels-first" :
                                                              "channels-last") +
             " reading of these buffers: if the data is " + other + ", pass data_format='" +
             other + "'";
    }
  }
  return ffi::Error(
      ffi::ErrorCode::kOutOfRange,
      std::string(op) + ": index " + std::to_string(b.value) + " at (n=" + std::to_string(b.n) +
          ", c=" + std::to_string(b.c) + ", i=" + std::to_string(b.i) +
          ") of indices is out of range: valid indices are [0, " + std::to_string(g.out_plane()) +
          ") for an output " + what + " of " + sizes + hint + " (" + PositionsNote(g.k) + ")");
}

}  // namespace jax_unpool
