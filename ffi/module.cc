// The extension module does one thing: hand the FFI handler capsules to Python (and,
// for the aclnn handlers, load the CANN runtime they call).
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <utility>

#include "cpu/kernels.h"
#include "cpu/simd.h"
#include "npu/cann_library.h"
#include "npu/handlers.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule Capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_jax_unpool, m) {
  m.def("cpu_registrations", []() {
    nb::dict d;
    d["max_unpool2d"] = Capsule(jax_unpool::MaxUnpool2dCpu);
    d["max_unpool2d_backward"] = Capsule(jax_unpool::MaxUnpool2dBackwardCpu);
    d["max_unpool"] = Capsule(jax_unpool::MaxUnpoolCpu);
    d["max_unpool_backward"] = Capsule(jax_unpool::MaxUnpoolBackwardCpu);
    d["max_pool"] = Capsule(jax_unpool::MaxPoolCpu);
    return d;
  });
  // How the CPU unpool backward gathers 4- and 8-byte values: "avx2" (vpgather*) or
  // "scalar" (loads), by CPU and JAX_UNPOOL_CPU_GATHER (cpu/simd.h).
  m.def("cpu_gather", []() { return jax_unpool::UseVectorGathers() ? "avx2" : "scalar"; });
  m.def("npu_registrations", []() {
    nb::dict d;
    d["max_unpool2d"] = Capsule(jax_unpool::npu::MaxUnpool2dAclnnDevice);
    d["max_unpool2d_backward"] = Capsule(jax_unpool::npu::MaxUnpool2dBackwardAclnnDevice);
    d["max_unpool2d_host"] = Capsule(jax_unpool::npu::MaxUnpool2dAclnnHost);
    d["max_unpool2d_backward_host"] = Capsule(jax_unpool::npu::MaxUnpool2dBackwardAclnnHost);
    d["max_unpool3d"] = Capsule(jax_unpool::npu::MaxUnpool3dAclnnDevice);
    d["max_unpool3d_backward"] = Capsule(jax_unpool::npu::MaxUnpool3dBackwardAclnnDevice);
    d["max_unpool3d_host"] = Capsule(jax_unpool::npu::MaxUnpool3dAclnnHost);
    d["max_unpool3d_backward_host"] = Capsule(jax_unpool::npu::MaxUnpool3dBackwardAclnnHost);
    d["max_pool2d"] = Capsule(jax_unpool::npu::MaxPool2dAclnnDevice);
    d["max_pool2d_host"] = Capsule(jax_unpool::npu::MaxPool2dAclnnHost);
    d["max_pool3d"] = Capsule(jax_unpool::npu::MaxPool3dAclnnDevice);
    d["max_pool3d_host"] = Capsule(jax_unpool::npu::MaxPool3dAclnnHost);
    return d;
  });
  m.def("load_cann", &jax_unpool::cann::LoadCannOrThrow, nb::arg("library_dir"),
        nb::arg("host"));
  m.def("probe_cann", &jax_unpool::cann::ProbeCannOrThrow, nb::arg("library_dir"));
  // The unpool ops whose entry points (both) the loaded CANN has: max_unpool2d,
  // max_unpool2d_backward, max_unpool3d, max_unpool3d_backward; [] when none is loaded.
  m.def("cann_ops", []() {
    const jax_unpool::cann::CannLibrary* cann = jax_unpool::cann::LoadedCann();
    nb::list ops;
    if (cann == nullptr) return ops;
    const std::pair<const char*, bool> all[] = {
        {"max_unpool2d", cann->max_unpool2d_get_workspace_size && cann->max_unpool2d},
        {"max_unpool2d_backward",
         cann->max_unpool2d_backward_get_workspace_size && cann->max_unpool2d_backward},
        {"max_unpool3d", cann->max_unpool3d_get_workspace_size && cann->max_unpool3d},
        {"max_unpool3d_backward",
         cann->max_unpool3d_backward_get_workspace_size && cann->max_unpool3d_backward}};
    for (const auto& [name, present] : all) {
      if (present) ops.append(name);
    }
    return ops;
  });
  // The chip's SoC name as the loaded CANN's aclrtGetSocName() gives it (e.g.
  // "Ascend910B1"); None when no CANN is loaded, it lacks the function or names no chip.
  m.def("cann_soc_name", []() -> nb::object {
    const jax_unpool::cann::CannLibrary* cann = jax_unpool::cann::LoadedCann();
    const char* name = cann && cann->get_soc_name ? cann->get_soc_name() : nullptr;
    if (name == nullptr) return nb::none();
    // "replace": a name that is not UTF-8 must not raise here.
    return nb::steal(PyUnicode_DecodeUTF8(name, std::strlen(name), "replace"));
  });
  // The spatial ranks whose (optional) pool op the loaded CANN has: 2 for
  // aclnnMaxPool2dWithIndices, 3 for aclnnMaxPool3dWithArgmax.
  m.def("cann_pool_ranks", []() {
    const jax_unpool::cann::CannLibrary* cann = jax_unpool::cann::LoadedCann();
    nb::list ranks;
    if (cann != nullptr && cann->max_pool2d_with_indices_get_workspace_size != nullptr &&
        cann->max_pool2d_with_indices != nullptr) {
      ranks.append(2);
    }
    if (cann != nullptr && cann->max_pool3d_with_argmax_get_workspace_size != nullptr &&
        cann->max_pool3d_with_argmax != nullptr) {
      ranks.append(3);
    }
    return ranks;
  });
}
