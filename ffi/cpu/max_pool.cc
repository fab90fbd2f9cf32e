// CPU max pool with indices, PyTorch's semantics (aten/src/ATen/native/cpu/MaxPoolKernel.cpp):
// each window starts from (lowest value, first in-bounds position) and an in-bounds tap
// replaces the running max iff `val > maxval || isnan(val)`, in row-major scan order over
// the window. So the first maximum wins ties, the last NaN wins, padding is never
// selected, and a ceil_mode window of padding only reports the lowest value and its first
// tap right of the left padding, past the input.
//
// One pass over x writes values and indices together: flat positions (int32 or int64), or
// tap numbers in the window (uint8 window offsets, common/window_offsets.h), computed in
// the same loops. Work is split into output rows
// (channels first: the W outputs of one (n, c, d, h)) or output positions (channels last:
// the C channels of one (n, d, h, w)), across XLA's intra-op pool. Windows of 2 with
// stride 2 (most real use) take a fast path whose loops the compiler vectorises: across
// w (channels first) or across the contiguous channels (channels last).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "common/no_throw.h"
#include "common/pool_checks.h"
#include "common/pool_values.h"
#include "cpu/handlers.h"
#include "cpu/output_pages.h"
#include "cpu/thread_chunks.h"

namespace jax_unpool {
namespace {

// I: int32_t or int64_t for flat indices, uint8_t for window offsets.
template <typename Order, typename I>
class Pool {
 public:
  using Raw = typename Order::Raw;
  using Key = typename Order::Key;
  static constexpr bool kTaps = std::is_same_v<I, uint8_t>;

  Pool(const Geometry& g, Order order, const Raw* x, Raw* values, I* indices)
      : g_(g), order_(order), x_(x), values_(values), indices_(indices) {}

  // Channels first: output rows [u0, u1), a row being (plane, od, oh), taken as runs of
  // rows of one (plane, od).
  void Rows(int64_t u0, int64_t u1) const {
    std::vector<Key> best(static_cast<size_t>(g_.out[2]));
    // The row's coordinates are counted up, not divided out of u: 64-bit divisions per
    // row cost as much as pooling a short row.
    int64_t oh = u0 % g_.out[1], od = u0 / g_.out[1] % g_.out[0];
    const Raw* src = x_ + u0 / (g_.out[0] * g_.out[1]) * g_.in_plane();
    for (int64_t u = u0; u < u1;) {
      const int64_t oh_end = std::min(g_.out[1], oh + (u1 - u));  // the run: [oh, oh_end)
      Raw* out = values_ + u * g_.out[2];
      I* idx = indices_ + u * g_.out[2];
      u += oh_end - oh;
      if (fast_ && Full(0, od)) {
        const int64_t done = small_plane_ ? FastRows<int32_t>(src, od, oh, oh_end, out, idx)
                                          : FastRows<Wide>(src, od, oh, oh_end, out, idx);
        out += (done - oh) * g_.out[2];
        idx += (done - oh) * g_.out[2];
        oh = done;
      }
      for (; oh < oh_end; ++oh, out += g_.out[2], idx += g_.out[2])
        GenericRow(src, od, oh, out, idx, best.data());
      oh = 0;
      if (++od == g_.out[0]) {
        od = 0;
        src += g_.in_plane();
      }
    }
  }

  // Channels last: output positions [u0, u1), a position being (n, od, oh, ow).
  void Positions(int64_t u0, int64_t u1) const {
    std::vector<Key> best(static_cast<size_t>(g_.C));
    // int64 indices and offsets are computed in int32 here, then converted (FastPosition).
    std::vector<int32_t> narrow(sizeof(I) != sizeof(int32_t) ? static_cast<size_t>(g_.C) : 0);
    int64_t ow = u0 % g_.out[2], oh = u0 / g_.out[2] % g_.out[1],
            od = u0 / (g_.out[2] * g_.out[1]) % g_.out[0];
    const Raw* src = x_ + u0 / g_.out_plane() * g_.in_plane() * g_.C;
    for (int64_t u = u0; u < u1; ++u) {
      Raw* out = values_ + u * g_.C;
      I* idx = indices_ + u * g_.C;
      if (fast_ && Full(0, od) && Full(1, oh) && Full(2, ow)) {
        FastPosition(src, od, oh, ow, out, idx, narrow.data());
      } else {
        GenericPosition(src, od, oh, ow, out, idx, best.data());
      }
      if (++ow == g_.out[2]) {
        ow = 0;
        if (++oh == g_.out[1]) {
          oh = 0;
          if (++od == g_.out[0]) {
            od = 0;
            src += g_.in_plane() * g_.C;
          }
        }
      }
    }
  }

 private:
  // What the index loops count in: int32 for offsets (a tap number), else the index type.
  using Wide = std::conditional_t<kTaps, int32_t, I>;

  // Whether window o of axis a lies inside the input (always, for an axis of size 1).
  bool Full(int a, int64_t o) const { return g_.Tap(a, o, g_.kernel[a] - 1) < g_.in[a]; }
  // The window's initial argmax (PyTorch's): its flat position, possibly past the input;
  // as an offset, its tap number, or 0 for a window of padding only.
  int64_t Initial(int64_t od, int64_t oh, int64_t ow) const {
    if constexpr (kTaps) {
      const int64_t o[3] = {od, oh, ow};
      int64_t tap = 0;
      for (int a = 0; a < 3; ++a) {
        const int64_t first = g_.FirstTap(a, o[a]);
        if (first >= g_.EndTap(a, o[a])) return 0;
        tap = tap * g_.kernel[a] + first;
      }
      return tap;
    } else {
      return (g_.First(0, od) * g_.in[1] + g_.First(1, oh)) * g_.in[2] + g_.First(2, ow);
    }
  }

  // Calls f(offset, tap) for each in-bounds input row (d, h) of window row (od, oh), offset
  // the flat position of the row's first element and tap the tap number of the row's first
  // tap, in scan order.
  template <typename F>
  void ForEachTapRow(int64_t od, int64_t oh, const F& f) const {
    const int64_t h0 = g_.FirstTap(1, oh), h1 = g_.EndTap(1, oh);
    for (int64_t td = g_.FirstTap(0, od), d1 = g_.EndTap(0, od); td < d1; ++td) {
      const int64_t d = g_.Tap(0, od, td);
      for (int64_t th = h0; th < h1; ++th)
        f((d * g_.in[1] + g_.Tap(1, oh, th)) * g_.in[2], (td * g_.kernel[1] + th) * g_.kernel[2]);
    }
  }

  // Calls f(i, t) for each in-bounds tap of window (od, oh, ow), i its flat position in the
  // plane and t its tap number, in scan order (PyTorch's order, which decides ties).
  template <typename F>
  void ForEachTap(int64_t od, int64_t oh, int64_t ow, const F& f) const {
    const int64_t w0 = g_.FirstTap(2, ow), w1 = g_.EndTap(2, ow);
    ForEachTapRow(od, oh, [&](int64_t offset, int64_t tap) {
      for (int64_t tw = w0; tw < w1; ++tw) f(offset + g_.Tap(2, ow, tw), tap + tw);
    });
  }

  // 2 per axis, stride 2: the full rows among [oh0, oh1) of (plane, od); returns where
  // they end (a ceil_mode window half below the input is left to GenericRow). The taps of
  // output w are 2 * w and 2 * w + 1 of each of its 1, 2 or 4 input rows, in scan order:
  // one pass over the run's outputs per input slice d, in which each output row is a
  // vectorised loop over its 1 or 2 input rows. So x is read in order, slice after slice,
  // and the run's results (a few KB) stay in cache from the first pass to the second
  // (reading two slices at once was slower: docs/performance.md, "Measured choices").
  // Rows of fewer than kNarrow windows take PairsThenRows instead.
  // J: the type indices are computed in (see Pairs).
  template <typename J>
  int64_t FastRows(const Raw* src, int64_t od, int64_t oh0, int64_t oh1, Raw* out,
                   I* idx) const {
    if (!Full(1, oh1 - 1)) --oh1;  // only the axis' last window may be partial
    const int64_t W = g_.in[2], Wo = g_.out[2], full = W / 2;  // full windows in a row
    if (W % 2 == 0 && g_.kernel[1] == 2 && full < kNarrow) {
      if (g_.kernel[0] == 1) {
        PairsThenRows<1, J>(src, od, oh0, oh1, out, idx);
      } else {
        PairsThenRows<2, J>(src, od, oh0, oh1, out, idx);
      }
      return oh1;
    }
    for (int64_t td = 0; td < g_.kernel[0]; ++td) {
      const int64_t offset = (g_.Tap(0, od, td) * g_.in[1] + g_.Tap(1, oh0, 0)) * W;
      const J tap = static_cast<J>(td * g_.kernel[1] * 2);  // of the slice's first tap
      if (g_.kernel[1] == 1) {
        PairRows<1, false, J>(src, offset, tap, oh1 - oh0, out, idx);
      } else if (td == 0) {
        PairRows<2, false, J>(src, offset, tap, oh1 - oh0, out, idx);
      } else {
        PairRows<2, true, J>(src, offset, tap, oh1 - oh0, out, idx);
      }
    }
    for (int64_t oh = oh0; oh < oh1; ++oh) {  // ceil_mode: a last window half right of x
      for (int64_t ow = full; ow < Wo; ++ow) {
        const int64_t o = (oh - oh0) * Wo + ow;
        out[o] = Element(src, 1, od, oh, ow, &idx[o]);
      }
    }
    return oh1;
  }

  // Rows of even width: the pairs (2w, 2w + 1) of consecutive input rows lie back to back,
  // so one vectorised loop per slice takes the better tap of every pair of a block of rows
  // (no row ends, no remainders per row), and a second loop per output row takes the 2 or 4
  // pair winners of each window in scan order, with no shuffles. Each pair is a stretch of
  // its window's scan order, and PyTorch's rule applied to the stretches' winners in order
  // gives its result over all their taps. kSlices: the window's input slices (1 or 2).
  template <int kSlices, typename J>
  void PairsThenRows(const Raw* src, int64_t od, int64_t oh0, int64_t oh1, Raw* out,
                     I* idx) const {
    const int64_t H = g_.in[1], W = g_.in[2], Wo = W / 2;
    const int64_t rows = kStretches / (2 * Wo * kSlices);  // a block (Wo < kNarrow)
    Raw best[kStretches];  // per slice: the pairs of the block's input rows, row by row
    J at[kStretches];
    for (int64_t b0 = oh0; b0 < oh1; b0 += rows) {
      const int64_t b1 = std::min(oh1, b0 + rows), pairs = 2 * (b1 - b0) * Wo;
      for (int s = 0; s < kSlices; ++s) {
        const int64_t offset = (g_.Tap(0, od, s) * H + 2 * b0) * W;
        const Raw* in = src + offset;
        // An offset counts the pair's tap (0 or 1): its row and slice are added below.
        const J first = kTaps ? J{0} : static_cast<J>(offset);
        Raw* __restrict b = best + s * pairs;
        J* __restrict a = at + s * pairs;
        InBlocks(pairs, [&](int64_t p0, int64_t p1) {
          PairWinners(order_, in, first, p0, p1, b, a);
        });
      }
      for (int64_t j = 0; j < b1 - b0; ++j) {
        const int64_t o = (b0 - oh0 + j) * Wo;
        InBlocks(Wo, [&](int64_t w0, int64_t w1) {
          RowWinners<kSlices>(order_, best + 2 * j * Wo, at + 2 * j * Wo, Wo, pairs, w0, w1,
                              out + o, idx + o);
        });
      }
    }
  }

  // b[p], a[p]: the better of in[2p] and in[2p + 1] by PyTorch's rule, and its position
  // (first + 2p or first + 2p + 1), for p in [p0, p1).
  template <typename J>
  __attribute__((always_inline)) static void PairWinners(const Order order,
                                                         const Raw* __restrict in, J first,
                                                         int64_t p0, int64_t p1,
                                                         Raw* __restrict b, J* __restrict a) {
    constexpr J step = kTaps ? 0 : 2;
    J i = static_cast<J>(first + step * p0);
#if defined(__clang__)
#pragma clang loop vectorize_width(16 / sizeof(Raw))
#endif
    for (int64_t p = p0; p < p1; ++p, i += step) {
      const Raw v0 = in[2 * p], v1 = in[2 * p + 1];
      const bool take = Replaces(order.Decode(v1), order.Decode(v0));
      b[p] = take ? v1 : v0;
      a[p] = static_cast<J>(i + J(take));
    }
  }

  // Outputs [w0, w1) of one output row from its pair winners: row th of slice s at
  // b + s * pairs + th * Wo, in scan order (s, th). Offsets add the pair's tap number
  // (s * 2 + th) * 2 to the tap inside it.
  template <int kSlices, typename J>
  __attribute__((always_inline)) static void RowWinners(const Order order,
                                                        const Raw* __restrict b,
                                                        const J* __restrict a, int64_t Wo,
                                                        int64_t pairs, int64_t w0, int64_t w1,
                                                        Raw* __restrict out,
                                                        I* __restrict idx) {
#if defined(__clang__)
#pragma clang loop vectorize_width(16 / sizeof(Raw))
#endif
    for (int64_t w = w0; w < w1; ++w) {
      Raw v = b[w];
      J i = a[w];
      const auto tap = [&](int64_t q, J t) {  // a[q] read either way: no branch
        const Raw u = b[q];
        const J at_q = static_cast<J>(a[q] + (kTaps ? 2 * t : 0));
        const bool take = Replaces(order.Decode(u), order.Decode(v));
        v = take ? u : v;
        i = take ? at_q : i;
      };
      tap(Wo + w, 1);
      if constexpr (kSlices == 2) {
        tap(pairs + w, 2);
        tap(pairs + Wo + w, 3);
      }
      out[w] = v;
      idx[w] = static_cast<I>(i);
    }
  }

  // `rows` full output rows of one input slice, the first row's first input row at flat
  // position `offset`, each next one 2 input rows further; R (1 or 2) input rows each;
  // `tap`: the slice's first tap number. kMore: the windows' taps in an earlier slice are
  // in out and idx already.
  template <int R, bool kMore, typename J>
  void PairRows(const Raw* src, int64_t offset, J tap, int64_t rows, Raw* out, I* idx) const {
    constexpr int64_t kBlock = 16 / sizeof(Raw);  // values per 16-byte vector (SSE2)
    const int64_t W = g_.in[2], Wo = g_.out[2], full = W / 2, body = full / kBlock * kBlock;
    // A row in whole blocks, so that the vectorised loop never ends in its scalar
    // remainder, whose float compares branch (and mispredict on data): where blocks do not
    // fit, the row's last block first, then the whole blocks before it, overlapping it.
    // Outputs seen twice come out the same (the same taps in the same order, PyTorch's
    // rule). That block first: done last, its load of out (kMore) would overlap the
    // previous block's store just made and wait for it to reach the cache (9% of the 3-D
    // pool in cache). One loop over both parts: a loop of kBlock alone would be unrolled
    // into the scalar code.
    const int parts = body == full ? 1 : 2;
    const int64_t last = full >= kBlock ? full - kBlock : 0;
    const int64_t start[2] = {parts == 2 ? last : 0, 0};
    const int64_t end[2] = {parts == 2 ? full : body, body};
    for (int64_t r = 0; r < rows; ++r, offset += 2 * W, out += Wo, idx += Wo) {
      const Raw* row = src + offset;
      // An offset is the same tap number in every window: no position to count up.
      const J first = kTaps ? tap : static_cast<J>(offset), down = static_cast<J>(kTaps ? 2 : W);
      for (int part = 0; part < parts; ++part)
        Pairs<R, kMore, J>(order_, row, row + W, first, down, start[part], end[part], out, idx);
    }
  }

  // Outputs [o0, o1) of one output row from its input rows r0 (and r1 = r0 + down, for
  // R = 2), r0 at flat position b0: each output's pair (2 * w, 2 * w + 1) of each row, in
  // scan order. (Offsets: b0 is the first tap's number and down the next row's, 2.) Indices are counted up in J, not derived from ow; J is int32 wherever the
  // plane's positions fit (int64 indices included, widened when stored). So the
  // vectorised loop adds vectors of 4-byte lanes, as wide as the float compares' masks:
  // with int64 ow or int64 indices the compiler did not vectorise it. The order comes by
  // value: a member read through `this` could alias out. Inlined into the loop over rows
  // (both measured: docs/performance.md, "Measured choices").
  template <int R, bool kMore, typename J>
  __attribute__((always_inline)) static void Pairs(const Order order, const Raw* __restrict r0, const Raw* __restrict r1,
                    J b0, J down, int64_t o0, int64_t o1, Raw* __restrict out,
                    I* __restrict idx) {
    constexpr J step = kTaps ? 0 : 2;  // per output
    J i = b0 + static_cast<J>(step * o0);
    // As many lanes as values in a 16-byte vector, as GCC takes and PairRows cuts rows for:
    // clang's cost model (baseline x86-64) took fewer and ran more instructions
    // (docs/performance.md, "Measured choices").
#if defined(__clang__)
#pragma clang loop vectorize_width(16 / sizeof(Raw))
#endif
    for (int64_t ow = o0; ow < o1; ++ow, i += step) {
      Raw best;
      J best_idx;
      const auto tap = [&](Raw v, J at) {
        const bool take = Replaces(order.Decode(v), order.Decode(best));
        best = take ? v : best;
        best_idx = take ? at : best_idx;
      };
      if constexpr (kMore) {
        best = out[ow];
        best_idx = static_cast<J>(idx[ow]);
        tap(r0[2 * ow], i);
      } else {
        best = r0[2 * ow];
        best_idx = i;
      }
      tap(r0[2 * ow + 1], i + 1);
      if constexpr (R > 1) {
        tap(r1[2 * ow], i + down);
        tap(r1[2 * ow + 1], i + down + 1);
      }
      out[ow] = best;
      idx[ow] = static_cast<I>(best_idx);
    }
  }

  // Runs pass(o0, o1) over [0, count) so that the vectorised loop never ends in its scalar
  // remainder, whose float compares branch (and mispredict on data): whole blocks first,
  // then the last block again, overlapping. A pass may repeat outputs: with PyTorch's rule
  // a window's taps seen twice, in the same order, give the same result.
  template <typename Pass>
  static void InBlocks(int64_t count, const Pass& pass) {
    constexpr int64_t kBlock = 16 / sizeof(Raw);  // values per 16-byte vector (SSE2)
    const int64_t body = count / kBlock * kBlock;
    pass(0, body);
    if (body != count) pass(count >= kBlock ? count - kBlock : body, count);
  }

  // Any window: starts from (lowest, first position) and goes over the in-bounds taps of
  // every output w at once, tap row by tap row and tap by tap, so that each output sees
  // its taps in scan order.
  void GenericRow(const Raw* src, int64_t od, int64_t oh, Raw* out, I* idx, Key* best) const {
    const int64_t W = g_.in[2], Wo = g_.out[2], s = g_.stride[2];
    const Raw lowest = order_.Lowest();
    for (int64_t ow = 0; ow < Wo; ++ow) {
      best[ow] = order_.Decode(lowest);
      out[ow] = lowest;
      idx[ow] = static_cast<I>(Initial(od, oh, ow));
    }
    // The taps that some output's window has inside the row: from the last window's first
    // to the first window's last.
    const int64_t first_tap = g_.FirstTap(2, Wo - 1), end_tap = g_.EndTap(2, 0);
    ForEachTapRow(od, oh, [&](int64_t offset, int64_t tap) {
      const Raw* row = src + offset;
      for (int64_t tw = first_tap; tw < end_tap; ++tw) {
        // w = ow * s + shift; the outputs whose tap tw lies inside the row.
        const int64_t shift = tw * g_.dil[2] - g_.pad[2];
        const int64_t lo = shift >= 0 ? 0 : (-shift + s - 1) / s;
        const int64_t hi = std::min(Wo, W - 1 - shift < 0 ? 0 : (W - 1 - shift) / s + 1);
        if (lo >= hi) {
          // No output has tap tw inside the row (windows further apart than the row is
          // long): window lo's lies right of it, window lo - 1's left of it. Skip to the
          // first tap of window lo - 1 that is not left of the row.
          if (lo == 0) break;
          tw = std::max(tw, g_.FirstTap(2, lo - 1) - 1);
          continue;
        }
        for (int64_t ow = lo; ow < hi; ++ow) {
          const int64_t w = ow * s + shift;
          const Key v = order_.Decode(row[w]);
          if (Replaces(v, best[ow])) {
            best[ow] = v;
            out[ow] = row[w];
            idx[ow] = static_cast<I>(kTaps ? tap + tw : offset + w);
          }
        }
      }
    });
  }

  // One output of any window; element i of the plane is src[i * step].
  Raw Element(const Raw* src, int64_t step, int64_t od, int64_t oh, int64_t ow, I* idx) const {
    Raw best_raw = order_.Lowest();
    Key best = order_.Decode(best_raw);
    int64_t best_idx = Initial(od, oh, ow);
    ForEachTap(od, oh, ow, [&](int64_t i, int64_t t) {
      const Key v = order_.Decode(src[i * step]);
      if (Replaces(v, best)) {
        best = v;
        best_raw = src[i * step];
        best_idx = kTaps ? t : i;
      }
    });
    *idx = static_cast<I>(best_idx);
    return best_raw;
  }

  // Channels last, 2 per axis, stride 2: the 2, 4 or 8 taps of a full window are rows of
  // C contiguous values each. With int64 indices, where the plane's positions fit int32,
  // and with offsets, the taps' loops choose int32 indices in `narrow`, converted after:
  // as for the rows (see Pairs), the compiler vectorised neither loop with int64 indices
  // (docs/performance.md, "Measured choices").
  void FastPosition(const Raw* src, int64_t od, int64_t oh, int64_t ow, Raw* out, I* idx,
                    int32_t* narrow) const {
    int64_t flat[8], at[8];  // each tap's flat position, and what its index is
    int taps = 0;
    for (int64_t td = 0; td < g_.kernel[0]; ++td)
      for (int64_t th = 0; th < g_.kernel[1]; ++th)
        for (int64_t tw = 0; tw < 2; ++tw, ++taps) {
          flat[taps] = (g_.Tap(0, od, td) * g_.in[1] + g_.Tap(1, oh, th)) * g_.in[2] +
                       g_.Tap(2, ow, tw);
          at[taps] = kTaps ? taps : flat[taps];
        }
    const auto pool = [&](auto* into) {
      switch (taps) {
        case 2: FastPositionOf<2>(src, flat, at, out, into); break;
        case 4: FastPositionOf<4>(src, flat, at, out, into); break;
        default: FastPositionOf<8>(src, flat, at, out, into); break;
      }
    };
    if constexpr (sizeof(I) != sizeof(int32_t)) {
      if (kTaps || small_plane_) {
        pool(narrow);
        for (int64_t c = 0; c < g_.C; ++c) idx[c] = static_cast<I>(narrow[c]);
        return;
      }
    }
    if constexpr (!kTaps) pool(idx);
  }

  // Tap by tap in scan order, each over the C contiguous channels: loops without branches
  // that the compiler vectorises (a loop over the taps inside one over C does not).
  template <int T, typename J>
  void FastPositionOf(const Raw* src, const int64_t* flat, const int64_t* at, Raw* out,
                      J* idx) const {
    const Raw* first = src + flat[0] * g_.C;
    const Raw* second = src + flat[1] * g_.C;
    InBlocks(g_.C, [&](int64_t c0, int64_t c1) {
      FirstTaps(first, second, static_cast<J>(at[0]), static_cast<J>(at[1]), c0, c1, out, idx);
    });
    for (int t = 2; t < T; ++t) {
      const Raw* tap = src + flat[t] * g_.C;
      InBlocks(g_.C, [&](int64_t c0, int64_t c1) {
        MoreTaps(tap, static_cast<J>(at[t]), c0, c1, out, idx);
      });
    }
  }

  template <typename J>
  void FirstTaps(const Raw* __restrict a, const Raw* __restrict b, J pa, J pb, int64_t c0,
                 int64_t c1, Raw* __restrict out, J* __restrict idx) const {
    for (int64_t c = c0; c < c1; ++c) {
      const Raw va = a[c], vb = b[c];
      const bool take = Replaces(order_.Decode(vb), order_.Decode(va));
      out[c] = take ? vb : va;
      idx[c] = take ? pb : pa;
    }
  }

  // A repeated channel (InBlocks' overlap) is harmless: a tap against itself keeps it.
  // idx[c] is read whatever `take` is: clang (the wheels' compiler) makes a read inside
  // the select a conditional one, which it does not vectorise on baseline x86-64 (the
  // channels-last pool took 4 to 18 times GCC's time).
  template <typename J>
  void MoreTaps(const Raw* __restrict tap, J position, int64_t c0, int64_t c1,
                Raw* __restrict out, J* __restrict idx) const {
    for (int64_t c = c0; c < c1; ++c) {
      const Raw v = tap[c], best = out[c];
      const J best_idx = idx[c];
      const bool take = Replaces(order_.Decode(v), order_.Decode(best));
      out[c] = take ? v : best;
      idx[c] = take ? position : best_idx;
    }
  }

  // Channels last, any window: the in-bounds taps in scan order, each a row of C values.
  void GenericPosition(const Raw* src, int64_t od, int64_t oh, int64_t ow, Raw* out, I* idx,
                       Key* best) const {
    const Raw lowest = order_.Lowest();
    const I first = static_cast<I>(Initial(od, oh, ow));
    for (int64_t c = 0; c < g_.C; ++c) {
      best[c] = order_.Decode(lowest);
      out[c] = lowest;
      idx[c] = first;
    }
    ForEachTap(od, oh, ow, [&](int64_t i, int64_t t) {
      const Raw* tap = src + i * g_.C;
      const I at = static_cast<I>(kTaps ? t : i);
      for (int64_t c = 0; c < g_.C; ++c) {
        const Key v = order_.Decode(tap[c]);
        if (Replaces(v, best[c])) {
          best[c] = v;
          out[c] = tap[c];
          idx[c] = at;
        }
      }
    });
  }

  // Windows of 2 taps, stride 2, no padding or dilation on every axis (the common case):
  // the fast path. Axes of size 1 with a window of 1 do not count.
  static bool TwoByStrideTwo(const Geometry& g) {
    for (int a = 3 - g.k; a < 3; ++a)
      if (g.kernel[a] != 2 || g.stride[a] != 2 || g.pad[a] != 0 || g.dil[a] != 1) return false;
    return true;
  }

  const Geometry& g_;
  const Order order_;
  const Raw* x_;
  Raw* values_;
  I* indices_;
  const bool fast_ = TwoByStrideTwo(g_);
  // Rows of fewer windows than this take PairsThenRows: its loops have fewer ends, and
  // wider rows take fewer instructions per row. Under GCC only: clang's code for it (the
  // wheels') took more instructions than clang's per-row loops (docs/performance.md,
  // "Measured choices").
#if defined(__clang__)
  static constexpr int64_t kNarrow = 0;
#else
  static constexpr int64_t kNarrow = 16;
#endif
  // Pair winners PairsThenRows keeps on the stack, per block of rows (8 to 16 KiB).
  static constexpr int64_t kStretches = 1024;
  // Every flat position in the plane fits int32 (see Pairs).
  const bool small_plane_ = g_.in_plane() <= std::numeric_limits<int32_t>::max();
};

// XLA runs its CPU code with subnormal floats read as zero (MXCSR's DAZ and FTZ flags),
// where PyTorch compares them exactly: a chunk clears both for its compares and restores
// them after.
class ExactFloatCompares {
 public:
#if defined(__SSE__)
  ExactFloatCompares() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~kFlushFlags); }
  ~ExactFloatCompares() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFlushFlags = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)
  unsigned saved_;
#endif
};

// Calls f(TypeTag<I>{}) with the kernel's index type: the indices' integer type, or
// uint8_t for window offsets.
template <IndexFormat kFormat, typename F>
ffi::Error VisitPoolIndex(ffi::DataType dtype, F&& f) {
  if constexpr (kFormat == IndexFormat::kWindow) {
    return f(TypeTag<uint8_t>{});
  } else {
    return VisitIndexType(dtype, f);
  }
}

template <IndexFormat kFormat>
ffi::Error MaxPool(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> values,
                   ffi::Result<ffi::AnyBuffer> indices, bool channels_last,
                   ffi::Span<const int64_t> kernel_size, ffi::Span<const int64_t> stride,
                   ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                   bool ceil_mode) {
  return NoThrow("max_pool", [&]() -> ffi::Error {
    auto checked = CheckPoolCall(x, *values, *indices, channels_last, kernel_size, stride,
                                 padding, dilation, ceil_mode, kFormat);
    if (checked.has_error()) return checked.error();
    Geometry g = *checked;
    // One channel last is the same memory as one channel first.
    if (g.C == 1) g.channels_last = false;
    const int64_t units = g.channels_last ? g.N * g.out_plane()
                                          : g.N * g.C * g.out[0] * g.out[1];
    if (units == 0 || values->element_count() == 0) return ffi::Error::Success();
    // The pool's results are a quarter of x or less: most fall below glibc's 32 MiB mmap
    // threshold and come from its heap, whose top glibc gives back to the kernel when
    // they are freed, so that each call faults them in again. Huge pages from 4 MiB up, as
    // numpy advises its arrays, fault far less (docs/performance.md, "Measured choices").
    constexpr size_t kAdviseBytes = size_t{4} << 20;
    AdviseHugePages(values->untyped_data(), values->size_bytes(), kAdviseBytes);
    AdviseHugePages(indices->untyped_data(), indices->size_bytes(), kAdviseBytes);
    const int64_t bytes =
        static_cast<int64_t>(x.size_bytes() + values->size_bytes() + indices->size_bytes());
    return VisitPoolValueType(x.element_type(), [&](auto order) {
      using Order = decltype(order);
      using Raw = typename Order::Raw;
      return VisitPoolIndex<kFormat>(indices->element_type(), [&](auto index_tag) {
        using I = typename decltype(index_tag)::type;
        const Pool<Order, I> kernel(g, order, static_cast<const Raw*>(x.untyped_data()),
                                    static_cast<Raw*>(values->untyped_data()),
                                    static_cast<I*>(indices->untyped_data()));
        return ForEachChunk(pool, units, bytes, [&](int64_t u0, int64_t u1) {
          const ExactFloatCompares exact;
          if (g.channels_last) {
            kernel.Positions(u0, u1);
          } else {
            kernel.Rows(u0, u1);
          }
        });
      });
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxPoolCpu, MaxPool<IndexFormat::kFlat>,
                              BindPoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
// The same pool with window offsets (uint8) for indices.
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxPoolWindowCpu, MaxPool<IndexFormat::kWindow>,
                              BindPoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jax_unpool
