// Where the first out-of-range index is, once a kernel's IndexRange says there is one:
// the search inside a block, and the first over the chunks of a call, which run on any
// threads in any order.
#pragma once

#include <cstdint>
#include <mutex>

#include "common/geometry.h"
#include "common/out_of_range.h"
#include "cpu/index_range.h"

namespace jax_unpool {

// The first bad index among positions [i0, i1) of planes [c0, c1) of image n, in flat
// order: the search a kernel runs once IndexRange::failed() says there is one.
template <typename I>
BadIndex FindBadIndex(const Geometry& g, const I* indices, int64_t n, int64_t c0, int64_t c1,
                      int64_t i0, int64_t i1) {
  const IndexRange<I> range(g.out_plane());
  const auto found = [&](int64_t c, int64_t i) {
    const int64_t flat = g.in_offset(n, c, i);
    return BadIndex{flat, static_cast<int64_t>(indices[flat]), n, c, i};
  };
  if (!g.channels_last) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t i = i0; i < i1; ++i)
        if (range.IsBad(indices[g.in_offset(n, c, i)])) return found(c, i);
  } else {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t c = c0; c < c1; ++c)
        if (range.IsBad(indices[g.in_offset(n, c, i)])) return found(c, i);
  }
  return BadIndex{};
}

// The first bad index of a call whose chunks each report their own first: each chunk stops
// at its first, so the smallest flat offset among them is the call's first.
class FirstBadIndex {
 public:
  void Offer(const BadIndex& b) {
    if (!b.found()) return;  // the common case takes no lock
    std::lock_guard<std::mutex> lock(mutex_);
    if (b.flat < first_.flat) first_ = b;
  }
  // Once every chunk has run.
  const BadIndex& first() const { return first_; }

 private:
  std::mutex mutex_;
  BadIndex first_;
};

}  // namespace jax_unpool
