// The inner loop of the backward: one row of a gather with its range check,
//   dst[k] = src[idx[k] * stride + k * step]   for k in [0, count),
// with (stride, step) = (1, 0) inside an NCHW plane and (C, 1) across the channels of an
// NHWC position. x86-64's baseline (SSE2) has no gather instruction, so 4- and 8-byte
// values also get an AVX2 version (vpgather*): it moves 4 or 8 values per instruction
// where the scalar loop moves one, which is what bounds the gather once its data is in
// cache -- on CPUs whose gathers are fast (UseVectorGathers in simd.h).
#pragma once

#include <cstdint>

#include "cpu/index_range.h"
#include "cpu/simd.h"

#if JAX_UNPOOL_HAVE_AVX2
#include <immintrin.h>
#endif

namespace jax_unpool {

// Checks the row first: the check vectorises, the gather does not.
template <typename V, typename I>
void GatherRowScalar(const V* src, const I* idx, V* dst, int64_t count, int64_t stride,
                     int64_t step, IndexRange<I>& range) {
  if (!range.Admit(idx, count)) return;
  for (int64_t k = 0; k < count; ++k)
    dst[k] = src[static_cast<int64_t>(idx[k]) * stride + k * step];
}

#if JAX_UNPOOL_HAVE_AVX2

// Gathers a prefix of the row and returns its length; the caller does the rest. Needs
// a 4- or 8-byte V and every offset pos * stride + k * step below 2^31. The range check
// rides along in the vector registers: each index is clamped into the plane, so no
// access leaves it, and a bad one marks `range` failed (the caller then searches for it
// and fails the call, so what the clamped lanes moved is never returned).
template <typename V, typename I>
__attribute__((target("avx2"))) int64_t GatherRowAvx2(const V* src, const I* idx, V* dst,
                                                       int64_t count, int64_t stride,
                                                       int64_t step, IndexRange<I>& range) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "vpgather moves 4- or 8-byte values");
  constexpr int64_t kLanes = sizeof(V) == 4 && sizeof(I) == 4 ? 8 : 4;
  const bool planar = step == 0;  // NCHW: the offset is the position itself
  int64_t k = 0;
  bool bad = false;
  if constexpr (sizeof(I) == 4 && sizeof(V) == 4) {
    // int32 indices, 8 lanes: clamp with an unsigned min; the sign bit of v | (last - v)
    // flags an index outside [0, last] (IndexRange's test, lane by lane).
    const __m256i last = _mm256_set1_epi32(static_cast<int32_t>(range.last()));
    const __m256i scale = _mm256_set1_epi32(static_cast<int32_t>(stride));
    const __m256i lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int32_t>(step)));
    __m256i seen = _mm256_setzero_si256();
    for (; k + kLanes <= count; k += kLanes) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + k));
      seen = _mm256_or_si256(seen, _mm256_or_si256(v, _mm256_sub_epi32(last, v)));
      __m256i off = _mm256_min_epu32(v, last);
      if (!planar) {
        off = _mm256_add_epi32(
            _mm256_mullo_epi32(off, scale),
            _mm256_add_epi32(lanes, _mm256_set1_epi32(static_cast<int32_t>(k * step))));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                          _mm256_i32gather_epi32(reinterpret_cast<const int*>(src), off, 4));
    }
    bad = _mm256_movemask_ps(_mm256_castsi256_ps(seen)) != 0;
  } else if constexpr (sizeof(I) == 4) {
    // int32 indices, 8-byte values: the same with 4 lanes.
    const __m128i last = _mm_set1_epi32(static_cast<int32_t>(range.last()));
    const __m128i scale = _mm_set1_epi32(static_cast<int32_t>(stride));
    const __m128i lanes =
        _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32(static_cast<int32_t>(step)));
    __m128i seen = _mm_setzero_si128();
    for (; k + kLanes <= count; k += kLanes) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(idx + k));
      seen = _mm_or_si128(seen, _mm_or_si128(v, _mm_sub_epi32(last, v)));
      __m128i off = _mm_min_epu32(v, last);
      if (!planar) {
        off = _mm_add_epi32(_mm_mullo_epi32(off, scale),
                            _mm_add_epi32(lanes, _mm_set1_epi32(static_cast<int32_t>(k * step))));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                          _mm256_i32gather_epi64(reinterpret_cast<const long long*>(src), off, 8));
    }
    bad = _mm_movemask_ps(_mm_castsi128_ps(seen)) != 0;
  } else {
    // int64 indices, 4 lanes: AVX2 has no unsigned 64-bit min, so clamp with a signed
    // compare of sign-flipped values. Offsets stay below 2^31, so the 32-bit multiply
    // (vpmuludq) is exact.
    const __m256i last = _mm256_set1_epi64x(static_cast<int64_t>(range.last()));
    const __m256i flip = _mm256_set1_epi64x(std::numeric_limits<int64_t>::min());
    const __m256i last_flipped = _mm256_xor_si256(last, flip);
    const __m256i scale = _mm256_set1_epi64x(stride);
    const __m256i lanes = _mm256_setr_epi64x(0, step, 2 * step, 3 * step);
    __m256i seen = _mm256_setzero_si256();
    for (; k + kLanes <= count; k += kLanes) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + k));
      seen = _mm256_or_si256(seen, _mm256_or_si256(v, _mm256_sub_epi64(last, v)));
      const __m256i above = _mm256_cmpgt_epi64(_mm256_xor_si256(v, flip), last_flipped);
      __m256i off = _mm256_blendv_epi8(v, last, above);
      if (!planar) {
        off = _mm256_add_epi64(_mm256_mul_epu32(off, scale),
                               _mm256_add_epi64(lanes, _mm256_set1_epi64x(k * step)));
      }
      if constexpr (sizeof(V) == 4) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k),
                         _mm256_i64gather_epi32(reinterpret_cast<const int*>(src), off, 4));
      } else {
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(dst + k),
            _mm256_i64gather_epi64(reinterpret_cast<const long long*>(src), off, 8));
      }
    }
    bad = _mm256_movemask_pd(_mm256_castsi256_pd(seen)) != 0;
  }
  if (bad) range.MarkFailed();
  return k;
}

#endif  // JAX_UNPOOL_HAVE_AVX2

// Gathers rows with the AVX2 loop where it applies (decided once per call) and the
// scalar loop for the rest.
template <typename V, typename I>
class RowGatherer {
 public:
  // `offset_limit`: one past the largest offset pos * stride + k * step of the call.
  explicit RowGatherer(int64_t offset_limit) {
#if JAX_UNPOOL_HAVE_AVX2
    vector_ = sizeof(V) >= 4 && offset_limit <= (int64_t{1} << 31) && UseVectorGathers();
#else
    (void)offset_limit;
#endif
  }

  void operator()(const V* src, const I* idx, V* dst, int64_t count, int64_t stride,
                  int64_t step, IndexRange<I>& range) const {
    int64_t done = 0;
#if JAX_UNPOOL_HAVE_AVX2
    if constexpr (sizeof(V) >= 4) {
      if (vector_) done = GatherRowAvx2(src, idx, dst, count, stride, step, range);
    }
#endif
    GatherRowScalar(src + done * step, idx + done, dst + done, count - done, stride, step,
                    range);
  }

 private:
  bool vector_ = false;
};

}  // namespace jax_unpool
