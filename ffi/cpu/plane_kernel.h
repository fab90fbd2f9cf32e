// The frame both CPU handlers share around their kernel: no exception escapes, the
// buffers are checked, the geometry is read, and the kernel runs on every (image,
// channel range) chunk with the value and index types dispatched.
#pragma once

#include <string>
#include <utility>

#include "common/buffer_checks.h"
#include "cpu/output_pages.h"
#include "cpu/planes.h"
#include "common/value_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

enum class Op { kForward, kBackward };

// The op's name in messages: max_unpool{k}d, or max_unpool{k}d_backward.
inline const char* OpName(Op kind, int64_t k) {
  static constexpr const char* kForward[] = {"max_unpool1d", "max_unpool2d", "max_unpool3d"};
  static constexpr const char* kBackward[] = {
      "max_unpool1d_backward", "max_unpool2d_backward", "max_unpool3d_backward"};
  return (kind == Op::kForward ? kForward : kBackward)[k - 1];
}

// The spatial rank attribute of a *_v2 call: 1, 2 or 3.
inline ffi::Error CheckSpatialRank(Op kind, int64_t k) {
  if (k >= 1 && k <= 3) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(
      std::string(kind == Op::kForward ? "max_unpool" : "max_unpool_backward") +
      ": spatial_rank must be 1, 2 or 3, got " + std::to_string(k));
}

// The buffers checked against each other (buffer_checks.h) for spatial rank k, `values`
// of a dtype the kernels can move, and the geometry: the forward's x and the backward's
// indices are the input side, the forward's result and the backward's grad_output the
// output side.
inline ffi::ErrorOr<PlaneGeometry> CheckBuffers(const char* op, Op kind,
                                                const ffi::AnyBuffer& values,
                                                const ffi::AnyBuffer& indices,
                                                const ffi::AnyBuffer& out, bool channels_last,
                                                int k) {
  const bool forward = kind == Op::kForward;
  ffi::Error checked =
      forward ? CheckForwardBuffers(op, values, indices, out, channels_last, k)
              : CheckBackwardBuffers(op, values, indices, out, channels_last, k);
  if (!checked.success()) return ffi::Unexpected(std::move(checked));
  if (MovableByteWidth(values.element_type()) == 0) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        std::string(op) + ": unsupported value dtype " + DataTypeName(values.element_type())));
  }
  return ReadGeometry(forward ? values.dimensions() : indices.dimensions(),
                      forward ? out.dimensions() : values.dimensions(), channels_last, k);
}

// Runs span(g, values, indices, out, n, c0, c1) -> BadIndex, with typed pointers, over
// all planes; the first bad index in flat order becomes the call's error.
template <typename Span>
ffi::Error RunPlaneKernel(const char* op, ffi::ThreadPool& pool, const PlaneGeometry& g,
                          const ffi::AnyBuffer& values, const ffi::AnyBuffer& indices,
                          ffi::AnyBuffer out, Span span) {
  if (indices.element_count() == 0 && out.element_count() == 0) return ffi::Error::Success();
  if (g.Lo == 0) {  // an empty output plane: the first index is already out of range
    return VisitIndexType(indices.element_type(), [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const I first = *static_cast<const I*>(indices.untyped_data());
      return OutOfRangeError(op, g, BadIndex{0, static_cast<int64_t>(first), 0, 0, 0});
    });
  }
  AdviseHugePages(out.untyped_data(), out.size_bytes());
  const int64_t bytes =
      static_cast<int64_t>(values.size_bytes() + indices.size_bytes() + out.size_bytes());
  return VisitValueWidth(MovableByteWidth(values.element_type()), [&](auto value_tag) {
    using V = typename decltype(value_tag)::type;
    return VisitIndexType(indices.element_type(), [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const V* vs = static_cast<const V*>(values.untyped_data());
      const I* is = static_cast<const I*>(indices.untyped_data());
      V* os = static_cast<V*>(out.untyped_data());
      return ForEachPlaneChunk(
          pool, g.units(), bytes,
          [=](int64_t u0, int64_t u1) {
            return ForEachImageSpan(g, u0, u1, [&](int64_t n, int64_t c0, int64_t c1) {
              return span(g, vs, is, os, n, c0, c1);
            });
          },
          [op, &g](const BadIndex& b) { return OutOfRangeError(op, g, b); });
    });
  });
}

// A whole handler call of spatial rank k: the rank attribute and the buffers checked,
// then RunPlaneKernel with `span`; no exception escapes.
template <typename Span>
ffi::Error RunOp(Op kind, ffi::ThreadPool& pool, const ffi::AnyBuffer& values,
                 const ffi::AnyBuffer& indices, ffi::AnyBuffer out, bool channels_last,
                 int64_t k, Span span) {
  if (ffi::Error e = CheckSpatialRank(kind, k); !e.success()) return e;
  const char* op = OpName(kind, k);
  return NoThrow(op, [&]() -> ffi::Error {
    auto geometry =
        CheckBuffers(op, kind, values, indices, out, channels_last, static_cast<int>(k));
    if (geometry.has_error()) return geometry.error();
    return RunPlaneKernel(op, pool, *geometry, values, indices, out, span);
  });
}

}  // namespace jax_unpool
