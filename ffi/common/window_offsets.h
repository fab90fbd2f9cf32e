// Window offsets (jax_unpool/_window.py) on any platform: a max pool's argmax as its tap
// number inside its window, one byte. Tap (jd, jh, jw) of a (kd, kh, kw) window is
// t = (jd * kh + jh) * kw + jw, at input coordinates Axes::Tap(a, o, j) (common/geometry.h).
// A window with no tap inside the input holds 0, which names PyTorch's initial index
// (Axes::First), past the row or the plane. The kernels decode offsets their own fast way;
// this header has the host's reference decoding, which says what a bad element names in
// the call's error, and the limits and messages every platform shares.
#pragma once

#include <cstdint>
#include <string>

#include "common/buffer_checks.h"
#include "common/geometry.h"
#include "common/out_of_range.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

constexpr int64_t kMaxWindowTaps = 256;  // tap numbers 0..255 in a uint8

// Offsets are for windows of at most kMaxWindowTaps taps.
inline ffi::Error CheckWindowTaps(const std::string& op, ffi::Span<const int64_t> kernel_size) {
  __int128 taps = 1;
  for (int64_t k : kernel_size) taps *= k;  // each k < 2^31: no overflow for 3 axes
  if (taps <= kMaxWindowTaps) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(
      op + ": window offsets (uint8) number the taps of windows of at most " +
      std::to_string(kMaxWindowTaps) + " taps; kernel_size=" + ShapeString(kernel_size) +
      " has more: use flat indices");
}

// The taps of a pool's window (after CheckWindowTaps).
inline int64_t WindowTaps(const Geometry& pool) {
  return pool.kernel[0] * pool.kernel[1] * pool.kernel[2];
}

// The unpool's view of a pool's geometry: its input side (values, offsets) is the pool's
// output, its output plane the pool's input plane -- what positions in messages and
// OutOfRangeError's plane refer to.
inline Geometry Unpooling(const Geometry& pool) {
  Geometry g = pool;
  for (int a = 0; a < 3; ++a) {
    g.in[a] = pool.out[a];
    g.out[a] = pool.in[a];
  }
  return g;
}

// Window (o[0], o[1], o[2]) of position i of the pool's output plane.
inline void WindowOf(const Geometry& pool, int64_t i, int64_t (&o)[3]) {
  o[2] = i % pool.out[2];
  o[1] = i / pool.out[2] % pool.out[1];
  o[0] = i / pool.out[2] / pool.out[1];
}

// Whether window o has no tap inside the input (PyTorch's window of padding only).
inline bool PaddingOnly(const Geometry& pool, const int64_t (&o)[3]) {
  for (int a = 0; a < 3; ++a)
    if (pool.FirstTap(a, o[a]) >= pool.EndTap(a, o[a])) return true;
  return false;
}

// What offset t of window o names: the flat position in the pool's input plane of its tap
// where that tap lies inside the input, or for a window of padding only, offset 0,
// PyTorch's initial index (which may lie past the plane); `named` is false otherwise.
// Exactly _window.to_flat's rule.
struct NamedTap {
  bool named = false;
  int64_t flat = 0;
};

inline NamedTap DecodeOffset(const Geometry& pool, const int64_t (&o)[3], int64_t t) {
  NamedTap tap;
  if (PaddingOnly(pool, o)) {
    tap.named = t == 0;
    tap.flat = (pool.First(0, o[0]) * pool.in[1] + pool.First(1, o[1])) * pool.in[2] +
               pool.First(2, o[2]);
    return tap;
  }
  if (t < 0 || t >= WindowTaps(pool)) return tap;
  const int64_t j[3] = {t / (pool.kernel[1] * pool.kernel[2]), t / pool.kernel[2] % pool.kernel[1],
                        t % pool.kernel[2]};
  for (int a = 0; a < 3; ++a)
    if (j[a] < pool.FirstTap(a, o[a]) || j[a] >= pool.EndTap(a, o[a])) return tap;
  tap.named = true;
  tap.flat = (pool.Tap(0, o[0], j[0]) * pool.in[1] + pool.Tap(1, o[1], j[1])) * pool.in[2] +
             pool.Tap(2, o[2], j[2]);
  return tap;
}

// The bad element at offset `flat` of an offsets buffer (the pool's output side) whose
// value is `offset`: the offset itself when it names no tap, else the index it names (a
// window of padding only's, past the plane).
inline BadIndex BadOffsetAt(const Geometry& pool, int64_t flat, int64_t offset) {
  const Geometry u = Unpooling(pool);
  BadIndex b = BadIndexAt(u, flat, offset);
  int64_t o[3];
  WindowOf(pool, b.i, o);
  const NamedTap tap = DecodeOffset(pool, o, offset);
  if (tap.named) {
    b.value = tap.flat;
  } else {
    b.window_offset = true;
  }
  return b;
}

// "(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))" of k axes.
inline std::string WindowAttributes(const Geometry& g) {
  const auto axes = [&g](const int64_t (&v)[3]) {
    return ShapeString(ffi::Span<const int64_t>(v + 3 - g.k, static_cast<size_t>(g.k)));
  };
  return "(kernel_size=" + axes(g.kernel) + ", stride=" + axes(g.stride) +
         ", padding=" + axes(g.pad) + ", dilation=" + axes(g.dil) + ")";
}

inline std::string PlaneSizes(const Geometry& pool) {
  std::string sizes;
  for (int a = 3 - pool.k; a < 3; ++a)
    sizes += (a > 3 - pool.k ? "x" : "") + std::to_string(pool.in[a]);
  return std::string(pool.k == 1 ? "row" : pool.k == 2 ? "plane" : "volume") + " of " + sizes;
}

// OUT_OF_RANGE for the first bad element of an unpool's offsets (BadOffsetAt): an offset
// naming no tap inside the input, or the index past the plane that a window of padding
// only names (the flat indices' message, as the same call on flat indices fails).
inline ffi::Error BadOffsetError(const char* op, const Geometry& pool, const BadIndex& b) {
  if (!b.window_offset) return OutOfRangeError(op, Unpooling(pool), b);
  return ffi::Error(
      ffi::ErrorCode::kOutOfRange,
      std::string(op) + ": window offset " + std::to_string(b.value) + " at (n=" +
          std::to_string(b.n) + ", c=" + std::to_string(b.c) + ", i=" + std::to_string(b.i) +
          ") of indices is out of range: valid offsets are [0, " +
          std::to_string(WindowTaps(pool)) + "), the taps of its window " +
          WindowAttributes(pool) + " that lie inside the output " + PlaneSizes(pool) + " (" +
          PositionsNote(pool.k) + ")");
}

// OUT_OF_RANGE for window_indices: flat index `b.value` at (n, c, i) of the pool's output
// is not a position of its window.
inline ffi::Error NotInWindowError(const Geometry& pool, const BadIndex& b) {
  return ffi::Error(
      ffi::ErrorCode::kOutOfRange,
      "window_indices: index " + std::to_string(b.value) + " at (n=" + std::to_string(b.n) +
          ", c=" + std::to_string(b.c) + ", i=" + std::to_string(b.i) +
          ") of indices is not in its window: valid indices are the positions of the taps of "
          "its window " + WindowAttributes(pool) + " inside the input " + PlaneSizes(pool) +
          ", or PyTorch's initial index for a window of padding only (" +
          PositionsNote(pool.k) + ")");
}

}  // namespace jax_unpool
