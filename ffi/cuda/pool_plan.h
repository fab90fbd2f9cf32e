// What the pool kernel is launched with (see unpool_plan.h for why this is plain C++).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/geometry.h"
#include "cuda/pool_elements.h"
#include "cuda/unpool_plan.h"

namespace jax_unpool {
namespace cuda {

// How a dtype is compared: integers (and bool) by width, with `sign` their sign bit;
// float16, bfloat16, float32, float64; a float8 format as `float8` describes it.
enum class OrderKind : uint8_t {
  kInteger8,
  kInteger16,
  kInteger32,
  kInteger64,
  kHalf,
  kBFloat16,
  kFloat32,
  kFloat64,
  kFloat8
};

// What a pool launches with: the call checked (common/pool_checks.h's CheckPoolCall), its
// Geometry base, the results non-empty.
struct PoolLaunch : Geometry {
  OrderKind kind = OrderKind::kFloat32;
  uint64_t sign = 0;
  Float8Order float8{};
  bool index64 = false;
  bool taps = false;  // indices: window offsets (uint8), not flat positions
  const void* x = nullptr;
  void* values = nullptr;
  void* indices = nullptr;
};

template <typename F>
void VisitOrder(const PoolLaunch& a, F&& f) {
  switch (a.kind) {
    case OrderKind::kInteger8: f(IntegerOrder<uint8_t>{static_cast<uint8_t>(a.sign)}); break;
    case OrderKind::kInteger16: f(IntegerOrder<uint16_t>{static_cast<uint16_t>(a.sign)}); break;
    case OrderKind::kInteger32: f(IntegerOrder<uint32_t>{static_cast<uint32_t>(a.sign)}); break;
    case OrderKind::kInteger64: f(IntegerOrder<uint64_t>{a.sign}); break;
    case OrderKind::kHalf: f(HalfOrder{}); break;
    case OrderKind::kBFloat16: f(BFloat16Order{}); break;
    case OrderKind::kFloat64: f(Float64Order{}); break;
    case OrderKind::kFloat8: f(a.float8); break;
    default: f(Float32Order{}); break;
  }
}

// The largest element count or coordinate of a pool: what picks its offsets' type.
inline int64_t PoolExtent(const PoolLaunch& a) {
  const int64_t counts = std::max(a.in_count(), a.out_count());
  return WindowFits32(a) ? counts : std::max<int64_t>(counts, int64_t{1} << 31);
}

template <typename Index>
PoolWindows<Index> MakePoolWindows(const PoolLaunch& a) {
  PoolWindows<Index> w;
  w.inner = static_cast<Index>(a.channels_last ? a.C : 1);
  w.in_plane = static_cast<Index>(a.in_plane());
  w.inner_div = Divider<Index>(w.inner);
  static_cast<Axes<Coord<Index>>&>(w) = AxesAs<Coord<Index>>(a);
  for (int d = 0; d < 3; ++d) w.out_div[d] = Divider<Index>(static_cast<Index>(a.out[d]));
  // Only used for windows inside the input, where (kernel - 1) * dilation < in.
  const int64_t plane_strides[3] = {a.in[1] * a.in[2], a.in[2], 1};
  for (int d = 0; d < 3; ++d)
    w.step[d] = a.kernel[d] > 1 && (a.kernel[d] - 1) * a.dil[d] < a.in[d]
                    ? static_cast<Index>(a.dil[d] * plane_strides[d])
                    : 0;
  return w;
}

// The window size (kKH x kKW) of the compiled 2-D channels-first kernels (PlanePoolWindow)
// that a call takes, or 0: 2x2 and 3x3 windows without dilation, any stride and padding,
// in 32-bit offsets.
inline int PlaneKernelSize(const PoolLaunch& a, int64_t extent) {
  if (a.channels_last || a.in[0] != 1 || a.kernel[0] != 1 || a.dil[1] != 1 || a.dil[2] != 1 ||
      extent >= (int64_t{1} << 31))
    return 0;
  for (int size : {2, 3})
    if (a.kernel[1] == size && a.kernel[2] == size) return size;
  return 0;
}

template <int kSize, typename Order, typename I>
PlanePoolWindow<Order, I, kSize, kSize> MakePlanePoolWindow(const PoolLaunch& a,
                                                            const Order& order) {
  using Raw = typename Order::Raw;
  PlanePoolWindow<Order, I, kSize, kSize> f{};
  f.w = AxesAs<int32_t>(a);
  f.out_h_div = Divider<uint32_t>(static_cast<uint32_t>(a.out[1]));
  f.out_w_div = Divider<uint32_t>(static_cast<uint32_t>(a.out[2]));
  f.in_plane = static_cast<uint32_t>(a.in[1] * a.in[2]);
  f.order = order;
  f.x = static_cast<const Raw*>(a.x);
  f.values = static_cast<Raw*>(a.values);
  f.indices = static_cast<I*>(a.indices);
  return f;
}

template <typename Launcher>
void RunPool(Launcher& launch, const PoolLaunch& a) {
  const int64_t extent = PoolExtent(a);
  VisitOrder(a, [&](auto order) {
    using Order = decltype(order);
    using Raw = typename Order::Raw;
    const auto pool = [&](auto index) {
      using I = typename decltype(index)::type;
      const uint32_t n = static_cast<uint32_t>(a.out_count());
      switch (launch.PlaneKernels() ? PlaneKernelSize(a, extent) : 0) {
        case 2: return launch.Run(n, MakePlanePoolWindow<2, Order, I>(a, order), nullptr);
        case 3: return launch.Run(n, MakePlanePoolWindow<3, Order, I>(a, order), nullptr);
        default: break;
      }
      launch.VisitOffsets(extent, [&](auto offset) {
        using Index = typename decltype(offset)::type;
        launch.Run(static_cast<Index>(a.out_count()),
                   PoolWindow<Order, I, Index>{MakePoolWindows<Index>(a), order,
                                               static_cast<const Raw*>(a.x),
                                               static_cast<Raw*>(a.values),
                                               static_cast<I*>(a.indices)},
                   nullptr);
      });
    };
    if (a.taps) {
      pool(Tag<uint8_t>{});
    } else {
      VisitIndex(a.index64, pool);
    }
  });
}

}  // namespace cuda
}  // namespace jax_unpool
