// Host emulation of the CUDA handlers: their bodies (ffi/cuda/unpool_call.h, pool_call.h)
// run as they do on the GPU -- the same checks, plans and per-element code, compiled by a
// plain C++ compiler (ffi/common/host_device.h defines the CUDA qualifiers away) -- on a
// device whose launches loop over the grid in a shuffled order (a kernel's result must not
// depend on the order its threads run in) and whose memory is the host's. Only the
// grid-stride kernel wrapper and the CUDA runtime calls (grid_launcher.cuh, gpu_stream.h)
// are not run here. Built and called by tests/backends/cuda/emulation.py (ctypes).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "cuda/pool_call.h"
#include "cuda/unpool_call.h"

namespace {

namespace ffi = xla::ffi;
using jax_unpool::cuda::FirstBadLaunch;
using jax_unpool::cuda::ForwardLaunch;
using jax_unpool::cuda::GatherLaunch;
using jax_unpool::cuda::PoolLaunch;
using jax_unpool::cuda::WindowIndicesLaunch;

// Whether every launch takes 64-bit offsets, as calls of 2^31 elements or more do
// (ju_set_wide_offsets): their code, checked on small inputs.
bool wide_offsets = false;

class LoopLauncher {
 public:
  explicit LoopLauncher(uint64_t seed) : rng_(seed) {}

  template <typename F>
  void VisitOffsets(int64_t largest, F&& f) {
    if (wide_offsets) {
      f(jax_unpool::cuda::Tag<uint64_t>{});
    } else {
      jax_unpool::cuda::VisitOffsetType(largest, f);
    }
  }
  // The compiled 2-D pool kernels take 32-bit offsets only.
  bool PlaneKernels() const { return !wide_offsets; }

  template <typename Index, typename F>
  void Run(Index n, const F& f, const uint32_t* guard) {
    if (guard != nullptr && *guard == 0) return;
    std::vector<Index> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), Index{0});
    std::shuffle(order.begin(), order.end(), rng_);
    for (Index t : order) f(t);
  }
  void Zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
  void Fill(void* p, int byte, size_t bytes) { std::memset(p, byte, bytes); }

 private:
  std::mt19937_64 rng_;
};

// The forward's path, as the test reads it back.
enum Path {
  kNothing = 0,
  kGeneral = 1,
  kWindowed = 2,
  kWindowedThenGeneral = 3,
  kTiled = 4,
  kTiledThenGeneral = 5,
  kPlaneTiled = 6,  // PlaneTiledScatter
  kPlaneTiledThenGeneral = 7
};

// The pool's kernel, as the test reads it back: PoolWindow with 32- or 64-bit arithmetic,
// or PlanePoolWindow of a 2x2 or 3x3 window.
enum PoolPath { kNoPool = 0, kWindows32 = 1, kWindows64 = 2, kPlane2x2 = 3, kPlane3x3 = 4 };

class EmulatedDevice {
 public:
  explicit EmulatedDevice(uint64_t seed) : launch_(seed) {}

  void Forward(const ForwardLaunch& a) {
    const bool windowed = jax_unpool::cuda::WindowedPassApplies(a.shape, a.window);
    const bool tiled = windowed && jax_unpool::cuda::Tiles(a.shape, a.window);
    const bool plane = tiled && launch_.PlaneKernels() &&
                       std::max(a.shape.in_count(), a.shape.out_count()) < (int64_t{1} << 31) &&
                       jax_unpool::cuda::PlaneTileSize<char>(a.shape.channels_last, a.shape.in,
                                                             a.window.stride, a.out) != 0;
    jax_unpool::cuda::RunForward(launch_, a);
    const uint32_t flag = *reinterpret_cast<const uint32_t*>(a.workspace);
    if (!windowed) {
      path_ = kGeneral;
    } else if (plane) {
      path_ = flag ? kPlaneTiledThenGeneral : kPlaneTiled;
    } else if (tiled) {
      path_ = flag ? kTiledThenGeneral : kTiled;
    } else {
      path_ = flag ? kWindowedThenGeneral : kWindowed;
    }
  }
  void Gather(const GatherLaunch& a) { jax_unpool::cuda::RunGather(launch_, a); }
  void FindFirstBad(const FirstBadLaunch& a) { jax_unpool::cuda::RunFindFirstBad(launch_, a); }
  void Pool(const PoolLaunch& a) {
    const int64_t extent = jax_unpool::cuda::PoolExtent(a);
    const int plane = launch_.PlaneKernels() ? jax_unpool::cuda::PlaneKernelSize(a, extent) : 0;
    if (plane != 0) {
      pool_path_ = plane == 2 ? kPlane2x2 : kPlane3x3;
    } else {
      pool_path_ = wide_offsets || extent >= (int64_t{1} << 31) ? kWindows64 : kWindows32;
    }
    jax_unpool::cuda::RunPool(launch_, a);
  }
  void WindowIndices(const WindowIndicesLaunch& a) {
    jax_unpool::cuda::RunWindowIndices(launch_, a);
  }
  void Zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
  void CopyToHost(void* host, const void* device, size_t bytes) {
    std::memcpy(host, device, bytes);
  }
  ffi::Error Status(const char*) const { return ffi::Error::Success(); }
  Path path() const { return path_; }
  PoolPath pool_path() const { return pool_path_; }

 private:
  LoopLauncher launch_;
  Path path_ = kNothing;
  PoolPath pool_path_ = kNoPool;
};

// XLA runs host code with subnormals flushed (MXCSR's FTZ and DAZ); the GPU kernels are
// built without that, so the emulation compares exactly too.
class ExactFloats {
 public:
#if defined(__SSE__)
  ExactFloats() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0x8040u); }
  ~ExactFloats() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

ffi::DataType DataTypeByName(const std::string& name) {
  static const std::pair<const char*, ffi::DataType> kTypes[] = {
      {"bool", ffi::DataType::PRED},
      {"int8", ffi::DataType::S8},
      {"int16", ffi::DataType::S16},
      {"int32", ffi::DataType::S32},
      {"int64", ffi::DataType::S64},
      {"uint8", ffi::DataType::U8},
      {"uint16", ffi::DataType::U16},
      {"uint32", ffi::DataType::U32},
      {"uint64", ffi::DataType::U64},
      {"float16", ffi::DataType::F16},
      {"bfloat16", ffi::DataType::BF16},
      {"float32", ffi::DataType::F32},
      {"float64", ffi::DataType::F64},
      {"complex64", ffi::DataType::C64},
      {"float8_e5m2", ffi::DataType::F8E5M2},
      {"float8_e4m3", ffi::DataType::F8E4M3},
      {"float8_e3m4", ffi::DataType::F8E3M4},
      {"float8_e4m3fn", ffi::DataType::F8E4M3FN},
      {"float8_e4m3b11fnuz", ffi::DataType::F8E4M3B11FNUZ},
      {"float8_e4m3fnuz", ffi::DataType::F8E4M3FNUZ},
      {"float8_e5m2fnuz", ffi::DataType::F8E5M2FNUZ},
      {"float8_e8m0fnu", ffi::DataType::F8E8M0FNU},
      {"int4", ffi::DataType::S4},
  };
  for (const auto& [n, t] : kTypes)
    if (name == n) return t;
  return ffi::DataType::INVALID;
}

}  // namespace

// A buffer as Python hands it over: numpy's dtype name, data, dims.
struct Buffer {
  const char* dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
};

namespace {

// An XLA_FFI_Buffer (what a handler's ffi::AnyBuffer wraps) for `b`.
XLA_FFI_Buffer Wrap(const Buffer& b) {
  return XLA_FFI_Buffer{XLA_FFI_Buffer_STRUCT_SIZE, nullptr,
                        static_cast<XLA_FFI_DataType>(DataTypeByName(b.dtype)), b.data, b.rank,
                        b.dims};
}

ffi::Span<const int64_t> SpanOf(const int64_t* v, int64_t size) {
  return ffi::Span<const int64_t>(v, static_cast<size_t>(size));
}

// The call's error code (0: success), its message copied into `message`.
int Report(const ffi::Error& e, char* message, int64_t size) {
  const std::string text = e.success() ? "" : e.message();
  std::snprintf(message, static_cast<size_t>(size), "%s", text.c_str());
  return e.success() ? 0 : static_cast<int>(*e.errc());
}

}  // namespace

extern "C" {

// The forward handler: x, indices -> out, workspace; `window` holds the 3 * k entries
// extent, stride, padding (or window_size 0). `path` receives the Path taken.
int ju_forward(Buffer x, Buffer indices, Buffer out, Buffer workspace, int checked,
               int channels_last, int64_t k, const int64_t* window, int64_t window_size,
               uint64_t seed, int* path, char* message, int64_t message_size) {
  const XLA_FFI_Buffer xb = Wrap(x), ib = Wrap(indices), ob = Wrap(out), wb = Wrap(workspace);
  const int64_t n = window_size / 3;
  EmulatedDevice device(seed);
  const ffi::Error e = jax_unpool::cuda::MaxUnpoolCall(
      device, checked != 0, ffi::AnyBuffer(&xb), ffi::AnyBuffer(&ib), ffi::AnyBuffer(&ob),
      ffi::AnyBuffer(&wb), channels_last != 0, k, SpanOf(window, n), SpanOf(window + n, n),
      SpanOf(window + 2 * n, n));
  *path = device.path();
  return Report(e, message, message_size);
}

// The backward handler; the checked one when workspace.data is non-null.
int ju_backward(Buffer grad, Buffer indices, Buffer out, Buffer workspace, int channels_last,
                int64_t k, uint64_t seed, char* message, int64_t message_size) {
  const XLA_FFI_Buffer gb = Wrap(grad), ib = Wrap(indices), ob = Wrap(out), wb = Wrap(workspace);
  const ffi::AnyBuffer ws(&wb);
  EmulatedDevice device(seed);
  const ffi::Error e = jax_unpool::cuda::MaxUnpoolBackwardCall(
      device, ffi::AnyBuffer(&gb), ffi::AnyBuffer(&ib), ffi::AnyBuffer(&ob),
      workspace.data != nullptr ? &ws : nullptr, channels_last != 0, k);
  return Report(e, message, message_size);
}

// The pool handler; window attributes of k entries each. `path` receives the PoolPath.
int ju_pool(Buffer x, Buffer values, Buffer indices, int channels_last, const int64_t* kernel,
            const int64_t* stride, const int64_t* padding, const int64_t* dilation, int64_t k,
            int ceil_mode, uint64_t seed, int* path, char* message, int64_t message_size) {
  const ExactFloats exact;
  const XLA_FFI_Buffer xb = Wrap(x), vb = Wrap(values), ib = Wrap(indices);
  EmulatedDevice device(seed);
  const ffi::Error e = jax_unpool::cuda::MaxPoolCall(
      device, ffi::AnyBuffer(&xb), ffi::AnyBuffer(&vb), ffi::AnyBuffer(&ib), channels_last != 0,
      SpanOf(kernel, k), SpanOf(stride, k), SpanOf(padding, k), SpanOf(dilation, k),
      ceil_mode != 0);
  *path = device.pool_path();
  return Report(e, message, message_size);
}

// The handlers on window offsets: the pool's window (k entries each of kernel, stride,
// padding, dilation) and ceil_mode as attributes.
int ju_forward_window(Buffer x, Buffer offsets, Buffer out, Buffer workspace, int checked,
                      int channels_last, const int64_t* kernel, const int64_t* stride,
                      const int64_t* padding, const int64_t* dilation, int64_t k, int ceil_mode,
                      uint64_t seed, int* path, char* message, int64_t message_size) {
  const XLA_FFI_Buffer xb = Wrap(x), ob = Wrap(offsets), rb = Wrap(out), wb = Wrap(workspace);
  EmulatedDevice device(seed);
  const ffi::Error e = jax_unpool::cuda::MaxUnpoolWindowCall(
      device, checked != 0, ffi::AnyBuffer(&xb), ffi::AnyBuffer(&ob), ffi::AnyBuffer(&rb),
      ffi::AnyBuffer(&wb), channels_last != 0, SpanOf(kernel, k), SpanOf(stride, k),
      SpanOf(padding, k), SpanOf(dilation, k), ceil_mode != 0);
  *path = device.path();
  return Report(e, message, message_size);
}

// The checked one when workspace.data is non-null.
int ju_backward_window(Buffer grad, Buffer offsets, Buffer out, Buffer workspace,
                       int channels_last, const int64_t* kernel, const int64_t* stride,
                       const int64_t* padding, const int64_t* dilation, int64_t k, int ceil_mode,
                       uint64_t seed, char* message, int64_t message_size) {
  const XLA_FFI_Buffer gb = Wrap(grad), ob = Wrap(offsets), rb = Wrap(out), wb = Wrap(workspace);
  const ffi::AnyBuffer ws(&wb);
  EmulatedDevice device(seed);
  const ffi::Error e = jax_unpool::cuda::MaxUnpoolBackwardWindowCall(
      device, ffi::AnyBuffer(&gb), ffi::AnyBuffer(&ob), ffi::AnyBuffer(&rb),
      workspace.data != nullptr ? &ws : nullptr, channels_last != 0, SpanOf(kernel, k),
      SpanOf(stride, k), SpanOf(padding, k), SpanOf(dilation, k), ceil_mode != 0);
  return Report(e, message, message_size);
}

// The pool writing window offsets (uint8 indices).
int ju_pool_window(Buffer x, Buffer values, Buffer offsets, int channels_last,
                   const int64_t* kernel, const int64_t* stride, const int64_t* padding,
                   const int64_t* dilation, int64_t k, int ceil_mode, uint64_t seed, int* path,
                   char* message, int64_t message_size) {
  const ExactFloats exact;
  const XLA_FFI_Buffer xb = Wrap(x), vb = Wrap(values), ob = Wrap(offsets);
  EmulatedDevice device(seed);
  const ffi::Error e = jax_unpool::cuda::MaxPoolCall(
      device, ffi::AnyBuffer(&xb), ffi::AnyBuffer(&vb), ffi::AnyBuffer(&ob), channels_last != 0,
      SpanOf(kernel, k), SpanOf(stride, k), SpanOf(padding, k), SpanOf(dilation, k),
      ceil_mode != 0, jax_unpool::IndexFormat::kWindow);
  *path = device.pool_path();
  return Report(e, message, message_size);
}

// window_indices: flat indices -> offsets; input_size k entries.
int ju_window_indices(Buffer indices, Buffer offsets, int channels_last, const int64_t* kernel,
                      const int64_t* stride, const int64_t* padding, const int64_t* dilation,
                      int64_t k, int ceil_mode, const int64_t* input_size, uint64_t seed,
                      char* message, int64_t message_size) {
  const XLA_FFI_Buffer ib = Wrap(indices), ob = Wrap(offsets);
  EmulatedDevice device(seed);
  const ffi::Error e = jax_unpool::cuda::WindowIndicesCall(
      device, ffi::AnyBuffer(&ib), ffi::AnyBuffer(&ob), channels_last != 0, SpanOf(kernel, k),
      SpanOf(stride, k), SpanOf(padding, k), SpanOf(dilation, k), ceil_mode != 0,
      SpanOf(input_size, k));
  return Report(e, message, message_size);
}

void ju_set_wide_offsets(int wide) { wide_offsets = wide != 0; }

int64_t ju_position_bytes(int64_t width, int64_t L, int64_t Lo) {
  return jax_unpool::cuda::PositionBytes(width, L, Lo);
}

// Divider<uint32_t> (magic numbers) against plain division: the edges of its range and
// `trials` random pairs; returns how many quotients differed.
int64_t ju_divider_mismatches(uint64_t seed, int64_t trials) {
  using jax_unpool::cuda::Divider;
  std::mt19937_64 rng(seed);
  const uint32_t top = (uint32_t{1} << 31) - 1;
  std::vector<uint32_t> edges = {1, 2, 3, 5, 7, 224, 225, 50176, 65535, 65536, 65537, top - 1,
                                 top, uint32_t{1} << 31};
  int64_t wrong = 0;
  const auto check = [&](uint32_t d, uint32_t n) {
    const Divider<uint32_t> div(d);
    wrong += div.Div(n) != n / d || div.Mod(n) != n % d;
  };
  for (uint32_t d : edges)
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, top - 1, top})
      if (n <= top) check(d, n);
  for (int64_t t = 0; t < trials; ++t) {
    const uint32_t d = static_cast<uint32_t>(rng() % top) + 1;
    check(d, static_cast<uint32_t>(rng() % (uint64_t{top} + 1)));
    check(static_cast<uint32_t>(rng() % 4096) + 1, static_cast<uint32_t>(rng() % (uint64_t{top} + 1)));
  }
  return wrong;
}

}  // extern "C"
