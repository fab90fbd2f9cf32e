// The CUDA max pool handler's body, on any device (call.h): the call checked exactly as
// the CPU handler checks it (CheckPoolCall, the same messages), then one pass, one thread
// per output element, writing values and indices together (pool_plan.h). PyTorch's
// semantics, as the CPU kernel's: the first maximum in scan order wins ties, the last NaN
// wins, padding is never selected, and a ceil_mode window of padding only reports the
// lowest value and PyTorch's index past the input.
#pragma once

#include <cstdint>

#include "common/pool_checks.h"
#include "common/pool_values.h"
#include "cuda/call.h"
#include "cuda/pool_plan.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {
namespace cuda {

// A float8 format (common/pool_values.h's definitions) as the device decodes it; its lowest
// code is the CPU kernel's, found by decoding all 256 codes.
template <const Float8Format& F>
Float8Order DeviceFloat8() {
  return Float8Order{static_cast<uint8_t>(F.exponent_bits),
                     static_cast<uint8_t>(F.mantissa_bits), static_cast<int16_t>(F.bias),
                     static_cast<Float8Order::Special>(F.special), MakeFloat8Order<F>().Lowest()};
}

// How the kernel compares `dtype` (one IsPoolValueType accepts).
inline void SetOrder(ffi::DataType dtype, PoolLaunch& a) {
  const auto integer = [&a](OrderKind kind, uint64_t sign) {
    a.kind = kind;
    a.sign = sign;
  };
  const auto float8 = [&a](Float8Order order) {
    a.kind = OrderKind::kFloat8;
    a.float8 = order;
  };
  switch (dtype) {
    case ffi::DataType::PRED:
    case ffi::DataType::U8: return integer(OrderKind::kInteger8, 0);
    case ffi::DataType::S8: return integer(OrderKind::kInteger8, 0x80);
    case ffi::DataType::U16: return integer(OrderKind::kInteger16, 0);
    case ffi::DataType::S16: return integer(OrderKind::kInteger16, 0x8000);
    case ffi::DataType::U32: return integer(OrderKind::kInteger32, 0);
    case ffi::DataType::S32: return integer(OrderKind::kInteger32, 0x80000000u);
    case ffi::DataType::U64: return integer(OrderKind::kInteger64, 0);
    case ffi::DataType::S64: return integer(OrderKind::kInteger64, uint64_t{1} << 63);
    case ffi::DataType::F16: a.kind = OrderKind::kHalf; return;
    case ffi::DataType::BF16: a.kind = OrderKind::kBFloat16; return;
    case ffi::DataType::F64: a.kind = OrderKind::kFloat64; return;
    case ffi::DataType::F8E5M2: return float8(DeviceFloat8<kF8E5M2>());
    case ffi::DataType::F8E4M3: return float8(DeviceFloat8<kF8E4M3>());
    case ffi::DataType::F8E3M4: return float8(DeviceFloat8<kF8E3M4>());
    case ffi::DataType::F8E4M3FN: return float8(DeviceFloat8<kF8E4M3FN>());
    case ffi::DataType::F8E4M3B11FNUZ: return float8(DeviceFloat8<kF8E4M3B11FNUZ>());
    case ffi::DataType::F8E4M3FNUZ: return float8(DeviceFloat8<kF8E4M3FNUZ>());
    case ffi::DataType::F8E5M2FNUZ: return float8(DeviceFloat8<kF8E5M2FNUZ>());
    case ffi::DataType::F8E8M0FNU: return float8(DeviceFloat8<kF8E8M0FNU>());
    default: a.kind = OrderKind::kFloat32; return;  // F32
  }
}

// max_pool{k}d_with_indices: x -> (values, indices); attributes channels_last,
// kernel_size, stride, padding, dilation, ceil_mode (the CPU target's). The indices are
// flat positions, or, with IndexFormat::kWindow, uint8 window offsets.
template <typename Device>
ffi::Error MaxPoolCall(Device& device, const ffi::AnyBuffer& x, const ffi::AnyBuffer& values,
                       const ffi::AnyBuffer& indices, bool channels_last,
                       ffi::Span<const int64_t> kernel_size, ffi::Span<const int64_t> stride,
                       ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                       bool ceil_mode, IndexFormat format = IndexFormat::kFlat) {
  ffi::ErrorOr<Geometry> checked = CheckPoolCall(x, values, indices, channels_last, kernel_size,
                                                 stride, padding, dilation, ceil_mode, format);
  if (checked.has_error()) return checked.error();
  const Geometry& g = *checked;
  if (values.element_count() == 0) return ffi::Error::Success();
  PoolLaunch a;
  static_cast<Geometry&>(a) = g;  // as checked
  SetOrder(x.element_type(), a);
  a.index64 = indices.element_type() == ffi::DataType::S64;
  a.taps = format == IndexFormat::kWindow;
  a.x = x.untyped_data();
  a.values = values.untyped_data();
  a.indices = indices.untyped_data();
  device.Pool(a);
  return device.Status(pool_checks::OpName(g.k));
}

}  // namespace cuda
}  // namespace jax_unpool
