// What both CPU unpool handlers on window offsets share (max_unpool_window.cc,
// max_unpool_backward_window.cc): the offsets decoded into flat positions a row of
// windows at a time (WindowRows), the tiling test of their fast paths, and the frame around
// their kernels (the call checked, the planes split across threads, the first bad element
// in buffer order failing the call, named as common/window_offsets.h says).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/geometry.h"
#include "common/no_throw.h"
#include "common/out_of_range.h"
#include "common/unpool_checks.h"
#include "common/value_types.h"
#include "common/window_offsets.h"
#include "cpu/first_bad_index.h"
#include "cpu/image_spans.h"
#include "cpu/output_pages.h"
#include "cpu/thread_chunks.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// The windows (od, oh, ow) of one window row (od, oh) share their taps' rows: a table of
// the row's taps -- each tap's flat position in the plane less its window's start along W,
// or kNone where the tap lies in the padding -- makes a window's decode a lookup and an
// add. J: the flat positions' type (int32_t where the plane's positions fit it).
template <typename J>
class WindowRows {
 public:
  static constexpr J kNone = -1;  // names no position of the plane

  explicit WindowRows(const Geometry& pool) : g_(pool), taps_(WindowTaps(pool)) {
    std::fill(row_, row_ + kMaxWindowTaps, kNone);
    for (int64_t t = 0; t < taps_; ++t) {
      td_[t] = static_cast<uint8_t>(t / (g_.kernel[1] * g_.kernel[2]));
      th_[t] = static_cast<uint8_t>(t / g_.kernel[2] % g_.kernel[1]);
      tw_[t] = static_cast<uint8_t>(t % g_.kernel[2]);
    }
    // The windows whose taps along W all lie inside the input: [full_lo_, full_hi_).
    const int64_t reach = (g_.kernel[2] - 1) * g_.dil[2];
    full_lo_ = std::min(g_.out[2], (g_.pad[2] + g_.stride[2] - 1) / g_.stride[2]);
    full_hi_ = g_.in[2] - 1 - reach + g_.pad[2] < 0
                   ? 0
                   : std::min(g_.out[2], (g_.in[2] - 1 - reach + g_.pad[2]) / g_.stride[2] + 1);
    full_hi_ = std::max(full_hi_, full_lo_);
  }

  // Prepares window row (od, oh).
  void Start(int64_t od, int64_t oh) {
    const int64_t d0 = g_.FirstTap(0, od), d1 = g_.EndTap(0, od);
    const int64_t h0 = g_.FirstTap(1, oh), h1 = g_.EndTap(1, oh);
    empty_ = d0 >= d1 || h0 >= h1;
    row_full_ = d0 == 0 && d1 == g_.kernel[0] && h0 == 0 && h1 == g_.kernel[1];
    initial_ = (g_.First(0, od) * g_.in[1] + g_.First(1, oh)) * g_.in[2];
    for (int64_t t = 0; t < taps_; ++t) {
      const int64_t td = td_[t], th = th_[t];
      row_[t] = td >= d0 && td < d1 && th >= h0 && th < h1
                    ? static_cast<J>((g_.Tap(0, od, td) * g_.in[1] + g_.Tap(1, oh, th)) * g_.in[2] +
                                     tw_[t] * g_.dil[2])
                    : kNone;
    }
  }

  // The flat position that offset t of window ow of the started row names, or kNone: where
  // it names no tap inside the input, and where a window of padding only names an index
  // past the plane (BadOffsetAt tells them apart).
  J At(int64_t ow, uint8_t t) const {
    const int64_t start = ow * g_.stride[2] - g_.pad[2];
    if (!empty_ && ow >= full_lo_ && ow < full_hi_) return Shifted(row_[t], start);
    const int64_t w0 = g_.FirstTap(2, ow), w1 = g_.EndTap(2, ow);
    if (empty_ || w0 >= w1) {  // PyTorch's initial index, for offset 0
      const int64_t flat = initial_ + g_.First(2, ow);
      return t == 0 && flat < g_.in_plane() ? static_cast<J>(flat) : kNone;
    }
    return tw_[t] >= w0 && tw_[t] < w1 ? Shifted(row_[t], start) : kNone;
  }

  // out[ow] = At(ow, off[ow]) for the whole started row: channels first.
  void Row(const uint8_t* off, J* out) const {
    if (empty_) {
      for (int64_t ow = 0; ow < g_.out[2]; ++ow) out[ow] = At(ow, off[ow]);
      return;
    }
    for (int64_t ow = 0; ow < full_lo_; ++ow) out[ow] = At(ow, off[ow]);
    const int64_t s = g_.stride[2], first = full_lo_ * s - g_.pad[2];
    for (int64_t ow = full_lo_; ow < full_hi_; ++ow)
      out[ow] = Shifted(row_[off[ow]], first + (ow - full_lo_) * s);
    for (int64_t ow = full_hi_; ow < g_.out[2]; ++ow) out[ow] = At(ow, off[ow]);
  }

  // out[j] = At(ow, off[j]) for j < count: the channels of one window, channels last.
  void Window(int64_t ow, const uint8_t* off, int64_t count, J* out) const {
    if (!empty_ && ow >= full_lo_ && ow < full_hi_) {
      const int64_t start = ow * g_.stride[2] - g_.pad[2];
      for (int64_t j = 0; j < count; ++j) out[j] = Shifted(row_[off[j]], start);
      return;
    }
    for (int64_t j = 0; j < count; ++j) out[j] = At(ow, off[j]);
  }

  // Whether every tap of window ow of the started row lies inside the input: there, an
  // offset names a tap iff it is below the tap count.
  bool Full(int64_t ow) const { return row_full_ && ow >= full_lo_ && ow < full_hi_; }

  int64_t taps() const { return taps_; }

 private:
  static J Shifted(J f, int64_t start) {
    return f == kNone ? kNone : static_cast<J>(f + start);
  }

  const Geometry& g_;
  const int64_t taps_;
  int64_t full_lo_ = 0, full_hi_ = 0, initial_ = 0;
  bool empty_ = true, row_full_ = false;
  J row_[kMaxWindowTaps];
  uint8_t td_[kMaxWindowTaps] = {}, th_[kMaxWindowTaps] = {}, tw_[kMaxWindowTaps] = {};
};

// The flat position type of a pool's input plane: int32_t where every position fits it.
template <typename F>
decltype(auto) VisitPlanePositions(const Geometry& pool, F&& f) {
  if (pool.in_plane() <= std::numeric_limits<int32_t>::max()) return f(TypeTag<int32_t>{});
  return f(TypeTag<int64_t>{});
}

// Whether the pool's windows tile its input: kernel == stride, no padding or dilation, on
// every axis. Then each input position lies in at most one window, at one tap, and the
// fast paths write each result element once, from the offsets alone; only a ceil_mode
// window may reach past the input (its last along an axis).
inline bool WindowsTile(const Geometry& pool) {
  for (int a = 0; a < 3; ++a)
    if (pool.kernel[a] != pool.stride[a] || pool.pad[a] != 0 || pool.dil[a] != 1) return false;
  return true;
}

// The largest of n offsets (a loop the compiler vectorises).
inline uint8_t LargestOffset(const uint8_t* off, int64_t n) {
  uint8_t m = 0;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, off[j]);
  return m;
}

// The first of n offsets of window ow (started row; count stride `step`) that names no
// position, or -1.
template <typename J>
int64_t FirstUnnamed(const WindowRows<J>& rows, int64_t ow, const uint8_t* off, int64_t n,
                     int64_t step) {
  for (int64_t j = 0; j < n; ++j)
    if (rows.At(ow, off[j * step]) == WindowRows<J>::kNone) return j;
  return -1;
}

// The first offset of window row (od, oh) of a tiling pool (WindowsTile; its Wo offsets
// `off`) that names no position, as a window number, or -1. Where the row's windows lie
// inside the input along D and H, the first `full` (those inside along W too) name a tap
// iff their largest offset is below the tap count: one vectorised test, no table.
inline int64_t FirstUnnamedInRow(const Geometry& p, WindowRows<int64_t>& rows,
                                 const uint8_t* off, int64_t od, int64_t oh, int64_t full) {
  int64_t ow = 0;
  const bool inside = (od + 1) * p.kernel[0] <= p.in[0] && (oh + 1) * p.kernel[1] <= p.in[1];
  if (inside && LargestOffset(off, full) < rows.taps()) ow = full;
  if (ow == p.out[2]) return -1;
  rows.Start(od, oh);
  for (; ow < p.out[2]; ++ow)
    if (rows.At(ow, off[ow]) == WindowRows<int64_t>::kNone) return ow;
  return -1;
}

// Whether a tiling pool's planes hold only windows inside the input (no ceil_mode window
// past it): there, a plane's offsets are valid iff the largest is below the tap count, one
// vectorised pass per plane where FirstUnnamedInRow makes one per row.
inline bool EveryWindowInside(const Geometry& p) {
  for (int a = 0; a < 3; ++a)
    if (p.out[a] * p.kernel[a] > p.in[a]) return false;
  return true;
}

// A whole unpool handler call on window offsets: checked (CheckWindowUnpoolCall), then
// span(pool, values, offsets, out, n, c0, c1) -> BadIndex over every (image, channel
// range) span of every chunk of planes, with typed values; the first bad element in
// buffer order fails the call (BadOffsetError).
template <typename Span>
ffi::Error RunWindowUnpoolOp(UnpoolOp kind, ffi::ThreadPool& pool, const ffi::AnyBuffer& values,
                             const ffi::AnyBuffer& offsets, ffi::AnyBuffer out,
                             bool channels_last, ffi::Span<const int64_t> kernel_size,
                             ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                             ffi::Span<const int64_t> dilation, bool ceil_mode, Span span) {
  const size_t k = kernel_size.size();
  const char* op = k >= 1 && k <= 3 ? UnpoolOpName(kind, static_cast<int64_t>(k))
                   : kind == UnpoolOp::kForward ? "max_unpool"
                                                : "max_unpool_backward";
  return NoThrow(op, [&]() -> ffi::Error {
    auto checked = CheckWindowUnpoolCall(kind, values, offsets, out, channels_last, kernel_size,
                                         stride, padding, dilation, ceil_mode);
    if (checked.has_error()) return checked.error();
    Geometry p = *checked;
    if (p.C == 1) p.channels_last = false;  // one channel last is one channel first
    if (p.planes() == 0) return ffi::Error::Success();
    AdviseHugePages(out.untyped_data(), out.size_bytes());
    const int64_t bytes =
        static_cast<int64_t>(values.size_bytes() + offsets.size_bytes() + out.size_bytes());
    return VisitValueWidth(MovableByteWidth(values.element_type()), [&](auto value_tag) {
      using V = typename decltype(value_tag)::type;
      const V* vs = static_cast<const V*>(values.untyped_data());
      const uint8_t* os = static_cast<const uint8_t*>(offsets.untyped_data());
      V* rs = static_cast<V*>(out.untyped_data());
      FirstBadIndex bad;
      const Geometry u = Unpooling(p);  // the spans' planes: offsets on the input side
      ffi::Error run = ForEachChunk(pool, p.planes(), bytes, [&](int64_t u0, int64_t u1) {
        bad.Offer(ForEachImageSpan(u, u0, u1, [&](int64_t n, int64_t c0, int64_t c1) {
          return span(p, vs, os, rs, n, c0, c1);
        }));
      });
      if (!run.success()) return run;
      return bad.first().found() ? BadOffsetError(op, p, bad.first()) : ffi::Error::Success();
    });
  });
}

// The window targets' attributes after (values, offsets) -> out: the pool's.
template <typename Binding>
auto BindWindowUnpoolOperands(Binding binding) {
  return BindPoolWindow(std::move(binding)
                            .template Arg<ffi::AnyBuffer>()    // x or grad_output
                            .template Arg<ffi::AnyBuffer>()    // the window offsets, uint8
                            .template Ret<ffi::AnyBuffer>());  // out
}

}  // namespace jax_unpool
