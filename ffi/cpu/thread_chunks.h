// The split of a CPU call's work across XLA's intra-op thread pool (ffi::ThreadPool).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/value_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// Runs chunk(u0, u1) over the units [0, units) in contiguous chunks, on the pool's threads
// when the problem is big enough (`bytes` moved per call), inline otherwise. The calling
// thread claims chunks too and then waits only for chunks already claimed by running pool
// tasks: it never waits on a task that has not started, so it cannot deadlock however busy
// the pool is. An exception on a pool thread (an allocation failure) becomes INTERNAL
// once every chunk has run; on the calling thread it propagates (see NoThrow).
template <typename Chunk>
ffi::Error ForEachChunk(ffi::ThreadPool& pool, int64_t units, int64_t bytes, const Chunk& chunk) {
  // Handing work to a pool thread costs more than small calls save (docs/performance.md,
  // "Measured choices"). Above that, several
  // chunks per thread let a thread that was held up fall behind by less.
  constexpr int64_t kMinBytesToSplit = int64_t{2} << 20, kMinBytesPerChunk = int64_t{256} << 10;
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t chunks =
      bytes < kMinBytesToSplit
          ? 1
          : std::clamp<int64_t>(std::min(bytes / kMinBytesPerChunk, units), 1, 4 * threads);
  if (chunks == 1) {  // small problems run inline, without the bookkeeping below
    chunk(int64_t{0}, units);
    return ffi::Error::Success();
  }

  struct Job {
    const Chunk* chunk;
    int64_t units, chunks;
    std::atomic<int64_t> next{0}, done{0};
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::condition_variable all_done;
    // Claims and runs chunks until none is left.
    void Drain() {
      for (int64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
        try {  // a pool thread must not throw (a chunk may allocate)
          (*chunk)(units * k / chunks, units * (k + 1) / chunks);
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
  return ffi::Error::Success();
}

}  // namespace jax_unpool
