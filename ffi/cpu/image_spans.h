// How an unpool kernel walks a chunk of planes: by image, a span of channels at a time,
// and in NHWC in blocks of positions.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/geometry.h"
#include "common/out_of_range.h"

namespace jax_unpool {

// Splits the planes [u0, u1) of a chunk by image: calls span(n, c0, c1) for the channels
// [c0, c1) of image n, in flat order, and stops at the first bad index it reports.
template <typename Span>
BadIndex ForEachImageSpan(const Geometry& g, int64_t u0, int64_t u1, Span span) {
  for (int64_t u = u0; u < u1;) {
    const int64_t n = u / g.C, c0 = u % g.C, c1 = std::min(g.C, c0 + (u1 - u));
    BadIndex bad = span(n, c0, c1);
    if (bad.found()) return bad;
    u += c1 - c0;
  }
  return BadIndex{};
}

// Positions per block of an NHWC span: blocks of about kBlockBytes of indices are
// checked and moved one after the other, so that a bad index stops the span soon.
inline int64_t RowsPerBlock(int64_t cols, int64_t index_bytes) {
  constexpr int64_t kBlockBytes = 16 << 10;
  return std::max<int64_t>(1, kBlockBytes / (cols * index_bytes));
}

}  // namespace jax_unpool
