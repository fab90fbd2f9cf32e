// Large results are written in full, and XLA allocates each one anew: glibc serves an
// allocation of 32 MiB or more with a fresh mmap, so every call faults its pages in. In
// 4 KiB pages the faults cost more than the writes themselves (docs/performance.md,
// "Measured choices"), so the kernels ask for transparent huge pages first, as numpy does for its large arrays.
// This is advice only: the kernel may ignore it and nothing depends on it. Callers whose
// results are mostly smaller (the pool's) pass a lower `min_bytes`.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace jax_unpool {

inline void AdviseHugePages(void* data, size_t bytes, size_t min_bytes = size_t{32} << 20) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Below glibc's largest mmap threshold a buffer usually comes from a heap that is
  // already faulted in; advising part of a shared heap would only split its mapping.
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  if (bytes < min_bytes) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (begin < end) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
  (void)min_bytes;
#endif
}

}  // namespace jax_unpool
