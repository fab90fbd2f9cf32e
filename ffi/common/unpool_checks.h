// An unpool call (the forward, a scatter, or the backward, a gather) checked on any
// platform before any memory is touched: the op's name, the spatial_rank attribute of
// the _v2 targets, the buffers against each other (buffer_checks.h) and the value dtype,
// and the geometry they give (common/geometry.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common/buffer_checks.h"
#include "common/geometry.h"
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

// The geometry of spatial rank k read from the dims of an input-side buffer and an
// output-side buffer, which buffer_checks.h found to be of rank k + 1 or k + 2, of equal
// rank, N and C.
inline Geometry ReadGeometry(ffi::Span<const int64_t> in, ffi::Span<const int64_t> out,
                             bool channels_last, int k) {
  const size_t rank = in.size();
  const size_t s = rank - k - (channels_last ? 1 : 0);  // the first spatial dim
  Geometry g;
  g.k = k;
  g.channels_last = channels_last;
  g.N = rank == static_cast<size_t>(k) + 2 ? in[0] : 1;
  g.C = in[channels_last ? rank - 1 : s - 1];
  for (int a = 0; a < k; ++a) {
    g.in[3 - k + a] = in[s + a];
    g.out[3 - k + a] = out[s + a];
  }
  return g;
}

// The buffers checked against each other for spatial rank k, `values` of a dtype the
// kernels can move, and the geometry: the forward's x and the backward's indices are the
// input side, the forward's result and the backward's grad_output the output side.
inline ffi::ErrorOr<Geometry> CheckUnpoolCall(const char* op, UnpoolOp kind,
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
