// Which vector instructions the kernels may use beyond x86-64's baseline (SSE2): code
// for AVX2 is compiled for AVX2 alone (__attribute__((target("avx2")))) and chosen at
// run time, so the module still runs on any x86-64.
#pragma once

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

}  // namespace jax_unpool
