// The kernel registry (kernel_registry.h): its one definition. Its state is plain
// zero-initialised memory, so it is ready before any kernel registers (the .cu objects'
// static initialisers run in an order of their own); the figures are read and written
// with __atomic builtins, the list only by the loader's thread before any reader.
#include "cuda/kernel_registry.h"

namespace jax_unpool {
namespace cuda {
namespace {

KernelEntry* registered = nullptr;
uint64_t registered_count = 0;
int device_sms[kMaxDevices];      // 0: not known yet
bool device_loaded[kMaxDevices];  // every kernel loaded and its figures noted
uint64_t captured_calls = 0, loads_in_capture = 0;

template <typename T>
T Load(const T& v) {
  return __atomic_load_n(&v, __ATOMIC_ACQUIRE);
}
template <typename T>
void Store(T& v, T value) {
  __atomic_store_n(&v, value, __ATOMIC_RELEASE);
}

int Max1(int v) { return v > 1 ? v : 1; }

cudaError_t BlocksPerSm(const KernelEntry& k, int& blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k.function, kThreadsPerBlock, 0);
}

// Loads every kernel on the current device (cudaFuncGetAttributes loads a kernel) and notes
// its occupancy and the device's multiprocessors. Two threads that load at once both load
// and store the same figures; `device_loaded` is set after all of them.
cudaError_t LoadKernelsOnCurrentDevice() {
  int device = 0, sms = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const bool cached = device < kMaxDevices;
  if (cached && Load(device_loaded[device])) return cudaSuccess;
  for (KernelEntry* k = registered; k != nullptr; k = k->next) {
    cudaFuncAttributes attributes;
    int blocks = 0;
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, k->function); e != cudaSuccess)
      return e;
    if (cudaError_t e = BlocksPerSm(*k, blocks); e != cudaSuccess) return e;
    if (cached) Store(k->blocks_per_sm[device], Max1(blocks));
  }
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess)
    return e;
  if (cached) {
    Store(device_sms[device], sms);
    Store(device_loaded[device], true);
  }
  return cudaSuccess;
}

}  // namespace

bool RegisterKernel(KernelEntry* entry, const void* function) {
  entry->function = function;
  entry->next = registered;
  registered = entry;
  ++registered_count;
  return true;
}

unsigned ResidentBlocks(KernelEntry* k) {
  int device = 0, per_sm = 0, sms = 0;
  cudaGetDevice(&device);
  const bool cached = device < kMaxDevices;
  if (cached) {
    per_sm = Load(k->blocks_per_sm[device]);
    sms = Load(device_sms[device]);
  }
  if (per_sm == 0 && BlocksPerSm(*k, per_sm) != cudaSuccess) per_sm = 1;
  if (sms == 0 && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
                      cudaSuccess)
    sms = 1;
  if (cached) {
    Store(k->blocks_per_sm[device], Max1(per_sm));
    Store(device_sms[device], sms);
  }
  return static_cast<unsigned>(Max1(per_sm) * Max1(sms));
}

cudaError_t LoadKernelsOnAllDevices() {
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

cudaError_t EnsureKernelsLoaded(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(stream, &capture); e != cudaSuccess) return e;
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (capturing) __atomic_fetch_add(&captured_calls, 1, __ATOMIC_RELAXED);
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < kMaxDevices && Load(device_loaded[device])) return cudaSuccess;
  if (capturing) __atomic_fetch_add(&loads_in_capture, 1, __ATOMIC_RELAXED);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t e = LoadKernelsOnCurrentDevice();
  cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}

KernelStats ReadKernelStats() {
  return {registered_count, Load(captured_calls), Load(loads_in_capture)};
}

}  // namespace cuda
}  // namespace jax_unpool
