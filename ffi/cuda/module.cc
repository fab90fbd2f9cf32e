// The CUDA extension module, _jax_unpool_cuda: hands the CUDA handlers to Python
// (jax_unpool/backends/cuda.py registers them for platform "CUDA"), each target as its
// stages: {"instantiate": LoadCudaKernels, "execute": the handler}. Built only when CMake
// finds a CUDA compiler (JAX_UNPOOL_CUDA); its CUDA runtime is linked statically, so it
// imports on a machine without a GPU or driver.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "common/handler_capsules.h"
#include "cuda/handlers.h"
#include "cuda/kernel_registry.h"

namespace nb = nanobind;

namespace jax_unpool {
namespace cuda {
namespace {

namespace ffi = xla::ffi;

ffi::Error LoadKernels(ffi::Dictionary) {
  LoadKernelsOnAllDevices();  // a failure is the execute stage's to report
  return ffi::Error::Success();
}

}  // namespace

// No device, stream or buffers at this stage; the attributes are the call's.
XLA_FFI_DEFINE_HANDLER_SYMBOL(LoadCudaKernels, LoadKernels, ffi::Ffi::BindInstantiate().Attrs());

}  // namespace cuda
}  // namespace jax_unpool

NB_MODULE(_jax_unpool_cuda, m) {
  // Target key -> {"instantiate": capsule, "execute": capsule}.
  m.def("registrations", []() {
    // Entry<Handler> static_asserts that Handler has the FFI handler's signature.
    using jax_unpool::Entry;
    namespace cuda = jax_unpool::cuda;
    const nb::dict execute = jax_unpool::HandlerCapsules({
        Entry<cuda::MaxUnpoolCuda>("max_unpool"),
        Entry<cuda::MaxUnpoolCheckedCuda>("max_unpool_checked"),
        Entry<cuda::MaxUnpoolBackwardCuda>("max_unpool_backward"),
        Entry<cuda::MaxUnpoolBackwardCheckedCuda>("max_unpool_backward_checked"),
        Entry<cuda::MaxPoolCuda>("max_pool"),
        Entry<cuda::MaxPoolWindowCuda>("max_pool_window"),
        Entry<cuda::MaxUnpoolWindowCuda>("max_unpool_window"),
        Entry<cuda::MaxUnpoolWindowCheckedCuda>("max_unpool_window_checked"),
        Entry<cuda::MaxUnpoolBackwardWindowCuda>("max_unpool_backward_window"),
        Entry<cuda::MaxUnpoolBackwardWindowCheckedCuda>("max_unpool_backward_window_checked"),
        Entry<cuda::WindowIndicesCuda>("window_offsets"),
    });
    const nb::capsule instantiate =
        jax_unpool::HandlerCapsule(Entry<cuda::LoadCudaKernels>("instantiate").second);
    nb::dict stages;
    for (const auto& [name, handler] : execute) {
      nb::dict bundle;
      bundle["instantiate"] = instantiate;
      bundle["execute"] = handler;
      stages[name] = bundle;
    }
    return stages;
  });
  // Loads every kernel on every device now (what the instantiate stage does); returns the
  // CUDA error's name, "cudaSuccess" when all loaded.
  m.def("load_kernels", []() {
    return std::string(cudaGetErrorName(jax_unpool::cuda::LoadKernelsOnAllDevices()));
  });
  // The kernels registered, and what the execute stages saw: calls made while their stream
  // was capturing a CUDA graph, and kernel loads that had to happen inside a capture.
  m.def("kernel_stats", []() {
    const jax_unpool::cuda::KernelStats s = jax_unpool::cuda::ReadKernelStats();
    nb::dict d;
    d["kernels"] = s.kernels;
    d["captured_calls"] = s.captured_calls;
    d["loads_in_capture"] = s.loads_in_capture;
    return d;
  });
  // What the module was built with: the CUDA runtime version ("13.0") and the
  // CMAKE_CUDA_ARCHITECTURES its kernels were compiled for.
  m.def("build_info", []() {
    int version = 0;
    cudaRuntimeGetVersion(&version);  // the static runtime's own: no driver needed
    nb::dict d;
    d["cuda_runtime"] = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
    d["architectures"] = JAX_UNPOOL_CUDA_ARCHITECTURES;
    return d;
  });
}
