// What the aclnn handlers share: how XLA buffers are presented to aclnn (dtype, NCHW
// view), RAII owners of the CANN objects, the two-phase call (GetWorkspaceSize, then the
// launch with exactly that workspace), error reporting (also for entry points an older
// CANN lacks), and where the workspace and the stream come from (device, or host memory in
// emulation mode).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/no_throw.h"
#include "npu/cann_library.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool::npu {

namespace ffi = xla::ffi;
using namespace jax_unpool::cann;  // NOLINT: the CANN names are the vocabulary here

enum class AclnnOp { kMaxUnpool2d, kMaxUnpool2dBackward, kMaxUnpool3d, kMaxUnpool3dBackward };

// The aclDataType under which values of `dtype` are handed to `op`. The ops only move
// bits, so a dtype is served exactly by any aclDataType of its byte width; the choice
// favours the AI Core kernels' lists: the forwards take every 2-byte dtype as FLOAT16, bool
// goes as UINT8 to every op, f64 as DOUBLE (forwards) or INT64 (backwards), bf16 as INT16
// in the backwards. The 2-D and 3-D op of a direction run the same kernel
// (ScatterElements, GatherElements), so they get the same types, all on both ops' lists.
// nullopt for a dtype that cannot be moved (sub-byte, 16-byte).
std::optional<aclDataType> PresentedValueType(ffi::DataType dtype, AclnnOp op);

// INT32 or INT64, as given; nullopt for any other dtype.
std::optional<aclDataType> PresentedIndexType(ffi::DataType dtype);

// What every aclnn handler decides once its buffers are checked: the aclDataType of its
// `values` (named `values_name`) for `kind`, or nullopt with `*answer` set to the call's
// answer without aclnn -- INVALID_ARGUMENT for a dtype that cannot be presented, Success
// for an empty result (nothing to write), INVALID_ARGUMENT for empty values with a
// non-empty result (`aclnn` refuses them; the NPU lowering sends that case to the jnp
// reference).
std::optional<aclDataType> ValuesTypeOrAnswer(const char* op, AclnnOp kind, const char* aclnn,
                                              const char* values_name,
                                              const ffi::AnyBuffer& values,
                                              const ffi::AnyBuffer& out, ffi::Error* answer);

// An aclTensor description: a view (dims, strides in elements, offset) into the storage
// `data` of shape `storage`.
struct TensorView {
  std::vector<int64_t> dims, strides, storage;
  int64_t offset = 0;
  aclDataType dtype = 0;
  void* data = nullptr;
};

// A buffer of rank k + 1 or k + 2 (k spatial dims) in the primitive's layout seen as
// aclnn's (N,) C, spatial dims. Channels-first is the buffer itself; channels-last is
// described as a strided view, e.g. NHWC as (N, C, H, W) with strides (H*W*C, 1, W*C, C),
// because aclnn honours strides (the 2-D unpool ops and both pool ops document
// non-contiguous support and make the layout copy inside their executor, sized into the
// workspace): no transposes in the XLA program and no extra buffers for XLA to hold.
TensorView PlanesView(ffi::AnyBuffer buffer, bool channels_last, aclDataType dtype, int k = 2);

// A buffer of any rank as itself: a contiguous (row-major) ND tensor of its dims.
TensorView ContiguousView(ffi::AnyBuffer buffer, aclDataType dtype);

// A view with `shape`'s dims whose every element is the first element of `memory`
// (all strides 0): a tensor whose data is never read needs no memory of its own.
TensorView BroadcastFirstElement(const TensorView& shape, const TensorView& memory);

// Creates aclTensor/aclIntArray/aclScalar objects and destroys every one of them when it
// goes out of scope, on success and error paths alike.
class AclObjects {
 public:
  explicit AclObjects(const CannLibrary& cann) : cann_(cann) {}
  ~AclObjects();
  AclObjects(const AclObjects&) = delete;
  AclObjects& operator=(const AclObjects&) = delete;

  aclTensor* Tensor(const TensorView& view);  // nullptr on failure, see error()
  aclIntArray* IntArray(const std::vector<int64_t>& values);
  // The value of `dtype` at `value` (CANN copies it); needs cann.create_scalar.
  aclScalar* Scalar(const void* value, aclDataType dtype);

  // The first creation failure, as the error of `op`; Success if none.
  ffi::Error error(const char* op) const;

 private:
  const CannLibrary& cann_;
  std::vector<aclTensor*> tensors_;
  std::vector<aclIntArray*> arrays_;
  std::vector<aclScalar*> scalars_;
  std::string failure_;
};

// The aclIntArray arguments of aclnnMaxUnpool{2,3}d(Backward): outputSize, and for the
// 3-D ops stride and padding (null for the 2-D ones, which take neither).
struct UnpoolArrays {
  aclIntArray* output_size = nullptr;
  aclIntArray* stride = nullptr;
  aclIntArray* padding = nullptr;
};

// outputSize: the last k dims of `planes` (the forward's out, the backward's gradOutput).
// For k = 3, stride (1, 1, 1) and padding (0, 0, 0): CANN only validates them -- three
// elements each, stride > 0 (CheckIntArrayShapeMaxUnPool3D in
// common/inc/op_api/level2_base.h of hicann/ops-nn) -- and never reads them again:
// aclnn_max_unpool3d{,_backward}.cpp place every value by outputSize and the indices alone.
// Null members on failure, see objects.error().
UnpoolArrays MakeUnpoolArrays(AclObjects& objects, const TensorView& planes, int k);

// Which stream runs the op and where its workspace comes from.
struct Launch {
  aclrtStream stream = nullptr;
  // XLA's scratch memory of `bytes` bytes, freed by XLA in stream order; nullptr if it
  // has none.
  std::function<void*(uint64_t bytes)> scratch;
  // Device mode (OnDevice): the buffers are device memory. Host-emulation mode (OnHost):
  // host memory. See DeviceMemory for where the memory of a call comes from.
  bool device = false;
  // Device mode: XLA's device ordinal of the call, when the plugin's FFI gives it.
  std::optional<int32_t> device_ordinal;
};

// Memory of a call that must stay valid until the call's kernels have run (a workspace,
// the safe indices, the check's result). Device mode: XLA's scratch memory, else the
// block kept for the call's device, stream and slot, grown as needed and held (no other
// thread may grow it) until this object goes away -- after the call's last launch. Kernels
// of one stream run in order, so successive calls share a slot's block with no sync.
// Host-emulation mode: aclrtMalloc'ed for the call, freed when this object goes away,
// after the stream has drained.
class DeviceMemory {
 public:
  enum Slot { kWorkspace, kIndices, kCheck };
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  // `bytes` > 0. An error names `op` and the function that failed.
  ffi::Error Allocate(const CannLibrary& cann, const Launch& launch, const char* op,
                      uint64_t bytes, Slot slot);
  // Host mode: synchronises the stream and frees the memory now; a failed sync is the
  // error. Nothing on a device.
  ffi::Error Drain(const char* op);
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::unique_lock<std::mutex> hold_;
  const CannLibrary* owner_ = nullptr;  // host mode: freed by the destructor
  aclrtStream stream_ = nullptr;
};

// Whether the loaded CANN takes a call, as GetWorkspaceSize (`ask`) answers it; nothing
// runs, the executor it makes is released (ReleaseUnrunExecutor) and a refusal's message
// read. nullopt when no executor can be released (a CANN without the two functions) or a
// release failed: ask no more, each answer would leak one.
std::optional<bool> Takes(const CannLibrary& cann,
                          const std::function<aclnnStatus(uint64_t*, aclOpExecutor**)>& ask);

// The index dtypes ("int32", "int64") for which takes(aclDataType) is true; both where it
// is true for neither or cannot tell (nullopt): no context on the calling thread, say.
std::vector<std::string> IndexDtypesTaken(
    const std::function<std::optional<bool>(aclDataType)>& takes);

// Releases an executor that will not run, as CANN's docs allow (aclDestroyAclOpExecutor
// destroys only executors made repeatable): aclSetAclOpExecutorRepeatable, then
// aclDestroyAclOpExecutor, each status checked, no destroy after a failed first step.
// "" when released (or null); otherwise why it leaked, for the call's error.
std::string ReleaseUnrunExecutor(const CannLibrary& cann, aclOpExecutor* executor);

// The second phase: given GetWorkspaceSize's status, workspace size and executor,
// provides a workspace of that size (see Launch) and runs the executor. An executor that
// is not run is released (ReleaseUnrunExecutor); where that fails, the error says what
// leaked. Errors name `op`, the failing function, the status code and its name, and
// aclGetRecentErrMsg().
ffi::Error RunExecutor(const CannLibrary& cann, const Launch& launch, const char* op,
                       const char* get_workspace_size_name, aclnnStatus status,
                       uint64_t workspace_size, aclOpExecutor* executor, const char* run_name,
                       AclnnRunFn run);

// Whether RequireCann compares the context's device with XLA's device ordinal: on unless
// jax_unpool.npu.register(check_device_ordinal=False) turned it off, for a PJRT plugin
// whose device ordinals are not ACL's device numbers. Process-wide.
void SetDeviceOrdinalCheck(bool on);
bool DeviceOrdinalCheck();

// The loaded CANN, or FAILED_PRECONDITION when it is not loaded, the calling thread has
// no ACL context (aclrtGetCurrentContext), or -- device mode, where both are known, and
// unless DeviceOrdinalCheck() is off -- the context's device (aclrtGetDevice) is not
// XLA's device ordinal of the call. CANN has no
// query of a stream's device, so the context is what can be checked: a launch on XLA's
// stream and a workspace allocated on another device's context would not meet. The one
// public Ascend port of XLA (dayanhn/xla, ascend_context.cc) passes its device ordinal to
// aclrtSetDevice as is.
ffi::ErrorOr<const CannLibrary*> RequireCann(const char* op, const Launch& launch);

// An aclnn entry point that the loader resolves optionally, by name, and whether `cann`'s
// op library has it.
struct OptionalSymbol {
  const char* name;
  bool present;
};

// RequireSymbols' advice for an op that a CANN may predate.
inline constexpr const char* kNewerCann =
    "this CANN predates the op; install a newer CANN toolkit";

// FAILED_PRECONDITION naming each absent symbol, the op library looked in and `advice`;
// Success when all are present.
ffi::Error RequireSymbols(const CannLibrary& cann, const char* op,
                          std::initializer_list<OptionalSymbol> symbols,
                          const char* advice = kNewerCann);

// The names of a call's attributes, bound as `.Attrs<AttributeNames>()`: ffi::Dictionary
// lists them only from jaxlib 0.8's FFI headers on, and the extension is built against
// jaxlib 0.7's. A view of XLA's call frame (the stable C struct XLA_FFI_Attrs), valid
// during the call; nothing is copied.
class AttributeNames {
 public:
  explicit AttributeNames(const XLA_FFI_Attrs* attrs) : attrs_(attrs) {}
  size_t size() const { return static_cast<size_t>(attrs_->size); }
  std::string_view operator[](size_t i) const {
    return {attrs_->names[i]->ptr, attrs_->names[i]->len};
  }

 private:
  const XLA_FFI_Attrs* attrs_;
};

// INVALID_ARGUMENT naming every attribute in `attrs`; Success when there is none. For the
// targets that take no attribute: XLA checks the attribute count only for handlers that
// bind some, so these bind them all and refuse any -- channels_last=True would otherwise
// be ignored and an NDHWC buffer read as NCDHW.
ffi::Error RefuseAttributes(const char* op, const AttributeNames& attrs);

// XLA's device ordinal of a call, bound as `.Ctx<DeviceOrdinalIfKnown>()`: nullopt where
// the plugin's FFI cannot tell (an XLA_FFI_Api without XLA_FFI_DeviceOrdinal_Get, or a
// call of it that fails) instead of failing the call, as ffi::DeviceOrdinal would.
struct DeviceOrdinalIfKnown {};

// Calls impl(launch) with XLA's stream, device ordinal and scratch memory for the
// workspace. No exception escapes (NoThrow).
template <typename Impl>
ffi::Error OnDevice(void* stream, std::optional<int32_t> device_ordinal,
                    ffi::ScratchAllocator& scratch, Impl&& impl) {
  return NoThrow("jax_unpool aclnn handler", [&] {
    Launch launch;
    launch.stream = stream;
    launch.device = true;
    launch.device_ordinal = device_ordinal;
    launch.scratch = [&scratch](uint64_t bytes) -> void* {
      // 16: the largest alignment XLA's FFI allocator grants (device allocators align
      // more in practice).
      std::optional<void*> p = scratch.Allocate(bytes, 16);
      return p ? *p : nullptr;
    };
    return impl(launch);
  });
}

// Calls impl(launch) in host-emulation mode: the CPU platform has no stream to give
// (nullptr, CANN's default stream) and no device memory, so the workspace comes from
// aclrtMalloc -- host memory in an emulated CANN -- and is freed after the call.
template <typename Impl>
ffi::Error OnHost(Impl&& impl) {
  return NoThrow("jax_unpool aclnn handler", [&] { return impl(Launch{}); });
}

}  // namespace jax_unpool::npu

template <>
struct xla::ffi::CtxDecoding<jax_unpool::npu::DeviceOrdinalIfKnown> {
  using Type = std::optional<int32_t>;
  static std::optional<Type> Decode(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                                    DiagnosticEngine&) {
    if (api->struct_size < XLA_FFI_Api_STRUCT_SIZE || api->XLA_FFI_DeviceOrdinal_Get == nullptr) {
      return Type();
    }
    XLA_FFI_DeviceOrdinal_Get_Args args;
    args.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
    args.extension_start = nullptr;
    args.ctx = ctx;
    args.device_ordinal = 0;
    if (XLA_FFI_Error* error = api->XLA_FFI_DeviceOrdinal_Get(&args)) {
      XLA_FFI_Error_Destroy_Args destroy;
      destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
      destroy.extension_start = nullptr;
      destroy.error = error;
      api->XLA_FFI_Error_Destroy(&destroy);
      return Type();
    }
    return Type(args.device_ordinal);
  }
};

// How `.Attrs<AttributeNames>()` decodes the call's attributes (AttrDecoding is the FFI's
// customisation point for attribute types; ffi::Dictionary is decoded the same way).
template <>
struct xla::ffi::AttrDecoding<jax_unpool::npu::AttributeNames> {
  using Type = jax_unpool::npu::AttributeNames;
  static std::optional<Type> Decode(XLA_FFI_AttrType type, void* attr,
                                    DiagnosticEngine& diagnostic) {
    if (type != XLA_FFI_AttrType_DICTIONARY) {
      return diagnostic.Emit("Wrong attribute type: expected a dictionary");
    }
    return Type(static_cast<const XLA_FFI_Attrs*>(attr));
  }
};
