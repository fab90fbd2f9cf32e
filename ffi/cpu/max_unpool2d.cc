// CPU forward: out = zeros; out[n, c, indices[n, c, i]] = x[n, c, i].
// Each plane is zero-filled and scattered in one pass while it is in cache; inside a
// plane positions go in flat order, so among duplicated indices the largest input
// position wins, deterministically (PyTorch CPU's sequential behaviour).
#include <cstring>

#include "cpu/kernels.h"
#include "cpu/planes.h"

namespace jax_unpool {
namespace {

template <typename V, typename I>
BadIndex ScatterSpan(const PlaneGeometry& g, const V* x, const I* indices, V* out, int64_t n,
                     int64_t c0, int64_t c1) {
  // Every index is checked before anything of the span is written.
  BadIndex bad = CheckSpan(g, indices, n, c0, c1);
  if (bad.found()) return bad;
  if (!g.channels_last) {
    for (int64_t c = c0; c < c1; ++c) {
      const V* src = x + g.in_offset(n, c, 0);
      const I* idx = indices + g.in_offset(n, c, 0);
      V* dst = out + g.out_offset(n, c, 0);
      std::memset(dst, 0, sizeof(V) * g.Lo);
      for (int64_t i = 0; i < g.L; ++i) dst[idx[i]] = src[i];
    }
    return bad;
  }
  const int64_t cols = c1 - c0;
  V* dst = out + g.out_offset(n, c0, 0);
  if (cols == g.C) {
    std::memset(dst, 0, sizeof(V) * g.Lo * g.C);
  } else {
    for (int64_t o = 0; o < g.Lo; ++o) std::memset(dst + o * g.C, 0, sizeof(V) * cols);
  }
  for (int64_t i = 0; i < g.L; ++i) {
    const V* src = x + g.in_offset(n, c0, i);
    const I* idx = indices + g.in_offset(n, c0, i);
    for (int64_t j = 0; j < cols; ++j) dst[static_cast<int64_t>(idx[j]) * g.C + j] = src[j];
  }
  return bad;
}

ffi::Error MaxUnpool2dImpl(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer indices,
                            ffi::Result<ffi::AnyBuffer> out, bool channels_last) {
  constexpr const char* kOp = "max_unpool2d";
  const int64_t width = MovableByteWidth(x.element_type());
  if (width == 0 || out->element_type() != x.element_type()) {
    return ffi::Error::InvalidArgument(
        std::string(kOp) + ": unsupported value dtype " + DataTypeName(x.element_type()));
  }
  if (!IsIndexType(indices.element_type())) {
    return ffi::Error::InvalidArgument(std::string(kOp) + ": indices must be int32 or int64");
  }
  auto geometry = ReadGeometry(kOp, x.dimensions(), out->dimensions(), channels_last);
  if (geometry.has_error()) return geometry.error();
  const PlaneGeometry g = *geometry;
  if (out->element_count() == 0) return ffi::Error::Success();

  const int64_t bytes = static_cast<int64_t>(x.size_bytes() + indices.size_bytes() +
                                             out->size_bytes());
  return VisitValueWidth(width, [&](auto value_tag) {
    using V = typename decltype(value_tag)::type;
    return VisitIndexType(indices.element_type(), [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const V* xs = static_cast<const V*>(x.untyped_data());
      const I* is = static_cast<const I*>(indices.untyped_data());
      V* os = static_cast<V*>(out->untyped_data());
      return ForEachPlaneChunk(
          pool, g.units(), bytes,
          [=](int64_t u0, int64_t u1) {
            return ForEachImageSpan(g, u0, u1, [&](int64_t n, int64_t c0, int64_t c1) {
              return ScatterSpan<V, I>(g, xs, is, os, n, c0, c1);
            });
          },
          [g](const BadIndex& b) { return OutOfRangeError(kOp, g, b); });
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dCpu, MaxUnpool2dImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<bool>("channels_last"));

}  // namespace jax_unpool
