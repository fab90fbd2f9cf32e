// Streaming (non-temporal) stores for results too large to stay in cache: they write
// whole lines without first reading them (the read-for-ownership of a plain store),
// which saves a sixth of the memory traffic of a large gather. SSE2 is part of the
// x86-64 baseline, so this needs no dispatch; other architectures use plain stores.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define JAX_UNPOOL_HAVE_STREAMING_STORES 1
#else
#define JAX_UNPOOL_HAVE_STREAMING_STORES 0
#endif

namespace jax_unpool {

// Results at least this large are written with streaming stores: smaller ones may
// still be in cache when the next operation reads them.
inline constexpr int64_t kStreamingMinBytes = int64_t{8} << 20;

// Writes value(k) to dst[k] for k in [0, n), values of an unsigned type V of 1, 2, 4 or
// 8 bytes. With kStream, the aligned middle goes out 8 bytes at a time past the cache;
// the caller ends its writes with StreamingFence().
template <bool kStream, typename V, typename F>
inline void StoreValues(V* dst, int64_t n, const F& value) {
  int64_t k = 0;
#if JAX_UNPOOL_HAVE_STREAMING_STORES
  if constexpr (kStream) {
    constexpr int64_t kPerWord = 8 / sizeof(V);
    for (; k < n && (reinterpret_cast<uintptr_t>(dst + k) & 7) != 0; ++k) dst[k] = value(k);
    for (; k + kPerWord <= n; k += kPerWord) {
      uint64_t word = 0;  // little-endian: element e goes to bytes [e * sizeof(V), ...)
      for (int64_t e = 0; e < kPerWord; ++e)
        word |= static_cast<uint64_t>(value(k + e)) << (8 * sizeof(V) * e);
      _mm_stream_si64(reinterpret_cast<long long*>(dst + k), static_cast<long long>(word));
    }
  }
#endif
  for (; k < n; ++k) dst[k] = value(k);
}

// Orders the streaming stores before whatever signals that the result is complete.
inline void StreamingFence() {
#if JAX_UNPOOL_HAVE_STREAMING_STORES
  _mm_sfence();
#endif
}

}  // namespace jax_unpool
