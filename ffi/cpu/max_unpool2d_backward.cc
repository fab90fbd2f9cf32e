// CPU backward (the seed op aclnnMaxUnpool2dBackward): out[n, c, i] =
// grad_output[n, c, indices[n, c, i]]. A gather: every duplicate reads its position.
#include "cpu/kernels.h"
#include "cpu/output_pages.h"
#include "cpu/streaming.h"
#include "cpu/planes.h"

namespace jax_unpool {
namespace {

// Reads of grad_output follow the indices, which no hardware prefetcher can guess: they
// are prefetched kAhead positions ahead, a block of kBlock positions at a time.
constexpr int64_t kBlock = 64, kAhead = 256;

// NCHW: plane by plane, each checked just before it is gathered.
template <bool kStream, typename V, typename I>
BadIndex GatherPlanes(const PlaneGeometry& g, const V* grad, const I* indices, V* out,
                      int64_t n, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) {
    BadIndex bad = CheckBlock(g, indices, n, c, c + 1, 0, g.L);
    if (bad.found()) return bad;
    const V* src = grad + g.out_offset(n, c, 0);
    const I* idx = indices + g.in_offset(n, c, 0);
    V* dst = out + g.in_offset(n, c, 0);
    for (int64_t p = 0; p < std::min(kAhead, g.L); ++p) __builtin_prefetch(src + idx[p]);
    for (int64_t i0 = 0; i0 < g.L; i0 += kBlock) {
      const int64_t i1 = std::min(g.L, i0 + kBlock);
      for (int64_t p = i0 + kAhead; p < std::min(g.L, i1 + kAhead); ++p)
        __builtin_prefetch(src + idx[p]);
      StoreValues<kStream>(dst + i0, i1 - i0, [&](int64_t k) { return src[idx[i0 + k]]; });
    }
  }
  return BadIndex{};
}

// NHWC: the channels [c0, c1) of image n, in blocks of positions checked just before
// they are gathered.
template <bool kStream, typename V, typename I>
BadIndex GatherImageSpan(const PlaneGeometry& g, const V* grad, const I* indices, V* out,
                         int64_t n, int64_t c0, int64_t c1) {
  const int64_t cols = c1 - c0, rows = RowsPerBlock(cols, sizeof(I));
  const V* src = grad + g.out_offset(n, c0, 0);
  for (int64_t i0 = 0; i0 < g.L; i0 += rows) {
    const int64_t i1 = std::min(g.L, i0 + rows);
    BadIndex bad = CheckBlock(g, indices, n, c0, c1, i0, i1);
    if (bad.found()) return bad;
    for (int64_t i = i0; i < i1; ++i) {
      const I* idx = indices + g.in_offset(n, c0, i);
      StoreValues<kStream>(out + g.in_offset(n, c0, i), cols, [&](int64_t j) {
        return src[static_cast<int64_t>(idx[j]) * g.C + j];
      });
    }
  }
  return BadIndex{};
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

  AdviseHugePages(out->untyped_data(), out->size_bytes());
  const int64_t bytes = static_cast<int64_t>(grad_output.size_bytes() + indices.size_bytes() +
                                             out->size_bytes());
  return VisitValueWidth(width, [&](auto value_tag) {
    using V = typename decltype(value_tag)::type;
    return VisitIndexType(indices.element_type(), [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const V* gs = static_cast<const V*>(grad_output.untyped_data());
      const I* is = static_cast<const I*>(indices.untyped_data());
      V* os = static_cast<V*>(out->untyped_data());
      const auto run = [&](auto stream) {
        constexpr bool kStream = decltype(stream)::value;
        return ForEachPlaneChunk(
            pool, g.units(), bytes,
            [=](int64_t u0, int64_t u1) {
              BadIndex bad = ForEachImageSpan(g, u0, u1, [&](int64_t n, int64_t c0, int64_t c1) {
                return g.channels_last
                           ? GatherImageSpan<kStream, V, I>(g, gs, is, os, n, c0, c1)
                           : GatherPlanes<kStream, V, I>(g, gs, is, os, n, c0, c1);
              });
              if (kStream) StreamingFence();
              return bad;
            },
            [g](const BadIndex& b) { return OutOfRangeError(kOp, g, b); });
      };
      return static_cast<int64_t>(out->size_bytes()) >= kStreamingMinBytes ? run(std::true_type{})
                                                                            : run(std::false_type{});
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
