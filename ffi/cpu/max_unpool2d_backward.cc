// CPU backward (the seed op aclnnMaxUnpool2dBackward): out[n, c, i] =
// grad_output[n, c, indices[n, c, i]]. A gather: every duplicate reads its position.
#include "cpu/kernels.h"
#include "cpu/planes.h"

namespace jax_unpool {
namespace {

template <typename V, typename I>
BadIndex GatherSpan(const PlaneGeometry& g, const V* grad, const I* indices, V* out, int64_t n,
                    int64_t c0, int64_t c1) {
  BadIndex bad = CheckSpan(g, indices, n, c0, c1);
  if (bad.found()) return bad;
  if (!g.channels_last) {
    for (int64_t c = c0; c < c1; ++c) {
      const V* src = grad + g.out_offset(n, c, 0);
      const I* idx = indices + g.in_offset(n, c, 0);
      V* dst = out + g.in_offset(n, c, 0);
      for (int64_t i = 0; i < g.L; ++i) dst[i] = src[idx[i]];
    }
    return bad;
  }
  const int64_t cols = c1 - c0;
  const V* src = grad + g.out_offset(n, c0, 0);
  for (int64_t i = 0; i < g.L; ++i) {
    const I* idx = indices + g.in_offset(n, c0, i);
    V* dst = out + g.in_offset(n, c0, i);
    for (int64_t j = 0; j < cols; ++j) dst[j] = src[static_cast<int64_t>(idx[j]) * g.C + j];
  }
  return bad;
}

ffi::Error MaxUnpool2dBackwardImpl(ffi::ThreadPool pool, ffi::AnyBuffer grad_output,
                                    ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                                    bool channels_last) {
  constexpr const char* kOp = "max_unpool2d_backward";
  const int64_t width = MovableByteWidth(grad_output.element_type());
  if (width == 0 || out->element_type() != grad_output.element_type()) {
    return ffi::Error::InvalidArgument(
        std::string(kOp) + ": unsupported value dtype " +
        DataTypeName(grad_output.element_type()));
  }
  if (!IsIndexType(indices.element_type())) {
    return ffi::Error::InvalidArgument(std::string(kOp) + ": indices must be int32 or int64");
  }
  auto geometry =
      ReadGeometry(kOp, indices.dimensions(), grad_output.dimensions(), channels_last);
  if (geometry.has_error()) return geometry.error();
  const PlaneGeometry g = *geometry;
  if (out->element_count() == 0) return ffi::Error::Success();

  const int64_t bytes = static_cast<int64_t>(indices.size_bytes() + 2 * out->size_bytes());
  return VisitValueWidth(width, [&](auto value_tag) {
    using V = typename decltype(value_tag)::type;
    return VisitIndexType(indices.element_type(), [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const V* gs = static_cast<const V*>(grad_output.untyped_data());
      const I* is = static_cast<const I*>(indices.untyped_data());
      V* os = static_cast<V*>(out->untyped_data());
      return ForEachPlaneChunk(
          pool, g.units(), bytes,
          [=](int64_t u0, int64_t u1) {
            return ForEachImageSpan(g, u0, u1, [&](int64_t n, int64_t c0, int64_t c1) {
              return GatherSpan<V, I>(g, gs, is, os, n, c0, c1);
            });
          },
          [g](const BadIndex& b) { return OutOfRangeError(kOp, g, b); });
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dBackwardCpu, MaxUnpool2dBackwardImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // grad_output
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<bool>("channels_last"));

}  // namespace jax_unpool
