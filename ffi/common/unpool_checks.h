// An unpool call (the forward, a scatter, or the backward, a gather) checked on any
// platform before any memory is touched: the op's name, the spatial_rank attribute of
// the _v2 targets, the buffers against each other (buffer_checks.h) and the value dtype,
// and the geometry they give (common/geometry.h). The window targets' calls, whose
// indices are a pool's window offsets, are checked against that pool's window.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common/buffer_checks.h"
#include "common/geometry.h"
#include "common/pool_checks.h"
#include "common/value_types.h"
#include "common/window_offsets.h"
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

// An unpool call on window offsets (common/window_offsets.h), (values, offsets) -> out,
// checked against the pool whose window the attributes give, and that pool's geometry
// (its input side: the forward's out, the backward's grad_output). The forward's values
// are the pool's values (x) and its out the pool's input; the backward's values
// (grad_output) are the pool's input and its out the offsets' shape.
inline ffi::ErrorOr<Geometry> CheckWindowUnpoolCall(
    UnpoolOp kind, const ffi::AnyBuffer& values, const ffi::AnyBuffer& offsets,
    const ffi::AnyBuffer& out, bool channels_last, ffi::Span<const int64_t> kernel_size,
    ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
    ffi::Span<const int64_t> dilation, bool ceil_mode) {
  using pool_checks::Fail;
  const bool forward = kind == UnpoolOp::kForward;
  ffi::Error error = ffi::Error::Success();
  const int k = pool_checks::WindowRank(forward ? "max_unpool" : "max_unpool_backward",
                                        kernel_size, stride, padding, dilation, &error);
  if (k == 0) return ffi::Unexpected(std::move(error));
  const char* op = UnpoolOpName(kind, k);
  if (ffi::Error e = pool_checks::CheckWindowValues(op, kernel_size, stride, padding, dilation);
      !e.success())
    return ffi::Unexpected(std::move(e));
  if (ffi::Error e = CheckWindowTaps(op, kernel_size); !e.success())
    return ffi::Unexpected(std::move(e));
  if (offsets.element_type() != ffi::DataType::U8)
    return Fail(std::string(op) + ": indices must be uint8 window offsets, got " +
                DataTypeName(offsets.element_type()));
  const NamedBuffer vs{forward ? "x" : "grad_output", values}, os{"indices", offsets},
      rs{"result", out};
  if (out.element_type() != values.element_type())
    return Fail(std::string(op) + ": result has dtype " + DataTypeName(out.element_type()) +
                " but " + vs.name + " has dtype " + DataTypeName(values.element_type()) +
                "; they must be equal");
  if (MovableByteWidth(values.element_type()) == 0)
    return Fail(std::string(op) + ": unsupported value dtype " +
                DataTypeName(values.element_type()));
  const size_t rank = values.dimensions().size();
  if (rank != static_cast<size_t>(k) + 1 && rank != static_cast<size_t>(k) + 2)
    return Fail(std::string(op) + ": " + vs.name + " must have rank " + std::to_string(k + 1) +
                " or " + std::to_string(k + 2) + ", got shape " + ShapeString(vs.dims()));
  // The forward's x and offsets are the pool's output, its result the pool's input; the
  // backward's grad_output is the pool's input, its offsets and result the pool's output.
  const NamedBuffer& pooled = forward ? vs : os;
  const NamedBuffer& input = forward ? rs : vs;
  const NamedBuffer& twin = forward ? os : rs;
  if (!buffer_checks::SameDims(twin.dims(), pooled.dims()))
    return ffi::Unexpected(buffer_checks::Mismatch(op, twin, pooled, "they must be equal"));
  if (ffi::Error e = buffer_checks::SameImagesAndChannels(op, forward ? rs : os, vs,
                                                          channels_last, k);
      !e.success())
    return ffi::Unexpected(std::move(e));
  ffi::ErrorOr<Geometry> pool =
      pool_checks::Pooling(op, input.name, input.dims(), channels_last, kernel_size, stride,
                           padding, dilation, ceil_mode);
  if (pool.has_error()) return pool;
  int64_t expected[5];
  const ffi::Span<const int64_t> want = pool_checks::PooledDims(*pool, input.dims(), expected);
  if (!buffer_checks::SameDims(pooled.dims(), want))
    return Fail(std::string(op) + ": " + pooled.name + " has shape " +
                ShapeString(pooled.dims()) + " but pooling " + input.name + " of shape " +
                ShapeString(input.dims()) + " with " +
                pool_checks::WindowString(kernel_size, stride, padding, dilation) +
                ", ceil_mode=" + (ceil_mode ? "True" : "False") + " gives " + ShapeString(want));
  return pool;
}

// The flat unpool targets' operands after the platform's context (binding: ffi::Ffi::Bind()
// with it): (values, indices) -> out and the layout; the 2-D _v1 targets end there, the
// others add "spatial_rank".
template <typename Binding>
auto BindUnpoolOperands(Binding binding) {
  return std::move(binding)
      .template Arg<ffi::AnyBuffer>()  // values: x (forward) or grad_output (backward)
      .template Arg<ffi::AnyBuffer>()  // indices
      .template Ret<ffi::AnyBuffer>()  // out
      .template Attr<bool>("channels_last");
}

}  // namespace jax_unpool
