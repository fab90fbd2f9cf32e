// What the CUDA kernels' per-element code needs from the compiler, in one place: the
// atomics, bit casts, vector stores, loop unrolling and division by a run-time constant.
// Under nvcc this is device code. The host emulation (tests/backends/cuda/emulation.cc)
// compiles the same headers with a plain C++ compiler: the qualifiers (JU_HD) vanish and
// the atomics become the host's, so that the kernels' logic runs, and is checked, where
// there is no GPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/host_device.h"

#if defined(__CUDACC__)
#define JU_UNROLL _Pragma("unroll")
#else
#define JU_UNROLL
#endif

namespace jax_unpool {
namespace cuda {

template <typename To, typename From>
JU_HD To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "BitCast needs equal sizes");
  To to;
  memcpy(&to, &from, sizeof to);
  return to;
}

// The high 32 bits of a * b.
JU_HD uint32_t MulHi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// Division by a divisor fixed for a whole launch. uint32_t: by multiplication with a
// magic number (Granlund-Montgomery, as PyTorch's IntDivider), valid for dividends and
// divisors in [1, 2^31) -- a call whose counts exceed that uses uint64_t, which divides
// plainly (slower; GPUs have no 64-bit divide instruction).
template <typename T>
struct Divider;

template <>
struct Divider<uint32_t> {
  uint32_t divisor = 1, magic = 1;
  uint32_t shift = 0;

  Divider() = default;
  explicit Divider(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d) / d + 1);
  }
  JU_HD uint32_t Div(uint32_t n) const { return (MulHi(n, magic) + n) >> shift; }
  JU_HD uint32_t Mod(uint32_t n) const { return n - Div(n) * divisor; }
};

template <>
struct Divider<uint64_t> {
  uint64_t divisor = 1;

  Divider() = default;
  explicit Divider(uint64_t d) : divisor(d) {}
  JU_HD uint64_t Div(uint64_t n) const { return n / divisor; }
  JU_HD uint64_t Mod(uint64_t n) const { return n % divisor; }
};

// The coordinates' type of a launch: int32_t with 32-bit offsets (the plans take them only
// where every coordinate of the call fits, unpool_plan.h's WindowFits32), else int64_t:
// 32-bit division is inline, 64-bit division a called routine with a stack frame.
template <typename Index>
using Coord = std::conditional_t<sizeof(Index) == 4, int32_t, int64_t>;

// Stores kN values to dst, as one vector store on the device where kN values are 4, 8 or
// 16 bytes: the caller guarantees dst is aligned to that size.
template <int kN, typename V>
JU_HD void StoreRow(V* dst, const V (&row)[kN]) {
  [[maybe_unused]] constexpr size_t kBytes = kN * sizeof(V);
#if defined(__CUDA_ARCH__)
  constexpr bool kVector = kBytes == 4 || kBytes == 8 || kBytes == 16;
#else
  constexpr bool kVector = false;
#endif
  if constexpr (kVector) {
#if defined(__CUDA_ARCH__)
    using Word = std::conditional_t<kBytes == 4, uint32_t,
                                    std::conditional_t<kBytes == 8, uint2, uint4>>;
    Word w;
    memcpy(&w, row, kBytes);
    *reinterpret_cast<Word*>(dst) = w;
#endif
  } else {
    for (int i = 0; i < kN; ++i) dst[i] = row[i];
  }
}

// Atomics on global memory. Each kernel writes a location either from one thread only,
// or through these (max and min commute, so the result is the same whatever the order):
// that is what makes every kernel's result independent of the schedule.
template <bool kMax, typename T>
JU_HD void AtomicExtreme(T* p, T v) {
#if defined(__CUDA_ARCH__)
  // CUDA's atomics take unsigned int and unsigned long long (uint64_t is unsigned long).
  using Word = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
  if constexpr (kMax) {
    atomicMax(reinterpret_cast<Word*>(p), static_cast<Word>(v));
  } else {
    atomicMin(reinterpret_cast<Word*>(p), static_cast<Word>(v));
  }
#else
  T seen = __atomic_load_n(p, __ATOMIC_RELAXED);
  while ((kMax ? seen < v : seen > v) &&
         !__atomic_compare_exchange_n(p, &seen, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

JU_HD void AtomicMax(uint32_t* p, uint32_t v) { AtomicExtreme<true>(p, v); }
JU_HD void AtomicMax(uint64_t* p, uint64_t v) { AtomicExtreme<true>(p, v); }
JU_HD void AtomicMin(uint64_t* p, uint64_t v) { AtomicExtreme<false>(p, v); }

JU_HD uint32_t AtomicCas(uint32_t* p, uint32_t expected, uint32_t desired) {
#if defined(__CUDA_ARCH__)
  return atomicCAS(reinterpret_cast<unsigned int*>(p), expected, desired);
#else
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return expected;  // the value seen: `expected` as passed iff the swap happened
#endif
}

// 16 bits have no atomic max: a compare-and-swap of the aligned 32-bit word holding them
// (little-endian). The caller guarantees that the word lies inside the buffer (an even
// element count and a 4-byte aligned start).
JU_HD void AtomicMax(uint16_t* p, uint16_t v) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t* word = reinterpret_cast<uint32_t*>(address & ~uintptr_t{3});
  const uint32_t shift = (address & 2) ? 16 : 0;
  uint32_t seen = *word;
  while (((seen >> shift) & 0xffffu) < v) {
    const uint32_t desired = (seen & ~(0xffffu << shift)) | (static_cast<uint32_t>(v) << shift);
    const uint32_t before = AtomicCas(word, seen, desired);
    if (before == seen) return;
    seen = before;
  }
}

}  // namespace cuda
}  // namespace jax_unpool
