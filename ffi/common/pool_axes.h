// A max pool's sizes and window per axis (D, H, W); a 1-D or 2-D pool has leading axes of
// size 1 with a window of 1. The checked call (common/pool_geometry.h), the CUDA launch and
// the CUDA kernel's arithmetic (cuda/pool_plan.h, cuda/pool_elements.h) each carry it, and
// copy it from one to the next. Plain data without the XLA headers: CUDA device code uses it.
#pragma once

#include <cstdint>

namespace jax_unpool {

struct PoolAxes {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
};

}  // namespace jax_unpool
