// What the pool kernel is launched with (see unpool_plan.h for why this is plain C++).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/pool_axes.h"
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

// What a pool launches with: the call checked (common/pool_geometry.h's CheckPoolCall), the
// results non-empty; its sizes and window per axis (D, H, W) are the PoolAxes base.
struct PoolLaunch : PoolAxes {
  OrderKind kind = OrderKind::kFloat32;
  uint64_t sign = 0;
  Float8Order float8{};
  bool index64 = false;
  bool channels_last = false;
  int64_t N = 1, C = 1;
  const void* x = nullptr;
  void* values = nullptr;
  void* indices = nullptr;

  int64_t in_count() const { return N * C * in[0] * in[1] * in[2]; }
  int64_t out_count() const { return N * C * out[0] * out[1] * out[2]; }
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

template <typename Index>
PoolWindows<Index> MakePoolWindows(const PoolLaunch& a) {
  PoolWindows<Index> w;
  w.inner = static_cast<Index>(a.channels_last ? a.C : 1);
  w.in_plane = static_cast<Index>(a.in[0] * a.in[1] * a.in[2]);
  w.inner_div = Divider<Index>(w.inner);
  static_cast<PoolAxes&>(w) = a;  // the sizes and window, as launched
  for (int d = 0; d < 3; ++d) w.out_div[d] = Divider<Index>(static_cast<Index>(a.out[d]));
  // Only used for windows inside the input, where (kernel - 1) * dilation < in.
  const int64_t plane_strides[3] = {a.in[1] * a.in[2], a.in[2], 1};
  for (int d = 0; d < 3; ++d)
    w.step[d] = a.kernel[d] > 1 && (a.kernel[d] - 1) * a.dil[d] < a.in[d]
                    ? static_cast<Index>(a.dil[d] * plane_strides[d])
                    : 0;
  return w;
}

template <typename Launcher>
void RunPool(Launcher& launch, const PoolLaunch& a) {
  VisitOrder(a, [&](auto order) {
    using Order = decltype(order);
    using Raw = typename Order::Raw;
    VisitIndex(a.index64, [&](auto index) {
      using I = typename decltype(index)::type;
      launch.VisitOffsets(std::max(a.in_count(), a.out_count()), [&](auto offset) {
        using Index = typename decltype(offset)::type;
        launch.Run(static_cast<Index>(a.out_count()),
                   PoolWindow<Order, I, Index>{MakePoolWindows<Index>(a), order,
                                               static_cast<const Raw*>(a.x),
                                               static_cast<Raw*>(a.values),
                                               static_cast<I*>(a.indices)},
                   nullptr);
      });
    });
  });
}

}  // namespace cuda
}  // namespace jax_unpool
