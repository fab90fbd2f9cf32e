// A max pool call checked on any platform, attributes and buffers, before any memory is
// touched, and its geometry (common/geometry.h). A hand-written jax.ffi.ffi_call or an
// edited jax.export artifact can pass anything: every attribute is checked as PyTorch
// checks it, and the results must have exactly the shape PyTorch's output-size rule gives.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "common/buffer_checks.h"
#include "common/geometry.h"
#include "common/pool_values.h"
#include "common/value_types.h"
#include "common/window_offsets.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// floor(n / d) for d >= 1 without a 128-bit division: that is a library call (__divti3),
// which the wheels' toolchain takes from zig's compiler_rt, and with it compiler_rt's
// generic memset, memcpy and memmove, which then replace glibc's in the whole module
// (slower: docs/performance.md, "Measured choices"). One 64-bit division where |n| fits in
// 64 bits (any real call), else binary long division (|n| < 2^127, d < 2^63).
inline __int128 FloorDivide(__int128 n, int64_t d) {
  using U128 = unsigned __int128;
  const uint64_t divisor = static_cast<uint64_t>(d);
  const U128 m = n < 0 ? -static_cast<U128>(n) : static_cast<U128>(n);  // |n|
  U128 q = 0;
  uint64_t r = 0;
  if ((m >> 64) == 0) {
    q = static_cast<uint64_t>(m) / divisor;
    r = static_cast<uint64_t>(m) % divisor;
  } else {
    for (int bit = 127; bit >= 0; --bit) {
      r = (r << 1) | static_cast<uint64_t>((m >> bit) & 1);
      q <<= 1;
      if (r >= divisor) {
        r -= divisor;
        q |= 1;
      }
    }
  }
  return n < 0 ? -static_cast<__int128>(q + (r != 0)) : static_cast<__int128>(q);
}

// PyTorch's pooling_output_shape (aten/src/ATen/native/Pool.h; CANN's PoolingOutShape is
// the same), in 128 bits so that no attribute value overflows it. May be <= 0.
inline __int128 PooledSize(int64_t size, int64_t kernel, int64_t stride, int64_t pad,
                           int64_t dilation, bool ceil_mode) {
  const __int128 s = stride;
  const __int128 num = __int128{size} + 2 * __int128{pad} - __int128{dilation} * (kernel - 1) -
                       1 + (ceil_mode ? s - 1 : 0);
  __int128 out = FloorDivide(num, stride) + 1;
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * s >= __int128{size} + pad) --out;
  return out;
}

namespace pool_checks {

inline const char* OpName(int k) {
  static constexpr const char* kNames[] = {"max_pool1d_with_indices", "max_pool2d_with_indices",
                                           "max_pool3d_with_indices"};
  return kNames[k - 1];
}

inline ffi::Unexpected<ffi::Error> Fail(const std::string& what) {
  return ffi::Unexpected(ffi::Error::InvalidArgument(what));
}

// "kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1)"
inline std::string WindowString(ffi::Span<const int64_t> kernel_size,
                                ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                                ffi::Span<const int64_t> dilation) {
  return "kernel_size=" + ShapeString(kernel_size) + ", stride=" + ShapeString(stride) +
         ", padding=" + ShapeString(padding) + ", dilation=" + ShapeString(dilation);
}

// The window's spatial rank: one entry per spatial dim in each attribute, 1 to 3 of them;
// 0 if not (`family`, the op's name without its rank, then names it in `error`).
inline int WindowRank(const char* family, ffi::Span<const int64_t> kernel_size,
                      ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                      ffi::Span<const int64_t> dilation, ffi::Error* error) {
  const size_t k = kernel_size.size();
  if (k >= 1 && k <= 3 && stride.size() == k && padding.size() == k && dilation.size() == k)
    return static_cast<int>(k);
  *error = ffi::Error::InvalidArgument(
      std::string(family) + ": kernel_size, stride, padding and dilation must have one entry "
      "per spatial dim (1, 2 or 3 of them), got " +
      WindowString(kernel_size, stride, padding, dilation));
  return 0;
}

// The window's values, as PyTorch checks them (`op` names the call).
inline ffi::Error CheckWindowValues(const std::string& op, ffi::Span<const int64_t> kernel_size,
                                    ffi::Span<const int64_t> stride,
                                    ffi::Span<const int64_t> padding,
                                    ffi::Span<const int64_t> dilation) {
  // PyTorch's pooling takes int32 sizes, as the Python API does (_pool_xla._sizes); the
  // bound also keeps the arithmetic below far from overflow.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const auto out_of_range = [&](const char* name, ffi::Span<const int64_t> v) {
    return ffi::Error::InvalidArgument(op + ": " + name + " must be positive and at most " +
                                       std::to_string(kMax) + ", got " + ShapeString(v));
  };
  for (size_t a = 0; a < kernel_size.size(); ++a) {
    if (kernel_size[a] < 1 || kernel_size[a] > kMax)
      return out_of_range("kernel_size", kernel_size);
    if (stride[a] < 1 || stride[a] > kMax) return out_of_range("stride", stride);
    if (dilation[a] < 1 || dilation[a] > kMax) return out_of_range("dilation", dilation);
    if (padding[a] < 0 || padding[a] > kernel_size[a] / 2)
      return ffi::Error::InvalidArgument(
          op + ": padding must be non-negative and at most half of kernel_size (padding <= "
          "kernel_size // 2), got padding=" + ShapeString(padding) + " and kernel_size=" +
          ShapeString(kernel_size));
  }
  return ffi::Error::Success();
}

// The geometry of pooling a buffer (`name`, of `dims`: rank k + 1 or k + 2, channels first
// or last) with a checked window: in = its spatial sizes, out = PyTorch's pooled ones, or
// INVALID_ARGUMENT naming op and buffer.
inline ffi::ErrorOr<Geometry> Pooling(const std::string& op, const char* name,
                                      ffi::Span<const int64_t> dims, bool channels_last,
                                      ffi::Span<const int64_t> kernel_size,
                                      ffi::Span<const int64_t> stride,
                                      ffi::Span<const int64_t> padding,
                                      ffi::Span<const int64_t> dilation, bool ceil_mode) {
  const size_t k = kernel_size.size(), rank = dims.size();
  if (rank != k + 1 && rank != k + 2)
    return Fail(op + ": " + name + " must have rank " + std::to_string(k + 1) + " or " +
                std::to_string(k + 2) + ", got shape " + ShapeString(dims));
  Geometry g;
  g.k = static_cast<int>(k);
  g.channels_last = channels_last;
  const size_t s = rank - k - (channels_last ? 1 : 0);  // the first spatial dim
  g.N = rank == k + 2 ? dims[0] : 1;
  g.C = dims[channels_last ? rank - 1 : s - 1];
  for (size_t a = 0; a < k; ++a) {
    const size_t axis = 3 - k + a;
    g.in[axis] = dims[s + a];
    g.kernel[axis] = kernel_size[a];
    g.stride[axis] = stride[a];
    g.pad[axis] = padding[a];
    g.dil[axis] = dilation[a];
    if (g.in[axis] < 1)
      return Fail(op + ": " + name + " must have non-empty spatial dims, got shape " +
                  ShapeString(dims) + (channels_last ? " (channels last)" : " (channels first)"));
    // In int64: the sizes are bounded above, so this is at most the input plus padding.
    g.out[axis] = static_cast<int64_t>(
        PooledSize(g.in[axis], kernel_size[a], stride[a], padding[a], dilation[a], ceil_mode));
    if (g.out[axis] < 1)
      return Fail(op + ": output size must be positive, got " + std::to_string(g.out[axis]) +
                  " along spatial dim " + std::to_string(a) + " of " + name + " of shape " +
                  ShapeString(dims) + ": the input is too small for kernel_size=" +
                  ShapeString(kernel_size) + ", dilation=" + ShapeString(dilation));
  }
  return g;
}

// `dims` (the pooled buffer's) with the spatial sizes replaced by g's pooled ones, into
// `out` (5 entries).
inline ffi::Span<const int64_t> PooledDims(const Geometry& g, ffi::Span<const int64_t> dims,
                                           int64_t (&out)[5]) {
  const size_t rank = dims.size(), k = static_cast<size_t>(g.k);
  const size_t s = rank - k - (g.channels_last ? 1 : 0);
  for (size_t d = 0; d < rank; ++d) out[d] = dims[d];
  for (size_t a = 0; a < k; ++a) out[s + a] = g.out[3 - k + a];
  return ffi::Span<const int64_t>(out, rank);
}

}  // namespace pool_checks

// How a pool reports its argmax: flat positions in the input plane (int32 or int64), or
// each one's tap number in its window (uint8 window offsets, common/window_offsets.h).
enum class IndexFormat { kFlat, kWindow };

// Checks the attributes and the buffers (x -> values, indices) of a max pool call and
// returns its geometry, or INVALID_ARGUMENT naming the op, what was expected and what
// was received.
inline ffi::ErrorOr<Geometry> CheckPoolCall(const ffi::AnyBuffer& x, const ffi::AnyBuffer& values,
                                            const ffi::AnyBuffer& indices, bool channels_last,
                                            ffi::Span<const int64_t> kernel_size,
                                            ffi::Span<const int64_t> stride,
                                            ffi::Span<const int64_t> padding,
                                            ffi::Span<const int64_t> dilation, bool ceil_mode,
                                            IndexFormat format = IndexFormat::kFlat) {
  using pool_checks::Fail;
  ffi::Error error = ffi::Error::Success();
  const int k = pool_checks::WindowRank("max_pool", kernel_size, stride, padding, dilation, &error);
  if (k == 0) return ffi::Unexpected(std::move(error));
  const std::string op = pool_checks::OpName(k);
  if (ffi::Error e = pool_checks::CheckWindowValues(op, kernel_size, stride, padding, dilation);
      !e.success())
    return ffi::Unexpected(std::move(e));
  const NamedBuffer vs{"values", values}, is{"indices", indices};
  if (!IsPoolValueType(x.element_type()))
    return Fail(op + ": unsupported value dtype " + DataTypeName(x.element_type()));
  if (values.element_type() != x.element_type())
    return Fail(op + ": values has dtype " + DataTypeName(values.element_type()) +
                " but x has dtype " + DataTypeName(x.element_type()) + "; they must be equal");
  if (format == IndexFormat::kWindow) {
    if (indices.element_type() != ffi::DataType::U8)
      return Fail(op + ": indices must be uint8 window offsets, got " +
                  DataTypeName(indices.element_type()));
  } else if (!IsIndexType(indices.element_type())) {
    return Fail(op + ": indices must be int32 or int64, got " +
                DataTypeName(indices.element_type()));
  }
  const auto dims = x.dimensions();
  ffi::ErrorOr<Geometry> pooled = pool_checks::Pooling(op, "x", dims, channels_last, kernel_size,
                                                       stride, padding, dilation, ceil_mode);
  if (pooled.has_error()) return pooled;
  const Geometry g = *pooled;
  int64_t expected[5];
  const ffi::Span<const int64_t> want = pool_checks::PooledDims(g, dims, expected);
  for (const NamedBuffer* r : {&vs, &is}) {
    if (!buffer_checks::SameDims(r->dims(), want))
      return Fail(op + ": " + r->name + " has shape " + ShapeString(r->dims()) +
                  " but pooling x of shape " + ShapeString(dims) + " gives " +
                  ShapeString(want) + " (ceil_mode=" + (ceil_mode ? "True" : "False") + ")");
  }
  if (format == IndexFormat::kWindow) {
    if (ffi::Error e = CheckWindowTaps(op, kernel_size); !e.success())
      return ffi::Unexpected(std::move(e));
    return g;
  }
  // The largest index a window can report must fit the index dtype. Taps in the padding
  // are never reported, however far a huge kernel reaches: along each axis, the bound is
  // the last window's last tap inside the input -- or the input's last position when the
  // input ends inside that window, since with dilation an earlier window may reach further
  // -- or the last window's initial index when that is larger (PyTorch's, past the input
  // for a window of padding only).
  __int128 largest = 0, flat_stride = 1;
  for (int a = 2; a >= 3 - g.k; --a) {
    const int64_t o = g.out[a] - 1, end = g.EndTap(a, o);
    const int64_t inside = end < g.kernel[a] ? g.in[a] - 1 : g.Tap(a, o, end - 1);
    largest += static_cast<__int128>(std::max(inside, g.First(a, o))) * flat_stride;
    flat_stride *= g.in[a];
  }
  const int64_t index_max = indices.element_type() == ffi::DataType::S32
                                ? std::numeric_limits<int32_t>::max()
                                : std::numeric_limits<int64_t>::max();
  if (largest > index_max)
    return Fail(op + ": indices of dtype " + DataTypeName(indices.element_type()) +
                " cannot hold the flat positions of x of shape " + ShapeString(dims) +
                "; use int64");
  return g;
}

// A window_indices call (flat indices of a pool -> its window offsets, uint8, of the
// indices' shape), checked against the pool that the window attributes and input_size (the
// pool's input spatial size, k entries) give; returns that pool's geometry.
inline ffi::ErrorOr<Geometry> CheckWindowIndicesCall(
    const ffi::AnyBuffer& indices, const ffi::AnyBuffer& offsets, bool channels_last,
    ffi::Span<const int64_t> kernel_size, ffi::Span<const int64_t> stride,
    ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation, bool ceil_mode,
    ffi::Span<const int64_t> input_size) {
  using pool_checks::Fail;
  const std::string op = "window_indices";
  ffi::Error error = ffi::Error::Success();
  const int k = pool_checks::WindowRank(op.c_str(), kernel_size, stride, padding, dilation, &error);
  if (k == 0) return ffi::Unexpected(std::move(error));
  if (ffi::Error e = pool_checks::CheckWindowValues(op, kernel_size, stride, padding, dilation);
      !e.success())
    return ffi::Unexpected(std::move(e));
  if (ffi::Error e = CheckWindowTaps(op, kernel_size); !e.success())
    return ffi::Unexpected(std::move(e));
  if (input_size.size() != static_cast<size_t>(k))
    return Fail(op + ": input_size must have one entry per spatial dim of kernel_size=" +
                ShapeString(kernel_size) + ", got " + ShapeString(input_size));
  for (int64_t size : input_size)
    if (size < 1 || size > std::numeric_limits<int32_t>::max())
      return Fail(op + ": input_size must be positive and at most " +
                  std::to_string(std::numeric_limits<int32_t>::max()) + ", got " +
                  ShapeString(input_size));
  if (!IsIndexType(indices.element_type()))
    return Fail(op + ": indices must be int32 or int64, got " +
                DataTypeName(indices.element_type()));
  if (offsets.element_type() != ffi::DataType::U8)
    return Fail(op + ": result must be uint8 window offsets, got " +
                DataTypeName(offsets.element_type()));
  const NamedBuffer is{"indices", indices}, rs{"result", offsets};
  const auto dims = indices.dimensions();
  const size_t rank = dims.size();
  if (rank != static_cast<size_t>(k) + 1 && rank != static_cast<size_t>(k) + 2)
    return Fail(op + ": indices must have rank " + std::to_string(k + 1) + " or " +
                std::to_string(k + 2) + ", got shape " + ShapeString(dims));
  if (!buffer_checks::SameDims(rs.dims(), dims))
    return ffi::Unexpected(buffer_checks::Mismatch(op.c_str(), rs, is, "they must be equal"));
  // The pool's input: the indices' batch and channel dims, input_size for the spatial ones.
  int64_t input[5];
  const size_t s = rank - k - (channels_last ? 1 : 0);
  for (size_t d = 0; d < rank; ++d) input[d] = d >= s && d < s + k ? input_size[d - s] : dims[d];
  const ffi::Span<const int64_t> input_dims(input, rank);
  ffi::ErrorOr<Geometry> pool = pool_checks::Pooling(op, "the pool's input", input_dims,
                                                     channels_last, kernel_size, stride, padding,
                                                     dilation, ceil_mode);
  if (pool.has_error()) return pool;
  int64_t expected[5];
  const ffi::Span<const int64_t> want = pool_checks::PooledDims(*pool, input_dims, expected);
  if (!buffer_checks::SameDims(dims, want))
    return Fail(op + ": indices has shape " + ShapeString(dims) + " but pooling an input of " +
                "spatial size input_size=" + ShapeString(input_size) + " with " +
                pool_checks::WindowString(kernel_size, stride, padding, dilation) +
                ", ceil_mode=" + (ceil_mode ? "True" : "False") + " gives " + ShapeString(want));
  return pool;
}

// The pool's window as attributes, after a target's buffers: the pool's, and every target
// that takes a pool's window (window offsets).
template <typename Binding>
auto BindPoolWindow(Binding binding) {
  return std::move(binding)
      .template Attr<bool>("channels_last")
      .template Attr<ffi::Span<const int64_t>>("kernel_size")
      .template Attr<ffi::Span<const int64_t>>("stride")
      .template Attr<ffi::Span<const int64_t>>("padding")
      .template Attr<ffi::Span<const int64_t>>("dilation")
      .template Attr<bool>("ceil_mode");
}

// The pool target's operands after the platform's context (binding: ffi::Ffi::Bind() with
// it), as every platform's handler takes them and CheckPoolCall checks them.
template <typename Binding>
auto BindPoolOperands(Binding binding) {
  return BindPoolWindow(std::move(binding)
                            .template Arg<ffi::AnyBuffer>()    // x
                            .template Ret<ffi::AnyBuffer>()    // values
                            .template Ret<ffi::AnyBuffer>());  // indices
}

}  // namespace jax_unpool
