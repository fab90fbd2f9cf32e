// CPU window_indices: a pool's flat indices -> each one's tap number in its window (uint8
// window offsets, common/window_offsets.h), the inverse of _window.to_flat. An index that
// is not a position of one of its window's taps inside the input -- for a window of
// padding only, anything but PyTorch's initial index -- fails the call, the first one in
// buffer order (the unpools' policy on CPU).
#include <cstdint>

#include "common/geometry.h"
#include "common/no_throw.h"
#include "common/out_of_range.h"
#include "common/pool_checks.h"
#include "common/value_types.h"
#include "common/window_offsets.h"
#include "cpu/first_bad_index.h"
#include "cpu/handlers.h"
#include "cpu/image_spans.h"
#include "cpu/thread_chunks.h"

namespace jax_unpool {
namespace {

// The tap numbers of the windows of one window row (od, oh).
class TapsOfRow {
 public:
  explicit TapsOfRow(const Geometry& pool) : g_(pool) {}

  void Start(int64_t od, int64_t oh) {
    od_ = od;
    oh_ = oh;
    empty_ = g_.FirstTap(0, od) >= g_.EndTap(0, od) || g_.FirstTap(1, oh) >= g_.EndTap(1, oh);
    initial_ = (g_.First(0, od) * g_.in[1] + g_.First(1, oh)) * g_.in[2];
  }

  // The tap number of window ow that flat index v is, or -1.
  int At(int64_t ow, int64_t v) const {
    if (empty_ || g_.FirstTap(2, ow) >= g_.EndTap(2, ow))
      return v == initial_ + g_.First(2, ow) ? 0 : -1;
    if (v < 0 || v >= g_.in_plane()) return -1;
    const int64_t coordinate[3] = {v / g_.in[2] / g_.in[1], v / g_.in[2] % g_.in[1], v % g_.in[2]};
    const int64_t window[3] = {od_, oh_, ow};
    int64_t tap = 0;
    for (int a = 0; a < 3; ++a) {
      int64_t j = coordinate[a] - g_.Tap(a, window[a], 0);
      if (j < 0) return -1;
      if (g_.dil[a] != 1) {
        if (j % g_.dil[a] != 0) return -1;
        j /= g_.dil[a];
      }
      if (j >= g_.kernel[a]) return -1;
      tap = tap * g_.kernel[a] + j;
    }
    return static_cast<int>(tap);
  }

 private:
  const Geometry& g_;
  int64_t od_ = 0, oh_ = 0, initial_ = 0;
  bool empty_ = false;
};

// The channels [c0, c1) of image n, in buffer order; stops at the first bad index.
template <typename I>
BadIndex ConvertSpan(const Geometry& p, const I* indices, uint8_t* offsets, int64_t n,
                     int64_t c0, int64_t c1) {
  const Geometry u = Unpooling(p);
  TapsOfRow taps(p);
  const auto convert = [&](int64_t at, int64_t ow) {
    const int t = taps.At(ow, static_cast<int64_t>(indices[at]));
    offsets[at] = static_cast<uint8_t>(t);
    return t >= 0;
  };
  if (!p.channels_last) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t i = 0;
      for (int64_t od = 0; od < p.out[0]; ++od) {
        for (int64_t oh = 0; oh < p.out[1]; ++oh) {
          taps.Start(od, oh);
          for (int64_t ow = 0; ow < p.out[2]; ++ow, ++i) {
            const int64_t at = u.in_offset(n, c, i);
            if (!convert(at, ow)) return BadIndexAt(u, at, static_cast<int64_t>(indices[at]));
          }
        }
      }
    }
    return BadIndex{};
  }
  int64_t i = 0;
  for (int64_t od = 0; od < p.out[0]; ++od) {
    for (int64_t oh = 0; oh < p.out[1]; ++oh) {
      taps.Start(od, oh);
      for (int64_t ow = 0; ow < p.out[2]; ++ow, ++i) {
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t at = u.in_offset(n, c, i);
          if (!convert(at, ow)) return BadIndexAt(u, at, static_cast<int64_t>(indices[at]));
        }
      }
    }
  }
  return BadIndex{};
}

ffi::Error WindowIndices(ffi::ThreadPool pool, ffi::AnyBuffer indices,
                         ffi::Result<ffi::AnyBuffer> offsets, bool channels_last,
                         ffi::Span<const int64_t> kernel_size, ffi::Span<const int64_t> stride,
                         ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                         bool ceil_mode, ffi::Span<const int64_t> input_size) {
  return NoThrow("window_indices", [&]() -> ffi::Error {
    auto checked = CheckWindowIndicesCall(indices, *offsets, channels_last, kernel_size, stride,
                                          padding, dilation, ceil_mode, input_size);
    if (checked.has_error()) return checked.error();
    Geometry p = *checked;
    if (p.C == 1) p.channels_last = false;  // one channel last is one channel first
    if (p.planes() == 0) return ffi::Error::Success();
    const Geometry u = Unpooling(p);
    const int64_t bytes = static_cast<int64_t>(indices.size_bytes() + offsets->size_bytes());
    return VisitIndexType(indices.element_type(), [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const I* is = static_cast<const I*>(indices.untyped_data());
      uint8_t* os = static_cast<uint8_t*>(offsets->untyped_data());
      FirstBadIndex bad;
      ffi::Error run = ForEachChunk(pool, p.planes(), bytes, [&](int64_t u0, int64_t u1) {
        bad.Offer(ForEachImageSpan(u, u0, u1, [&](int64_t n, int64_t c0, int64_t c1) {
          return ConvertSpan(p, is, os, n, c0, c1);
        }));
      });
      if (!run.success()) return run;
      return bad.first().found() ? NotInWindowError(p, bad.first()) : ffi::Error::Success();
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(WindowIndicesCpu, WindowIndices,
                              BindPoolWindow(ffi::Ffi::Bind()
                                                 .Ctx<ffi::ThreadPool>()
                                                 .Arg<ffi::AnyBuffer>()   // flat indices
                                                 .Ret<ffi::AnyBuffer>())  // offsets: uint8
                                  .Attr<ffi::Span<const int64_t>>("input_size"));

}  // namespace jax_unpool
