// CPU backward (the seed op aclnnMaxUnpool2dBackward): out[n, c, i] =
// grad_output[n, c, indices[n, c, i]]. A gather: every duplicate reads its position.
#include <algorithm>
#include <cstdint>

#include "common/geometry.h"
#include "common/out_of_range.h"
#include "cpu/first_bad_index.h"
#include "cpu/gather_row.h"
#include "cpu/handlers.h"
#include "cpu/image_spans.h"
#include "cpu/index_range.h"
#include "cpu/unpool_kernel.h"

namespace jax_unpool {
namespace {

// Reads of grad_output follow the indices, which no hardware prefetcher can guess: they
// are prefetched kAhead positions ahead (every other position: neighbours mostly share
// a line), a block of kBlock positions at a time.
constexpr int64_t kBlock = 64, kAhead = 256;

// NCHW: plane by plane.
template <typename V, typename I>
BadIndex GatherPlanes(const Geometry& g, const V* grad, const I* indices, V* out, int64_t n,
                      int64_t c0, int64_t c1) {
  const int64_t L = g.in_plane(), Lo = g.out_plane();
  const RowGatherer<V, I> gather(Lo);
  for (int64_t c = c0; c < c1; ++c) {
    const V* src = grad + g.out_offset(n, c, 0);
    const I* idx = indices + g.in_offset(n, c, 0);
    V* dst = out + g.in_offset(n, c, 0);
    IndexRange<I> range(Lo);
    for (int64_t p = 0; p < std::min(kAhead, L); p += 2)
      __builtin_prefetch(src + range.Position(idx[p]));
    for (int64_t i0 = 0; i0 < L; i0 += kBlock) {
      const int64_t i1 = std::min(L, i0 + kBlock);
      for (int64_t p = i0 + kAhead; p < std::min(L, i1 + kAhead); p += 2)
        __builtin_prefetch(src + range.Position(idx[p]));
      gather(src, idx + i0, dst + i0, i1 - i0, 1, 0, range);
    }
    if (range.failed()) return FindBadIndex(g, indices, n, c, c + 1, 0, L);
  }
  return BadIndex{};
}

// NHWC: the channels [c0, c1) of image n, position by position, in blocks of positions.
template <typename V, typename I>
BadIndex GatherImageSpan(const Geometry& g, const V* grad, const I* indices, V* out, int64_t n,
                         int64_t c0, int64_t c1) {
  const int64_t cols = c1 - c0, rows = RowsPerBlock(cols, sizeof(I));
  const int64_t L = g.in_plane(), Lo = g.out_plane(), C = g.C;
  const RowGatherer<V, I> gather(Lo * C);
  const V* src = grad + g.out_offset(n, c0, 0);  // channel c0 + j of position o: src[o * C + j]
  const I* is = indices + g.in_offset(n, c0, 0);  // position i of channel c0 + j: is[i * C + j]
  V* dst = out + g.in_offset(n, c0, 0);
  IndexRange<I> range(Lo);
  for (int64_t i0 = 0; i0 < L; i0 += rows) {
    const int64_t i1 = std::min(L, i0 + rows);
    for (int64_t i = i0; i < i1; ++i) gather(src, is + i * C, dst + i * C, cols, C, 1, range);
    if (range.failed()) return FindBadIndex(g, indices, n, c0, c1, i0, i1);
  }
  return BadIndex{};
}

// Every spatial rank k: the kernels see flat planes.
ffi::Error MaxUnpoolBackward(ffi::ThreadPool pool, ffi::AnyBuffer grad_output,
                             ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                             bool channels_last, int64_t k) {
  return RunUnpoolOp(UnpoolOp::kBackward, pool, grad_output, indices, *out, channels_last, k,
                     [](const Geometry& g, auto gs, auto is, auto os, int64_t n, int64_t c0,
                        int64_t c1) {
                       return g.channels_last ? GatherImageSpan(g, gs, is, os, n, c0, c1)
                                              : GatherPlanes(g, gs, is, os, n, c0, c1);
                     });
}

// _v1: 2-D only (artifacts exported before 1-D and 3-D had their own calls).
ffi::Error MaxUnpool2dBackward(ffi::ThreadPool pool, ffi::AnyBuffer grad_output,
                               ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                               bool channels_last) {
  return MaxUnpoolBackward(pool, grad_output, indices, out, channels_last, 2);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dBackwardCpu, MaxUnpool2dBackward,
                              BindUnpoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolBackwardCpu, MaxUnpoolBackward,
                              BindUnpoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>())
                                  .Attr<int64_t>("spatial_rank"));

}  // namespace jax_unpool
