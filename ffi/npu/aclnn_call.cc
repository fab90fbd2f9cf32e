#include "npu/aclnn_call.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <utility>

#include "common/value_types.h"

namespace jax_unpool::npu {

std::optional<aclDataType> PresentedValueType(ffi::DataType dtype, AclnnOp op) {
  const bool forward = op == AclnnOp::kMaxUnpool2d || op == AclnnOp::kMaxUnpool3d;
  // DOUBLE: the forwards only (newer 2-D backward docs drop it, and GatherElements has no
  // DOUBLE on AI Core, where the 3-D backward would fall back to AI CPU); it keeps its name.
  if (forward && dtype == ffi::DataType::F64) return ACL_DOUBLE;
  switch (dtype) {
    case ffi::DataType::F32: return ACL_FLOAT;
    case ffi::DataType::F16: return ACL_FLOAT16;
    case ffi::DataType::S8: return ACL_INT8;
    case ffi::DataType::S32: return ACL_INT32;
    case ffi::DataType::S64: return ACL_INT64;
    default: break;
  }
  // Both ops only move bits, so any dtype of the same width is exact. The choice keeps
  // the AI Core kernels: the forward's ScatterElements has FLOAT16 but no INT16 there, the
  // backward's GatherElements has no BOOL; all other 1-byte dtypes go as UINT8.
  switch (MovableByteWidth(dtype)) {
    case 1: return ACL_UINT8;
    case 2: return forward ? ACL_FLOAT16 : ACL_INT16;
    case 4: return ACL_INT32;
    case 8: return ACL_INT64;
    default: return std::nullopt;
  }
}

std::optional<aclDataType> PresentedIndexType(ffi::DataType dtype) {
  if (dtype == ffi::DataType::S32) return ACL_INT32;
  if (dtype == ffi::DataType::S64) return ACL_INT64;
  return std::nullopt;
}

std::optional<aclDataType> ValuesTypeOrAnswer(const char* op, AclnnOp kind, const char* aclnn,
                                              const char* values_name,
                                              const ffi::AnyBuffer& values,
                                              const ffi::AnyBuffer& out, ffi::Error* answer) {
  const auto type = PresentedValueType(values.element_type(), kind);
  if (!type) {
    *answer = ffi::Error::InvalidArgument(std::string(op) + ": unsupported value dtype " +
                                          DataTypeName(values.element_type()));
  } else if (out.element_count() == 0) {
    *answer = ffi::Error::Success();
  } else if (values.element_count() == 0) {
    *answer = ffi::Error::InvalidArgument(std::string(op) + ": " + aclnn +
                                          " cannot take an empty " + values_name);
  } else {
    return type;
  }
  return std::nullopt;
}

TensorView ContiguousView(ffi::AnyBuffer buffer, aclDataType dtype) {
  const auto d = buffer.dimensions();
  TensorView v;
  v.storage.assign(d.begin(), d.end());
  v.dims = v.storage;
  v.dtype = dtype;
  v.data = buffer.untyped_data();
  const size_t rank = d.size();
  v.strides.assign(rank, 1);
  for (size_t i = rank; i-- > 1;) v.strides[i - 1] = v.strides[i] * d[i];
  return v;
}

TensorView PlanesView(ffi::AnyBuffer buffer, bool channels_last, aclDataType dtype, int k) {
  TensorView v = ContiguousView(buffer, dtype);
  if (!channels_last) return v;
  // (N,) S1..Sk, C -> (N,) C, S1..Sk: C moves in front of the spatial dims, strides along.
  const size_t rank = v.dims.size(), c = rank - 1, first = rank - 1 - k;
  std::rotate(v.dims.begin() + first, v.dims.begin() + c, v.dims.end());
  std::rotate(v.strides.begin() + first, v.strides.begin() + c, v.strides.end());
  return v;
}

TensorView BroadcastFirstElement(const TensorView& shape, const TensorView& memory) {
  TensorView v = memory;
  v.dims = shape.dims;
  v.strides.assign(shape.dims.size(), 0);
  v.offset = 0;
  return v;
}

AclObjects::~AclObjects() {
  // A failed destroy cannot be acted on here; the objects are ours alone, so it would be
  // a CANN-internal problem, not a leak we could fix.
  for (aclTensor* t : tensors_) cann_.destroy_tensor(t);
  for (aclIntArray* a : arrays_) cann_.destroy_int_array(a);
  for (aclScalar* a : scalars_) cann_.destroy_scalar(a);
}

aclTensor* AclObjects::Tensor(const TensorView& v) {
  aclTensor* t = cann_.create_tensor(v.dims.data(), v.dims.size(), v.dtype, v.strides.data(),
                                     v.offset, ACL_FORMAT_ND, v.storage.data(),
                                     v.storage.size(), v.data);
  if (t == nullptr) {
    if (failure_.empty()) failure_ = "aclCreateTensor failed: " + cann_.RecentErrorMessage();
    return nullptr;
  }
  tensors_.push_back(t);
  return t;
}

aclIntArray* AclObjects::IntArray(const std::vector<int64_t>& values) {
  aclIntArray* a = cann_.create_int_array(values.data(), values.size());
  if (a == nullptr) {
    if (failure_.empty()) failure_ = "aclCreateIntArray failed: " + cann_.RecentErrorMessage();
    return nullptr;
  }
  arrays_.push_back(a);
  return a;
}

aclScalar* AclObjects::Scalar(const void* value, aclDataType dtype) {
  aclScalar* a = cann_.create_scalar(const_cast<void*>(value), dtype);
  if (a == nullptr) {
    if (failure_.empty()) failure_ = "aclCreateScalar failed: " + cann_.RecentErrorMessage();
    return nullptr;
  }
  scalars_.push_back(a);
  return a;
}

ffi::Error AclObjects::error(const char* op) const {
  if (failure_.empty()) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(op) + ": " + failure_);
}

UnpoolArrays MakeUnpoolArrays(AclObjects& objects, const TensorView& planes, int k) {
  const std::vector<int64_t>& d = planes.dims;
  UnpoolArrays a;
  a.output_size = objects.IntArray(std::vector<int64_t>(d.end() - k, d.end()));
  if (k == 3) {
    a.stride = objects.IntArray({1, 1, 1});
    a.padding = objects.IntArray({0, 0, 0});
  }
  return a;
}

namespace {

ffi::Error StatusError(const CannLibrary& cann, const char* op, const char* function,
                       aclnnStatus status) {
  // 161xxx: the arguments were refused; everything else is a runtime or internal error.
  const bool invalid = status / 1000 == 161;
  return ffi::Error(invalid ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal,
                    std::string(op) + ": " + function + " failed with status " +
                        std::to_string(status) + " " + StatusName(status) + ": " +
                        cann.RecentErrorMessage());
}

ffi::Error RuntimeError(const CannLibrary& cann, const char* op, const char* function,
                        aclError error) {
  return ffi::Error::Internal(std::string(op) + ": " + function + " failed with error " +
                              std::to_string(error) + ": " + cann.RecentErrorMessage());
}

const char* SlotAllocation(int slot) {
  return slot == DeviceMemory::kWorkspace ? "aclrtMalloc of the workspace"
         : slot == DeviceMemory::kIndices ? "aclrtMalloc of the safe indices"
                                          : "aclrtMalloc of the check's result";
}

// Device memory for device-mode calls that get no XLA scratch memory: one block per
// (device, stream, slot), kept for the process. Kernels of one stream run in order, so
// successive calls share their stream's blocks with no sync and no allocation; a call that
// needs more grows a block once, after the stream has drained (the old block may still be
// in use by queued kernels). A lease holds the block from the allocation to the call's
// last launch, so that no other thread grows (frees) it in between. A call holds at most
// one kWorkspace lease at a time, taken after its other slots and held over no other
// acquisition, so two threads never wait on each other in a cycle.
class WorkspaceCache {
 public:
  struct Lease {
    void* data = nullptr;
    const char* failed = nullptr;  // the function that failed, when data is null
    aclError error = 0;
    std::unique_lock<std::mutex> hold;
  };

  Lease Acquire(const CannLibrary& cann, aclrtStream stream, uint64_t bytes, int slot) {
    int32_t device = -1;  // the context's device: a stream's address alone may be reused
    if (cann.get_device == nullptr || cann.get_device(&device) != 0) device = -1;
    Block* block;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::unique_ptr<Block>& b = blocks_[{device, stream, slot}];
      if (!b) b = std::make_unique<Block>();
      block = b.get();
    }
    Lease lease;
    lease.hold = std::unique_lock<std::mutex>(block->in_use);
    if (block->bytes < bytes) {
      // Doubling bounds the number of growths (and their syncs) by a log of the sizes;
      // where twice the old block is not to be had, exactly what this call needs.
      const uint64_t doubled = std::max(bytes, 2 * block->bytes);
      if (block->data != nullptr) {
        if ((lease.error = cann.synchronize_stream(stream)) != 0) {
          lease.failed = "aclrtSynchronizeStream (before growing a cached block)";
          return lease;
        }
        cann.rt_free(block->data);
        block->data = nullptr;
        block->bytes = 0;
      }
      for (uint64_t size : {doubled, bytes}) {
        lease.error = cann.rt_malloc(&block->data, size, ACL_MEM_MALLOC_HUGE_FIRST);
        if (lease.error == 0) {
          block->bytes = size;
          break;
        }
        block->data = nullptr;
        if (size == bytes) {
          lease.failed = SlotAllocation(slot);
          return lease;
        }
      }
    }
    lease.data = block->data;
    return lease;
  }

 private:
  struct Block {
    std::mutex in_use;
    void* data = nullptr;
    uint64_t bytes = 0;
  };
  std::mutex mutex_;
  std::map<std::tuple<int32_t, aclrtStream, int>, std::unique_ptr<Block>> blocks_;
};

WorkspaceCache& Workspaces() {
  static WorkspaceCache* cache = new WorkspaceCache;  // never destroyed: kernels may run late
  return *cache;
}

// `error` of a call whose executor does not run, after releasing the executor; where that
// fails, the error says what leaked and why.
ffi::Error NotRun(const CannLibrary& cann, const char* get_workspace_size_name,
                  aclOpExecutor* executor, ffi::Error error) {
  const std::string leak = ReleaseUnrunExecutor(cann, executor);
  if (leak.empty()) return error;
  return ffi::Error(*error.errc(), error.message() + "; the executor " + get_workspace_size_name +
                                       " made could not be released (a host-side leak): " + leak);
}

std::atomic<bool> device_ordinal_check{true};

}  // namespace

std::string ReleaseUnrunExecutor(const CannLibrary& cann, aclOpExecutor* executor) {
  if (executor == nullptr) return "";
  if (cann.destroy_executor == nullptr) return "this CANN has no aclDestroyAclOpExecutor";
  if (cann.set_executor_repeatable == nullptr) {
    return "this CANN has no aclSetAclOpExecutorRepeatable, without which "
           "aclDestroyAclOpExecutor may destroy none";
  }
  for (const auto& [name, step] :
       {std::pair{"aclSetAclOpExecutorRepeatable", cann.set_executor_repeatable},
        std::pair{"aclDestroyAclOpExecutor", cann.destroy_executor}}) {
    if (const aclnnStatus status = step(executor); status != ACLNN_SUCCESS) {
      return std::string(name) + " failed with status " + std::to_string(status) + " " +
             StatusName(status) + ": " + cann.RecentErrorMessage();
    }
  }
  return "";
}

std::optional<bool> Takes(const CannLibrary& cann,
                          const std::function<aclnnStatus(uint64_t*, aclOpExecutor**)>& ask) {
  if (cann.set_executor_repeatable == nullptr || cann.destroy_executor == nullptr) {
    return std::nullopt;
  }
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = ask(&workspace_size, &executor);
  if (status != ACLNN_SUCCESS) cann.RecentErrorMessage();  // read: clears the refusal
  if (!ReleaseUnrunExecutor(cann, executor).empty()) return std::nullopt;
  return status == ACLNN_SUCCESS;
}

std::vector<std::string> IndexDtypesTaken(
    const std::function<std::optional<bool>(aclDataType)>& takes) {
  std::vector<std::string> taken;
  for (const auto& [name, type] :
       {std::pair<const char*, aclDataType>{"int32", ACL_INT32}, {"int64", ACL_INT64}}) {
    const std::optional<bool> answer = takes(type);
    if (!answer) return {"int32", "int64"};
    if (*answer) taken.push_back(name);
  }
  if (taken.empty()) return {"int32", "int64"};
  return taken;
}

void SetDeviceOrdinalCheck(bool on) { device_ordinal_check.store(on); }
bool DeviceOrdinalCheck() { return device_ordinal_check.load(); }

DeviceMemory::~DeviceMemory() {
  if (owner_ == nullptr) return;
  owner_->synchronize_stream(stream_);  // a kernel may still use it; a failure adds nothing
  owner_->rt_free(data_);
}

ffi::Error DeviceMemory::Drain(const char* op) {
  if (owner_ == nullptr) return ffi::Error::Success();
  const CannLibrary& cann = *owner_;
  owner_ = nullptr;
  // A failed sync means a broken stream: the memory is freed all the same, not leaked.
  const aclError e = cann.synchronize_stream(stream_);
  cann.rt_free(data_);
  data_ = nullptr;
  return e == 0 ? ffi::Error::Success() : RuntimeError(cann, op, "aclrtSynchronizeStream", e);
}

ffi::Error DeviceMemory::Allocate(const CannLibrary& cann, const Launch& launch, const char* op,
                                  uint64_t bytes, Slot slot) {
  if (!launch.device) {
    if (const aclError e = cann.rt_malloc(&data_, bytes, ACL_MEM_MALLOC_HUGE_FIRST); e != 0) {
      data_ = nullptr;
      return RuntimeError(cann, op, SlotAllocation(slot), e);
    }
    owner_ = &cann;
    stream_ = launch.stream;
    return ffi::Error::Success();
  }
  if (launch.scratch) data_ = launch.scratch(bytes);
  if (data_ != nullptr) return ffi::Error::Success();
  WorkspaceCache::Lease lease = Workspaces().Acquire(cann, launch.stream, bytes, slot);
  if (lease.data == nullptr) return RuntimeError(cann, op, lease.failed, lease.error);
  data_ = lease.data;
  hold_ = std::move(lease.hold);
  return ffi::Error::Success();
}

ffi::Error RunExecutor(const CannLibrary& cann, const Launch& launch, const char* op,
                       const char* get_workspace_size_name, aclnnStatus status,
                       uint64_t workspace_size, aclOpExecutor* executor, const char* run_name,
                       AclnnRunFn run) {
  if (status != ACLNN_SUCCESS) {
    return NotRun(cann, get_workspace_size_name, executor,
                  StatusError(cann, op, get_workspace_size_name, status));
  }
  // Held over the launch (device mode); freed after a sync (host mode): by Drain below, or
  // after a failed launch, which may have queued kernels, by the destructor.
  DeviceMemory memory;
  if (workspace_size > 0) {
    if (ffi::Error e = memory.Allocate(cann, launch, op, workspace_size, DeviceMemory::kWorkspace);
        !e.success()) {
      return NotRun(cann, get_workspace_size_name, executor, std::move(e));
    }
  }
  status = run(memory.data(), workspace_size, executor, launch.stream);  // consumes it
  if (status != ACLNN_SUCCESS) return StatusError(cann, op, run_name, status);
  return memory.Drain(op);
}

ffi::Error RequireSymbols(const CannLibrary& cann, const char* op,
                          std::initializer_list<OptionalSymbol> symbols, const char* advice) {
  std::string absent;
  for (const OptionalSymbol& s : symbols) {
    if (!s.present) absent += (absent.empty() ? "" : ", ") + std::string(s.name);
  }
  if (absent.empty()) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                    std::string(op) + ": the loaded CANN op library (" + cann.opapi_path +
                        ") has no " + absent + ": " + advice);
}

ffi::Error RefuseAttributes(const char* op, const AttributeNames& attrs) {
  if (attrs.size() == 0) return ffi::Error::Success();
  std::string names;
  for (size_t i = 0; i < attrs.size(); ++i) {
    names += (names.empty() ? "'" : ", '") + std::string(attrs[i]) + "'";
  }
  return ffi::Error::InvalidArgument(
      std::string(op) + ": unknown attribute" + (attrs.size() > 1 ? "s " : " ") + names +
      ": this target takes no attributes (its buffers are channels-first)");
}

ffi::ErrorOr<const CannLibrary*> RequireCann(const char* op, const Launch& launch) {
  const CannLibrary* cann = LoadedCann();
  if (cann == nullptr) {
    return ffi::Unexpected(ffi::Error(
        ffi::ErrorCode::kFailedPrecondition,
        std::string(op) + ": the CANN runtime is not loaded in this process: call "
                          "jax_unpool.npu.register() before running a program that uses the "
                          "aclnn targets"));
  }
  // Without a current context on this thread, CANN would allocate and launch for no
  // device (or fail with an obscure status deep inside aclnn): say so up front.
  aclrtContext context = nullptr;
  const aclError e = cann->get_current_context(&context);
  if (e != 0 || context == nullptr) {
    return ffi::Unexpected(ffi::Error(
        ffi::ErrorCode::kFailedPrecondition,
        std::string(op) + ": the calling thread has no ACL context (aclrtGetCurrentContext " +
            (e != 0 ? "failed with error " + std::to_string(e) +
                          (e == ACL_ERROR_RT_CONTEXT_NULL ? " ACL_ERROR_RT_CONTEXT_NULL" : "")
                    : std::string("returned none")) +
            "). The PJRT plugin must set the device's context on the threads that run "
            "custom calls; CANN said: " + cann->RecentErrorMessage()));
  }
  if (launch.device && launch.device_ordinal && cann->get_device != nullptr &&
      DeviceOrdinalCheck()) {
    int32_t device = -1;
    const aclError g = cann->get_device(&device);
    if (g != 0 || device != *launch.device_ordinal) {
      return ffi::Unexpected(ffi::Error(
          ffi::ErrorCode::kFailedPrecondition,
          std::string(op) + ": XLA runs this call on the stream of device " +
              std::to_string(*launch.device_ordinal) + ", but the calling thread's ACL " +
              "context is " +
              (g != 0 ? "of no device (aclrtGetDevice failed with error " + std::to_string(g) +
                            ": " + cann->RecentErrorMessage() + ")"
                      : "device " + std::to_string(device) + "'s") +
              ": the launch and its workspace would be on different devices. The PJRT "
              "plugin must set the context of the call's device on the threads that run "
              "custom calls; one that numbers its devices otherwise than ACL does needs "
              "jax_unpool.npu.register(..., check_device_ordinal=False)."));
    }
  }
  return cann;
}

}  // namespace jax_unpool::npu
