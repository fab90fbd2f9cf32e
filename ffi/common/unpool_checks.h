// An unpool call (the forward, a scatter, or the backward, a gather) checked on any
// platform before any memory is touched: the op's name, the spatial_rank attribute of
// the _v2 targets, the buffers against each other (buffer_checks.h) and the value dtype,
// and the plane geometry they give.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common/buffer_checks.h"
#include "common/plane_geometry.h"
#include "common/value_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

enum class UnpoolOp { kForward, kBackward };

// The op's name in messages: max_unpool{k}d, or max_unpool{k}d_backward.
inline const char* UnpoolOpName(UnpoolOp kind, int64_t k) {
  static constexpr const char* kForward[] = {"max_unpool1d", "max_unpool2d", "max_unpool3d"};
  static constexpr const char* kBackward[] = {"max_unpool1d_backward", "max_unpool2d_backward",
                                              "max_unpool3d_backward"};
  return (kind == UnpoolOp::kForward ? kForward : kBackward)[k - 1];
}

// The spatial rank attribute of a *_v2 call: 1, 2 or 3.
inline ffi::Error CheckSpatialRank(UnpoolOp kind, int64_t k) {
  if (k >= 1 && k <= 3) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(
      std::string(kind == UnpoolOp::kForward ? "max_unpool" : "max_unpool_backward") +
      ": spatial_rank must be 1, 2 or 3, got " + std::to_string(k));
}

// The buffers checked against each other for spatial rank k, `values` of a dtype the
// kernels can move, and the geometry: the forward's x and the backward's indices are the
// input side, the forward's result and the backward's grad_output the output side.
inline ffi::ErrorOr<PlaneGeometry> CheckUnpoolCall(const char* op, UnpoolOp kind,
                                                   const ffi::AnyBuffer& values,
                                                   const ffi::AnyBuffer& indices,
                                                   const ffi::AnyBuffer& out, bool channels_last,
                                                   int k) {
  const bool forward = kind == UnpoolOp::kForward;
  ffi::Error checked = forward ? CheckForwardBuffers(op, values, indices, out, channels_last, k)
                               : CheckBackwardBuffers(op, values, indices, out, channels_last, k);
  if (!checked.success()) return ffi::Unexpected(std::move(checked));
  if (MovableByteWidth(values.element_type()) == 0) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        std::string(op) + ": unsupported value dtype " + DataTypeName(values.element_type())));
  }
  return ReadGeometry(forward ? values.dimensions() : indices.dimensions(),
                      forward ? out.dimensions() : values.dimensions(), channels_last, k);
}

}  // namespace jax_unpool
