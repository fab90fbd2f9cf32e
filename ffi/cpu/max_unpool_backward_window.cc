// CPU backward on window offsets: out[n, c, i] = grad_output[n, c, p], p the position that
// offset[n, c, i] names in window i (common/window_offsets.h) -- the flat kernel's result
// (max_unpool_backward.cc) for the same pool's flat indices, bit for bit, errors included.
//
// Where the pool's windows tile its input (WindowsTile), a window's taps are kd * kh rows
// of kw neighbours: out is a select among them by offset, tap row by tap row, in loops the
// compiler vectorises (no gather). Any other window decodes a row of offsets into flat
// positions (cpu/window_rows.h) and gathers them as the flat kernel does.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/geometry.h"
#include "common/out_of_range.h"
#include "common/window_offsets.h"
#include "cpu/gather_row.h"
#include "cpu/handlers.h"
#include "cpu/index_range.h"
#include "cpu/simd.h"
#include "cpu/window_rows.h"

#if JAX_UNPOOL_HAVE_AVX2
#include <immintrin.h>
#endif

namespace jax_unpool {
namespace {

// ---------------------------------------------------------------------------------------
// Windows that tile the input
// ---------------------------------------------------------------------------------------

// One tap row of `windows` full windows of kW taps, channels first: out[ow] = the tap row's
// value at window ow's offset where the offset is in this row (tap .. tap + kW - 1), else
// what an earlier tap row chose (kFirst: 0).
template <int kW, bool kFirst, typename V>
__attribute__((always_inline)) inline void SelectRow(const uint8_t* __restrict off,
                                                     const V* __restrict row,
                                                     V* __restrict out, int tap,
                                                     int64_t windows) {
  for (int64_t ow = 0; ow < windows; ++ow) {
    const unsigned t = static_cast<unsigned>(off[ow]) - static_cast<unsigned>(tap);
    V v = kFirst ? V(0) : out[ow];
    for (int jw = 0; jw < kW; ++jw) v = Select(t == unsigned(jw), row[ow * kW + jw], v);
    out[ow] = v;
  }
}

#if JAX_UNPOOL_HAVE_AVX2
// Windows of 2 along W (SegNet's), where the CPU has AVX2: the same loop in 256-bit vectors
// (it is bound by its shuffles and selects more than by memory once prefetched).
template <bool kFirst, typename V>
__attribute__((target("avx2"))) void SelectPairsAvx2(const uint8_t* off, const V* row, V* out,
                                                     int tap, int64_t windows) {
  SelectRow<2, kFirst>(off, row, out, tap, windows);
}
#endif

// SegNet's 2x2 windows, both tap rows in one pass (top's taps are 0 and 1, bottom's 2
// and 3): one read of the offsets and one write of out per window, where two passes
// read and wrote them twice.
template <typename V>
__attribute__((always_inline)) inline void SelectRow2x2(const uint8_t* __restrict off,
                                                        const V* __restrict top,
                                                        const V* __restrict bottom,
                                                        V* __restrict out, int64_t windows) {
  for (int64_t ow = 0; ow < windows; ++ow) {
    const unsigned t = off[ow];
    out[ow] = static_cast<V>((top[2 * ow] & MaskOf<V>(t == 0)) |
                             (top[2 * ow + 1] & MaskOf<V>(t == 1)) |
                             (bottom[2 * ow] & MaskOf<V>(t == 2)) |
                             (bottom[2 * ow + 1] & MaskOf<V>(t == 3)));
  }
}

#if JAX_UNPOOL_HAVE_AVX2
template <typename V>
__attribute__((target("avx2"))) void SelectRow2x2Avx2(const uint8_t* off, const V* top,
                                                      const V* bottom, V* out,
                                                      int64_t windows) {
  SelectRow2x2(off, top, bottom, out, windows);
}

// The same for 4-byte values where vector gathers are fast (UseVectorGathers): each
// offset becomes its tap's place in the two rows (2 * ow + t % 2, plus W below) and one
// vpgatherdd loads 8 windows' values -- one load per window, where the select loads all
// four taps and deinterleaves them, which bounded it once the rows were in cache
// (docs/performance.md, "Measured choices"). Returns the windows done, a multiple of 8.
__attribute__((target("avx2"))) inline int64_t GatherRow2x2Avx2(const uint8_t* off,
                                                                const uint32_t* top, int64_t W,
                                                                uint32_t* out, int64_t windows) {
  const __m256i one = _mm256_set1_epi32(1), below = _mm256_set1_epi32(static_cast<int32_t>(W));
  const __m256i sixteen = _mm256_set1_epi32(16);
  __m256i left = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);  // 2 * ow, lane by lane
  int64_t ow = 0;
  for (; ow + 8 <= windows; ow += 8, left = _mm256_add_epi32(left, sixteen)) {
    const __m256i t = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(off + ow)));
    const __m256i at = _mm256_add_epi32(_mm256_add_epi32(left, _mm256_and_si256(t, one)),
                                        _mm256_and_si256(_mm256_cmpgt_epi32(t, one), below));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + ow),
                        _mm256_i32gather_epi32(reinterpret_cast<const int*>(top), at, 4));
  }
  return ow;
}
#endif

// `top` and `bottom` = top + W: the window row's two input rows.
template <typename V>
void SelectRow2x2AnyCpu(const uint8_t* off, const V* top, int64_t W, V* out, int64_t windows) {
  const V* bottom = top + W;
#if JAX_UNPOOL_HAVE_AVX2
  if (CpuHasAvx2()) {
    int64_t done = 0;
    if constexpr (sizeof(V) == 4) {
      if (UseVectorGathers() && W < (int64_t{1} << 29))
        done = GatherRow2x2Avx2(off, reinterpret_cast<const uint32_t*>(top), W,
                                reinterpret_cast<uint32_t*>(out), windows);
    }
    return SelectRow2x2Avx2(off + done, top + 2 * done, bottom + 2 * done, out + done,
                            windows - done);
  }
#endif
  SelectRow2x2(off, top, bottom, out, windows);
}

template <bool kFirst, typename V>
void SelectRowAnyWidth(const uint8_t* off, const V* row, V* out, int tap, int64_t kw,
                       int64_t windows) {
  switch (kw) {
    case 1: return SelectRow<1, kFirst>(off, row, out, tap, windows);
    case 2:
#if JAX_UNPOOL_HAVE_AVX2
      if (CpuHasAvx2()) return SelectPairsAvx2<kFirst>(off, row, out, tap, windows);
#endif
      return SelectRow<2, kFirst>(off, row, out, tap, windows);
    case 3: return SelectRow<3, kFirst>(off, row, out, tap, windows);
    default:
      for (int64_t ow = 0; ow < windows; ++ow) {
        V v = kFirst ? V(0) : out[ow];
        for (int64_t jw = 0; jw < kw; ++jw) v = Select(off[ow] == tap + jw, row[ow * kw + jw], v);
        out[ow] = v;
      }
  }
}

// Prefetches the input rows of window row (od, oh) of a tiling pool's plane `src`, if it
// has one: the rows are read in order, but the hardware prefetcher alone left the select
// waiting on memory (docs/performance.md, "Measured choices"). Inlined
// always: GCC 12 takes a function of prefetches alone for one without effects and drops
// its calls.
template <typename V>
__attribute__((always_inline)) inline void PrefetchTapRows(const Geometry& p, const V* src,
                                                        int64_t od, int64_t oh) {
  if (oh >= p.out[1]) return;
  const int64_t W = p.in[2], h = oh * p.kernel[1], rows = std::min(p.kernel[1], p.in[1] - h);
  for (int64_t d = od * p.kernel[0]; d < std::min(p.in[0], (od + 1) * p.kernel[0]); ++d) {
    const char* first = reinterpret_cast<const char*>(src + (d * p.in[1] + h) * W);
    for (int64_t b = 0; b < static_cast<int64_t>(sizeof(V)) * rows * W; b += 64)
      __builtin_prefetch(first + b);
  }
}

// Channels first: the planes [c0, c1) of image n, window row by window row.
template <typename V>
BadIndex SelectPlanes(const Geometry& p, const V* grad, const uint8_t* offsets, V* out,
                      int64_t n, int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t D = p.in[0], H = p.in[1], W = p.in[2], Ho = p.out[1], Wo = p.out[2];
  const int64_t kd = p.kernel[0], kh = p.kernel[1], kw = p.kernel[2];
  const int64_t full = std::min(Wo, W / kw);  // windows inside the input along W
  const bool inside = EveryWindowInside(p), pairs = kd == 1 && kh == 2 && kw == 2;
  WindowRows<int64_t> rows(p);
  for (int64_t c = c0; c < c1; ++c) {
    const V* src = grad + u.out_offset(n, c, 0);
    const uint8_t* off = offsets + u.in_offset(n, c, 0);
    V* dst = out + u.in_offset(n, c, 0);
    const bool valid = inside && LargestOffset(off, p.out_plane()) < rows.taps();
    for (int64_t od = 0; od < p.out[0]; ++od) {
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t r = (od * Ho + oh) * Wo;
        const int64_t bad = valid ? -1 : FirstUnnamedInRow(p, rows, off + r, od, oh, full);
        if (bad >= 0) return BadOffsetAt(p, u.in_offset(n, c, r + bad), off[r + bad]);
        PrefetchTapRows(p, src, od, oh + 2);
        const bool two_by_two = pairs && oh * 2 + 1 < H;  // then both tap rows at once
        if (two_by_two) SelectRow2x2AnyCpu(off + r, src + (od * H + oh * 2) * W, W, dst + r, full);
        bool first = true;
        for (int64_t jd = 0; jd < kd && od * kd + jd < D; ++jd) {
          for (int64_t jh = 0; jh < kh && oh * kh + jh < H; ++jh, first = false) {
            const V* row = src + ((od * kd + jd) * H + oh * kh + jh) * W;
            const int tap = static_cast<int>((jd * kh + jh) * kw);
            if (!two_by_two && first) {
              SelectRowAnyWidth<true>(off + r, row, dst + r, tap, kw, full);
            } else if (!two_by_two) {
              SelectRowAnyWidth<false>(off + r, row, dst + r, tap, kw, full);
            }
            for (int64_t ow = full; ow < Wo; ++ow) {  // ceil_mode: a window past the input
              V v = first ? V(0) : dst[r + ow];
              for (int64_t jw = 0; ow * kw + jw < W; ++jw)
                v = Select(off[r + ow] == tap + jw, row[ow * kw + jw], v);
              dst[r + ow] = v;
            }
          }
        }
      }
    }
  }
  return BadIndex{};
}

// Channels last: the channels [c0, c1) of image n, window by window, tap by tap over the
// cols contiguous channels.
template <typename V>
BadIndex SelectImageSpan(const Geometry& p, const V* grad, const uint8_t* offsets, V* out,
                         int64_t n, int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t cols = c1 - c0;
  const int64_t D = p.in[0], H = p.in[1], W = p.in[2];
  const int64_t kd = p.kernel[0], kh = p.kernel[1], kw = p.kernel[2];
  WindowRows<int64_t> rows(p);
  int64_t i = 0;
  for (int64_t od = 0; od < p.out[0]; ++od) {
    for (int64_t oh = 0; oh < p.out[1]; ++oh) {
      rows.Start(od, oh);
      for (int64_t ow = 0; ow < p.out[2]; ++ow, ++i) {
        const uint8_t* __restrict off = offsets + u.in_offset(n, c0, i);
        V* __restrict dst = out + u.in_offset(n, c0, i);
        int64_t bad = -1;
        if (!rows.Full(ow) || LargestOffset(off, cols) >= rows.taps())
          bad = FirstUnnamed(rows, ow, off, cols, 1);
        if (bad >= 0) return BadOffsetAt(p, u.in_offset(n, c0 + bad, i), off[bad]);
        bool first = true;
        for (int64_t jd = 0; jd < kd && od * kd + jd < D; ++jd) {
          for (int64_t jh = 0; jh < kh && oh * kh + jh < H; ++jh) {
            for (int64_t jw = 0; jw < kw && ow * kw + jw < W; ++jw, first = false) {
              const int64_t position = ((od * kd + jd) * H + oh * kh + jh) * W + ow * kw + jw;
              const V* __restrict src = grad + u.out_offset(n, c0, position);
              const int tap = static_cast<int>((jd * kh + jh) * kw + jw);
              if (first) {
                for (int64_t j = 0; j < cols; ++j) dst[j] = src[j] & MaskOf<V>(off[j] == tap);
              } else {
                for (int64_t j = 0; j < cols; ++j) dst[j] = Select(off[j] == tap, src[j], dst[j]);
              }
            }
          }
        }
      }
    }
  }
  return BadIndex{};
}

// ---------------------------------------------------------------------------------------
// Any window: offsets decoded into flat positions, then gathered as the flat kernel does
// ---------------------------------------------------------------------------------------

template <typename J, typename V>
BadIndex GatherPlanes(const Geometry& p, const V* grad, const uint8_t* offsets, V* out,
                      int64_t n, int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t Wo = p.out[2], Lo = p.in_plane();
  const RowGatherer<V, J> gather(Lo);
  WindowRows<J> rows(p);
  std::vector<J> flat(static_cast<size_t>(Wo));
  for (int64_t c = c0; c < c1; ++c) {
    const V* src = grad + u.out_offset(n, c, 0);
    const uint8_t* off = offsets + u.in_offset(n, c, 0);
    V* dst = out + u.in_offset(n, c, 0);
    IndexRange<J> range(Lo);
    for (int64_t od = 0, r = 0; od < p.out[0]; ++od) {
      for (int64_t oh = 0; oh < p.out[1]; ++oh, r += Wo) {
        rows.Start(od, oh);
        rows.Row(off + r, flat.data());
        gather(src, flat.data(), dst + r, Wo, 1, 0, range);
        if (range.failed()) {
          const int64_t bad = std::find(flat.begin(), flat.end(), WindowRows<J>::kNone) - flat.begin();
          return BadOffsetAt(p, u.in_offset(n, c, r + bad), off[r + bad]);
        }
      }
    }
  }
  return BadIndex{};
}

template <typename J, typename V>
BadIndex GatherImageSpan(const Geometry& p, const V* grad, const uint8_t* offsets, V* out,
                         int64_t n, int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t cols = c1 - c0, Lo = p.in_plane();
  const RowGatherer<V, J> gather(Lo * p.C);
  const V* src = grad + u.out_offset(n, c0, 0);  // channel c0 + j of position o: src[o * C + j]
  WindowRows<J> rows(p);
  std::vector<J> flat(static_cast<size_t>(cols));
  IndexRange<J> range(Lo);
  int64_t i = 0;
  for (int64_t od = 0; od < p.out[0]; ++od) {
    for (int64_t oh = 0; oh < p.out[1]; ++oh) {
      rows.Start(od, oh);
      for (int64_t ow = 0; ow < p.out[2]; ++ow, ++i) {
        const uint8_t* off = offsets + u.in_offset(n, c0, i);
        rows.Window(ow, off, cols, flat.data());
        gather(src, flat.data(), out + u.in_offset(n, c0, i), cols, p.C, 1, range);
        if (range.failed()) {
          const int64_t bad = std::find(flat.begin(), flat.end(), WindowRows<J>::kNone) - flat.begin();
          return BadOffsetAt(p, u.in_offset(n, c0 + bad, i), off[bad]);
        }
      }
    }
  }
  return BadIndex{};
}

ffi::Error MaxUnpoolBackwardWindow(ffi::ThreadPool pool, ffi::AnyBuffer grad_output,
                                   ffi::AnyBuffer offsets, ffi::Result<ffi::AnyBuffer> out,
                                   bool channels_last, ffi::Span<const int64_t> kernel_size,
                                   ffi::Span<const int64_t> stride,
                                   ffi::Span<const int64_t> padding,
                                   ffi::Span<const int64_t> dilation, bool ceil_mode) {
  return RunWindowUnpoolOp(
      UnpoolOp::kBackward, pool, grad_output, offsets, *out, channels_last, kernel_size, stride,
      padding, dilation, ceil_mode,
      [](const Geometry& p, auto gs, const uint8_t* os, auto rs, int64_t n, int64_t c0,
         int64_t c1) -> BadIndex {
        if (WindowsTile(p)) {
          return p.channels_last ? SelectImageSpan(p, gs, os, rs, n, c0, c1)
                                 : SelectPlanes(p, gs, os, rs, n, c0, c1);
        }
        return VisitPlanePositions(p, [&](auto position_tag) {
          using J = typename decltype(position_tag)::type;
          return p.channels_last ? GatherImageSpan<J>(p, gs, os, rs, n, c0, c1)
                                 : GatherPlanes<J>(p, gs, os, rs, n, c0, c1);
        });
      });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolBackwardWindowCpu, MaxUnpoolBackwardWindow,
                              BindWindowUnpoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jax_unpool
