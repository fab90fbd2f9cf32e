// What the unpool kernels are launched with, and in which order: the plan that the device
// (the *_kernels.cu files, on XLA's stream) and the host emulation (tests/backends/cuda) both
// run, each with its own launcher. Plain C++ without the XLA headers, which would triple the
// device compile's time (nvcc parses every header once per GPU architecture).
//
// A launcher has Run(n, functor, guard), which runs functor(t) for every t < n -- nothing
// when `guard` is non-null and *guard == 0 on the device --, Zero / Fill(device pointer,
// byte, bytes), and VisitOffsets(largest, f), which calls f(Tag<Index>{}) with the offset
// type of a call whose largest element count is `largest` (VisitOffsetType below; the
// host emulation can force 64-bit offsets to check them on small inputs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/geometry.h"
#include "cuda/unpool_elements.h"

namespace jax_unpool {
namespace cuda {

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<uint32_t>{}) when every element offset of the call, and so every size the
// kernels divide by, is below 2^31 (division by magic numbers, device.h), else
// f(Tag<uint64_t>{}).
template <typename F>
void VisitOffsetType(int64_t largest, F&& f) {
  if (largest < (int64_t{1} << 31)) {
    f(Tag<uint32_t>{});
  } else {
    f(Tag<uint64_t>{});
  }
}

// Calls f(Tag<U>{}) with the unsigned type of a value's byte width (1, 2, 4 or 8).
template <typename F>
void VisitWidth(int64_t width, F&& f) {
  switch (width) {
    case 1: f(Tag<uint8_t>{}); break;
    case 2: f(Tag<uint16_t>{}); break;
    case 4: f(Tag<uint32_t>{}); break;
    default: f(Tag<uint64_t>{}); break;
  }
}

template <typename F>
void VisitIndex(bool index64, F&& f) {
  if (index64) {
    f(Tag<int64_t>{});
  } else {
    f(Tag<int32_t>{});
  }
}

// The sizes and window in the arithmetic's type T (the caller has checked they fit).
template <typename T>
Axes<T> AxesAs(const Axes<int64_t>& a) {
  Axes<T> b;
  for (int d = 0; d < 3; ++d) {
    b.in[d] = static_cast<T>(a.in[d]);
    b.out[d] = static_cast<T>(a.out[d]);
    b.kernel[d] = static_cast<T>(a.kernel[d]);
    b.stride[d] = static_cast<T>(a.stride[d]);
    b.pad[d] = static_cast<T>(a.pad[d]);
    b.dil[d] = static_cast<T>(a.dil[d]);
  }
  return b;
}

// Whether every coordinate the kernels compute fits in int32_t: on each axis the furthest
// reach of a window, (out - 1) * stride + padding + kernel * dilation, plus the input, and
// the flat position of PyTorch's initial argmax (at most max(in - 1, dilation - 1, the
// last window's start) per axis). Else the call takes 64-bit offsets and arithmetic, as
// a window of 2^31 - 1 taps does.
inline bool WindowFits32(const Axes<int64_t>& a) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  int64_t flat = 0;
  for (int d = 0; d < 3; ++d) {  // every term below 2^62: no int64 overflow
    const int64_t reach =
        (a.out[d] - 1) * a.stride[d] + a.pad[d] + a.kernel[d] * a.dil[d] + a.in[d];
    if (reach >= kLimit) return false;
    const int64_t first =
        std::max({a.in[d] - 1, a.dil[d] - 1, (a.out[d] - 1) * a.stride[d] - a.pad[d]});
    flat = flat * a.in[d] + first;
    if (flat >= kLimit) return false;
  }
  return true;
}

// How a call's indices are read (unpool_elements.h's sources): flat int32 or int64, or a
// pool's window offsets (uint8), decoded with `pool`'s window.
struct IndexSpec {
  enum Kind : uint8_t { kInt32, kInt64, kWindow };
  Kind kind = kInt32;
  const void* data = nullptr;
  Axes<int64_t> pool;  // kWindow: in, the output plane's sizes; out, the windows'
};

// Whether some window of `pool` has no tap inside the input (PyTorch's window of padding
// only). Along an axis of more than 2^24 windows it says yes without looking: the source
// then tests every window, which is only slower.
inline bool HasPaddingOnlyWindows(const Axes<int64_t>& pool) {
  for (int a = 0; a < 3; ++a) {
    if (pool.out[a] > (int64_t{1} << 24)) return true;
    for (int64_t o = 0; o < pool.out[a]; ++o)
      if (pool.FirstTap(a, o) >= pool.EndTap(a, o)) return true;
  }
  return false;
}

template <typename Index>
Planes<Index> MakePlanes(const Geometry& g);

// The largest element count or coordinate of a call: what picks its offsets' type. Window
// offsets decode in Coord<Index>: a window whose coordinates pass int32 takes 64 bits.
inline int64_t CallExtent(const Geometry& g, const IndexSpec& spec) {
  const int64_t counts = std::max(g.in_count(), g.out_count());
  if (spec.kind != IndexSpec::kWindow || WindowFits32(spec.pool)) return counts;
  return std::max<int64_t>(counts, int64_t{1} << 31);
}

// Calls f(source) with the index source of `spec` for a call of geometry g.
template <typename Index, typename F>
void VisitSource(const IndexSpec& spec, const Geometry& g, F&& f) {
  switch (spec.kind) {
    case IndexSpec::kInt32: return f(FlatIndices<int32_t>{static_cast<const int32_t*>(spec.data)});
    case IndexSpec::kInt64: return f(FlatIndices<int64_t>{static_cast<const int64_t*>(spec.data)});
    default: break;
  }
  WindowOffsets<Index> w{};
  w.offsets = static_cast<const uint8_t*>(spec.data);
  w.planes = MakePlanes<Index>(g);
  w.pool = AxesAs<Coord<Index>>(spec.pool);
  w.windows[0] = Divider<Index>(static_cast<Index>(spec.pool.out[2]));
  w.windows[1] = Divider<Index>(static_cast<Index>(spec.pool.out[1]));
  w.taps_w = Divider<uint32_t>(static_cast<uint32_t>(spec.pool.kernel[2]));
  w.taps_h = Divider<uint32_t>(static_cast<uint32_t>(spec.pool.kernel[1]));
  w.taps = static_cast<uint32_t>(spec.pool.kernel[0] * spec.pool.kernel[1] * spec.pool.kernel[2]);
  w.padding_only = HasPaddingOnlyWindows(spec.pool);
  f(w);
}

// The workspace of the forward and of the checked backward: an extra result that the
// lowering drops, so that XLA allocates it (and CUDA graphs capture the call). It begins
// with a header -- the windowed pass's flag (uint32 at offset 0) and the first bad index's
// element offset (uint64 at 8, checked calls) -- followed, where the result cannot hold
// them, by the general pass's positions: one per output element, PositionBytes() each.
constexpr int64_t kHeaderBytes = 16;

// Bytes per output element of the general pass's positions outside the result: 0 when the
// result itself holds them (a 2-, 4- or 8-byte value wide enough for L + 1; 2-byte values
// only for an even plane, so that the 32-bit word of a 16-bit atomic lies inside the
// result), else 4 or 8. jax_unpool/backends/cuda.py sizes the workspace by the same rule.
inline int64_t PositionBytes(int64_t width, int64_t L, int64_t Lo) {
  const bool fits = width == 8 || (width == 4 && L <= int64_t{0xffffffff}) ||
                    (width == 2 && L <= 0xffff && Lo % 2 == 0);
  if (fits) return 0;
  return L <= int64_t{0xffffffff} ? 4 : 8;
}

// A forward's window (jax_unpool._geometry.Window, which the lowering computes for every
// call) on (D, H, W) -- leading axes of 1 --, or none (`given` false): input position q's
// index is expected in the box [q * stride - padding, q * stride - padding + extent).
struct Window {
  bool given = false;
  int64_t extent[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, padding[3] = {0, 0, 0};
};

// Whether the boxes tile the output (TiledScatter): extent == stride, no padding, every
// output size the input size times the stride, and boxes of at most 64 positions (one
// thread writes each).
inline bool Tiles(const Geometry& g, const Window& w) {
  if (!w.given) return false;
  int64_t box = 1;
  for (int a = 0; a < 3; ++a) {
    if (w.extent[a] != w.stride[a] || w.padding[a] != 0 || g.out[a] != g.in[a] * w.stride[a])
      return false;
    box *= w.stride[a];
  }
  return box <= 64;
}

// Whether the windowed pass can run: on every axis each input position's box, clipped to
// the output, is non-empty (so that a thread owns its check), sizes are small enough for
// 32-bit window arithmetic, and an output element has at most 64 candidate boxes.
inline bool WindowedPassApplies(const Geometry& g, const Window& w) {
  if (!w.given) return false;
  constexpr int64_t kSmall = int64_t{1} << 30;
  int64_t candidates = 1;
  for (int a = 0; a < 3; ++a) {
    if (g.in[a] < 1 || g.out[a] < 1 || g.in[a] >= kSmall || g.out[a] >= kSmall ||
        w.extent[a] >= kSmall || w.stride[a] >= kSmall || w.padding[a] >= kSmall)
      return false;
    if (w.extent[a] <= w.padding[a] || (g.in[a] - 1) * w.stride[a] - w.padding[a] >= g.out[a])
      return false;
    candidates *= (w.extent[a] + w.stride[a] - 1) / w.stride[a];
  }
  return candidates <= 64;
}

template <typename Index>
Planes<Index> MakePlanes(const Geometry& g) {
  Planes<Index> p;
  p.inner = static_cast<Index>(g.inner());
  p.L = static_cast<Index>(g.in_plane());
  p.Lo = static_cast<Index>(g.out_plane());
  p.inner_div = Divider<Index>(p.inner > 0 ? p.inner : 1);
  p.L_div = Divider<Index>(p.L > 0 ? p.L : 1);
  p.Lo_div = Divider<Index>(p.Lo > 0 ? p.Lo : 1);
  return p;
}

template <typename Index>
Boxes<Index> MakeBoxes(const Geometry& g, const Window& w) {
  Boxes<Index> b;
  for (int a = 0; a < 3; ++a) {
    b.in[a] = static_cast<Index>(g.in[a]);
    b.out[a] = static_cast<Index>(g.out[a]);
    b.extent[a] = static_cast<Index>(w.extent[a]);
    b.stride[a] = static_cast<Index>(w.stride[a]);
    b.padding[a] = static_cast<Index>(w.padding[a]);
    b.first_owner_max[a] = static_cast<Index>(std::min(g.in[a] - 1, w.padding[a] / w.stride[a]));
    b.in_div[a] = Divider<Index>(b.in[a]);
    b.out_div[a] = Divider<Index>(b.out[a]);
    b.stride_div[a] = Divider<Index>(b.stride[a]);
  }
  return b;
}

// The general pass: positions filled with 0, raised to position + 1 by every index, then
// resolved into values. After a windowed pass, `guard` (its flag) skips it unless some
// index lay outside its box.
template <typename V, typename I, typename P, typename Index, typename Launcher>
void LaunchGeneralPass(Launcher& launch, const Planes<Index>& planes, const Geometry& g, const V* x,
                       const I& indices, V* out, P* positions, const uint32_t* guard) {
  const Index in_count = static_cast<Index>(g.in_count());
  const Index out_count = static_cast<Index>(g.out_count());
  launch.Run(out_count, FillPositions<P, Index>{positions}, guard);
  launch.Run(in_count, ScatterPositions<I, P, Index>{planes, indices, positions}, guard);
  launch.Run(out_count, ResolvePositions<V, P, Index>{planes, x, positions, out}, guard);
}

// What a forward launches with: buffers checked and non-empty on both sides.
struct ForwardLaunch {
  Geometry shape;
  Window window;  // the lowering's (a window offsets call: its pool's), or none
  int64_t width = 4, position_bytes = 0;
  IndexSpec indices;
  const void* x = nullptr;
  void* out = nullptr;
  uint8_t* workspace = nullptr;  // kHeaderBytes, then the positions if any
};

template <typename V, typename I, int kS>
PlaneTiledScatter<V, I, kS> MakePlaneTiled(const Geometry& g, const ForwardLaunch& a,
                                           const I& indices, uint32_t* flag) {
  PlaneTiledScatter<V, I, kS> f{};
  f.L = static_cast<uint32_t>(g.in_plane());
  f.Lo = static_cast<uint32_t>(g.out_plane());
  f.out_w = static_cast<uint32_t>(g.out[2]);
  f.L_div = Divider<uint32_t>(f.L);
  f.in_w_div = Divider<uint32_t>(static_cast<uint32_t>(g.in[2]));
  f.x = static_cast<const V*>(a.x);
  f.indices = indices;
  f.out = static_cast<V*>(a.out);
  f.flag = flag;
  return f;
}

template <typename V, typename I, typename Index, typename Launcher>
void LaunchForward(Launcher& launch, const ForwardLaunch& a, const I& indices) {
  const Geometry& g = a.shape;
  const Planes<Index> planes = MakePlanes<Index>(g);
  const V* x = static_cast<const V*>(a.x);
  V* out = static_cast<V*>(a.out);
  uint32_t* flag = reinterpret_cast<uint32_t*>(a.workspace);
  const uint32_t* guard = nullptr;
  if (WindowedPassApplies(g, a.window)) {
    launch.Zero(flag, sizeof *flag);
    const Boxes<Index> boxes = MakeBoxes<Index>(g, a.window);
    const int plane_tile = sizeof(Index) == 4 && launch.PlaneKernels()
                               ? PlaneTileSize<V>(g.channels_last, g.in, a.window.stride, out)
                               : 0;
    if (Tiles(g, a.window) && plane_tile != 0) {
      if constexpr (sizeof(Index) == 4) {
        if (plane_tile == 2) {
          launch.Run(static_cast<uint32_t>(g.in_count()),
                     MakePlaneTiled<V, I, 2>(g, a, indices, flag), nullptr);
        } else {
          launch.Run(static_cast<uint32_t>(g.in_count()),
                     MakePlaneTiled<V, I, 3>(g, a, indices, flag), nullptr);
        }
      }
    } else if (Tiles(g, a.window)) {
      launch.Run(static_cast<Index>(g.in_count()),
                 TiledScatter<V, I, Index>{planes, boxes, x, indices, out, flag}, nullptr);
    } else {
      launch.Run(static_cast<Index>(g.out_count()),
                 WindowedScatter<V, I, Index>{planes, boxes, x, indices, out, flag}, nullptr);
    }
    guard = flag;
  }
  uint8_t* positions = a.workspace + kHeaderBytes;
  if (a.position_bytes == 4) {
    LaunchGeneralPass(launch, planes, g, x, indices, out, reinterpret_cast<uint32_t*>(positions),
                      guard);
  } else if (a.position_bytes == 8) {
    LaunchGeneralPass(launch, planes, g, x, indices, out, reinterpret_cast<uint64_t*>(positions),
                      guard);
  } else if constexpr (sizeof(V) >= 2) {  // PositionBytes is never 0 for 1-byte values
    LaunchGeneralPass(launch, planes, g, x, indices, out, out, guard);
  }
}

template <typename Launcher>
void RunForward(Launcher& launch, const ForwardLaunch& a) {
  VisitWidth(a.width, [&](auto value) {
    launch.VisitOffsets(CallExtent(a.shape, a.indices), [&](auto offset) {
      using Index = typename decltype(offset)::type;
      VisitSource<Index>(a.indices, a.shape, [&](const auto& indices) {
        LaunchForward<typename decltype(value)::type, std::decay_t<decltype(indices)>, Index>(
            launch, a, indices);
      });
    });
  });
}

// What a backward launches with: buffers checked, the result non-empty.
struct GatherLaunch {
  Geometry shape;
  int64_t width = 4;
  IndexSpec indices;
  const void* grad = nullptr;
  void* out = nullptr;
};

template <typename Launcher>
void RunGather(Launcher& launch, const GatherLaunch& a) {
  const Geometry& g = a.shape;
  VisitWidth(a.width, [&](auto value) {
    using V = typename decltype(value)::type;
    launch.VisitOffsets(CallExtent(g, a.indices), [&](auto offset) {
      using Index = typename decltype(offset)::type;
      VisitSource<Index>(a.indices, g, [&](const auto& indices) {
        using I = std::decay_t<decltype(indices)>;
        const Index n = static_cast<Index>(g.in_count());
        launch.Run(Gather<V, I, Index>::Threads(n),
                   Gather<V, I, Index>{MakePlanes<Index>(g), n, static_cast<const V*>(a.grad),
                                       indices, static_cast<V*>(a.out)},
                   nullptr);
      });
    });
  });
}

// Checked calls: *first = the element offset of the first index naming no position of
// the output plane, or ~0 when there is none.
struct FirstBadLaunch {
  Geometry shape;
  IndexSpec indices;
  uint64_t* first = nullptr;
};

template <typename Launcher>
void RunFindFirstBad(Launcher& launch, const FirstBadLaunch& a) {
  launch.Fill(a.first, 0xff, sizeof *a.first);
  const Geometry& g = a.shape;
  launch.VisitOffsets(CallExtent(g, a.indices), [&](auto offset) {
    using Index = typename decltype(offset)::type;
    VisitSource<Index>(a.indices, g, [&](const auto& indices) {
      using I = std::decay_t<decltype(indices)>;
      launch.Run(static_cast<Index>(g.in_count()),
                 FindFirstBadIndex<I, Index>{static_cast<Index>(g.out_plane()), indices, a.first},
                 nullptr);
    });
  });
}

// What window_indices launches with: the indices (the unpool view of the pool, `shape`:
// its input side the windows) checked and non-empty.
struct WindowIndicesLaunch {
  Geometry shape;
  Axes<int64_t> pool;
  bool index64 = false;
  const void* indices = nullptr;
  uint8_t* offsets = nullptr;
};

template <typename Launcher>
void RunWindowIndices(Launcher& launch, const WindowIndicesLaunch& a) {
  const Geometry& g = a.shape;
  const IndexSpec window{IndexSpec::kWindow, nullptr, a.pool};
  VisitIndex(a.index64, [&](auto index) {
    using I = typename decltype(index)::type;
    launch.VisitOffsets(CallExtent(g, window), [&](auto offset) {
      using Index = typename decltype(offset)::type;
      FlatToOffsets<I, Index> f{};
      f.planes = MakePlanes<Index>(g);
      f.pool = AxesAs<Coord<Index>>(a.pool);
      f.windows[0] = Divider<Index>(static_cast<Index>(a.pool.out[2]));
      f.windows[1] = Divider<Index>(static_cast<Index>(a.pool.out[1]));
      f.rows[0] = Divider<Index>(static_cast<Index>(a.pool.in[2]));
      f.rows[1] = Divider<Index>(static_cast<Index>(a.pool.in[1]));
      f.indices = static_cast<const I*>(a.indices);
      f.offsets = a.offsets;
      f.none = static_cast<uint8_t>(std::min<int64_t>(
          a.pool.kernel[0] * a.pool.kernel[1] * a.pool.kernel[2], 255));
      f.padding_only = HasPaddingOnlyWindows(a.pool);
      launch.Run(static_cast<Index>(g.in_count()), f, nullptr);
    });
  });
}

}  // namespace cuda
}  // namespace jax_unpool
