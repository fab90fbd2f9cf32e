// CPU forward on window offsets: out = zeros; out[n, c, p] = x[n, c, i], p the position that
// offset[n, c, i] names in window i (common/window_offsets.h) -- what the flat kernel
// (max_unpool.cc) gives for the same pool's flat indices, bit for bit, errors included:
// the first element in buffer order that names no position fails the call.
//
// Where the pool's windows tile its input (WindowsTile: kernel == stride, no padding or
// dilation, as SegNet's 2x2/s2), each output element lies in one window at one tap: it is
// x where that window's offset names its tap, else 0, written once with no fill first and
// no scatter, in loops the compiler vectorises. Any other window (overlapping, padded,
// dilated) decodes a row of offsets into flat positions (cpu/window_rows.h) and scatters
// them as the flat kernel does, so among windows naming one position the largest input
// position wins.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/geometry.h"
#include "common/out_of_range.h"
#include "common/window_offsets.h"
#include "cpu/handlers.h"
#include "cpu/image_spans.h"
#include "cpu/index_range.h"
#include "cpu/simd.h"
#include "cpu/window_rows.h"

namespace jax_unpool {
namespace {

// ---------------------------------------------------------------------------------------
// Windows that tile the input
// ---------------------------------------------------------------------------------------

// One output row of full windows, channels first: out[ow * kW + jw] = x[ow] where window
// ow's offset is tap + jw, else 0, for `windows` windows of kW taps along W.
template <int kW, typename V>
void TileRow(const uint8_t* __restrict off, const V* __restrict x, V* __restrict out, int tap,
             int64_t windows) {
  for (int64_t ow = 0; ow < windows; ++ow) {
    const unsigned t = static_cast<unsigned>(off[ow]) - static_cast<unsigned>(tap);
    const V v = x[ow];
    for (int jw = 0; jw < kW; ++jw) out[ow * kW + jw] = v & MaskOf<V>(t == unsigned(jw));
  }
}

// SegNet's 2x2 windows, both output rows in one pass (top's taps are 0 and 1, bottom's 2
// and 3): one read of the offsets and of x per window, where a pass per row read them
// twice.
template <typename V>
__attribute__((always_inline)) inline void TileRow2x2(const uint8_t* __restrict off,
                                                      const V* __restrict x,
                                                      V* __restrict top, V* __restrict bottom,
                                                      int64_t windows) {
  for (int64_t ow = 0; ow < windows; ++ow) {
    const unsigned t = off[ow];
    const V v = x[ow];
    top[2 * ow] = v & MaskOf<V>(t == 0);
    top[2 * ow + 1] = v & MaskOf<V>(t == 1);
    bottom[2 * ow] = v & MaskOf<V>(t == 2);
    bottom[2 * ow + 1] = v & MaskOf<V>(t == 3);
  }
}

#if JAX_UNPOOL_HAVE_AVX2
template <typename V>
__attribute__((target("avx2"))) void TileRow2x2Avx2(const uint8_t* off, const V* x, V* top,
                                                    V* bottom, int64_t windows) {
  TileRow2x2(off, x, top, bottom, windows);
}
#endif

template <typename V>
void TileRow2x2AnyCpu(const uint8_t* off, const V* x, V* top, V* bottom, int64_t windows) {
#if JAX_UNPOOL_HAVE_AVX2
  if (CpuHasAvx2()) return TileRow2x2Avx2(off, x, top, bottom, windows);
#endif
  TileRow2x2(off, x, top, bottom, windows);
}

template <typename V>
void TileRowAnyWidth(const uint8_t* off, const V* x, V* out, int tap, int64_t kw,
                     int64_t windows) {
  switch (kw) {
    case 1: return TileRow<1>(off, x, out, tap, windows);
    case 2: return TileRow<2>(off, x, out, tap, windows);
    case 3: return TileRow<3>(off, x, out, tap, windows);
    default:
      for (int64_t ow = 0; ow < windows; ++ow)
        for (int64_t jw = 0; jw < kw; ++jw)
          out[ow * kw + jw] = x[ow] & MaskOf<V>(off[ow] == tap + jw);
  }
}

// Channels first: the planes [c0, c1) of image n, window row by window row, each row
// checked before its kd * kh output rows are written.
template <typename V>
BadIndex TilePlanes(const Geometry& p, const V* x, const uint8_t* offsets, V* out, int64_t n,
                    int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t D = p.in[0], H = p.in[1], W = p.in[2], Ho = p.out[1], Wo = p.out[2];
  const int64_t kd = p.kernel[0], kh = p.kernel[1], kw = p.kernel[2];
  const int64_t full = std::min(Wo, W / kw);  // windows inside the input along W
  const int64_t Dc = std::min(D, p.out[0] * kd), Hc = std::min(H, Ho * kh),
                Wc = std::min(W, Wo * kw);  // what the windows cover
  const bool inside = EveryWindowInside(p), pairs = kd == 1 && kh == 2 && kw == 2;
  WindowRows<int64_t> rows(p);
  for (int64_t c = c0; c < c1; ++c) {
    const V* src = x + u.in_offset(n, c, 0);
    const uint8_t* off = offsets + u.in_offset(n, c, 0);
    V* dst = out + u.out_offset(n, c, 0);
    const bool valid = inside && LargestOffset(off, p.out_plane()) < rows.taps();
    for (int64_t od = 0; od < p.out[0]; ++od) {
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t r = (od * Ho + oh) * Wo;
        const int64_t bad = valid ? -1 : FirstUnnamedInRow(p, rows, off + r, od, oh, full);
        if (bad >= 0) return BadOffsetAt(p, u.in_offset(n, c, r + bad), off[r + bad]);
        const bool two_by_two = pairs && oh * 2 + 1 < H;  // then both output rows at once
        if (two_by_two) {
          V* top = dst + (od * H + oh * 2) * W;
          TileRow2x2AnyCpu(off + r, src + r, top, top + W, full);
        }
        for (int64_t jd = 0; jd < kd && od * kd + jd < D; ++jd) {
          for (int64_t jh = 0; jh < kh && oh * kh + jh < H; ++jh) {
            V* row = dst + ((od * kd + jd) * H + oh * kh + jh) * W;
            const int tap = static_cast<int>((jd * kh + jh) * kw);
            if (!two_by_two) TileRowAnyWidth(off + r, src + r, row, tap, kw, full);
            for (int64_t ow = full; ow < Wo; ++ow)  // ceil_mode: a window past the input
              for (int64_t jw = 0; ow * kw + jw < W; ++jw)
                row[ow * kw + jw] = src[r + ow] & MaskOf<V>(off[r + ow] == tap + jw);
            std::memset(row + Wc, 0, sizeof(V) * (W - Wc));
          }
        }
      }
    }
    // What no window covers (the rows and slices a floor-mode pool leaves out).
    for (int64_t d = 0; d < Dc; ++d)
      std::memset(dst + (d * H + Hc) * W, 0, sizeof(V) * (H - Hc) * W);
    std::memset(dst + Dc * H * W, 0, sizeof(V) * (D - Dc) * H * W);
  }
  return BadIndex{};
}

// Channels last: the channels [c0, c1) of image n, window by window: each window's
// offsets checked, then each of its taps inside the input written, cols values each.
template <typename V>
BadIndex TileImageSpan(const Geometry& p, const V* x, const uint8_t* offsets, V* out, int64_t n,
                       int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t cols = c1 - c0;
  const int64_t D = p.in[0], H = p.in[1], W = p.in[2];
  const int64_t kd = p.kernel[0], kh = p.kernel[1], kw = p.kernel[2];
  WindowRows<int64_t> rows(p);
  const auto zero = [&](int64_t position, int64_t count) {  // `count` positions from there
    V* dst = out + u.out_offset(n, c0, position);
    if (cols == p.C) {
      std::memset(dst, 0, sizeof(V) * count * p.C);
    } else {
      for (int64_t q = 0; q < count; ++q) std::memset(dst + q * p.C, 0, sizeof(V) * cols);
    }
  };
  int64_t i = 0;
  for (int64_t od = 0; od < p.out[0]; ++od) {
    for (int64_t oh = 0; oh < p.out[1]; ++oh) {
      rows.Start(od, oh);
      for (int64_t ow = 0; ow < p.out[2]; ++ow, ++i) {
        const uint8_t* off = offsets + u.in_offset(n, c0, i);
        const V* src = x + u.in_offset(n, c0, i);
        int64_t bad = -1;
        if (!rows.Full(ow) || LargestOffset(off, cols) >= rows.taps())
          bad = FirstUnnamed(rows, ow, off, cols, 1);
        if (bad >= 0) return BadOffsetAt(p, u.in_offset(n, c0 + bad, i), off[bad]);
        for (int64_t jd = 0; jd < kd && od * kd + jd < D; ++jd) {
          for (int64_t jh = 0; jh < kh && oh * kh + jh < H; ++jh) {
            for (int64_t jw = 0; jw < kw && ow * kw + jw < W; ++jw) {
              const int64_t position = ((od * kd + jd) * H + oh * kh + jh) * W + ow * kw + jw;
              V* __restrict dst = out + u.out_offset(n, c0, position);
              const int tap = static_cast<int>((jd * kh + jh) * kw + jw);
              for (int64_t j = 0; j < cols; ++j) dst[j] = src[j] & MaskOf<V>(off[j] == tap);
            }
          }
        }
      }
    }
  }
  // What no window covers.
  const int64_t Dc = std::min(D, p.out[0] * kd), Hc = std::min(H, p.out[1] * kh),
                Wc = std::min(W, p.out[2] * kw);
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t h = 0; h < H; ++h) {
      if (d >= Dc || h >= Hc) {
        zero((d * H + h) * W, W);
      } else if (Wc < W) {
        zero((d * H + h) * W + Wc, W - Wc);
      }
    }
  }
  return BadIndex{};
}

// ---------------------------------------------------------------------------------------
// Any window: offsets decoded into flat positions, then scattered as the flat kernel does
// ---------------------------------------------------------------------------------------

// Channels first: each plane zero-filled, then its window rows decoded and scattered in
// buffer order while the plane is in cache.
template <typename J, typename V>
BadIndex ScatterPlanes(const Geometry& p, const V* x, const uint8_t* offsets, V* out, int64_t n,
                       int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t Wo = p.out[2], Lo = p.in_plane();
  WindowRows<J> rows(p);
  std::vector<J> flat(static_cast<size_t>(Wo));
  for (int64_t c = c0; c < c1; ++c) {
    const V* src = x + u.in_offset(n, c, 0);
    const uint8_t* off = offsets + u.in_offset(n, c, 0);
    V* dst = out + u.out_offset(n, c, 0);
    std::memset(dst, 0, sizeof(V) * Lo);
    IndexRange<J> range(Lo);
    for (int64_t od = 0, r = 0; od < p.out[0]; ++od) {
      for (int64_t oh = 0; oh < p.out[1]; ++oh, r += Wo) {
        rows.Start(od, oh);
        rows.Row(off + r, flat.data());
        if (!range.Admit(flat.data(), Wo)) {
          const int64_t bad = std::find(flat.begin(), flat.end(), WindowRows<J>::kNone) - flat.begin();
          return BadOffsetAt(p, u.in_offset(n, c, r + bad), off[r + bad]);
        }
        for (int64_t ow = 0; ow < Wo; ++ow) dst[flat[ow]] = src[r + ow];
      }
    }
  }
  return BadIndex{};
}

// Channels last: the channels [c0, c1) of image n, a block of positions at a time, the
// output zero-filled lazily in blocks as the flat kernel's ScatterImageSpan does.
template <typename J, typename V>
BadIndex ScatterImageSpan(const Geometry& p, const V* x, const uint8_t* offsets, V* out,
                          int64_t n, int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  const int64_t cols = c1 - c0, L = p.out_plane(), Lo = p.in_plane();
  V* dst = out + u.out_offset(n, c0, 0);  // position o of channel c0 + j is dst[o * C + j]
  int shift = 0;  // blocks of 2^shift positions, about 4 KiB of the span's output
  while ((int64_t{2} << shift) * cols * static_cast<int64_t>(sizeof(V)) <= 4096) ++shift;
  std::vector<uint8_t> zeroed(static_cast<size_t>(((Lo - 1) >> shift) + 1), 0);
  const auto zero_block = [&](int64_t b) {
    const int64_t o0 = b << shift, o1 = std::min(Lo, (b + 1) << shift);
    if (cols == p.C) {
      std::memset(dst + o0 * p.C, 0, sizeof(V) * (o1 - o0) * p.C);
    } else {
      for (int64_t o = o0; o < o1; ++o) std::memset(dst + o * p.C, 0, sizeof(V) * cols);
    }
    zeroed[b] = 1;
  };
  WindowRows<J> rows(p);
  IndexRange<J> range(Lo);
  const int64_t per_block = RowsPerBlock(cols, sizeof(J));
  std::vector<J> flat(static_cast<size_t>(per_block * cols));
  int64_t window[3];
  for (int64_t i0 = 0; i0 < L; i0 += per_block) {
    const int64_t i1 = std::min(L, i0 + per_block);
    WindowOf(p, i0, window);
    rows.Start(window[0], window[1]);
    for (int64_t i = i0; i < i1; ++i) {
      rows.Window(window[2], offsets + u.in_offset(n, c0, i), cols, flat.data() + (i - i0) * cols);
      if (++window[2] == p.out[2]) {
        window[2] = 0;
        if (++window[1] == p.out[1]) window[1] = 0, ++window[0];
        if (i + 1 < i1) rows.Start(window[0], window[1]);
      }
    }
    if (!range.Admit(flat.data(), (i1 - i0) * cols)) {
      const auto end = flat.begin() + (i1 - i0) * cols;
      const int64_t bad = std::find(flat.begin(), end, WindowRows<J>::kNone) - flat.begin();
      const int64_t at = u.in_offset(n, c0 + bad % cols, i0 + bad / cols);
      return BadOffsetAt(p, at, offsets[at]);
    }
    for (int64_t i = i0; i < i1; ++i) {
      const V* src = x + u.in_offset(n, c0, i);
      const J* f = flat.data() + (i - i0) * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t o = static_cast<int64_t>(f[j]);
        if (!zeroed[o >> shift]) zero_block(o >> shift);
        dst[o * p.C + j] = src[j];
      }
    }
  }
  for (int64_t b = 0; b < static_cast<int64_t>(zeroed.size()); ++b)
    if (!zeroed[b]) zero_block(b);
  return BadIndex{};
}

ffi::Error MaxUnpoolWindow(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer offsets,
                           ffi::Result<ffi::AnyBuffer> out, bool channels_last,
                           ffi::Span<const int64_t> kernel_size, ffi::Span<const int64_t> stride,
                           ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                           bool ceil_mode) {
  return RunWindowUnpoolOp(
      UnpoolOp::kForward, pool, x, offsets, *out, channels_last, kernel_size, stride, padding,
      dilation, ceil_mode,
      [](const Geometry& p, auto xs, const uint8_t* os, auto rs, int64_t n, int64_t c0,
         int64_t c1) -> BadIndex {
        if (WindowsTile(p)) {
          return p.channels_last ? TileImageSpan(p, xs, os, rs, n, c0, c1)
                                 : TilePlanes(p, xs, os, rs, n, c0, c1);
        }
        return VisitPlanePositions(p, [&](auto position_tag) {
          using J = typename decltype(position_tag)::type;
          return p.channels_last ? ScatterImageSpan<J>(p, xs, os, rs, n, c0, c1)
                                 : ScatterPlanes<J>(p, xs, os, rs, n, c0, c1);
        });
      });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolWindowCpu, MaxUnpoolWindow,
                              BindWindowUnpoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jax_unpool
