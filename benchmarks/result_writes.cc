// What writing a large result costs on this machine: SegNet's 2x2 unpool forward on window
// offsets (as ffi/cpu/max_unpool_window.cc writes it, both output rows of a window row in
// one pass), float32, one thread, into a buffer reused between calls and into a fresh
// mmap each call (as XLA allocates a result of 32 MiB or more), with plain AVX2 stores and
// with non-temporal ones. docs/performance.md ("Window offsets: memory and speed") quotes
// it: why the kernels use no non-temporal stores.
//
//   g++ -std=c++17 -O3 -o /tmp/result_writes benchmarks/result_writes.cc
//   /tmp/result_writes [rounds]
//
// x86-64 with AVX2 only. Exits 1 if the two kinds of store write different results.
#include <immintrin.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int64_t kPlanes = 8 * 64, kRows = 112, kWindows = 112;  // x (8, 64, 112, 112)
constexpr int64_t kCount = kPlanes * kRows * kWindows;
constexpr size_t kOutBytes = sizeof(float) * 4 * kCount;  // (8, 64, 224, 224): 103 MB
constexpr size_t kHugePage = size_t{2} << 20;

// Window w of a row holds x[w] at tap off[w] (0, 1: top row; 2, 3: bottom row), 0 elsewhere.
template <bool kStream>
__attribute__((target("avx2"))) void Unpool(const uint8_t* off, const float* x, float* out) {
  const __m256i tap[4] = {_mm256_set1_epi32(0), _mm256_set1_epi32(1), _mm256_set1_epi32(2),
                          _mm256_set1_epi32(3)};
  for (int64_t r = 0; r < kPlanes * kRows; ++r) {
    float* top = out + r * 4 * kWindows;
    float* bottom = top + 2 * kWindows;
    for (int64_t w = 0; w < kWindows; w += 8) {  // kWindows is a multiple of 8
      const int64_t i = r * kWindows + w;
      const __m256i t = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(off + i)));
      const __m256 v = _mm256_loadu_ps(x + i);
      __m256 m[4];
      for (int k = 0; k < 4; ++k) m[k] = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(t, tap[k])));
      const __m256 lo01 = _mm256_unpacklo_ps(m[0], m[1]), hi01 = _mm256_unpackhi_ps(m[0], m[1]);
      const __m256 lo23 = _mm256_unpacklo_ps(m[2], m[3]), hi23 = _mm256_unpackhi_ps(m[2], m[3]);
      const __m256 out4[4] = {_mm256_permute2f128_ps(lo01, hi01, 0x20), _mm256_permute2f128_ps(lo01, hi01, 0x31),
                              _mm256_permute2f128_ps(lo23, hi23, 0x20), _mm256_permute2f128_ps(lo23, hi23, 0x31)};
      float* dst[4] = {top + 2 * w, top + 2 * w + 8, bottom + 2 * w, bottom + 2 * w + 8};
      for (int k = 0; k < 4; ++k) {
        if (kStream) {
          _mm256_stream_ps(dst[k], out4[k]);  // 32-byte aligned: rows of 896 bytes
        } else {
          _mm256_storeu_ps(dst[k], out4[k]);
        }
      }
    }
  }
  if (kStream) _mm_sfence();
}

// Milliseconds to write the result with plain or streaming stores, into `reused` or, where
// it is null, into a fresh mapping advised for huge pages (as cpu/output_pages.h does).
double Time(bool stream, const uint8_t* off, const float* x, float* reused, float* copy) {
  const auto start = std::chrono::steady_clock::now();
  void* mapping = nullptr;
  float* out = reused;
  if (out == nullptr) {
    mapping = mmap(nullptr, kOutBytes + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) std::exit(2);
    out = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(mapping) + kHugePage - 1) &
                                   ~uintptr_t{kHugePage - 1});
    madvise(out, kOutBytes, MADV_HUGEPAGE);
  }
  stream ? Unpool<true>(off, x, out) : Unpool<false>(off, x, out);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (copy != nullptr) std::memcpy(copy, out, kOutBytes);
  if (mapping != nullptr) munmap(mapping, kOutBytes + kHugePage);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 6;
  auto* off = static_cast<uint8_t*>(std::aligned_alloc(64, kCount));
  auto* x = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kCount));
  auto* reused = static_cast<float*>(std::aligned_alloc(kHugePage, kOutBytes));
  auto* plain = static_cast<float*>(std::aligned_alloc(64, kOutBytes));
  auto* streamed = static_cast<float*>(std::aligned_alloc(64, kOutBytes));
  if (!off || !x || !reused || !plain || !streamed) return 2;
  madvise(reused, kOutBytes, MADV_HUGEPAGE);
  std::memset(reused, 0, kOutBytes);
  for (int64_t i = 0; i < kCount; ++i) {
    off[i] = static_cast<uint8_t>(std::rand() & 3);
    x[i] = static_cast<float>(std::rand()) / 1e6f + 1.0f;
  }
  Time(false, off, x, nullptr, plain);
  Time(true, off, x, nullptr, streamed);
  if (std::memcmp(plain, streamed, kOutBytes) != 0) {
    std::puts("plain and streaming stores wrote different results");
    return 1;
  }
  std::printf("103 MB result, one thread, ms: reused buffer (plain, streaming) | fresh mmap "
              "(plain, streaming)\n");
  for (int r = 0; r < rounds; ++r) {
    const double a = Time(false, off, x, reused, nullptr), b = Time(true, off, x, reused, nullptr);
    const double c = Time(false, off, x, nullptr, nullptr), d = Time(true, off, x, nullptr, nullptr);
    std::printf("%6.1f %6.1f | %6.1f %6.1f\n", a, b, c, d);
  }
  return 0;
}
