// The CPU kernels' range check of the indices: a run is tested just before it is used, in
// a loop that vectorises (256 bits wide where the CPU has AVX2).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/out_of_range.h"
#include "cpu/simd.h"

namespace jax_unpool {

// Admit(run) tests a run of indices just before the run is moved: a branch-free
// OR-reduction of v | (last - v), whose sign bit is set iff some v < 0 or v > last
// (last < 2^(bits-1)), which vectorises (unsigned compares would not on x86-64's
// baseline), 256 bits wide where the CPU has AVX2. A failure is recorded: failed() then
// says to search the block for the first bad index (FindBadIndex), and the call fails.
// Needs Lo > 0.
template <typename I>
class IndexRange {
 public:
  using U = std::make_unsigned_t<I>;
  explicit IndexRange(int64_t Lo) : last_(LastValidIndex<I>(Lo)) {}

  bool Admit(const I* idx, int64_t count) {
    const U seen = avx2_ ? OutsideAvx2(idx, count, last_) : Outside(idx, count, last_);
    seen_ |= seen;
    return (seen >> kSign) == 0;
  }
  // A position inside the plane whatever i is (for prefetches, which run ahead of the
  // check).
  U Position(I i) const { return std::min(static_cast<U>(i), last_); }
  bool failed() const { return (seen_ >> kSign) != 0; }
  void MarkFailed() { seen_ = ~U{0}; }  // for vector loops that run the test themselves
  U last() const { return last_; }
  bool IsBad(I i) const { return (Outside(static_cast<U>(i)) >> kSign) != 0; }

 private:
  static constexpr int kSign = std::numeric_limits<U>::digits - 1;
  static U Outside(U v, U last) { return static_cast<U>(v | static_cast<U>(last - v)); }
  U Outside(U v) const { return Outside(v, last_); }
  static U Outside(const I* idx, int64_t count, U last) {
    U seen = 0;
    for (int64_t k = 0; k < count; ++k) seen |= Outside(static_cast<U>(idx[k]), last);
    return seen;
  }
#if JAX_UNPOOL_HAVE_AVX2
  __attribute__((target("avx2"))) static U OutsideAvx2(const I* idx, int64_t count, U last) {
    U seen = 0;  // the same loop, vectorised 256 bits wide
    for (int64_t k = 0; k < count; ++k) {
      const U v = static_cast<U>(idx[k]);
      seen |= static_cast<U>(v | static_cast<U>(last - v));
    }
    return seen;
  }
#else
  static U OutsideAvx2(const I* idx, int64_t count, U last) { return Outside(idx, count, last); }
#endif
  U last_;
  U seen_ = 0;
  bool avx2_ = CpuHasAvx2();
};

}  // namespace jax_unpool
