// The frame both CPU unpool handlers share around their kernel: no exception escapes, the
// call is checked (common/unpool_checks.h), and the kernel runs on every (image, channel
// range) span of every chunk of planes with the value and index types dispatched; the
// first bad index in flat order fails the call.
#pragma once

#include <cstdint>

#include "common/geometry.h"
#include "common/no_throw.h"
#include "common/out_of_range.h"
#include "common/unpool_checks.h"
#include "common/value_types.h"
#include "cpu/first_bad_index.h"
#include "cpu/image_spans.h"
#include "cpu/output_pages.h"
#include "cpu/thread_chunks.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// Runs span(g, values, indices, out, n, c0, c1) -> BadIndex, with typed pointers, over
// all planes; the first bad index in flat order becomes the call's error.
template <typename Span>
ffi::Error RunUnpoolKernel(const char* op, ffi::ThreadPool& pool, const Geometry& g,
                           const ffi::AnyBuffer& values, const ffi::AnyBuffer& indices,
                           ffi::AnyBuffer out, Span span) {
  if (indices.element_count() == 0 && out.element_count() == 0) return ffi::Error::Success();
  if (g.out_plane() == 0) {  // an empty output plane: the first index is already out of range
    return VisitIndexType(indices.element_type(), [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const I first = *static_cast<const I*>(indices.untyped_data());
      return OutOfRangeError(op, g, BadIndexAt(g, 0, static_cast<int64_t>(first)));
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
      FirstBadIndex bad;
      ffi::Error run = ForEachChunk(pool, g.planes(), bytes, [&](int64_t u0, int64_t u1) {
        bad.Offer(ForEachImageSpan(g, u0, u1, [&](int64_t n, int64_t c0, int64_t c1) {
          return span(g, vs, is, os, n, c0, c1);
        }));
      });
      if (!run.success()) return run;
      return bad.first().found() ? OutOfRangeError(op, g, bad.first()) : ffi::Error::Success();
    });
  });
}

// A whole unpool handler call of spatial rank k: the rank attribute and the buffers
// checked, then RunUnpoolKernel with `span`; no exception escapes.
template <typename Span>
ffi::Error RunUnpoolOp(UnpoolOp kind, ffi::ThreadPool& pool, const ffi::AnyBuffer& values,
                       const ffi::AnyBuffer& indices, ffi::AnyBuffer out, bool channels_last,
                       int64_t k, Span span) {
  if (ffi::Error e = CheckSpatialRank(kind, k); !e.success()) return e;
  const char* op = UnpoolOpName(kind, k);
  return NoThrow(op, [&]() -> ffi::Error {
    auto geometry =
        CheckUnpoolCall(op, kind, values, indices, out, channels_last, static_cast<int>(k));
    if (geometry.has_error()) return geometry.error();
    return RunUnpoolKernel(op, pool, *geometry, values, indices, out, span);
  });
}

}  // namespace jax_unpool
