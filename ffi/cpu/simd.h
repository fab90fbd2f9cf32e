// Which vector instructions the kernels may use beyond x86-64's baseline (SSE2): code
// for AVX2 is compiled for AVX2 alone (__attribute__((target("avx2")))) and chosen at
// run time, so the module still runs on any x86-64.
#pragma once

#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define JAX_UNPOOL_HAVE_AVX2 1
#else
#define JAX_UNPOOL_HAVE_AVX2 0
#endif

namespace jax_unpool {

inline bool CpuHasAvx2() {
#if JAX_UNPOOL_HAVE_AVX2
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

// Whether the backward gathers 4- and 8-byte values with AVX2's vpgather* (else with
// scalar loads). On Intel cores a gather moves 4 or 8 values per instruction and beats
// the scalar loop; AMD's Zen cores run it as microcode, slower than scalar loads: on the
// 2-core EPYC benchmark VM (Zen 4) the unpool backward took a median 0.70x the time with
// scalar loads in NHWC and 0.90x in NCHW (the bench's unpool and layout sections, twice).
// JAX_UNPOOL_CPU_GATHER=vector or =scalar overrides the choice (jax_unpool checks the
// value at import); it is read once.
inline bool UseVectorGathers() {
  static const bool use = [] {
    if (!CpuHasAvx2()) return false;
    const char* choice = std::getenv("JAX_UNPOOL_CPU_GATHER");
    if (choice != nullptr && std::strcmp(choice, "vector") == 0) return true;
    if (choice != nullptr && std::strcmp(choice, "scalar") == 0) return false;
#if JAX_UNPOOL_HAVE_AVX2
    return __builtin_cpu_is("amd") == 0;
#else
    return false;
#endif
  }();
  return use;
}

}  // namespace jax_unpool
