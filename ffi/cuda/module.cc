// The CUDA extension module, _jax_unpool_cuda: hands the CUDA handler capsules to Python
// (jax_unpool/backends/cuda.py registers them for platform "CUDA"). Built only when CMake
// finds a CUDA compiler (JAX_UNPOOL_CUDA); its CUDA runtime is linked statically, so it
// imports on a machine without a GPU or driver.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "cuda/handlers.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule Capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_jax_unpool_cuda, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["max_unpool"] = Capsule(jax_unpool::cuda::MaxUnpoolCuda);
    d["max_unpool_checked"] = Capsule(jax_unpool::cuda::MaxUnpoolCheckedCuda);
    d["max_unpool_backward"] = Capsule(jax_unpool::cuda::MaxUnpoolBackwardCuda);
    d["max_unpool_backward_checked"] = Capsule(jax_unpool::cuda::MaxUnpoolBackwardCheckedCuda);
    d["max_pool"] = Capsule(jax_unpool::cuda::MaxPoolCuda);
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
