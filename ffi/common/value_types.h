// Dtype dispatch shared by every kernel: these ops only move bits, so values are
// dispatched by byte width (NaN payloads, -0.0 and bf16/f16 move untouched) and
// indices by their integer type.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

namespace ffi = xla::ffi;

template <typename T>
struct TypeTag {
  using type = T;
};

// Byte width of a value dtype we can move, or 0 for one we cannot (sub-byte packed
// types, 16-byte complex, tokens).
inline int64_t MovableByteWidth(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::S1:
    case ffi::DataType::S2:
    case ffi::DataType::S4:
    case ffi::DataType::U1:
    case ffi::DataType::U2:
    case ffi::DataType::U4:
    case ffi::DataType::F4E2M1FN:
      return 0;
    default:
      break;
  }
  const int64_t width = static_cast<int64_t>(ffi::ByteWidth(dtype));
  return (width == 1 || width == 2 || width == 4 || width == 8) ? width : 0;
}

// Calls f(TypeTag<U>{}) with the unsigned integer type of the value's byte width.
// The caller checks MovableByteWidth first.
template <typename F>
decltype(auto) VisitValueWidth(int64_t width, F&& f) {
  switch (width) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    default:
      return f(TypeTag<uint64_t>{});
  }
}

inline bool IsIndexType(ffi::DataType dtype) {
  return dtype == ffi::DataType::S32 || dtype == ffi::DataType::S64;
}

// Calls f(TypeTag<int32_t>{}) or f(TypeTag<int64_t>{}). The caller checks IsIndexType.
template <typename F>
decltype(auto) VisitIndexType(ffi::DataType dtype, F&& f) {
  if (dtype == ffi::DataType::S32) return f(TypeTag<int32_t>{});
  return f(TypeTag<int64_t>{});
}

// numpy's (and ml_dtypes') name of every dtype of the FFI headers, XLA's number for any
// later one.
inline std::string DataTypeName(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::PRED: return "bool";
    case ffi::DataType::S1: return "int1";
    case ffi::DataType::S2: return "int2";
    case ffi::DataType::S4: return "int4";
    case ffi::DataType::U1: return "uint1";
    case ffi::DataType::U2: return "uint2";
    case ffi::DataType::U4: return "uint4";
    case ffi::DataType::S8: return "int8";
    case ffi::DataType::S16: return "int16";
    case ffi::DataType::S32: return "int32";
    case ffi::DataType::S64: return "int64";
    case ffi::DataType::U8: return "uint8";
    case ffi::DataType::U16: return "uint16";
    case ffi::DataType::U32: return "uint32";
    case ffi::DataType::U64: return "uint64";
    case ffi::DataType::F16: return "float16";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::F64: return "float64";
    case ffi::DataType::C64: return "complex64";
    case ffi::DataType::C128: return "complex128";
    case ffi::DataType::TOKEN: return "token";
    case ffi::DataType::F8E5M2: return "float8_e5m2";
    case ffi::DataType::F8E4M3: return "float8_e4m3";
    case ffi::DataType::F8E3M4: return "float8_e3m4";
    case ffi::DataType::F8E4M3FN: return "float8_e4m3fn";
    case ffi::DataType::F8E4M3B11FNUZ: return "float8_e4m3b11fnuz";
    case ffi::DataType::F8E4M3FNUZ: return "float8_e4m3fnuz";
    case ffi::DataType::F8E5M2FNUZ: return "float8_e5m2fnuz";
    case ffi::DataType::F8E8M0FNU: return "float8_e8m0fnu";
    case ffi::DataType::F4E2M1FN: return "float4_e2m1fn";
    default: return "dtype #" + std::to_string(static_cast<int>(dtype));
  }
}

}  // namespace jax_unpool
