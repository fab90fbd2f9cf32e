// The CUDA handlers' device on a GPU (call.h): the kernels' entry points (kernels.h) and
// the CUDA runtime's calls on XLA's stream, its kernels loaded first. Only checked calls
// wait (CopyToHost).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/kernel_registry.h"
#include "cuda/kernels.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {
namespace cuda {

namespace ffi = xla::ffi;

class GpuStream {
 public:
  // Every handler's execute stage starts here: its device's kernels loaded, before any
  // launch (kernel_registry.h).
  explicit GpuStream(cudaStream_t stream) : stream_(stream) {
    Do([&] { return EnsureKernelsLoaded(stream_); });
  }

  void Forward(const ForwardLaunch& a) { Do([&] { return LaunchForward(stream_, a); }); }
  void Gather(const GatherLaunch& a) { Do([&] { return LaunchGather(stream_, a); }); }
  void FindFirstBad(const FirstBadLaunch& a) {
    Do([&] { return LaunchFindFirstBad(stream_, a); });
  }
  void Pool(const PoolLaunch& a) { Do([&] { return LaunchPool(stream_, a); }); }
  void WindowIndices(const WindowIndicesLaunch& a) {
    Do([&] { return LaunchWindowIndices(stream_, a); });
  }
  void Zero(void* device, size_t bytes) {
    Do([&] { return cudaMemsetAsync(device, 0, bytes, stream_); });
  }
  void CopyToHost(void* host, const void* device, size_t bytes) {
    Do([&] { return cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_); });
    Do([&] { return cudaStreamSynchronize(stream_); });
  }
  // A launch reports an earlier asynchronous failure on this device too (cudaGetLastError):
  // it fails this call, as in jax's own CUDA FFI example.
  ffi::Error Status(const char* op) const {
    if (error_ == cudaSuccess) return ffi::Error::Success();
    return ffi::Error::Internal(std::string(op) + ": CUDA error " + cudaGetErrorName(error_) +
                                ": " + cudaGetErrorString(error_));
  }

 private:
  template <typename F>
  void Do(F f) {
    if (error_ == cudaSuccess) error_ = f();
  }
  cudaStream_t stream_;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace cuda
}  // namespace jax_unpool
