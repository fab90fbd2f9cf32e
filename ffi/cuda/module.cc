// The CUDA extension module, _jax_unpool_cuda: hands the CUDA handler capsules to Python
// (jax_unpool/backends/cuda.py registers them for platform "CUDA"). Built only when CMake
// finds a CUDA compiler (JAX_UNPOOL_CUDA); its CUDA runtime is linked statically, so it
// imports on a machine without a GPU or driver.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "common/handler_capsules.h"
#include "cuda/handlers.h"

namespace nb = nanobind;

NB_MODULE(_jax_unpool_cuda, m) {
  m.def("registrations", []() {
    return jax_unpool::HandlerCapsules({
        {"max_unpool", jax_unpool::cuda::MaxUnpoolCuda},
        {"max_unpool_checked", jax_unpool::cuda::MaxUnpoolCheckedCuda},
        {"max_unpool_backward", jax_unpool::cuda::MaxUnpoolBackwardCuda},
        {"max_unpool_backward_checked", jax_unpool::cuda::MaxUnpoolBackwardCheckedCuda},
        {"max_pool", jax_unpool::cuda::MaxPoolCuda},
    });
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
