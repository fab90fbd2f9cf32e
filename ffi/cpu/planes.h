// What the CPU forward and backward kernels share: the plane geometry of both layouts,
// the first-bad-index bookkeeping, and the split of planes across ffi::ThreadPool.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "common/buffer_checks.h"
#include "cpu/simd.h"
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
  int k = 2;                     // spatial rank
  int64_t out_sizes[3] = {};     // the output side's k spatial sizes, for messages
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
    g.L *= in[s + d];
    g.out_sizes[d] = out[s + d];
    g.Lo *= out[s + d];
  }
  return g;
}

// The first out-of-range index a chunk met; `flat` is its element offset in the
// indices buffer, so the smallest one over all chunks is the first in flat order,
// whichever thread found it.
struct BadIndex {
  int64_t flat = std::numeric_limits<int64_t>::max();
  int64_t value = 0, n = 0, c = 0, i = 0;
  bool found() const { return flat != std::numeric_limits<int64_t>::max(); }
};

// OUT_OF_RANGE: the index is well-typed, its value is outside the plane ("an output
// plane of 4x4"; a row of 8 for k = 1, a volume of 2x4x4 for k = 3).
inline ffi::Error OutOfRangeError(const char* op, const PlaneGeometry& g, const BadIndex& b) {
  std::string sizes;
  for (int d = 0; d < g.k; ++d) sizes += (d ? "x" : "") + std::to_string(g.out_sizes[d]);
  const char* what = g.k == 1 ? "row" : g.k == 2 ? "plane" : "volume";
  return ffi::Error(ffi::ErrorCode::kOutOfRange,
      std::string(op) + ": index " + std::to_string(b.value) + " at (n=" +
      std::to_string(b.n) + ", c=" + std::to_string(b.c) + ", i=" + std::to_string(b.i) +
      ") of indices is out of range: valid indices are [0, " + std::to_string(g.Lo) +
      ") for an output " + what + " of " + sizes + " (" + PositionsNote(g.k) + ")");
}

// Largest valid index, as the unsigned type of I. For int32 indices a plane of more than
// 2^31 positions is clamped: no int32 can exceed it anyway.
template <typename I>
std::make_unsigned_t<I> LastValidIndex(int64_t Lo) {
  using U = std::make_unsigned_t<I>;
  const uint64_t cap = static_cast<uint64_t>(std::numeric_limits<I>::max()) + 1;
  return static_cast<U>(std::min<uint64_t>(static_cast<uint64_t>(Lo), cap) - 1);
}

// The kernels' range check. Admit(run) tests a run of indices just before the run is
// moved: a branch-free OR-reduction of v | (last - v), whose sign bit is set iff some
// v < 0 or v > last (last < 2^(bits-1)), which vectorises (unsigned compares would not
// on x86-64's baseline), 256 bits wide where the CPU has AVX2. A failure is recorded:
// failed() then says to search the block for the first bad index (FindBadIndex), and
// the call fails. Needs Lo > 0.
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

// Runs `chunk(u0, u1) -> BadIndex` over the planes [0, units) in contiguous chunks and
// returns the error of the first bad index in flat order, whichever chunk found it.
// Chunks go to the XLA intra-op pool when the problem is big enough (`bytes` moved per
// call). The calling thread claims chunks too and then waits only for chunks already
// claimed by running pool tasks: it never waits on a task that has not started, so it
// cannot deadlock however busy the pool is.
// No exception crosses the FFI boundary: one (an allocation failure) becomes INTERNAL.
template <typename Body>
ffi::Error NoThrow(const char* op, Body body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(op) + ": " + e.what());
  } catch (...) {
    return ffi::Error::Internal(std::string(op) + ": unknown C++ exception");
  }
}

template <typename Chunk, typename MakeError>
ffi::Error ForEachPlaneChunk(ffi::ThreadPool& pool, int64_t units, int64_t bytes,
                             const Chunk& chunk, const MakeError& make_error) {
  // Handing work to a pool thread costs tens of microseconds: on the 2-core benchmark
  // machine calls of up to about 2 MB ran as fast or faster inline. Above that, several
  // chunks per thread let a thread that was held up fall behind by less.
  constexpr int64_t kMinBytesToSplit = int64_t{2} << 20, kMinBytesPerChunk = int64_t{256} << 10;
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t chunks =
      bytes < kMinBytesToSplit
          ? 1
          : std::clamp<int64_t>(std::min(bytes / kMinBytesPerChunk, units), 1, 4 * threads);
  if (chunks == 1) {  // small problems run inline, without the bookkeeping below
    const BadIndex bad = chunk(int64_t{0}, units);
    return bad.found() ? make_error(bad) : ffi::Error::Success();
  }

  struct Job {
    const Chunk* chunk;
    int64_t units, chunks;
    std::vector<BadIndex> bad;
    std::atomic<int64_t> next{0}, done{0};
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::condition_variable all_done;
    // Claims and runs chunks until none is left.
    void Drain() {
      for (int64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
        try {  // a pool thread must not throw (a span may allocate)
          bad[k] = (*chunk)(units * k / chunks, units * (k + 1) / chunks);
        } catch (...) {
          failed.store(true, std::memory_order_relaxed);
        }
        if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
          std::lock_guard<std::mutex> lock(mutex);
          all_done.notify_all();
        }
      }
    }
  };
  auto job = std::make_shared<Job>();
  job->chunk = &chunk;
  job->units = units;
  job->chunks = chunks;
  job->bad.resize(chunks);
  // A helper that starts after every chunk is claimed touches only the shared job.
  // If scheduling fails (out of memory), the calling thread drains what is left.
  for (int64_t t = 1; t < std::min(threads, chunks); ++t) {
    try {
      pool.Schedule([job] { job->Drain(); });
    } catch (...) {
      break;
    }
  }
  job->Drain();
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->all_done.wait(lock, [&] { return job->done.load(std::memory_order_acquire) == chunks; });
  }
  if (job->failed.load()) return ffi::Error::Internal("a worker ran out of memory");
  BadIndex first;
  for (const BadIndex& b : job->bad)
    if (b.flat < first.flat) first = b;
  return first.found() ? make_error(first) : ffi::Error::Success();
}

}  // namespace jax_unpool

namespace jax_unpool {

// Splits the planes [u0, u1) of a chunk by image: calls span(n, c0, c1) for the channels
// [c0, c1) of image n, in flat order, and stops at the first bad index it reports.
template <typename Span>
BadIndex ForEachImageSpan(const PlaneGeometry& g, int64_t u0, int64_t u1, Span span) {
  for (int64_t u = u0; u < u1;) {
    const int64_t n = u / g.C, c0 = u % g.C, c1 = std::min(g.C, c0 + (u1 - u));
    BadIndex bad = span(n, c0, c1);
    if (bad.found()) return bad;
    u += c1 - c0;
  }
  return BadIndex{};
}

// The first bad index among positions [i0, i1) of planes [c0, c1) of image n, in flat
// order: the search a kernel runs once IndexRange::failed() says there is one.
template <typename I>
BadIndex FindBadIndex(const PlaneGeometry& g, const I* indices, int64_t n, int64_t c0,
                      int64_t c1, int64_t i0, int64_t i1) {
  const IndexRange<I> range(g.Lo);
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

// Positions per block of an NHWC span: blocks of about kBlockBytes of indices are
// checked and moved one after the other, so that a bad index stops the span soon.
inline int64_t RowsPerBlock(int64_t cols, int64_t index_bytes) {
  constexpr int64_t kBlockBytes = 16 << 10;
  return std::max<int64_t>(1, kBlockBytes / (cols * index_bytes));
}

}  // namespace jax_unpool
