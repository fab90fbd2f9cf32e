// The buffers of a call checked against each other before any handler touches memory.
// The public API never builds a bad call, but a hand-written jax.ffi.ffi_call or an
// edited jax.export artifact can: every handler (CPU and aclnn) starts here, and a bad
// call is INVALID_ARGUMENT naming the op, the buffer and both shapes.
#pragma once

#include <cstdint>
#include <string>

#include "common/value_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// "(2, 3, 4, 5)"
inline std::string ShapeString(ffi::Span<const int64_t> dims) {
  std::string s = "(";
  for (size_t k = 0; k < dims.size(); ++k) s += (k ? ", " : "") + std::to_string(dims[k]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

// One operand or result of a call, by the name its messages use.
struct NamedBuffer {
  const char* name;
  const ffi::AnyBuffer& buffer;
  ffi::Span<const int64_t> dims() const { return buffer.dimensions(); }
};

namespace buffer_checks {

inline ffi::Error Invalid(const char* op, const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(op) + ": " + what);
}

inline bool SameDims(ffi::Span<const int64_t> a, ffi::Span<const int64_t> b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k] != b[k]) return false;
  return true;
}

// "`a` has shape A but `b` has shape B; <rule>"
inline ffi::Error Mismatch(const char* op, const NamedBuffer& a, const NamedBuffer& b,
                           const char* rule) {
  return Invalid(op, std::string(a.name) + " has shape " + ShapeString(a.dims()) + " but " +
                         b.name + " has shape " + ShapeString(b.dims()) + "; " + rule);
}

// The layout's name for spatial rank k: "NCHW"/"NHWC" for 2, "NCW"/"NWC" for 1,
// "NCDHW"/"NDHWC" for 3.
inline std::string LayoutName(bool channels_last, int k) {
  const std::string spatial = std::string("DHW").substr(3 - k);
  return channels_last ? "N" + spatial + "C" : "NC" + spatial;
}

// a and b: equal ranks, and equal N (rank k + 2) and C at their layout's places.
inline ffi::Error SameImagesAndChannels(const char* op, const NamedBuffer& a,
                                        const NamedBuffer& b, bool channels_last, int k) {
  const auto ad = a.dims(), bd = b.dims();
  if (ad.size() != bd.size()) return Mismatch(op, a, b, "their ranks must be equal");
  const size_t rank = ad.size(), c = channels_last ? rank - 1 : rank - 1 - k;
  if ((rank == static_cast<size_t>(k) + 2 && ad[0] != bd[0]) || ad[c] != bd[c]) {
    const std::string rule =
        "their N and C dims (" + LayoutName(channels_last, k) + ") must be equal";
    return Mismatch(op, a, b, rule.c_str());
  }
  return ffi::Error::Success();
}

// What both ops share: `indices` int32/int64, `result` of `values`' dtype, `values` of
// rank k + 1 or k + 2 for spatial rank k (1, 2 or 3).
inline ffi::Error Common(const char* op, const NamedBuffer& values, const NamedBuffer& indices,
                         const NamedBuffer& result, int k) {
  if (!IsIndexType(indices.buffer.element_type())) {
    return Invalid(op, std::string("indices must be int32 or int64, got ") +
                           DataTypeName(indices.buffer.element_type()));
  }
  if (result.buffer.element_type() != values.buffer.element_type()) {
    return Invalid(op, std::string(result.name) + " has dtype " +
                           DataTypeName(result.buffer.element_type()) + " but " + values.name +
                           " has dtype " + DataTypeName(values.buffer.element_type()) +
                           "; they must be equal");
  }
  const size_t rank = values.dims().size();
  if (rank != static_cast<size_t>(k) + 1 && rank != static_cast<size_t>(k) + 2) {
    return Invalid(op, std::string(values.name) + " must have rank " + std::to_string(k + 1) +
                           " or " + std::to_string(k + 2) + ", got shape " +
                           ShapeString(values.dims()));
  }
  return ffi::Error::Success();
}

}  // namespace buffer_checks

// The forward, result = scatter(x, indices), of spatial rank k: indices of x's shape;
// the result of x's rank, N and C, with any spatial sizes: an index outside them fails
// the call later.
inline ffi::Error CheckForwardBuffers(const char* op, const ffi::AnyBuffer& x,
                                      const ffi::AnyBuffer& indices, const ffi::AnyBuffer& out,
                                      bool channels_last, int k = 2) {
  using namespace buffer_checks;  // NOLINT: this file's own helpers
  const NamedBuffer xs{"x", x}, is{"indices", indices}, rs{"result", out};
  if (ffi::Error e = Common(op, xs, is, rs, k); !e.success()) return e;
  if (!SameDims(is.dims(), xs.dims())) return Mismatch(op, is, xs, "they must be equal");
  return SameImagesAndChannels(op, rs, xs, channels_last, k);
}

// The backward, result = gather(grad_output, indices), of spatial rank k: the result of
// indices' shape; indices of grad_output's rank, N and C, with any spatial sizes.
inline ffi::Error CheckBackwardBuffers(const char* op, const ffi::AnyBuffer& grad_output,
                                       const ffi::AnyBuffer& indices,
                                       const ffi::AnyBuffer& out, bool channels_last,
                                       int k = 2) {
  using namespace buffer_checks;  // NOLINT: this file's own helpers
  const NamedBuffer gs{"grad_output", grad_output}, is{"indices", indices}, rs{"result", out};
  if (ffi::Error e = Common(op, gs, is, rs, k); !e.success()) return e;
  if (!SameDims(rs.dims(), is.dims())) return Mismatch(op, rs, is, "they must be equal");
  return SameImagesAndChannels(op, is, gs, channels_last, k);
}

// What the (n, c, i) of an out-of-range message are relative to, for spatial rank k: the
// buffers the kernel received, which are not the caller's arrays under jax.vmap or
// sharding.
inline std::string PositionsNote(int k) {
  const char* flat = k == 1 ? "i = w" : k == 2 ? "i = h * W + w" : "i = (d * H + h) * W + w";
  return std::string("any position named here is in the indices buffer of this kernel "
                     "call: n counts the images with the batch axes of jax.vmap folded in, ") +
         flat + ", and under sharding positions are within the shard";
}

// A failure of the aclnn op with PositionsNote(k) appended: its message is CANN's.
inline ffi::Error WithPositionsNote(ffi::Error e, int k = 2) {
  if (e.success()) return e;
  return ffi::Error(*e.errc(), e.message() + " (" + PositionsNote(k) + ")");
}

}  // namespace jax_unpool
