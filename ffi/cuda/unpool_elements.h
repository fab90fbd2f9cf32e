// The unpool kernels' per-element code: each functor's operator()(t) is what one GPU
// thread does for element t of its launch (unpool_plan.h launches them, and
// grid_launcher.cuh runs each as a grid-stride kernel). The host emulation runs the same
// functors in a shuffled order (tests/backends/cuda), so the results checked there are these
// functions' results.
//
// Every functor keeps the rule that makes a launch's result independent of the schedule:
// a location is written by one thread only, or only through commuting atomics (max, min),
// and no thread reads what another thread of the same launch writes.
//
// A tensor pair is seen as `outer` slabs of `positions` x `inner` elements: channels first,
// outer = N * C planes and inner = 1; channels last, outer = N images and inner = C. The
// input side (x, indices, the backward's result) has L positions per plane, the output
// side (the forward's result, grad_output) Lo. An index is a flat position inside one
// output plane, in both layouts.
#pragma once

#include <cstdint>

#include "common/geometry.h"
#include "cuda/intrinsics.h"

namespace jax_unpool {
namespace cuda {

template <typename Index>
struct Planes {
  Index inner = 1, L = 0, Lo = 0;
  Divider<Index> inner_div, L_div, Lo_div;

  JU_HD Index In(Index outer, Index i, Index c) const { return (outer * L + i) * inner + c; }
  JU_HD Index Out(Index outer, Index o, Index c) const { return (outer * Lo + o) * inner + c; }
  // Element t of a side with `positions` per plane -> (outer, position, c).
  JU_HD void Split(Index t, const Divider<Index>& positions, Index& outer, Index& p,
                   Index& c) const {
    Index u = t;
    c = 0;
    if (inner != 1) {
      u = inner_div.Div(t);
      c = t - u * inner;
    }
    outer = positions.Div(u);
    p = u - outer * positions.divisor;
  }
  // Element t of the output side -> the input side's element at position i of its plane.
  JU_HD Index InAt(Index t, Index i) const {
    Index outer, o, c;
    Split(t, Lo_div, outer, o, c);
    return In(outer, i, c);
  }
  // Element t of the input side -> the output side's element at position o of its plane.
  JU_HD Index OutAt(Index t, Index o) const {
    Index outer, i, c;
    Split(t, L_div, outer, i, c);
    return Out(outer, o, c);
  }
};

// An index as a position of a plane of Lo, or Lo when it is outside [0, Lo).
template <typename I, typename Index>
JU_HD Index Position(I v, Index Lo) {
  const int64_t value = static_cast<int64_t>(v);
  return value >= 0 && static_cast<uint64_t>(value) < static_cast<uint64_t>(Lo)
             ? static_cast<Index>(value)
             : Lo;
}

// ---------------------------------------------------------------------------------------
// Where an element's index points: the kernels below read every index through a source,
// At(t, Lo) -> the output plane's position that element t names, or Lo for none; and
// At(t, q, Lo) where the element's input coordinates q (D, H, W) are known already.
// ---------------------------------------------------------------------------------------

// Flat indices (int32 or int64): the index itself.
template <typename I>
struct FlatIndices {
  const I* indices;
  template <typename Index>
  JU_HD Index At(Index t, Index Lo) const {
    return Position(indices[t], Lo);
  }
  template <typename Index>
  JU_HD Index At(Index t, const Index (&)[3], Index Lo) const {
    return Position(indices[t], Lo);
  }
};

// Whether window w of `pool` has no tap inside the input (PyTorch's window of padding only).
template <typename C>
JU_HD bool PaddingOnlyWindow(const Axes<C>& pool, const C (&w)[3]) {
  bool empty = false;
  JU_UNROLL
  for (int a = 0; a < 3; ++a) empty = empty || pool.FirstTap(a, w[a]) >= pool.EndTap(a, w[a]);
  return empty;
}

// PyTorch's initial index of window w (past the plane for a window of padding only).
template <typename C>
JU_HD C InitialPosition(const Axes<C>& pool, const C (&w)[3]) {
  return (pool.First(0, w[0]) * pool.in[1] + pool.First(1, w[1])) * pool.in[2] +
         pool.First(2, w[2]);
}

// Window offsets (common/window_offsets.h): element t's offset is a tap number of the
// pool window at its input coordinates q, decoded here -- _window.to_flat's rule, so that
// the kernels give what they give for the flat indices: a tap in the padding, an offset
// at or past the tap count, and a window of padding only's index past the plane are Lo.
// Coordinates in Coord<Index> (the plan takes 64-bit offsets where they do not fit 32 bits).
template <typename Index>
struct WindowOffsets {
  using C = Coord<Index>;
  const uint8_t* offsets;
  Planes<Index> planes;        // element t -> its position in the plane
  Axes<C> pool;                // the pool's window; in: the output plane, out: the windows
  Divider<Index> windows[2];   // a position's window coordinates: by pool.out[2], pool.out[1]
  Divider<uint32_t> taps_w, taps_h;  // a tap number's coordinates: by kernel[2], kernel[1]
  uint32_t taps = 1;
  bool padding_only = false;   // whether some window has no tap inside the input

  JU_HD Index At(Index t, Index Lo) const {
    Index outer, i, c;
    planes.Split(t, planes.L_div, outer, i, c);
    Index q[3];
    const Index rest = windows[0].Div(i);
    q[2] = i - rest * windows[0].divisor;
    q[0] = windows[1].Div(rest);
    q[1] = rest - q[0] * windows[1].divisor;
    return At(t, q, Lo);
  }

  JU_HD Index At(Index t, const Index (&q)[3], Index Lo) const {
    const uint32_t o = offsets[t];
    const C w[3] = {static_cast<C>(q[0]), static_cast<C>(q[1]), static_cast<C>(q[2])};
    if (padding_only && PaddingOnlyWindow(pool, w)) {
      const C initial = InitialPosition(pool, w);
      return o == 0 && initial < static_cast<C>(Lo) ? static_cast<Index>(initial) : Lo;
    }
    if (o >= taps) return Lo;
    const uint32_t above = taps_w.Div(o);
    const uint32_t j0 = taps_h.Div(above);
    const C j[3] = {static_cast<C>(j0), static_cast<C>(above - j0 * taps_h.divisor),
                    static_cast<C>(o - above * taps_w.divisor)};
    C flat = 0;
    JU_UNROLL
    for (int a = 0; a < 3; ++a) {
      const C coordinate = pool.Tap(a, w[a], j[a]);
      if (coordinate < 0 || coordinate >= pool.in[a]) return Lo;
      flat = flat * pool.in[a] + coordinate;
    }
    return static_cast<Index>(flat);
  }
};

// ---------------------------------------------------------------------------------------
// The forward's one-pass kernels, for indices in their windows: tiled and windowed
// ---------------------------------------------------------------------------------------

// A window hint on the k spatial axes, as 3 axes (D, H, W) whose leading ones have size 1
// and a window of 1: input position q is expected to hold an index inside its box
// [q * stride - padding, q * stride - padding + extent) on every axis.
template <typename Index>
struct Boxes {
  Index in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  Index extent[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, padding[3] = {0, 0, 0};
  // The largest q whose box starts at or before 0 (each validated by output 0), per axis.
  Index first_owner_max[3] = {0, 0, 0};
  Divider<Index> in_div[3], out_div[3], stride_div[3];

  // Output position o -> its coordinates r.
  JU_HD void Coordinates(Index o, Index r[3]) const {
    const Index rest = out_div[2].Div(o);
    r[2] = o - rest * out[2];
    r[0] = out_div[1].Div(rest);
    r[1] = rest - r[0] * out[1];
  }
  // Input position i -> its coordinates q.
  JU_HD void InCoordinates(Index i, Index q[3]) const {
    const Index rest = in_div[2].Div(i);
    q[2] = i - rest * in[2];
    q[0] = in_div[1].Div(rest);
    q[1] = rest - q[0] * in[1];
  }
  JU_HD Index InFlat(const Index q[3]) const { return (q[0] * in[1] + q[1]) * in[2] + q[2]; }
  // Whether box q[a] holds coordinate r on axis a, given q * stride <= r + padding.
  JU_HD bool Holds(int a, Index q, Index r) const {
    return r + padding[a] < q * stride[a] + extent[a];
  }
};

// The forward's two one-pass kernels take the same operands: kTiled picks the pass
// (TiledScatter or WindowedScatter, named below). In both, an index outside its box (or
// outside the plane) raises `flag`: then the general pass below recomputes the whole result.
template <typename V, typename I, typename Index, bool kTiled>
struct OnePassScatter {
  Planes<Index> planes;
  Boxes<Index> boxes;
  const V* x;
  I indices;  // FlatIndices or WindowOffsets
  V* out;
  uint32_t* flag;

  JU_HD void operator()(Index t) const {
    if constexpr (kTiled) {
      Tiled(t);
    } else {
      Windowed(t);
    }
  }

 private:
  // Boxes that tile the output (extent == stride, no padding, every output size the input
  // size times the stride: an unpool of a pool whose window is its stride): one thread per
  // input position writes its whole box -- x at the index, zeros elsewhere -- and checks its
  // own index; each output element is written once.
  JU_HD void Tiled(Index t) const {
    Index outer, i, c, q[3], corner[3];
    planes.Split(t, planes.L_div, outer, i, c);
    boxes.InCoordinates(i, q);
    for (int a = 0; a < 3; ++a) corner[a] = q[a] * boxes.stride[a];
    const V value = x[t];
    const Index o = indices.At(t, q, planes.Lo);
    bool inside = o != planes.Lo;
    if (inside) {
      Index r[3];
      boxes.Coordinates(o, r);
      for (int a = 0; a < 3; ++a)
        inside = inside && r[a] >= corner[a] && r[a] < corner[a] + boxes.stride[a];
    }
    if (!inside) *flag = 1;
    for (Index b0 = 0; b0 < boxes.stride[0]; ++b0) {
      for (Index b1 = 0; b1 < boxes.stride[1]; ++b1) {
        const Index row =
            ((corner[0] + b0) * boxes.out[1] + corner[1] + b1) * boxes.out[2] + corner[2];
        for (Index b2 = 0; b2 < boxes.stride[2]; ++b2)
          out[planes.Out(outer, row + b2, c)] = row + b2 == o ? value : V(0);
      }
    }
  }

  // One pass that writes every output element exactly once, with no fill: output o of plane
  // (outer, c) takes x at the largest input position q whose box holds o and whose index is
  // o, or 0. That is the CPU's result (the largest input position wins) as long as every
  // index lies in its own box: then no other position can hold o. Each input position's
  // index is checked by one thread, the one at the first output position of its box
  // (clipped to the plane; the handler only takes this pass where no clipped box is empty).
  JU_HD void Windowed(Index t) const {
    Index outer, o, c;
    planes.Split(t, planes.Lo_div, outer, o, c);
    Index r[3], last[3], top[3];
    boxes.Coordinates(o, r);
    bool held = true;  // whether every axis has a box holding r
    for (int a = 0; a < 3; ++a) {
      last[a] = boxes.stride_div[a].Div(r[a] + boxes.padding[a]);  // the last box from r's
      top[a] = last[a] < boxes.in[a] ? last[a] : boxes.in[a] - 1;
      held = held && boxes.Holds(a, top[a], r[a]);
    }
    V value = 0;
    if (held) Find(outer, o, c, r, top, value);
    out[t] = value;
    Validate(outer, c, r, last);
  }

  // The candidates, largest flat position first: per axis from top[a] down while the box
  // still holds r[a].
  JU_HD void Find(Index outer, Index o, Index c, const Index (&r)[3], const Index (&top)[3],
                  V& value) const {
    Index q[3];
    for (q[0] = top[0];; --q[0]) {
      for (q[1] = top[1];; --q[1]) {
        for (q[2] = top[2];; --q[2]) {
          const Index at = planes.In(outer, boxes.InFlat(q), c);
          if (indices.At(at, q, planes.Lo) == o) {
            value = x[at];
            return;
          }
          if (q[2] == 0 || !boxes.Holds(2, q[2] - 1, r[2])) break;
        }
        if (q[1] == 0 || !boxes.Holds(1, q[1] - 1, r[1])) break;
      }
      if (q[0] == 0 || !boxes.Holds(0, q[0] - 1, r[0])) break;
    }
  }

  // The input positions whose clipped box starts at r: per axis, the one with
  // q * stride - padding == r (q = last, if it divides), and for r = 0 every q whose box
  // starts at or before 0.
  JU_HD void Validate(Index outer, Index c, const Index (&r)[3], const Index (&last)[3]) const {
    Index lo[3], hi[3];
    for (int a = 0; a < 3; ++a) {
      if (r[a] == 0) {
        lo[a] = 0;
        hi[a] = boxes.first_owner_max[a];
      } else {
        if (last[a] * boxes.stride[a] != r[a] + boxes.padding[a] || last[a] >= boxes.in[a])
          return;
        lo[a] = hi[a] = last[a];
      }
    }
    Index q[3];
    for (q[0] = lo[0]; q[0] <= hi[0]; ++q[0])
      for (q[1] = lo[1]; q[1] <= hi[1]; ++q[1])
        for (q[2] = lo[2]; q[2] <= hi[2]; ++q[2])
          if (!InBox(indices.At(planes.In(outer, boxes.InFlat(q), c), q, planes.Lo), q)) *flag = 1;
  }

  // Whether output position o (Lo: none) lies in input position q's box.
  JU_HD bool InBox(Index o, const Index (&q)[3]) const {
    if (o == planes.Lo) return false;
    Index r[3];
    boxes.Coordinates(o, r);
    for (int a = 0; a < 3; ++a) {
      if (r[a] + boxes.padding[a] < q[a] * boxes.stride[a] || !boxes.Holds(a, q[a], r[a]))
        return false;
    }
    return true;
  }
};

template <typename V, typename I, typename Index>
using TiledScatter = OnePassScatter<V, I, Index, true>;

// TiledScatter of a 2-D channels-first call with a kS x kS box (2x2, 3x3) in 32-bit offsets,
// the stride known at compile time: no division by it, the index checked against the
// box's kS * kS positions as they are written, and each row of a 2x2 box one vector store
// (its first position is even, the result 16-byte aligned: the plan checks).
template <typename V, typename I, int kS>
struct PlaneTiledScatter {
  uint32_t L = 1, Lo = 1, out_w = 1;  // positions per plane, per output plane, per output row
  Divider<uint32_t> L_div, in_w_div;
  const V* x;
  I indices;  // FlatIndices or WindowOffsets
  V* out;
  uint32_t* flag;

  JU_HD void operator()(uint32_t t) const {
    const uint32_t outer = L_div.Div(t);
    const uint32_t i = t - outer * L;
    const uint32_t q_h = in_w_div.Div(i), q_w = i - q_h * in_w_div.divisor;
    // Input (q_h, q_w) -> the box's first output position, kS * (q_h * out_w + q_w).
    const uint32_t corner = kS * (kS * (i - q_w) + q_w);
    const V value = x[t];
    const uint32_t q[3] = {0, q_h, q_w};
    const uint32_t o = indices.At(t, q, Lo);  // Lo when outside the plane
    V* box = out + outer * Lo + corner;
    bool found = false;
    JU_UNROLL
    for (int b = 0; b < kS; ++b) {
      V row[kS];
      JU_UNROLL
      for (int c = 0; c < kS; ++c) {
        const bool here = corner + b * out_w + c == o;
        found = found || here;
        row[c] = here ? value : V(0);
      }
      StoreRow<kS>(box + b * out_w, row);
    }
    if (!found) *flag = 1;
  }
};

// Whether a forward's tiled pass runs as PlaneTiledScatter, and its box size (else 0):
// channels first, boxes of 2x2 or 3x3 on the last two axes, a 16-byte aligned result.
template <typename V>
inline int PlaneTileSize(bool channels_last, const int64_t (&in)[3], const int64_t (&stride)[3],
                         const void* out) {
  if (channels_last || in[0] != 1 || stride[0] != 1 || stride[1] != stride[2] ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return 0;
  return stride[1] == 2 || stride[1] == 3 ? static_cast<int>(stride[1]) : 0;
}
template <typename V, typename I, typename Index>
using WindowedScatter = OnePassScatter<V, I, Index, false>;

// ---------------------------------------------------------------------------------------
// The forward's general pass: any indices, three launches
// ---------------------------------------------------------------------------------------
// P holds "input position + 1" per output element (0: none), in the result itself when
// the value's width can hold it, else in the call's workspace.

template <typename P, typename Index>
struct FillPositions {
  P* positions;
  JU_HD void operator()(Index t) const { positions[t] = 0; }
};

// Every input position raises its output element's entry to its position + 1: the
// largest position wins whatever the order. An index outside the plane is dropped.
template <typename I, typename P, typename Index>
struct ScatterPositions {
  Planes<Index> planes;
  I indices;  // FlatIndices or WindowOffsets
  P* positions;

  JU_HD void operator()(Index t) const {
    const Index o = indices.At(t, planes.Lo);
    if (o == planes.Lo) return;
    Index outer, i, c;
    planes.Split(t, planes.L_div, outer, i, c);
    AtomicMax(&positions[planes.Out(outer, o, c)], static_cast<P>(i + 1));
  }
};

// Each output element: x at its winning position, or 0. `positions` may be `out` itself
// (each thread reads its own element before it writes it).
template <typename V, typename P, typename Index>
struct ResolvePositions {
  Planes<Index> planes;
  const V* x;
  const P* positions;
  V* out;

  JU_HD void operator()(Index t) const {
    const P p = positions[t];
    out[t] = p != 0 ? x[planes.InAt(t, static_cast<Index>(p - 1))] : V(0);
  }
};

// ---------------------------------------------------------------------------------------
// The backward, and the opt-in index check of both
// ---------------------------------------------------------------------------------------

// out[outer, i, c] = grad_output[outer, indices[outer, i, c], c]; 0 for an index outside
// the plane. Thread t gathers kGatherPerThread elements, kGatherLanes apart in a tile of
// kGatherLanes * kGatherPerThread (each of its loads coalesced with its block's, when the
// block has kGatherLanes threads), their loads independent: a warp keeps that many
// gathers in flight, where one chain of two dependent loads would wait on each.
constexpr uint32_t kGatherLanes = 256, kGatherPerThread = 4;

template <typename V, typename I, typename Index>
struct Gather {
  Planes<Index> planes;
  Index n = 0;  // elements
  const V* grad;
  I indices;  // FlatIndices or WindowOffsets
  V* out;

  // The threads that gather n elements.
  static Index Threads(Index n) {
    const Index tile = kGatherLanes * kGatherPerThread;
    return (n + tile - 1) / tile * kGatherLanes;
  }
  JU_HD void operator()(Index t) const {
    const Index lane = t % kGatherLanes;
    const Index first = (t - lane) * kGatherPerThread + lane;
    Index o[kGatherPerThread];
    JU_UNROLL
    for (uint32_t j = 0; j < kGatherPerThread; ++j) {
      const Index e = first + j * kGatherLanes;
      o[j] = e < n ? indices.At(e, planes.Lo) : planes.Lo;
    }
    V v[kGatherPerThread];
    JU_UNROLL
    for (uint32_t j = 0; j < kGatherPerThread; ++j) {
      const Index e = first + j * kGatherLanes;
      v[j] = o[j] != planes.Lo ? grad[planes.OutAt(e, o[j])] : V(0);
    }
    JU_UNROLL
    for (uint32_t j = 0; j < kGatherPerThread; ++j) {
      const Index e = first + j * kGatherLanes;
      if (e < n) out[e] = v[j];
    }
  }
};

// The smallest element offset of an index naming no position of the plane (outside
// [0, Lo), or an offset naming none): the first in flat order, the one the CPU kernels
// name.
template <typename I, typename Index>
struct FindFirstBadIndex {
  Index Lo;
  I indices;  // FlatIndices or WindowOffsets
  uint64_t* first;

  JU_HD void operator()(Index t) const {
    if (indices.At(t, Lo) == Lo) AtomicMin(first, static_cast<uint64_t>(t));
  }
};

// ---------------------------------------------------------------------------------------
// window_indices: flat indices -> window offsets
// ---------------------------------------------------------------------------------------

// Element t (input coordinates q, its window): the tap number of its window that flat
// index indices[t] is, or `none` (min(taps, 255): an offset the unpools drop, as XLA's
// ops give) -- for a window of padding only, 0 where the index is PyTorch's initial one.
template <typename I, typename Index>
struct FlatToOffsets {
  using C = Coord<Index>;
  Planes<Index> planes;       // the indices' (windows) side
  Axes<C> pool;
  Divider<Index> windows[2];  // by pool.out[2], pool.out[1]
  Divider<Index> rows[2];     // an index's coordinates: by pool.in[2], pool.in[1]
  const I* indices;
  uint8_t* offsets;
  uint8_t none = 255;
  bool padding_only = false;

  JU_HD void operator()(Index t) const {
    Index outer, i, c;
    planes.Split(t, planes.L_div, outer, i, c);
    const Index rest = windows[0].Div(i), q0 = windows[1].Div(rest);
    const C w[3] = {static_cast<C>(q0), static_cast<C>(rest - q0 * windows[1].divisor),
                    static_cast<C>(i - rest * windows[0].divisor)};
    offsets[t] = Offset(static_cast<int64_t>(indices[t]), w);
  }

 private:
  JU_HD uint8_t Offset(int64_t v, const C (&w)[3]) const {
    if (padding_only && PaddingOnlyWindow(pool, w))
      return v == static_cast<int64_t>(InitialPosition(pool, w)) ? 0 : none;
    if (v < 0 || v >= static_cast<int64_t>(planes.Lo)) return none;
    const Index above = rows[0].Div(static_cast<Index>(v)), d = rows[1].Div(above);
    const C coordinate[3] = {static_cast<C>(d), static_cast<C>(above - d * rows[1].divisor),
                             static_cast<C>(static_cast<Index>(v) - above * rows[0].divisor)};
    C tap = 0;
    JU_UNROLL
    for (int a = 0; a < 3; ++a) {
      C j = coordinate[a] - pool.Tap(a, w[a], 0);
      if (j < 0) return none;
      if (pool.dil[a] != 1) {
        if (j % pool.dil[a] != 0) return none;
        j /= pool.dil[a];
      }
      if (j >= pool.kernel[a]) return none;
      tap = tap * pool.kernel[a] + j;
    }
    return static_cast<uint8_t>(tap);
  }
};

}  // namespace cuda
}  // namespace jax_unpool
