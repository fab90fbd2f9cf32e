// A recording stand-in for the XLA runtime side of the FFI (tests only): it calls an FFI
// handler at the execute stage, as an NPU plugin's XLA would, with an XLA_FFI_Api of its
// own whose stream, device ordinal and scratch allocator are fakes that record what the
// handler asks of them. Together with the emulated CANN (which records the stream each
// launch got, the workspace, aclrtMalloc/aclrtFree/aclrtSynchronizeStream and every
// object), it runs the aclnn handlers' device path (OnDevice in ffi/npu/aclnn_call.h)
// without a device: the scratch memory is host memory, as the emulator's is.
//
// Only the C API (xla/ffi/api/c_api.h) is used, so the handlers see the same binary
// interface as from XLA. Every API function the handlers must not need fails with
// UNIMPLEMENTED and is counted, so an unexpected use fails the call.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xla/ffi/api/c_api.h"

#define FX_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Error {
  XLA_FFI_Error_Code code;
  std::string message;
};

struct State {
  std::mutex mu;
  void* stream = nullptr;
  bool stream_fails = false;
  int32_t device_ordinal = 0;
  bool ordinal_fails = false;
  size_t api_struct_size = XLA_FFI_Api_STRUCT_SIZE;  // smaller: an XLA that predates fields
  bool scratch_refused = false;
  std::map<std::string, int64_t> counts;
  std::map<void*, size_t> live;  // scratch memory not yet freed
  void* last_allocation = nullptr;
  size_t last_size = 0, last_alignment = 0;
  std::vector<void*> allocations;  // every one since the last reset, in order
};

State& state() {
  static State* s = new State;
  return *s;
}

void Count(const char* what) {
  std::lock_guard<std::mutex> lock(state().mu);
  ++state().counts[what];
}

XLA_FFI_Error* MakeError(XLA_FFI_Error_Code code, std::string message) {
  return reinterpret_cast<XLA_FFI_Error*>(new Error{code, std::move(message)});
}

XLA_FFI_Error* ErrorCreate(XLA_FFI_Error_Create_Args* args) {
  return MakeError(args->errc, args->message ? args->message : "");
}

void ErrorGetMessage(XLA_FFI_Error_GetMessage_Args* args) {
  args->message = reinterpret_cast<Error*>(args->error)->message.c_str();
}

void ErrorDestroy(XLA_FFI_Error_Destroy_Args* args) {
  delete reinterpret_cast<Error*>(args->error);
}

XLA_FFI_Error* StreamGet(XLA_FFI_Stream_Get_Args* args) {
  Count("stream_get");
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().stream_fails) return MakeError(XLA_FFI_Error_Code_INTERNAL, "no stream");
  args->stream = state().stream;
  return nullptr;
}

XLA_FFI_Error* DeviceOrdinalGet(XLA_FFI_DeviceOrdinal_Get_Args* args) {
  Count("device_ordinal_get");
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().ordinal_fails) return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED, "no ordinal");
  args->device_ordinal = state().device_ordinal;
  return nullptr;
}

XLA_FFI_Error* Allocate(XLA_FFI_DeviceMemory_Allocate_Args* args) {
  Count("allocate");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.scratch_refused) {
    return MakeError(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "no scratch memory");
  }
  void* p = nullptr;
  if (posix_memalign(&p, args->alignment < 64 ? 64 : args->alignment, args->size) != 0) {
    return MakeError(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "posix_memalign failed");
  }
  std::memset(p, 0xCD, args->size);
  s.live[p] = args->size;
  s.last_allocation = p;
  s.allocations.push_back(p);
  s.last_size = args->size;
  s.last_alignment = args->alignment;
  args->data = p;
  return nullptr;
}

XLA_FFI_Error* Free(XLA_FFI_DeviceMemory_Free_Args* args) {
  Count("free");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.live.find(args->data);
  if (it == s.live.end() || it->second != args->size) {
    ++s.counts["bad_free"];
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT, "not a live allocation of that size");
  }
  s.live.erase(it);
  std::free(args->data);
  return nullptr;
}

// The API functions the handlers must not use: each call is counted and fails.
template <typename Args>
XLA_FFI_Error* Unexpected(Args*) {
  Count("unexpected");
  return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED, "not provided by the fake XLA runtime");
}

XLA_FFI_Api MakeApi() {
  XLA_FFI_Api api;
  std::memset(&api, 0, sizeof(api));
  api.struct_size = XLA_FFI_Api_STRUCT_SIZE;
  api.api_version = {XLA_FFI_Api_Version_STRUCT_SIZE, nullptr, XLA_FFI_API_MAJOR,
                     XLA_FFI_API_MINOR};
  api.XLA_FFI_Error_Create = ErrorCreate;
  api.XLA_FFI_Error_GetMessage = ErrorGetMessage;
  api.XLA_FFI_Error_Destroy = ErrorDestroy;
  api.XLA_FFI_Handler_Register = Unexpected<XLA_FFI_Handler_Register_Args>;
  api.XLA_FFI_Stream_Get = StreamGet;
  api.XLA_FFI_TypeId_Register = Unexpected<XLA_FFI_TypeId_Register_Args>;
  api.XLA_FFI_ExecutionContext_Get = Unexpected<XLA_FFI_ExecutionContext_Get_Args>;
  api.XLA_FFI_State_Set = Unexpected<XLA_FFI_State_Set_Args>;
  api.XLA_FFI_State_Get = Unexpected<XLA_FFI_State_Get_Args>;
  api.XLA_FFI_DeviceMemory_Allocate = Allocate;
  api.XLA_FFI_DeviceMemory_Free = Free;
  api.XLA_FFI_ThreadPool_Schedule = Unexpected<XLA_FFI_ThreadPool_Schedule_Args>;
  api.XLA_FFI_ThreadPool_NumThreads = Unexpected<XLA_FFI_ThreadPool_NumThreads_Args>;
  api.XLA_FFI_Future_Create = Unexpected<XLA_FFI_Future_Create_Args>;
  api.XLA_FFI_Future_SetAvailable = Unexpected<XLA_FFI_Future_SetAvailable_Args>;
  api.XLA_FFI_Future_SetError = Unexpected<XLA_FFI_Future_SetError_Args>;
  api.XLA_FFI_RunId_Get = Unexpected<XLA_FFI_RunId_Get_Args>;
  api.XLA_FFI_DeviceOrdinal_Get = DeviceOrdinalGet;
  return api;
}

struct Context {
  int unused;
};

}  // namespace

// A buffer argument or result: XLA_FFI_DataType, data, rank, dims.
struct FxBuffer {
  int32_t dtype;
  void* data;
  int64_t rank;
  const int64_t* dims;
};

// An attribute: kind 0 is a bool scalar (values[0]), kind 1 an int64 array.
struct FxAttr {
  const char* name;
  int32_t kind;
  int64_t size;
  const int64_t* values;
};

// Calls `handler` (an XLA_FFI_Handler*) at the execute stage. Returns the error code
// (0: success) and copies the error's message into `message`.
FX_EXPORT int32_t fx_call(void* handler, int64_t num_args, const FxBuffer* args,
                          int64_t num_rets, const FxBuffer* rets, int64_t num_attrs,
                          const FxAttr* attrs, char* message, size_t message_size) {
  XLA_FFI_Api api = MakeApi();
  {
    std::lock_guard<std::mutex> lock(state().mu);
    api.struct_size = state().api_struct_size;
  }
  std::vector<XLA_FFI_Buffer> buffers(num_args + num_rets);
  std::vector<void*> arg_ptrs, ret_ptrs;
  for (int64_t i = 0; i < num_args + num_rets; ++i) {
    const FxBuffer& b = i < num_args ? args[i] : rets[i - num_args];
    buffers[i] = {XLA_FFI_Buffer_STRUCT_SIZE, nullptr, static_cast<XLA_FFI_DataType>(b.dtype),
                  b.data, b.rank, const_cast<int64_t*>(b.dims)};
    (i < num_args ? arg_ptrs : ret_ptrs).push_back(&buffers[i]);
  }
  std::vector<XLA_FFI_ArgType> arg_types(num_args, XLA_FFI_ArgType_BUFFER);
  std::vector<XLA_FFI_RetType> ret_types(num_rets, XLA_FFI_RetType_BUFFER);

  // XLA sorts the attributes by name.
  std::vector<const FxAttr*> sorted;
  for (int64_t i = 0; i < num_attrs; ++i) sorted.push_back(&attrs[i]);
  std::sort(sorted.begin(), sorted.end(),
            [](const FxAttr* a, const FxAttr* b) { return std::strcmp(a->name, b->name) < 0; });
  std::vector<XLA_FFI_ByteSpan> name_spans(num_attrs);
  std::vector<XLA_FFI_ByteSpan*> names(num_attrs);
  std::vector<XLA_FFI_AttrType> attr_types(num_attrs);
  std::vector<XLA_FFI_Scalar> scalars(num_attrs);
  std::vector<XLA_FFI_Array> arrays(num_attrs);
  std::unique_ptr<bool[]> flags(new bool[num_attrs > 0 ? num_attrs : 1]);
  std::vector<void*> attr_ptrs(num_attrs);
  for (int64_t i = 0; i < num_attrs; ++i) {
    const FxAttr& a = *sorted[i];
    name_spans[i] = {a.name, std::strlen(a.name)};
    names[i] = &name_spans[i];
    if (a.kind == 0) {
      flags[i] = a.values[0] != 0;
      scalars[i] = {XLA_FFI_DataType_PRED, &flags[i]};
      attr_types[i] = XLA_FFI_AttrType_SCALAR;
      attr_ptrs[i] = &scalars[i];
    } else {
      arrays[i] = {XLA_FFI_DataType_S64, static_cast<size_t>(a.size),
                   const_cast<int64_t*>(a.values)};
      attr_types[i] = XLA_FFI_AttrType_ARRAY;
      attr_ptrs[i] = &arrays[i];
    }
  }

  Context context{0};
  XLA_FFI_CallFrame frame;
  std::memset(&frame, 0, sizeof(frame));
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.api = &api;
  frame.ctx = reinterpret_cast<XLA_FFI_ExecutionContext*>(&context);
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args = {XLA_FFI_Args_STRUCT_SIZE, nullptr, num_args, arg_types.data(), arg_ptrs.data()};
  frame.rets = {XLA_FFI_Rets_STRUCT_SIZE, nullptr, num_rets, ret_types.data(), ret_ptrs.data()};
  frame.attrs = {XLA_FFI_Attrs_STRUCT_SIZE, nullptr, num_attrs, attr_types.data(),
                 names.data(), attr_ptrs.data()};

  XLA_FFI_Error* error = reinterpret_cast<XLA_FFI_Handler*>(handler)(&frame);
  if (message_size > 0) message[0] = '\0';
  if (error == nullptr) return 0;
  Error* e = reinterpret_cast<Error*>(error);
  const int32_t code = e->code;
  if (message_size > 0) {
    std::strncpy(message, e->message.c_str(), message_size - 1);
    message[message_size - 1] = '\0';
  }
  delete e;
  return code;
}

// The stream XLA_FFI_Stream_Get hands out (fails: it reports an error instead).
FX_EXPORT void fx_set_stream(void* stream, int32_t fails) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().stream = stream;
  state().stream_fails = fails != 0;
}

// The device ordinal XLA_FFI_DeviceOrdinal_Get hands out (fails: an error instead).
FX_EXPORT void fx_set_device_ordinal(int32_t ordinal, int32_t fails) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().device_ordinal = ordinal;
  state().ordinal_fails = fails != 0;
}

// Whether XLA_FFI_DeviceMemory_Allocate refuses (as where the plugin grants none).
FX_EXPORT void fx_set_scratch_refused(int32_t refused) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().scratch_refused = refused != 0;
}

// The XLA_FFI_Api's struct_size the handlers see: an older XLA's, without the last fields
// (0: this header's).
FX_EXPORT void fx_set_api_struct_size(size_t size) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().api_struct_size = size ? size : XLA_FFI_Api_STRUCT_SIZE;
}

// The offset of XLA_FFI_Api's XLA_FFI_DeviceOrdinal_Get: an API struct this small
// predates it.
FX_EXPORT size_t fx_device_ordinal_offset() {
  return offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get);
}

// How often `what` happened: stream_get, device_ordinal_get, allocate, free, bad_free,
// unexpected.
FX_EXPORT int64_t fx_count(const char* what) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().counts.find(what);
  return it == state().counts.end() ? 0 : it->second;
}

FX_EXPORT int64_t fx_live_scratch() {
  std::lock_guard<std::mutex> lock(state().mu);
  return static_cast<int64_t>(state().live.size());
}

FX_EXPORT void* fx_last_allocation() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_allocation;
}

// The i-th scratch allocation since the last reset (freed or not); NULL past the last.
FX_EXPORT void* fx_allocation(int64_t i) {
  std::lock_guard<std::mutex> lock(state().mu);
  const auto& a = state().allocations;
  return i >= 0 && i < static_cast<int64_t>(a.size()) ? a[i] : nullptr;
}

FX_EXPORT uint64_t fx_last_allocation_size() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_size;
}

FX_EXPORT uint64_t fx_last_alignment() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_alignment;
}

// Clears the counts and the last allocation; the stream, ordinal, scratch and API settings
// go back to their defaults (no stream, ordinal 0, scratch granted, this header's API).
FX_EXPORT void fx_reset() {
  std::lock_guard<std::mutex> lock(state().mu);
  State& s = state();
  s.counts.clear();
  s.last_allocation = nullptr;
  s.allocations.clear();
  s.last_size = s.last_alignment = 0;
  s.stream = nullptr;
  s.stream_fails = s.ordinal_fails = s.scratch_refused = false;
  s.device_ordinal = 0;
  s.api_struct_size = XLA_FFI_Api_STRUCT_SIZE;
}
