// The NPU part of the extension module _jax_unpool (ffi/module.cc): the aclnn handlers'
// capsules, which jax_unpool.npu.register registers, the CANN loader, and what the loaded
// CANN has, which the NPU routing reads (jax_unpool/npu.py).
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <utility>

#include "common/handler_capsules.h"
#include "npu/aclnn_call.h"
#include "npu/cann_library.h"
#include "npu/handlers.h"

namespace nb = nanobind;

namespace jax_unpool::npu {
namespace {

// Whether the loaded CANN lets the unpool handlers keep indices inside their plane
// (aclnnClamp and aclCreateScalar; npu/index_safety.h), host-emulation mode included.
bool IndexSafety(const cann::CannLibrary* cann) {
  return cann != nullptr && cann->clamp_get_workspace_size && cann->clamp && cann->create_scalar;
}

}  // namespace

void RegisterNpu(nb::module_& m) {
  m.def("npu_registrations", []() {
    // Entry<Handler> static_asserts that Handler has the FFI handler's signature.
    return HandlerCapsules({
        Entry<MaxUnpool2dAclnnDevice>("max_unpool2d"),
        Entry<MaxUnpool2dBackwardAclnnDevice>("max_unpool2d_backward"),
        Entry<MaxUnpool2dAclnnHost>("max_unpool2d_host"),
        Entry<MaxUnpool2dAclnnDeviceChecked>("max_unpool2d_checked"),
        Entry<MaxUnpool2dAclnnHostChecked>("max_unpool2d_checked_host"),
        Entry<MaxUnpool2dBackwardAclnnHost>("max_unpool2d_backward_host"),
        Entry<MaxUnpool2dBackwardAclnnDeviceChecked>("max_unpool2d_backward_checked"),
        Entry<MaxUnpool2dBackwardAclnnHostChecked>("max_unpool2d_backward_checked_host"),
        Entry<MaxUnpool3dAclnnDevice>("max_unpool3d"),
        Entry<MaxUnpool3dBackwardAclnnDevice>("max_unpool3d_backward"),
        Entry<MaxUnpool3dAclnnHost>("max_unpool3d_host"),
        Entry<MaxUnpool3dAclnnDeviceChecked>("max_unpool3d_checked"),
        Entry<MaxUnpool3dAclnnHostChecked>("max_unpool3d_checked_host"),
        Entry<MaxUnpool3dBackwardAclnnHost>("max_unpool3d_backward_host"),
        Entry<MaxUnpool3dBackwardAclnnDeviceChecked>("max_unpool3d_backward_checked"),
        Entry<MaxUnpool3dBackwardAclnnHostChecked>("max_unpool3d_backward_checked_host"),
        Entry<MaxPool2dAclnnDevice>("max_pool2d"),
        Entry<MaxPool2dAclnnHost>("max_pool2d_host"),
        Entry<MaxPool3dAclnnDevice>("max_pool3d"),
        Entry<MaxPool3dAclnnHost>("max_pool3d_host"),
    });
  });
  m.def("load_cann", &cann::LoadCannOrThrow, nb::arg("library_dir"), nb::arg("host"));
  m.def("probe_cann", &cann::ProbeCannOrThrow, nb::arg("library_dir"));
  // The unpool ops whose entry points (both) the loaded CANN has: max_unpool2d,
  // max_unpool2d_backward, max_unpool3d, max_unpool3d_backward; [] when none is loaded,
  // and where the handlers could not make indices safe (IndexSafety).
  m.def("cann_ops", []() {
    const cann::CannLibrary* cann = cann::LoadedCann();
    nb::list ops;
    if (!IndexSafety(cann)) return ops;
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
  // IndexSafety of the loaded CANN; False when none is loaded.
  m.def("cann_index_safety", []() { return IndexSafety(cann::LoadedCann()); });
  // The index dtypes the loaded CANN's aclnnClamp and aclnnMaxUnpool2d take (handlers.h).
  m.def("cann_clamp_index_dtypes", &ClampIndexDtypes);
  m.def("cann_unpool_index_dtypes", &ForwardIndexDtypes);
  // Whether the device handlers check the calling thread's ACL device against XLA's
  // device ordinal (aclnn_call.h); `on` sets it for the process first.
  m.def(
      "npu_device_ordinal_check",
      [](std::optional<bool> on) {
        if (on) SetDeviceOrdinalCheck(*on);
        return DeviceOrdinalCheck();
      },
      nb::arg("on") = nb::none());
  // The chip's SoC name as the loaded CANN's aclrtGetSocName() gives it (e.g.
  // "Ascend910B1"); None when no CANN is loaded, it lacks the function or names no chip.
  m.def("cann_soc_name", []() -> nb::object {
    const cann::CannLibrary* cann = cann::LoadedCann();
    const char* name = cann && cann->get_soc_name ? cann->get_soc_name() : nullptr;
    if (name == nullptr) return nb::none();
    // "replace": a name that is not UTF-8 must not raise here.
    return nb::steal(PyUnicode_DecodeUTF8(name, std::strlen(name), "replace"));
  });
  // The value dtypes the loaded CANN's pool op of spatial rank k accepts (asked of its
  // GetWorkspaceSize, see npu/handlers.h).
  m.def("cann_pool_dtypes", &AcceptedPoolDtypes, nb::arg("k"));
  // The spatial ranks whose (optional) pool op the loaded CANN has: 2 for
  // aclnnMaxPool2dWithIndices, 3 for aclnnMaxPool3dWithArgmax.
  m.def("cann_pool_ranks", []() {
    const cann::CannLibrary* cann = cann::LoadedCann();
    nb::list ranks;
    if (cann == nullptr) return ranks;
    if (cann->max_pool2d_with_indices_get_workspace_size && cann->max_pool2d_with_indices)
      ranks.append(2);
    if (cann->max_pool3d_with_argmax_get_workspace_size && cann->max_pool3d_with_argmax)
      ranks.append(3);
    return ranks;
  });
}

}  // namespace jax_unpool::npu
