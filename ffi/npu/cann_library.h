// Finds and opens the CANN runtime at run time (dlopen/dlsym), so that the package
// builds and imports on machines without CANN.
//
// Search order:
//   0. a libascendcl.so already loaded in the process (by the PJRT plugin, say; found with
//      dlopen(RTLD_NOLOAD)): only directories whose libascendcl.so is that very file (a
//      second runtime loaded from elsewhere would have no device context) -- library_dir
//      when given; else the directory it was loaded from, 2-5 below, its real directory.
//      Files are compared, not directory names: CANN's latest/<arch>-linux/lib64 holds
//      per-file symlinks into each package's versioned directory. (Not in host-emulation
//      mode.)
//   1. the library_dir argument, when not empty -- and then nothing else
//   2. $ASCEND_TOOLKIT_HOME/lib64
//   3. $ASCEND_HOME_PATH/lib64
//   4. /usr/local/Ascend/ascend-toolkit/latest/lib64
//   5. /usr/local/Ascend/cann/lib64
//   6. the dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache, ...), by bare name
// The first directory holding libascendcl.so, libnnopbase.so and an aclnn op library wins
// (all from one directory, never mixed across installs). Exactly one op library
// ("provider") is opened: one already loaded in the process, else the first present of
// libopapi_nn.so (CANN 9.x split packages), libopapi.so (CANN <= 8),
// libaclnn_ops_train.so + libaclnn_ops_infer.so (8.x --feature installs, one provider);
// with it, where present in the same directory, its ops-math library (libopapi_math.so,
// libaclnn_math.so; libopapi.so holds every domain itself), for aclnnClamp, aclnnMax and
// aclnnMin, with which the device handlers make or check indices safe (optional: without
// aclnnClamp the device unpool handlers refuse every call).
// It must have the aclnnMaxUnpool2dBackward* entry points (every product that has any of
// the four unpool ops has these); aclnnMaxUnpool2d*, the aclnnMaxUnpool3d* ones and the
// pools (aclnnMaxPool2dWithIndices*, aclnnMaxPool3dWithArgmax*) are optional (the
// forwards are not on the Atlas training series; older CANN lacks the 3-D ops), and so is
// libascendcl.so's aclrtGetSocName (which ops the chip has is decided in Python).
//
// Loading policy: the first successful LoadCann() fixes the runtime for the process (one
// process talks to one CANN: its streams, device memory and the handlers' function table
// belong to it). Later calls with no library_dir, or with one that resolves to the same
// files, return it; one that resolves to other files is an error, and so is any call in
// the other mode (host emulation or device) than the first load's: the emulator must never
// get device pointers, nor a real CANN host memory. A failed load installs nothing and may
// be retried, e.g. with another library_dir. Libraries are never closed: compiled
// executables may call into them until the process exits.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "npu/cann_api.h"

namespace jax_unpool::cann {

struct CannLibrary {
  // Where each part was loaded from (resolved file paths), for messages and for comparing
  // two loads.
  std::string ascendcl_path, nnopbase_path, opapi_path;
  // Installed for the host-emulation mode (host memory, an emulated CANN), not a device.
  bool host = false;

  CreateTensorFn create_tensor = nullptr;
  DestroyTensorFn destroy_tensor = nullptr;
  CreateIntArrayFn create_int_array = nullptr;
  DestroyIntArrayFn destroy_int_array = nullptr;
  // Optional: older CANN lacks them, and then an executor that does not run leaks.
  SetExecutorRepeatableFn set_executor_repeatable = nullptr;
  DestroyExecutorFn destroy_executor = nullptr;
  CreateScalarFn create_scalar = nullptr;        // optional, with destroy_scalar
  DestroyScalarFn destroy_scalar = nullptr;
  GetRecentErrMsgFn get_recent_err_msg = nullptr;
  SynchronizeStreamFn synchronize_stream = nullptr;
  RtMallocFn rt_malloc = nullptr;
  RtFreeFn rt_free = nullptr;
  MemcpyFn rt_memcpy = nullptr;  // optional: only the checked device targets need it
  GetCurrentContextFn get_current_context = nullptr;
  GetSocNameFn get_soc_name = nullptr;  // optional: without it the chip is unknown
  GetDeviceFn get_device = nullptr;      // optional: without it the device is not checked
  MaxUnpool2dBackwardGetWorkspaceSizeFn max_unpool2d_backward_get_workspace_size = nullptr;
  AclnnRunFn max_unpool2d_backward = nullptr;
  // Optional: a CANN without the forward or the 3-D ops still loads and serves the others;
  // the handlers of the absent ones say which symbols are missing.
  MaxUnpool2dGetWorkspaceSizeFn max_unpool2d_get_workspace_size = nullptr;
  AclnnRunFn max_unpool2d = nullptr;
  MaxUnpool3dGetWorkspaceSizeFn max_unpool3d_get_workspace_size = nullptr;
  AclnnRunFn max_unpool3d = nullptr;
  MaxUnpool3dBackwardGetWorkspaceSizeFn max_unpool3d_backward_get_workspace_size = nullptr;
  AclnnRunFn max_unpool3d_backward = nullptr;
  // Optional too: without them the NPU lowering keeps the pools' XLA ops.
  MaxPoolGetWorkspaceSizeFn max_pool2d_with_indices_get_workspace_size = nullptr;
  AclnnRunFn max_pool2d_with_indices = nullptr;
  MaxPoolGetWorkspaceSizeFn max_pool3d_with_argmax_get_workspace_size = nullptr;
  AclnnRunFn max_pool3d_with_argmax = nullptr;
  // Optional, from the provider or its ops-math library: aclnnClamp makes a device call's
  // indices safe; aclnnMax and aclnnMin check them (the checked targets).
  ClampGetWorkspaceSizeFn clamp_get_workspace_size = nullptr;
  AclnnRunFn clamp = nullptr;
  ReduceAllGetWorkspaceSizeFn reduce_max_get_workspace_size = nullptr;
  AclnnRunFn reduce_max = nullptr;
  ReduceAllGetWorkspaceSizeFn reduce_min_get_workspace_size = nullptr;
  AclnnRunFn reduce_min = nullptr;

  // aclGetRecentErrMsg(), or a note that it had none.
  std::string RecentErrorMessage() const;
  std::map<std::string, std::string> Describe() const;
};

struct LoadResult {
  std::optional<CannLibrary> library;  // set on success
  std::string error;                   // otherwise: every path tried and why it failed
};

// Finds and opens CANN without installing it (see the search order above). Once CANN is
// loaded, nothing more is opened: library_dir empty, or a directory holding the loaded
// files, gives the loaded one; any other directory is an error that names the loaded
// runtime (a process uses one, and a probe must not map a second one's libraries).
LoadResult ProbeCann(const std::string& library_dir);

// Finds, opens and installs CANN for the handlers (see the loading policy above).
// `host`: for the host-emulation mode, which needs an explicit library_dir and never
// reuses a loaded runtime. Thread-safe.
LoadResult LoadCann(const std::string& library_dir, bool host);

// The installed runtime, or nullptr before a successful LoadCann().
const CannLibrary* LoadedCann();

// For the Python module: LoadCann/ProbeCann returning where the parts are (were) loaded
// from, or throwing std::runtime_error with the message listing every path tried.
std::map<std::string, std::string> LoadCannOrThrow(const std::string& library_dir, bool host);
std::map<std::string, std::string> ProbeCannOrThrow(const std::string& library_dir);

}  // namespace jax_unpool::cann
