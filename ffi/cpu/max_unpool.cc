// CPU forward: out = zeros; out[n, c, indices[n, c, i]] = x[n, c, i], i a flat position in
// the plane of the k spatial dims (k = 1, 2, 3).
// Each plane is zero-filled and scattered in one pass while it is in cache; inside a
// plane positions go in flat order, so among duplicated indices the largest input
// position wins, deterministically (PyTorch's CPU kernel on one thread). Every run of
// indices is range-checked (IndexRange) just before it is used: a bad one fails the call.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/geometry.h"
#include "common/out_of_range.h"
#include "cpu/first_bad_index.h"
#include "cpu/handlers.h"
#include "cpu/image_spans.h"
#include "cpu/index_range.h"
#include "cpu/unpool_kernel.h"

namespace jax_unpool {
namespace {

// NCHW: each plane is zero-filled and scattered in one go while it is in cache.
template <typename V, typename I>
BadIndex ScatterPlanes(const Geometry& g, const V* x, const I* indices, V* out, int64_t n,
                       int64_t c0, int64_t c1) {
  const int64_t L = g.in_plane(), Lo = g.out_plane();
  for (int64_t c = c0; c < c1; ++c) {
    const V* src = x + g.in_offset(n, c, 0);
    const I* idx = indices + g.in_offset(n, c, 0);
    V* dst = out + g.out_offset(n, c, 0);
    IndexRange<I> range(Lo);
    if (!range.Admit(idx, L)) return FindBadIndex(g, indices, n, c, c + 1, 0, L);
    std::memset(dst, 0, sizeof(V) * Lo);
    for (int64_t i = 0; i < L; ++i) dst[idx[i]] = src[i];
  }
  return BadIndex{};
}

// NHWC: the channels [c0, c1) of image n are interleaved with the others, so the span's
// output is too big to zero-fill first and scatter later while it is in cache. Instead
// it is zero-filled lazily in blocks of positions: a block is zeroed just before its
// first write, the blocks nobody wrote at the end. Input positions go in flat order, so
// among duplicates the largest position still wins.
template <typename V, typename I>
BadIndex ScatterImageSpan(const Geometry& g, const V* x, const I* indices, V* out, int64_t n,
                          int64_t c0, int64_t c1) {
  const int64_t cols = c1 - c0, L = g.in_plane(), Lo = g.out_plane(), C = g.C;
  V* dst = out + g.out_offset(n, c0, 0);  // position o of channel c0 + j is dst[o * C + j]
  const V* xs = x + g.in_offset(n, c0, 0);  // position i of channel c0 + j: xs[i * C + j]
  const I* is = indices + g.in_offset(n, c0, 0);
  int shift = 0;  // blocks of 2^shift positions, about 4 KiB of the span's output
  while ((int64_t{2} << shift) * cols * static_cast<int64_t>(sizeof(V)) <= 4096) ++shift;
  std::vector<uint8_t> zeroed(static_cast<size_t>(((Lo - 1) >> shift) + 1), 0);
  const auto zero_block = [&](int64_t b) {
    const int64_t o0 = b << shift, o1 = std::min(Lo, (b + 1) << shift);
    if (cols == g.C) {
      std::memset(dst + o0 * g.C, 0, sizeof(V) * (o1 - o0) * g.C);
    } else {
      for (int64_t o = o0; o < o1; ++o) std::memset(dst + o * g.C, 0, sizeof(V) * cols);
    }
    zeroed[b] = 1;
  };
  IndexRange<I> range(Lo);
  const int64_t rows = RowsPerBlock(cols, sizeof(I));
  for (int64_t i0 = 0; i0 < L; i0 += rows) {
    const int64_t i1 = std::min(L, i0 + rows);
    for (int64_t i = i0; i < i1; ++i) range.Admit(is + i * C, cols);
    if (range.failed()) return FindBadIndex(g, indices, n, c0, c1, i0, i1);
    for (int64_t i = i0; i < i1; ++i) {
      const V* src = xs + i * C;
      const I* idx = is + i * C;
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t o = static_cast<int64_t>(idx[j]);
        if (!zeroed[o >> shift]) zero_block(o >> shift);
        dst[o * C + j] = src[j];
      }
    }
  }
  for (int64_t b = 0; b < static_cast<int64_t>(zeroed.size()); ++b)
    if (!zeroed[b]) zero_block(b);
  return BadIndex{};
}

// Every spatial rank k: the kernels see flat planes.
ffi::Error MaxUnpool(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer indices,
                     ffi::Result<ffi::AnyBuffer> out, bool channels_last, int64_t k) {
  return RunUnpoolOp(UnpoolOp::kForward, pool, x, indices, *out, channels_last, k,
                     [](const Geometry& g, auto xs, auto is, auto os, int64_t n, int64_t c0,
                        int64_t c1) {
                       return g.channels_last ? ScatterImageSpan(g, xs, is, os, n, c0, c1)
                                              : ScatterPlanes(g, xs, is, os, n, c0, c1);
                     });
}

// _v1: 2-D only (artifacts exported before 1-D and 3-D had their own calls).
ffi::Error MaxUnpool2d(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer indices,
                       ffi::Result<ffi::AnyBuffer> out, bool channels_last) {
  return MaxUnpool(pool, x, indices, out, channels_last, 2);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dCpu, MaxUnpool2d,
                              BindUnpoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpoolCpu, MaxUnpool,
                              BindUnpoolOperands(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>())
                                  .Attr<int64_t>("spatial_rank"));

}  // namespace jax_unpool
