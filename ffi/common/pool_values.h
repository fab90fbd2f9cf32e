// The order the max pool compares values in, per dtype. Unlike the unpool kernels, which
// only move bits, the pool compares: each dtype is read as its storage type (`Raw`, what
// is moved to the result, bit for bit) and compared as a `Key`: the value itself for
// float32 and float64, an unsigned int ordered as the value for the integers, and the
// exact float32 value for float16, bfloat16 and the float8 types, so that -0.0 == 0.0
// and NaN is unordered as in PyTorch's loop. Host code that every platform's pool shares:
// which dtypes are ordered, the float8 formats, PyTorch's replacement test; the CPU kernel
// compares with these orders directly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/value_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// Raw and Key are the same type: float32, float64.
template <typename T>
struct NativeOrder {
  using Raw = T;
  using Key = T;
  static Key Decode(Raw r) { return r; }
  // Below (or tied with) every value, never NaN: what padding counts as.
  static Raw Lowest() { return -std::numeric_limits<T>::infinity(); }
};

// Integers and bool (0/1, ordered like uint8), by width: a signed int compares as its
// bits with the sign bit flipped, so that one instantiation per width serves both.
template <typename U>
struct IntegerOrder {
  using Raw = U;
  using Key = U;
  U sign;  // the sign bit for signed ints, 0 for unsigned ones and bool
  Key Decode(Raw r) const { return static_cast<U>(r ^ sign); }
  Raw Lowest() const { return sign; }  // the smallest Key, 0
};

// float16 as its exact float32 value.
struct HalfOrder {
  using Raw = uint16_t;
  using Key = float;
  static Key Decode(Raw h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    // Zero or subnormal: mantissa * 2^-24, exact in float32. Selects, not branches:
    // clang vectorises the pool's loops over them (GCC does not yet).
    const float tiny = static_cast<float>(mantissa) * 0x1p-24f;
    uint32_t tiny_bits;
    std::memcpy(&tiny_bits, &tiny, sizeof tiny_bits);
    const uint32_t bits = exponent == 0      ? sign | tiny_bits
                          : exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)  // inf, NaN
                                             : sign | ((exponent + 112) << 23) | (mantissa << 13);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static Raw Lowest() { return 0xfc00; }  // -inf
};

// bfloat16: the upper half of a float32.
struct BFloat16Order {
  using Raw = uint16_t;
  using Key = float;
  static Key Decode(Raw h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static Raw Lowest() { return 0xff80; }  // -inf
};

// The float8 formats (ml_dtypes' definitions): each of the 256 codes decoded once into a
// table of float32 values.
struct Float8Format {
  enum Special { kIeee, kFiniteNanAllOnes, kNanIsNegativeZero, kUnsignedExponent };
  int exponent_bits, mantissa_bits, bias;
  Special special;
};

inline float DecodeFloat8(uint8_t code, const Float8Format& f) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (f.special == Float8Format::kUnsignedExponent)  // e8m0fnu: 2^(code - 127), 0xff NaN
    return code == 0xff ? nan : std::ldexp(1.0f, static_cast<int>(code) - f.bias);
  const int all_ones = (1 << f.exponent_bits) - 1, mantissa_ones = (1 << f.mantissa_bits) - 1;
  const bool negative = (code & 0x80) != 0;
  const int exponent = (code >> f.mantissa_bits) & all_ones, mantissa = code & mantissa_ones;
  switch (f.special) {
    case Float8Format::kIeee:
      if (exponent == all_ones)
        return mantissa ? nan : (negative ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity();
      break;
    case Float8Format::kFiniteNanAllOnes:  // no inf; S.1111.111 is NaN
      if (exponent == all_ones && mantissa == mantissa_ones) return nan;
      break;
    case Float8Format::kNanIsNegativeZero:  // no inf, no -0: 0x80 is NaN
      if (code == 0x80) return nan;
      break;
    default:
      break;
  }
  const float magnitude =
      exponent == 0 ? std::ldexp(static_cast<float>(mantissa), 1 - f.bias - f.mantissa_bits)
                    : std::ldexp(static_cast<float>((1 << f.mantissa_bits) | mantissa),
                                 exponent - f.bias - f.mantissa_bits);
  return negative ? -magnitude : magnitude;
}

// A float8 type: codes decoded through the table; the lowest code is -inf where the
// format has it, else its most negative finite value (jnp.finfo(dtype).min), as the
// XLA-ops pool pads.
struct Float8Order {
  using Raw = uint8_t;
  using Key = float;
  const float* table;
  Raw lowest;
  Key Decode(Raw r) const { return table[r]; }
  Raw Lowest() const { return lowest; }
};

template <const Float8Format& F>
Float8Order MakeFloat8Order() {
  struct Table {
    float values[256];
    uint8_t lowest = 0;
    Table() {
      for (int code = 0; code < 256; ++code) {
        values[code] = DecodeFloat8(static_cast<uint8_t>(code), F);
        const bool below = std::isnan(values[lowest]) || values[code] < values[lowest];
        if (!std::isnan(values[code]) && below) lowest = static_cast<uint8_t>(code);
      }
    }
  };
  static const Table table;
  return Float8Order{table.values, table.lowest};
}

inline constexpr Float8Format kF8E5M2{5, 2, 15, Float8Format::kIeee};
inline constexpr Float8Format kF8E4M3{4, 3, 7, Float8Format::kIeee};
inline constexpr Float8Format kF8E3M4{3, 4, 3, Float8Format::kIeee};
inline constexpr Float8Format kF8E4M3FN{4, 3, 7, Float8Format::kFiniteNanAllOnes};
inline constexpr Float8Format kF8E4M3B11FNUZ{4, 3, 11, Float8Format::kNanIsNegativeZero};
inline constexpr Float8Format kF8E4M3FNUZ{4, 3, 8, Float8Format::kNanIsNegativeZero};
inline constexpr Float8Format kF8E5M2FNUZ{5, 2, 16, Float8Format::kNanIsNegativeZero};
inline constexpr Float8Format kF8E8M0FNU{8, 0, 127, Float8Format::kUnsignedExponent};

// Whether the pool kernel orders this dtype (sub-byte types, complex and tokens: no).
inline bool IsPoolValueType(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::PRED:
    case ffi::DataType::S8:
    case ffi::DataType::S16:
    case ffi::DataType::S32:
    case ffi::DataType::S64:
    case ffi::DataType::U8:
    case ffi::DataType::U16:
    case ffi::DataType::U32:
    case ffi::DataType::U64:
    case ffi::DataType::F16:
    case ffi::DataType::BF16:
    case ffi::DataType::F32:
    case ffi::DataType::F64:
    case ffi::DataType::F8E5M2:
    case ffi::DataType::F8E4M3:
    case ffi::DataType::F8E3M4:
    case ffi::DataType::F8E4M3FN:
    case ffi::DataType::F8E4M3B11FNUZ:
    case ffi::DataType::F8E4M3FNUZ:
    case ffi::DataType::F8E5M2FNUZ:
    case ffi::DataType::F8E8M0FNU:
      return true;
    default:
      return false;
  }
}

// Calls f(order) with the order of `dtype`; the caller checks IsPoolValueType first.
template <typename F>
decltype(auto) VisitPoolValueType(ffi::DataType dtype, F&& f) {
  switch (dtype) {
    case ffi::DataType::PRED:
    case ffi::DataType::U8: return f(IntegerOrder<uint8_t>{0});
    case ffi::DataType::S8: return f(IntegerOrder<uint8_t>{0x80});
    case ffi::DataType::U16: return f(IntegerOrder<uint16_t>{0});
    case ffi::DataType::S16: return f(IntegerOrder<uint16_t>{0x8000});
    case ffi::DataType::U32: return f(IntegerOrder<uint32_t>{0});
    case ffi::DataType::S32: return f(IntegerOrder<uint32_t>{0x80000000u});
    case ffi::DataType::U64: return f(IntegerOrder<uint64_t>{0});
    case ffi::DataType::S64: return f(IntegerOrder<uint64_t>{uint64_t{1} << 63});
    case ffi::DataType::F16: return f(HalfOrder{});
    case ffi::DataType::BF16: return f(BFloat16Order{});
    case ffi::DataType::F64: return f(NativeOrder<double>{});
    case ffi::DataType::F8E5M2: return f(MakeFloat8Order<kF8E5M2>());
    case ffi::DataType::F8E4M3: return f(MakeFloat8Order<kF8E4M3>());
    case ffi::DataType::F8E3M4: return f(MakeFloat8Order<kF8E3M4>());
    case ffi::DataType::F8E4M3FN: return f(MakeFloat8Order<kF8E4M3FN>());
    case ffi::DataType::F8E4M3B11FNUZ: return f(MakeFloat8Order<kF8E4M3B11FNUZ>());
    case ffi::DataType::F8E4M3FNUZ: return f(MakeFloat8Order<kF8E4M3FNUZ>());
    case ffi::DataType::F8E5M2FNUZ: return f(MakeFloat8Order<kF8E5M2FNUZ>());
    case ffi::DataType::F8E8M0FNU: return f(MakeFloat8Order<kF8E8M0FNU>());
    default:  // F32 (IsPoolValueType excludes everything else)
      return f(NativeOrder<float>{});
  }
}

// PyTorch's test, `val > maxval || isnan(val)`: a NaN replaces anything, the last NaN in
// scan order wins, and nothing but a NaN replaces a NaN.
template <typename Key>
inline bool Replaces(Key v, Key best) {
  if constexpr (std::is_floating_point_v<Key>) {
    return v > best || v != v;
  } else {
    return v > best;
  }
}

}  // namespace jax_unpool
