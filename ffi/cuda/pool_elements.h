// The max pool's per-element code (one GPU thread per output element), with the order
// each dtype is compared in. The orders are the CPU kernel's (common/pool_values.h), written
// for the device: a dtype is moved as its storage type `Raw`, bit for bit, and compared as
// a `Key` -- the value itself for float32 and float64, an unsigned int ordered as the
// value for the integers and bool, the exact float32 value for float16, bfloat16 and the
// float8 types (so -0.0 == 0.0 and NaN is unordered, as in PyTorch's loop). The host
// emulation (tests/backends/cuda) checks every dtype against the CPU kernel bit for bit.
//
// The kernels are built without fast math: float compares on the GPU are exact for
// subnormals too, as the CPU kernel makes its own (ExactFloatCompares in cpu/max_pool.cc).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/geometry.h"
#include "cuda/intrinsics.h"

namespace jax_unpool {
namespace cuda {

JU_HD float FloatFromBits(uint32_t bits) { return BitCast<float>(bits); }

// float32 and float64.
template <typename T, typename Bits>
struct NativeOrder {
  using Raw = T;
  using Key = T;
  JU_HD Key Decode(Raw r) const { return r; }
  // Below (or tied with) every value, never NaN: what padding counts as; -inf.
  JU_HD Raw Lowest() const {
    return BitCast<T>(static_cast<Bits>(sizeof(T) == 4 ? 0xff800000u : 0xfff0000000000000u));
  }
};
using Float32Order = NativeOrder<float, uint32_t>;
using Float64Order = NativeOrder<double, uint64_t>;

// Integers and bool by width: a signed int compares as its bits with the sign bit flipped.
template <typename U>
struct IntegerOrder {
  using Raw = U;
  using Key = U;
  U sign;  // the sign bit for signed ints, 0 for unsigned ones and bool
  JU_HD Key Decode(Raw r) const { return static_cast<U>(r ^ sign); }
  JU_HD Raw Lowest() const { return sign; }
};

struct HalfOrder {
  using Raw = uint16_t;
  using Key = float;
  JU_HD Key Decode(Raw h) const {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float32
      const float magnitude = static_cast<float>(mantissa) * FloatFromBits(0x33800000u);
      return sign ? -magnitude : magnitude;
    }
    return FloatFromBits(exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)  // inf, NaN
                                          : sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  JU_HD Raw Lowest() const { return 0xfc00; }  // -inf
};

struct BFloat16Order {
  using Raw = uint16_t;
  using Key = float;
  JU_HD Key Decode(Raw h) const { return FloatFromBits(static_cast<uint32_t>(h) << 16); }
  JU_HD Raw Lowest() const { return 0xff80; }  // -inf
};

// 2^e as a float32 for e in [-149, 127], subnormals included.
JU_HD float Pow2(int e) {
  return e >= -126 ? FloatFromBits(static_cast<uint32_t>(e + 127) << 23)
                   : FloatFromBits(uint32_t{1} << (e + 149));
}

// The float8 formats (ml_dtypes' definitions, as common/pool_values.h reads them), decoded by
// arithmetic on the device; `lowest` is the format's -inf, or its most negative finite
// value where it has no inf (what the handler finds by decoding all 256 codes).
struct Float8Order {
  enum Special : uint8_t { kIeee, kFiniteNanAllOnes, kNanIsNegativeZero, kUnsignedExponent };
  using Raw = uint8_t;
  using Key = float;
  uint8_t exponent_bits, mantissa_bits;
  int16_t bias;
  Special special;
  uint8_t lowest;

  JU_HD Key Decode(Raw code) const {
    const float nan = FloatFromBits(0x7fc00000u);
    if (special == kUnsignedExponent)  // e8m0fnu: 2^(code - 127), 0xff NaN
      return code == 0xff ? nan : Pow2(static_cast<int>(code) - bias);
    const int all_ones = (1 << exponent_bits) - 1, mantissa_ones = (1 << mantissa_bits) - 1;
    const bool negative = (code & 0x80) != 0;
    const int exponent = (code >> mantissa_bits) & all_ones, mantissa = code & mantissa_ones;
    if (special == kIeee && exponent == all_ones) {
      return mantissa ? nan : FloatFromBits(negative ? 0xff800000u : 0x7f800000u);
    }
    if (special == kFiniteNanAllOnes && exponent == all_ones && mantissa == mantissa_ones)
      return nan;
    if (special == kNanIsNegativeZero && code == 0x80) return nan;
    // Exact: at most 4 significant bits times a power of two inside float32's range.
    const float magnitude =
        exponent == 0
            ? static_cast<float>(mantissa) * Pow2(1 - bias - mantissa_bits)
            : static_cast<float>((1 << mantissa_bits) | mantissa) *
                  Pow2(exponent - bias - mantissa_bits);
    return negative ? -magnitude : magnitude;
  }
  JU_HD Raw Lowest() const { return lowest; }
};

// PyTorch's test, `val > maxval || isnan(val)`: a NaN replaces anything, the last NaN in
// scan order wins, and nothing but a NaN replaces a NaN.
template <typename Key>
JU_HD bool Replaces(Key v, Key best) {
  return v > best || v != v;  // v != v is false for the integer keys
}


// The kernel's view of the pool: the sizes, window and taps (Axes) and flat steps.
template <typename Index>
struct PoolWindows : Axes<Coord<Index>> {
  Index inner = 1;  // C channels last, 1 channels first
  Index in_plane = 1;
  // Flat distance between neighbouring taps along each axis (0 for a window of 1).
  Index step[3] = {0, 0, 0};
  Divider<Index> inner_div, out_div[3];
};

// Keeps the first maximum in scan order: PyTorch's test, with its position.
template <typename Order, typename At>
struct Best {
  typename Order::Raw raw;
  typename Order::Key key;
  At at;

  JU_HD void Consider(const Order& order, typename Order::Raw r, At tap) {
    const typename Order::Key v = order.Decode(r);
    if (Replaces(v, key)) {
      key = v;
      raw = r;
      at = tap;
    }
  }
};

// The initial argmax of window o as a window offset: its first tap inside the input, 0 for
// a window of padding only (common/window_offsets.h).
template <typename C>
JU_HD C InitialTap(const Axes<C>& w, const C (&o)[3]) {
  C tap = 0;
  JU_UNROLL
  for (int a = 0; a < 3; ++a) {
    const C first = w.FirstTap(a, o[a]);
    if (first >= w.EndTap(a, o[a])) return 0;
    tap = tap * w.kernel[a] + first;
  }
  return tap;
}

// One output element: the first maximum of its window in PyTorch's scan order (row-major
// over the taps, padding skipped), starting from (Lowest(), the initial argmax). I: int32_t
// or int64_t for flat indices, uint8_t for window offsets (the winner's tap number).
template <typename Order, typename I, typename Index>
struct PoolWindow {
  using Raw = typename Order::Raw;
  using C = Coord<Index>;
  static constexpr bool kTaps = std::is_same_v<I, uint8_t>;
  PoolWindows<Index> w;
  Order order;
  const Raw* x;
  Raw* values;
  I* indices;

  JU_HD void operator()(Index t) const {
    Index rest = t, c = 0;
    if (w.inner != 1) {
      rest = w.inner_div.Div(t);
      c = t - rest * w.inner;
    }
    C o[3];
    for (int a = 2; a >= 0; --a) {
      const Index next = w.out_div[a].Div(rest);
      o[a] = static_cast<C>(rest - next * w.out_div[a].divisor);
      rest = next;
    }
    const Raw* plane = x + rest * w.in_plane * w.inner + c;  // rest: the image or plane
    Best<Order, C> best{order.Lowest(), order.Decode(order.Lowest()), 0};
    bool inside = true;  // every tap inside the input: no bounds to check
    C start[3];
    for (int a = 0; a < 3; ++a) {
      start[a] = o[a] * w.stride[a] - w.pad[a];
      inside = inside && start[a] >= 0 && start[a] + (w.kernel[a] - 1) * w.dil[a] < w.in[a];
    }
    if (inside) {
      const Index first = static_cast<Index>((start[0] * w.in[1] + start[1]) * w.in[2] + start[2]);
      Best<Order, Index> at{best.raw, best.key, kTaps ? 0 : first};
      Index number = 0;  // the tap's number (window offsets)
      for (C td = 0; td < w.kernel[0]; ++td) {
        for (C th = 0; th < w.kernel[1]; ++th) {
          const Index row = first + static_cast<Index>(td) * w.step[0] +
                            static_cast<Index>(th) * w.step[1];
          for (C tw = 0; tw < w.kernel[2]; ++tw, ++number) {
            const Index tap = row + static_cast<Index>(tw) * w.step[2];
            at.Consider(order, plane[tap * w.inner], kTaps ? number : tap);
          }
        }
      }
      best = {at.raw, at.key, static_cast<C>(at.at)};
    } else {
      best.at = kTaps ? InitialTap(w, o)
                      : (w.First(0, o[0]) * w.in[1] + w.First(1, o[1])) * w.in[2] + w.First(2, o[2]);
      // Only the taps inside the input: a border window costs its part inside.
      C lo[3], hi[3];
      for (int a = 0; a < 3; ++a) lo[a] = w.FirstTap(a, o[a]), hi[a] = w.EndTap(a, o[a]);
      for (C td = lo[0]; td < hi[0]; ++td) {
        const C d = w.Tap(0, o[0], td);
        for (C th = lo[1]; th < hi[1]; ++th) {
          const C h = w.Tap(1, o[1], th);
          if constexpr (kTaps) {
            const C first = (td * w.kernel[1] + th) * w.kernel[2];  // the tap row's number
            for (C tw = lo[2]; tw < hi[2]; ++tw) {
              const C tap = (d * w.in[1] + h) * w.in[2] + w.Tap(2, o[2], tw);
              best.Consider(order, plane[static_cast<Index>(tap) * w.inner], first + tw);
            }
          } else {
            for (C tw = lo[2]; tw < hi[2]; ++tw) {
              const C tap = (d * w.in[1] + h) * w.in[2] + w.Tap(2, o[2], tw);
              best.Consider(order, plane[static_cast<Index>(tap) * w.inner], tap);
            }
          }
        }
      }
    }
    values[t] = best.raw;
    indices[t] = static_cast<I>(best.at);
  }
};

// The 2-D channels-first pool with a kKH x kKW window known at compile time (2x2 and 3x3,
// the common ones) and no dilation, in 32-bit arithmetic: the same results as PoolWindow.
// An interior window is kKH * kKW loads at constant offsets from its first tap's row.
template <typename Order, typename I, int kKH, int kKW>
struct PlanePoolWindow {
  using Raw = typename Order::Raw;
  static constexpr bool kTaps = std::is_same_v<I, uint8_t>;
  Axes<int32_t> w;  // the H and W axes are used (D: one plane, a window of 1)
  Divider<uint32_t> out_h_div, out_w_div;
  uint32_t in_plane = 1;
  Order order;
  const Raw* x;
  Raw* values;
  I* indices;

  JU_HD void operator()(uint32_t t) const {
    const uint32_t rest = out_w_div.Div(t);
    const int32_t ow = static_cast<int32_t>(t - rest * out_w_div.divisor);
    const uint32_t plane = out_h_div.Div(rest);
    const int32_t oh = static_cast<int32_t>(rest - plane * out_h_div.divisor);
    const Raw* p = x + plane * in_plane;
    const int32_t H = w.in[1], W = w.in[2];
    const int32_t h0 = oh * w.stride[1] - w.pad[1], w0 = ow * w.stride[2] - w.pad[2];
    Best<Order, int32_t> best{order.Lowest(), order.Decode(order.Lowest()), 0};
    if (h0 >= 0 && w0 >= 0 && h0 + kKH <= H && w0 + kKW <= W) {
      const int32_t first = h0 * W + w0;
      const Raw* row = p + first;
      best.at = kTaps ? 0 : first;
      JU_UNROLL
      for (int th = 0; th < kKH; ++th, row += W) {
        JU_UNROLL
        for (int tw = 0; tw < kKW; ++tw)
          best.Consider(order, row[tw], kTaps ? th * kKW + tw : first + th * W + tw);
      }
    } else {  // a border window: its taps inside the input, in the same order
      const int32_t o[3] = {0, oh, ow};
      best.at = kTaps ? InitialTap(w, o) : w.First(1, oh) * W + w.First(2, ow);
      JU_UNROLL
      for (int th = 0; th < kKH; ++th) {
        const int32_t h = h0 + th;
        JU_UNROLL
        for (int tw = 0; tw < kKW; ++tw) {
          const int32_t at = h * W + w0 + tw;
          if (h >= 0 && h < H && w0 + tw >= 0 && w0 + tw < W)
            best.Consider(order, p[at], kTaps ? th * kKW + tw : at);
        }
      }
    }
    values[t] = best.raw;
    indices[t] = static_cast<I>(best.at);
  }
};

}  // namespace cuda
}  // namespace jax_unpool
