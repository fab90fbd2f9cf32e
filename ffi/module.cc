// The extension module does one thing: hand the FFI handler capsules to Python (and,
// for the aclnn handlers, load the CANN runtime they call).
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <utility>

#include "common/handler_capsules.h"
#include "cpu/kernels.h"
#include "cpu/simd.h"
#include "npu/cann_library.h"
#include "npu/handlers.h"

namespace nb = nanobind;

NB_MODULE(_jax_unpool, m) {
  m.def("cpu_registrations", []() {
    return jax_unpool::HandlerCapsules({
        {"max_unpool2d", jax_unpool::MaxUnpool2dCpu},
        {"max_unpool2d_backward", jax_unpool::MaxUnpool2dBackwardCpu},
        {"max_unpool", jax_unpool::MaxUnpoolCpu},
        {"max_unpool_backward", jax_unpool::MaxUnpoolBackwardCpu},
        {"max_pool", jax_unpool::MaxPoolCpu},
    });
  });
  // How the CPU unpool backward gathers 4- and 8-byte values: "avx2" (vpgather*) or
  // "scalar" (loads), by CPU and JAX_UNPOOL_CPU_GATHER (cpu/simd.h).
  m.def("cpu_gather", []() { return jax_unpool::UseVectorGathers() ? "avx2" : "scalar"; });
  m.def("npu_registrations", []() {
    return jax_unpool::HandlerCapsules({
        {"max_unpool2d", jax_unpool::npu::MaxUnpool2dAclnnDevice},
        {"max_unpool2d_backward", jax_unpool::npu::MaxUnpool2dBackwardAclnnDevice},
        {"max_unpool2d_host", jax_unpool::npu::MaxUnpool2dAclnnHost},
        {"max_unpool2d_checked", jax_unpool::npu::MaxUnpool2dAclnnDeviceChecked},
        {"max_unpool2d_checked_host", jax_unpool::npu::MaxUnpool2dAclnnHost},
        {"max_unpool2d_backward_host", jax_unpool::npu::MaxUnpool2dBackwardAclnnHost},
        {"max_unpool2d_backward_checked", jax_unpool::npu::MaxUnpool2dBackwardAclnnDeviceChecked},
        {"max_unpool2d_backward_checked_host", jax_unpool::npu::MaxUnpool2dBackwardAclnnHost},
        {"max_unpool3d", jax_unpool::npu::MaxUnpool3dAclnnDevice},
        {"max_unpool3d_backward", jax_unpool::npu::MaxUnpool3dBackwardAclnnDevice},
        {"max_unpool3d_host", jax_unpool::npu::MaxUnpool3dAclnnHost},
        {"max_unpool3d_checked", jax_unpool::npu::MaxUnpool3dAclnnDeviceChecked},
        {"max_unpool3d_checked_host", jax_unpool::npu::MaxUnpool3dAclnnHost},
        {"max_unpool3d_backward_host", jax_unpool::npu::MaxUnpool3dBackwardAclnnHost},
        {"max_unpool3d_backward_checked", jax_unpool::npu::MaxUnpool3dBackwardAclnnDeviceChecked},
        {"max_unpool3d_backward_checked_host", jax_unpool::npu::MaxUnpool3dBackwardAclnnHost},
        {"max_pool2d", jax_unpool::npu::MaxPool2dAclnnDevice},
        {"max_pool2d_host", jax_unpool::npu::MaxPool2dAclnnHost},
        {"max_pool3d", jax_unpool::npu::MaxPool3dAclnnDevice},
        {"max_pool3d_host", jax_unpool::npu::MaxPool3dAclnnHost},
    });
  });
  m.def("load_cann", &jax_unpool::cann::LoadCannOrThrow, nb::arg("library_dir"),
        nb::arg("host"));
  m.def("probe_cann", &jax_unpool::cann::ProbeCannOrThrow, nb::arg("library_dir"));
  // The unpool ops whose entry points (both) the loaded CANN has: max_unpool2d,
  // max_unpool2d_backward, max_unpool3d, max_unpool3d_backward; [] when none is loaded,
  // and on a device where it lacks aclnnClamp or aclCreateScalar (the device handlers
  // refuse every call they could not make safe: npu/index_safety.h).
  m.def("cann_ops", []() {
    const jax_unpool::cann::CannLibrary* cann = jax_unpool::cann::LoadedCann();
    nb::list ops;
    if (cann == nullptr ||
        !(cann->host || (cann->clamp_get_workspace_size && cann->clamp && cann->create_scalar))) {
      return ops;  // see cann_index_safety
    }
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
  // Whether the loaded CANN lets the device unpool handlers keep indices inside their
  // plane (aclnnClamp and aclCreateScalar; npu/index_safety.h); True in host-emulation
  // mode, where they check host memory; False when none is loaded.
  m.def("cann_index_safety", []() {
    const jax_unpool::cann::CannLibrary* cann = jax_unpool::cann::LoadedCann();
    return cann != nullptr && (cann->host || (cann->clamp_get_workspace_size && cann->clamp &&
                                              cann->create_scalar));
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
  // The value dtypes the loaded CANN's pool op of spatial rank k accepts (asked of its
  // GetWorkspaceSize, see npu/handlers.h).
  m.def("cann_pool_dtypes", &jax_unpool::npu::AcceptedPoolDtypes, nb::arg("k"));
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
