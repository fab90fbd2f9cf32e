// Which vector instructions the kernels may use beyond x86-64's baseline (SSE2), and
// selects by masks (MaskOf, Select) that the compiler vectorises in any of them. Code
// for AVX2 is compiled for AVX2 alone (__attribute__((target("avx2")))) and chosen at
// run time, so the module still runs on any x86-64.
//
// The CPU is asked with cpuid itself, not __builtin_cpu_supports/__builtin_cpu_is: those
// read libgcc's __cpu_model, which the wheels' toolchain (zig's clang and compiler-rt,
// tools/build-wheels) cannot link into a shared module.
#pragma once

#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define JAX_UNPOOL_HAVE_AVX2 1
#include <cpuid.h>
#else
#define JAX_UNPOOL_HAVE_AVX2 0
#endif

namespace jax_unpool {

#if JAX_UNPOOL_HAVE_AVX2
namespace cpu_detail {

// AVX2 is usable when the CPU has it (cpuid leaf 7, EBX bit 5) and AVX (leaf 1, ECX bit
// 28), and the OS saves the YMM registers on a context switch: OSXSAVE (leaf 1, ECX bit
// 27) and XCR0's SSE and AVX state bits (1 and 2) -- the test libgcc's
// __builtin_cpu_supports("avx2") makes.
inline bool Avx2Usable() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned osxsave = 1u << 27, avx = 1u << 28;
  if ((ecx & (osxsave | avx)) != (osxsave | avx)) return false;
  unsigned xcr0, xcr0_high;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  if ((xcr0 & 0x6) != 0x6) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (ebx & (1u << 5)) != 0;
}

// Whether the vendor string (cpuid leaf 0) is "AuthenticAMD", as __builtin_cpu_is("amd").
inline bool IsAmd() {
  unsigned max_leaf, ebx, ecx, edx;
  if (!__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx)) return false;
  return ebx == signature_AMD_ebx && edx == signature_AMD_edx && ecx == signature_AMD_ecx;
}

}  // namespace cpu_detail
#endif

inline bool CpuHasAvx2() {
#if JAX_UNPOOL_HAVE_AVX2
  static const bool has = cpu_detail::Avx2Usable();
  return has;
#else
  return false;
#endif
}

// Whether the backward gathers 4- and 8-byte values with AVX2's vpgather* (else with
// scalar loads). On Intel cores a gather moves 4 or 8 values per instruction and beats
// the scalar loop; AMD's Zen cores run it as microcode, slower than scalar loads
// (docs/performance.md, "Measured choices").
// JAX_UNPOOL_CPU_GATHER=vector or =scalar overrides the choice (jax_unpool checks the
// value at import); it is read once.
inline bool UseVectorGathers() {
  static const bool use = [] {
    if (!CpuHasAvx2()) return false;
    const char* choice = std::getenv("JAX_UNPOOL_CPU_GATHER");
    if (choice != nullptr && std::strcmp(choice, "vector") == 0) return true;
    if (choice != nullptr && std::strcmp(choice, "scalar") == 0) return false;
#if JAX_UNPOOL_HAVE_AVX2
    return !cpu_detail::IsAmd();
#else
    return false;
#endif
  }();
  return use;
}

// All ones where `take`, else 0: selects by masks, which the compiler vectorises where a
// select on data becomes a branch.
template <typename V>
V MaskOf(bool take) {
  return static_cast<V>(V(0) - V(take));
}

// `take` ? a : b, by mask.
template <typename V>
V Select(bool take, V a, V b) {
  const V m = MaskOf<V>(take);
  return static_cast<V>((a & m) | (b & static_cast<V>(~m)));
}

}  // namespace jax_unpool
