// The CUDA unpool handlers' bodies, on any device (call.h): the buffers and attributes
// checked as the CPU handlers check them (common/buffer_checks.h, the same messages), the
// geometry read, and the plan (unpool_plan.h) launched.
//
// Semantics: the CPU kernels', bit for bit, for every index inside its plane:
// - forward: zeros, then out[n, c, indices[n, c, i]] = x[n, c, i]; among duplicated
//   indices the largest input position i wins, deterministically;
// - backward: out[n, c, i] = grad_output[n, c, indices[n, c, i]].
// Window offsets (the *_window targets) are read as the flat indices they name
// (common/window_offsets.h): an offset naming no position is an index outside the plane.
// An index outside its plane is, by default, dropped by the forward and reads 0 in the
// backward (as XLA's scatter and gather on GPU, what ju.reference does there), with no
// host round trip. The *checked* targets (the unpool primitives' check_indices=True)
// first look for the first bad index in flat order, copy
// the answer to the host and wait for it, and fail the call with the CPU kernels'
// OUT_OF_RANGE message naming it (no result is written).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/buffer_checks.h"
#include "common/out_of_range.h"
#include "common/pool_checks.h"
#include "common/unpool_checks.h"
#include "common/window_offsets.h"
#include "common/value_types.h"
#include "cuda/call.h"
#include "cuda/unpool_plan.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {
namespace cuda {

// The forward's window: the attributes window_extent, window_stride and window_padding,
// k entries each, or all empty (no window). A window never changes a result.
inline ffi::ErrorOr<Window> ReadWindow(const char* op, int k, ffi::Span<const int64_t> extent,
                                       ffi::Span<const int64_t> stride,
                                       ffi::Span<const int64_t> padding) {
  Window w;
  if (extent.size() == 0 && stride.size() == 0 && padding.size() == 0) return w;
  const size_t want = static_cast<size_t>(k);
  const std::string got = "window_extent=" + ShapeString(extent) +
                          ", window_stride=" + ShapeString(stride) +
                          ", window_padding=" + ShapeString(padding);
  if (extent.size() != want || stride.size() != want || padding.size() != want) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        std::string(op) + ": window_extent, window_stride and window_padding must be empty or "
        "have " + std::to_string(k) + " entries each, got " + got));
  }
  constexpr int64_t kMax = int64_t{1} << 31;
  for (size_t a = 0; a < want; ++a) {
    if (extent[a] < 1 || extent[a] > kMax || stride[a] < 1 || stride[a] > kMax ||
        padding[a] < 0 || padding[a] > kMax) {
      return ffi::Unexpected(ffi::Error::InvalidArgument(
          std::string(op) + ": the window must have extent and stride in [1, 2^31] and "
          "padding in [0, 2^31], got " + got));
    }
    const size_t axis = 3 - want + a;
    w.extent[axis] = extent[a];
    w.stride[axis] = stride[a];
    w.padding[axis] = padding[a];
  }
  w.given = true;
  return w;
}

// The workspace must hold `needed` bytes, 8-byte aligned (its header's uint64).
inline ffi::Error CheckWorkspace(const char* op, const ffi::AnyBuffer& workspace,
                                 int64_t needed) {
  const int64_t bytes = static_cast<int64_t>(workspace.size_bytes());
  if (bytes < needed) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": workspace has shape " + ShapeString(workspace.dimensions()) +
        " (" + std::to_string(bytes) + " bytes) but this call needs at least " +
        std::to_string(needed) + " bytes");
  }
  if (reinterpret_cast<uintptr_t>(workspace.untyped_data()) % 8 != 0)
    return ffi::Error::InvalidArgument(std::string(op) + ": workspace is not 8-byte aligned");
  return ffi::Error::Success();
}

// Checked calls: the first element naming no position of the output plane, in flat order,
// fails the call, named as the CPU kernels name it (for window offsets, `pool` is the
// pool's geometry: common/window_offsets.h).
template <typename Device>
ffi::Error CheckIndices(Device& device, const char* op, const Geometry& g, const IndexSpec& spec,
                        const Geometry* pool, uint8_t* workspace) {
  FirstBadLaunch a;
  a.shape = g;
  a.indices = spec;
  a.first = reinterpret_cast<uint64_t*>(workspace + 8);
  device.FindFirstBad(a);
  uint64_t first = ~uint64_t{0};
  device.CopyToHost(&first, a.first, sizeof first);
  if (ffi::Error e = device.Status(op); !e.success()) return e;
  if (first == ~uint64_t{0}) return ffi::Error::Success();
  const int64_t width = spec.kind == IndexSpec::kInt64 ? 8 : spec.kind == IndexSpec::kInt32 ? 4 : 1;
  int64_t value64 = 0;
  int32_t value32 = 0;
  uint8_t value8 = 0;
  void* value = width == 8 ? static_cast<void*>(&value64)
                : width == 4 ? static_cast<void*>(&value32) : static_cast<void*>(&value8);
  device.CopyToHost(value, static_cast<const uint8_t*>(spec.data) + first * width, width);
  if (ffi::Error e = device.Status(op); !e.success()) return e;
  if (pool != nullptr)
    return BadOffsetError(op, *pool, BadOffsetAt(*pool, static_cast<int64_t>(first), value8));
  return OutOfRangeError(op, g, BadIndexAt(g, static_cast<int64_t>(first),
                                           width == 8 ? value64 : value32));
}

// What both forward calls share once checked: g, the unpool's geometry; its indices as
// `spec` (`pool`: the pool's geometry of window offsets, else null) and its window.
template <typename Device>
ffi::Error LaunchUnpoolForward(Device& device, bool checked, const char* op, const Geometry& g,
                               const IndexSpec& spec, const Geometry* pool, const Window& window,
                               const ffi::AnyBuffer& x, const ffi::AnyBuffer& indices,
                               const ffi::AnyBuffer& out, const ffi::AnyBuffer& workspace) {
  const int64_t width = MovableByteWidth(x.element_type());
  if (indices.element_count() == 0 && out.element_count() == 0) return ffi::Error::Success();
  const int64_t position_bytes = PositionBytes(width, g.in_plane(), g.out_plane());
  if (ffi::Error e = CheckWorkspace(op, workspace, kHeaderBytes + position_bytes * g.out_count());
      !e.success())
    return e;
  if (position_bytes == 0 && width == 2 &&
      reinterpret_cast<uintptr_t>(out.untyped_data()) % 4 != 0)
    return ffi::Error::InvalidArgument(std::string(op) + ": result is not 4-byte aligned");
  uint8_t* ws = static_cast<uint8_t*>(workspace.untyped_data());
  if (checked && g.in_count() > 0) {
    if (ffi::Error e = CheckIndices(device, op, g, spec, pool, ws); !e.success()) return e;
  }
  if (out.element_count() == 0) return ffi::Error::Success();  // every index dropped
  if (g.in_count() == 0) {
    device.Zero(out.untyped_data(), out.size_bytes());
    return device.Status(op);
  }
  ForwardLaunch a;
  a.shape = g;
  a.window = window;
  a.width = width;
  a.position_bytes = position_bytes;
  a.indices = spec;
  a.x = x.untyped_data();
  a.out = out.untyped_data();
  a.workspace = ws;
  device.Forward(a);
  return device.Status(op);
}

inline IndexSpec FlatIndexSpec(const ffi::AnyBuffer& indices) {
  IndexSpec spec;
  spec.kind = indices.element_type() == ffi::DataType::S64 ? IndexSpec::kInt64 : IndexSpec::kInt32;
  spec.data = indices.untyped_data();
  return spec;
}

inline IndexSpec WindowIndexSpec(const ffi::AnyBuffer& offsets, const Geometry& pool) {
  IndexSpec spec;
  spec.kind = IndexSpec::kWindow;
  spec.data = offsets.untyped_data();
  spec.pool = pool;
  return spec;
}

// max_unpool{k}d: (x, indices) -> (out, workspace); attributes channels_last,
// spatial_rank and the window.
template <typename Device>
ffi::Error MaxUnpoolCall(Device& device, bool checked, const ffi::AnyBuffer& x,
                         const ffi::AnyBuffer& indices, const ffi::AnyBuffer& out,
                         const ffi::AnyBuffer& workspace, bool channels_last, int64_t k,
                         ffi::Span<const int64_t> window_extent,
                         ffi::Span<const int64_t> window_stride,
                         ffi::Span<const int64_t> window_padding) {
  if (ffi::Error e = CheckSpatialRank(UnpoolOp::kForward, k); !e.success()) return e;
  const char* op = UnpoolOpName(UnpoolOp::kForward, k);
  const int rank = static_cast<int>(k);
  ffi::ErrorOr<Geometry> call =
      CheckUnpoolCall(op, UnpoolOp::kForward, x, indices, out, channels_last, rank);
  if (call.has_error()) return call.error();
  ffi::ErrorOr<Window> window = ReadWindow(op, rank, window_extent, window_stride, window_padding);
  if (window.has_error()) return window.error();
  return LaunchUnpoolForward(device, checked, op, *call, FlatIndexSpec(indices), nullptr,
                             *window, x, indices, out, workspace);
}

// The box of a pool's argmax: its window's dilated extent (common/window_offsets.h).
inline Window PoolBox(const Geometry& pool) {
  Window w;
  w.given = true;
  for (int a = 0; a < 3; ++a) {
    w.extent[a] = pool.dil[a] * (pool.kernel[a] - 1) + 1;
    w.stride[a] = pool.stride[a];
    w.padding[a] = pool.pad[a];
  }
  return w;
}

// max_unpool{k}d on window offsets: (x, offsets) -> (out, workspace); attributes
// channels_last and the pool's window (kernel_size, stride, padding, dilation, ceil_mode).
template <typename Device>
ffi::Error MaxUnpoolWindowCall(Device& device, bool checked, const ffi::AnyBuffer& x,
                               const ffi::AnyBuffer& offsets, const ffi::AnyBuffer& out,
                               const ffi::AnyBuffer& workspace, bool channels_last,
                               ffi::Span<const int64_t> kernel_size,
                               ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                               ffi::Span<const int64_t> dilation, bool ceil_mode) {
  ffi::ErrorOr<Geometry> pool =
      CheckWindowUnpoolCall(UnpoolOp::kForward, x, offsets, out, channels_last, kernel_size,
                            stride, padding, dilation, ceil_mode);
  if (pool.has_error()) return pool.error();
  const char* op = UnpoolOpName(UnpoolOp::kForward, pool->k);
  return LaunchUnpoolForward(device, checked, op, Unpooling(*pool),
                             WindowIndexSpec(offsets, *pool), &*pool, PoolBox(*pool), x, offsets,
                             out, workspace);
}

// What both backward calls share once checked.
template <typename Device>
ffi::Error LaunchUnpoolBackward(Device& device, const char* op, const Geometry& g,
                                const IndexSpec& spec, const Geometry* pool,
                                const ffi::AnyBuffer& grad, const ffi::AnyBuffer& out,
                                const ffi::AnyBuffer* checked_workspace) {
  if (out.element_count() == 0) return ffi::Error::Success();
  if (checked_workspace != nullptr) {
    if (ffi::Error e = CheckWorkspace(op, *checked_workspace, kHeaderBytes); !e.success())
      return e;
    uint8_t* ws = static_cast<uint8_t*>(checked_workspace->untyped_data());
    if (ffi::Error e = CheckIndices(device, op, g, spec, pool, ws); !e.success()) return e;
  }
  GatherLaunch a;
  a.shape = g;
  a.width = MovableByteWidth(grad.element_type());
  a.indices = spec;
  a.grad = grad.untyped_data();
  a.out = out.untyped_data();
  device.Gather(a);
  return device.Status(op);
}

// max_unpool{k}d_backward: (grad_output, indices) -> out; attributes channels_last and
// spatial_rank. Checked calls have a workspace (its header) as a second result.
template <typename Device>
ffi::Error MaxUnpoolBackwardCall(Device& device, const ffi::AnyBuffer& grad,
                                 const ffi::AnyBuffer& indices, const ffi::AnyBuffer& out,
                                 const ffi::AnyBuffer* checked_workspace, bool channels_last,
                                 int64_t k) {
  if (ffi::Error e = CheckSpatialRank(UnpoolOp::kBackward, k); !e.success()) return e;
  const char* op = UnpoolOpName(UnpoolOp::kBackward, k);
  const int rank = static_cast<int>(k);
  ffi::ErrorOr<Geometry> call =
      CheckUnpoolCall(op, UnpoolOp::kBackward, grad, indices, out, channels_last, rank);
  if (call.has_error()) return call.error();
  return LaunchUnpoolBackward(device, op, *call, FlatIndexSpec(indices), nullptr, grad, out,
                              checked_workspace);
}

// max_unpool{k}d_backward on window offsets: (grad_output, offsets) -> out (and the
// checked calls' workspace); attributes channels_last and the pool's window.
template <typename Device>
ffi::Error MaxUnpoolBackwardWindowCall(Device& device, const ffi::AnyBuffer& grad,
                                       const ffi::AnyBuffer& offsets, const ffi::AnyBuffer& out,
                                       const ffi::AnyBuffer* checked_workspace,
                                       bool channels_last, ffi::Span<const int64_t> kernel_size,
                                       ffi::Span<const int64_t> stride,
                                       ffi::Span<const int64_t> padding,
                                       ffi::Span<const int64_t> dilation, bool ceil_mode) {
  ffi::ErrorOr<Geometry> pool =
      CheckWindowUnpoolCall(UnpoolOp::kBackward, grad, offsets, out, channels_last, kernel_size,
                            stride, padding, dilation, ceil_mode);
  if (pool.has_error()) return pool.error();
  const char* op = UnpoolOpName(UnpoolOp::kBackward, pool->k);
  return LaunchUnpoolBackward(device, op, Unpooling(*pool), WindowIndexSpec(offsets, *pool),
                              &*pool, grad, out, checked_workspace);
}

// window_indices: flat indices -> uint8 window offsets; attributes the pool's window and
// input_size. An index that is not in its window becomes an offset the unpools drop
// (min(taps, 255)), as on XLA's ops.
template <typename Device>
ffi::Error WindowIndicesCall(Device& device, const ffi::AnyBuffer& indices,
                             const ffi::AnyBuffer& offsets, bool channels_last,
                             ffi::Span<const int64_t> kernel_size,
                             ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                             ffi::Span<const int64_t> dilation, bool ceil_mode,
                             ffi::Span<const int64_t> input_size) {
  ffi::ErrorOr<Geometry> pool =
      CheckWindowIndicesCall(indices, offsets, channels_last, kernel_size, stride, padding,
                             dilation, ceil_mode, input_size);
  if (pool.has_error()) return pool.error();
  if (offsets.element_count() == 0) return ffi::Error::Success();
  WindowIndicesLaunch a;
  a.shape = Unpooling(*pool);
  a.pool = *pool;
  a.index64 = indices.element_type() == ffi::DataType::S64;
  a.indices = indices.untyped_data();
  a.offsets = static_cast<uint8_t*>(offsets.untyped_data());
  device.WindowIndices(a);
  return device.Status("window_indices");
}

}  // namespace cuda
}  // namespace jax_unpool
