// Every kernel the device launcher starts (device_launcher.cuh registers each instance when
// the module loads), so that the handlers can load them all before XLA captures a call in
// a CUDA graph, and the launcher can size its grids from their occupancy.
//
// Why load ahead: the CUDA runtime loads a kernel lazily, at its first use (CUDA_MODULE_
// LOADING=LAZY, the default since CUDA 12.2), and before driver 12.3 a load inside a stream
// capture fails the capture. XLA may capture a custom call the first time it runs. So each
// target has an instantiate stage, run when XLA builds the executable -- before any run --,
// which loads every kernel on every device (LoadKernelsOnAllDevices); the execute stage
// checks that its device's kernels are loaded (EnsureKernelsLoaded), and loads them there,
// with the capture rules relaxed for the load only, where an executable reached a device
// that instantiate did not load (counted: the GPU test asserts it never happens).
// Plain C++ over the CUDA runtime API: the handlers (.cc) and kernels (.cu) share it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace jax_unpool {
namespace cuda {

constexpr int kThreadsPerBlock = 256;  // every launch's block
constexpr int kMaxDevices = 64;        // devices whose figures are cached (others: queried)

struct KernelEntry {
  const void* function;  // the kernel's host stub, as cudaLaunchKernel takes it
  std::atomic<int> blocks_per_sm[kMaxDevices] = {};  // 0: not known yet on that device
};

inline std::vector<KernelEntry*>& Kernels() {
  static std::vector<KernelEntry*> kernels;
  return kernels;
}
inline bool RegisterKernel(KernelEntry* e) {
  Kernels().push_back(e);  // at load time, one thread
  return true;
}

// What the GPU test reads (module.cc: kernel_stats): calls run while their stream was
// capturing, and kernel loads that had to happen during a capture.
struct CaptureStats {
  std::atomic<uint64_t> captured_calls{0}, loads_in_capture{0};
};
inline CaptureStats& Stats() {
  static CaptureStats stats;
  return stats;
}

struct DeviceFigures {
  std::atomic<int> sms[kMaxDevices] = {};
  std::atomic<bool> loaded[kMaxDevices] = {};
  std::mutex loading;
};
inline DeviceFigures& Devices() {
  static DeviceFigures devices;
  return devices;
}

inline cudaError_t BlocksPerSm(const KernelEntry& e, int& blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, e.function, kThreadsPerBlock, 0);
}

// Loads every kernel on the current device (cudaFuncGetAttributes loads a kernel) and
// notes its occupancy and the device's multiprocessors.
inline cudaError_t LoadKernelsOnCurrentDevice() {
  int device = 0, sms = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  DeviceFigures& d = Devices();
  std::lock_guard<std::mutex> lock(d.loading);
  if (device < kMaxDevices && d.loaded[device].load()) return cudaSuccess;
  for (KernelEntry* k : Kernels()) {
    cudaFuncAttributes attributes;
    int blocks = 0;
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, k->function); e != cudaSuccess)
      return e;
    if (cudaError_t e = BlocksPerSm(*k, blocks); e != cudaSuccess) return e;
    if (device < kMaxDevices) k->blocks_per_sm[device].store(std::max(blocks, 1));
  }
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess)
    return e;
  if (device < kMaxDevices) {
    d.sms[device].store(sms);
    d.loaded[device].store(true);
  }
  return cudaSuccess;
}

// The instantiate stage: every device the process sees; returns the first failure (no
// driver or GPU: cudaGetDeviceCount's), which the stage ignores (a device jax does not use
// may refuse a context). The current device is restored.
inline cudaError_t LoadKernelsOnAllDevices() {
  int count = 0, current = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();  // not a later call's error
    return e;
  }
  if (cudaError_t e = cudaGetDevice(&current); e != cudaSuccess) return e;
  cudaError_t first = cudaSuccess;
  for (int device = 0; device < count; ++device) {
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = LoadKernelsOnCurrentDevice();
    if (first == cudaSuccess) first = e;
  }
  cudaSetDevice(current);
  cudaGetLastError();  // a device that failed here is retried, and reported, by execute
  return first;
}

// The execute stage, on XLA's stream: counts a captured call; loads the kernels if this
// device has not got them yet, relaxing the thread's capture rules for that load alone.
inline cudaError_t EnsureKernelsLoaded(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(stream, &capture); e != cudaSuccess) return e;
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (capturing) Stats().captured_calls.fetch_add(1);
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < kMaxDevices && Devices().loaded[device].load()) return cudaSuccess;
  if (capturing) Stats().loads_in_capture.fetch_add(1);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t e = LoadKernelsOnCurrentDevice();
  cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}

// A grid of one wave: the blocks of kernel `k` the current device runs at once.
inline unsigned ResidentBlocks(KernelEntry& k) {
  int device = 0, per_sm = 0, sms = 0;
  cudaGetDevice(&device);
  if (device < kMaxDevices) {
    per_sm = k.blocks_per_sm[device].load();
    sms = Devices().sms[device].load();
  }
  if (per_sm == 0 && BlocksPerSm(k, per_sm) != cudaSuccess) per_sm = 1;
  if (sms == 0 && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
                      cudaSuccess)
    sms = 1;
  if (device < kMaxDevices) {
    k.blocks_per_sm[device].store(std::max(per_sm, 1));
    Devices().sms[device].store(sms);
  }
  return static_cast<unsigned>(std::max(per_sm, 1) * std::max(sms, 1));
}

}  // namespace cuda
}  // namespace jax_unpool
