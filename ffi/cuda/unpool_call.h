// The CUDA unpool handlers' bodies, on any device (call.h): the buffers and attributes
// checked as the CPU handlers check them (common/buffer_checks.h, the same messages), the
// geometry read, and the plan (unpool_plan.h) launched.
//
// Semantics: the CPU kernels', bit for bit, for every index inside its plane:
// - forward: zeros, then out[n, c, indices[n, c, i]] = x[n, c, i]; among duplicated
//   indices the largest input position i wins, deterministically;
// - backward: out[n, c, i] = grad_output[n, c, indices[n, c, i]].
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
#include "common/unpool_checks.h"
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

// Checked calls: the first index outside the plane, in flat order, fails the call.
template <typename Device>
ffi::Error CheckIndices(Device& device, const char* op, const Geometry& g,
                        const ffi::AnyBuffer& indices, uint8_t* workspace) {
  FirstBadLaunch a;
  a.Lo = g.out_plane();
  a.count = g.in_count();
  a.index64 = indices.element_type() == ffi::DataType::S64;
  a.indices = indices.untyped_data();
  a.first = reinterpret_cast<uint64_t*>(workspace + 8);
  device.FindFirstBad(a);
  uint64_t first = ~uint64_t{0};
  device.CopyToHost(&first, a.first, sizeof first);
  if (ffi::Error e = device.Status(op); !e.success()) return e;
  if (first == ~uint64_t{0}) return ffi::Error::Success();
  const int64_t width = a.index64 ? 8 : 4;
  int64_t value = 0;
  int32_t value32 = 0;
  device.CopyToHost(a.index64 ? static_cast<void*>(&value) : &value32,
                    static_cast<const uint8_t*>(a.indices) + first * width, width);
  if (ffi::Error e = device.Status(op); !e.success()) return e;
  return OutOfRangeError(op, g, BadIndexAt(g, static_cast<int64_t>(first),
                                           a.index64 ? value : value32));
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
  const Geometry& g = *call;
  const int64_t width = MovableByteWidth(x.element_type());
  ffi::ErrorOr<Window> window = ReadWindow(op, rank, window_extent, window_stride, window_padding);
  if (window.has_error()) return window.error();
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
    if (ffi::Error e = CheckIndices(device, op, g, indices, ws); !e.success()) return e;
  }
  if (out.element_count() == 0) return ffi::Error::Success();  // every index dropped
  if (g.in_count() == 0) {
    device.Zero(out.untyped_data(), out.size_bytes());
    return device.Status(op);
  }
  ForwardLaunch a;
  a.shape = g;
  a.window = *window;
  a.width = width;
  a.position_bytes = position_bytes;
  a.index64 = indices.element_type() == ffi::DataType::S64;
  a.x = x.untyped_data();
  a.indices = indices.untyped_data();
  a.out = out.untyped_data();
  a.workspace = ws;
  device.Forward(a);
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
  const Geometry& g = *call;
  const int64_t width = MovableByteWidth(grad.element_type());
  if (out.element_count() == 0) return ffi::Error::Success();
  if (checked_workspace != nullptr) {
    if (ffi::Error e = CheckWorkspace(op, *checked_workspace, kHeaderBytes); !e.success())
      return e;
    uint8_t* ws = static_cast<uint8_t*>(checked_workspace->untyped_data());
    if (ffi::Error e = CheckIndices(device, op, g, indices, ws); !e.success()) return e;
  }
  GatherLaunch a;
  a.shape = g;
  a.width = width;
  a.index64 = indices.element_type() == ffi::DataType::S64;
  a.grad = grad.untyped_data();
  a.indices = indices.untyped_data();
  a.out = out.untyped_data();
  device.Gather(a);
  return device.Status(op);
}

}  // namespace cuda
}  // namespace jax_unpool
