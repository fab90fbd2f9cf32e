// Every kernel the grid launcher starts (grid_launcher.cuh registers each instance when
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
//
// The kernels (.cu, nvcc with GCC: libstdc++) and the handlers (.cc: in the wheels, clang
// with libc++) both include this header, so, as in kernels.h, nothing here is a standard
// library type: std::vector or std::atomic would be two different types on the two sides.
// The registry is defined once, in kernel_registry.cc, which alone reads and writes its
// figures (with __atomic builtins).
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

namespace jax_unpool {
namespace cuda {

constexpr int kThreadsPerBlock = 256;  // every launch's block
constexpr int kMaxDevices = 64;        // devices whose figures are cached (others: queried)

// A kernel's entry: zero-initialised storage that RegisterKernel fills.
struct KernelEntry {
  const void* function;              // the kernel's host stub, as cudaLaunchKernel takes it
  int blocks_per_sm[kMaxDevices];    // 0: not known yet on that device
  KernelEntry* next;                 // the registry's list
};

// Adds `entry` for the kernel whose host stub is `function`; at load time, one thread.
bool RegisterKernel(KernelEntry* entry, const void* function);

// A grid of one wave: the blocks of `kernel` the current device runs at once.
unsigned ResidentBlocks(KernelEntry* kernel);

// The instantiate stage: every device the process sees; returns the first failure (no
// driver or GPU: cudaGetDeviceCount's), which the stage ignores (a device jax does not use
// may refuse a context). The current device is restored.
cudaError_t LoadKernelsOnAllDevices();

// The execute stage, on XLA's stream: counts a captured call; loads the kernels if this
// device has not got them yet, relaxing the thread's capture rules for that load alone.
cudaError_t EnsureKernelsLoaded(cudaStream_t stream);

// What the GPU test reads (module.cc: kernel_stats): the kernels registered, calls run
// while their stream was capturing, and kernel loads that had to happen during a capture.
struct KernelStats {
  uint64_t kernels, captured_calls, loads_in_capture;
};
KernelStats ReadKernelStats();

}  // namespace cuda
}  // namespace jax_unpool
