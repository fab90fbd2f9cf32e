// JU_HD marks a function that host and device code both call: __host__ __device__ (and
// inlined) under nvcc, plain inline C++ elsewhere (the CPU build, the CUDA handlers' host
// emulation in tests/backends/cuda).
#pragma once

#if defined(__CUDACC__)
#define JU_HD __host__ __device__ __forceinline__
#else
#define JU_HD inline
#endif
