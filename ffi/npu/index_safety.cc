#include "npu/index_safety.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/out_of_range.h"
#include "npu/handlers.h"

namespace jax_unpool::npu {
namespace {

template <typename I>
ffi::Error FirstOutOfRange(const char* op, const Geometry& g, const I* indices, int64_t count) {
  const int64_t Lo = g.out_plane();
  for (int64_t flat = 0; flat < count; ++flat) {
    const int64_t v = static_cast<int64_t>(indices[flat]);
    if (v < 0 || v >= Lo) return OutOfRangeError(op, g, BadIndexAt(g, flat, v));
  }
  return ffi::Error::Success();
}

// int32 or int64 indices (`wide`) in host memory at `data`.
ffi::Error FirstOutOfRange(const char* op, const Geometry& g, const void* data, bool wide,
                           int64_t count) {
  if (wide) return FirstOutOfRange(op, g, static_cast<const int64_t*>(data), count);
  return FirstOutOfRange(op, g, static_cast<const int32_t*>(data), count);
}

// FAILED_PRECONDITION naming the absent functions among `symbols`, and what they are for.
ffi::Error RequireSafetyFunctions(const CannLibrary& cann, const char* op,
                                  std::initializer_list<OptionalSymbol> symbols,
                                  const char* purpose) {
  std::string absent;
  for (const OptionalSymbol& s : symbols) {
    if (!s.present) absent += (absent.empty() ? "" : ", ") + std::string(s.name);
  }
  if (absent.empty()) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                    std::string(op) + ": the loaded CANN (" + cann.nnopbase_path + ", " +
                        cann.opapi_path + ", and the op library's ops-math library where " +
                        "present) has no " + absent + ", with which a call " + purpose +
                        ": CANN's unpool ops do not range-check indices. Install CANN's " +
                        "ops-math package (libopapi_math.so) beside the op library.");
}

// A 0-d tensor over element `i` of `memory` (two elements of `type`).
TensorView Element(void* memory, aclDataType type, int64_t i) {
  TensorView v;
  v.storage = {2};
  v.offset = i;
  v.dtype = type;
  v.data = memory;
  return v;
}

ffi::Error RuntimeFailure(const CannLibrary& cann, const char* op, const char* function,
                          aclError error) {
  return ffi::Error::Internal(std::string(op) + ": " + function + " failed with error " +
                              std::to_string(error) + ": " + cann.RecentErrorMessage());
}

}  // namespace

ffi::Error CheckIndicesOnHost(const char* op, const Geometry& g, const ffi::AnyBuffer& indices) {
  return FirstOutOfRange(op, g, indices.untyped_data(),
                         indices.element_type() == ffi::DataType::S64,
                         static_cast<int64_t>(indices.element_count()));
}

ffi::Error ClampIndices(const CannLibrary& cann, const Launch& launch, const char* op,
                        const Geometry& g, const ffi::AnyBuffer& indices, aclDataType index_type,
                        DeviceMemory* safe) {
  if (ffi::Error e = RequireSafetyFunctions(
          cann, op,
          {{"aclnnClampGetWorkspaceSize", cann.clamp_get_workspace_size != nullptr},
           {"aclnnClamp", cann.clamp != nullptr},
           {"aclCreateScalar", cann.create_scalar != nullptr}},
          "clamps its indices into their plane");
      !e.success()) {
    return e;
  }
  const bool wide = index_type == ACL_INT64;
  const uint64_t bytes = indices.element_count() * (wide ? 8 : 4);
  if (ffi::Error e = safe->Allocate(cann, launch, op, bytes, DeviceMemory::kIndices);
      !e.success()) {
    return e;
  }
  // The bounds in the indices' own type, so that no promotion or narrowing happens inside
  // aclnnClamp (the last position of a plane of more than 2^31 is INT32_MAX for int32).
  const int64_t lo64 = 0, hi64 = static_cast<int64_t>(LastValidIndex<int64_t>(g.out_plane()));
  const int32_t lo32 = 0, hi32 = static_cast<int32_t>(LastValidIndex<int32_t>(g.out_plane()));
  AclObjects objects(cann);
  const TensorView in = ContiguousView(indices, index_type);
  TensorView clamped = in;
  clamped.data = safe->data();
  aclTensor* self = objects.Tensor(in);
  aclTensor* out = objects.Tensor(clamped);
  aclScalar* lo = objects.Scalar(wide ? static_cast<const void*>(&lo64) : &lo32, index_type);
  aclScalar* hi = objects.Scalar(wide ? static_cast<const void*>(&hi64) : &hi32, index_type);
  if (ffi::Error e = objects.error(op); !e.success()) return e;
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status =
      cann.clamp_get_workspace_size(self, lo, hi, out, &workspace_size, &executor);
  return RunExecutor(cann, launch, op, "aclnnClampGetWorkspaceSize", status, workspace_size,
                     executor, "aclnnClamp", cann.clamp);
}

std::vector<std::string> ClampIndexDtypes() {
  const CannLibrary* cann = LoadedCann();
  if (cann == nullptr || cann->clamp_get_workspace_size == nullptr || cann->clamp == nullptr ||
      cann->create_scalar == nullptr) {
    return {};
  }
  return IndexDtypesTaken([&](aclDataType type) -> std::optional<bool> {
    // Two elements; GetWorkspaceSize reads no data, the memory is real all the same.
    alignas(16) static unsigned char in_memory[16], out_memory[16];
    const int64_t bounds64[2] = {0, 1};
    const int32_t bounds32[2] = {0, 1};
    const bool wide = type == ACL_INT64;
    AclObjects objects(*cann);
    aclTensor* self = objects.Tensor({{2}, {1}, {2}, 0, type, in_memory});
    aclTensor* out = objects.Tensor({{2}, {1}, {2}, 0, type, out_memory});
    aclScalar* lo = objects.Scalar(wide ? static_cast<const void*>(bounds64) : bounds32, type);
    aclScalar* hi =
        objects.Scalar(wide ? static_cast<const void*>(bounds64 + 1) : bounds32 + 1, type);
    if (!objects.error("aclnnClamp").success()) return std::nullopt;
    return Takes(*cann, [&](uint64_t* workspace_size, aclOpExecutor** executor) {
      return cann->clamp_get_workspace_size(self, lo, hi, out, workspace_size, executor);
    });
  });
}

ffi::Error CheckIndicesOnDevice(const CannLibrary& cann, const Launch& launch, const char* op,
                                const Geometry& g, const ffi::AnyBuffer& indices,
                                aclDataType index_type) {
  if (ffi::Error e = RequireSafetyFunctions(
          cann, op,
          {{"aclnnMinGetWorkspaceSize", cann.reduce_min_get_workspace_size != nullptr},
           {"aclnnMin", cann.reduce_min != nullptr},
           {"aclnnMaxGetWorkspaceSize", cann.reduce_max_get_workspace_size != nullptr},
           {"aclnnMax", cann.reduce_max != nullptr},
           {"aclrtMemcpy", cann.rt_memcpy != nullptr}},
          "checks its indices (check_indices=True)");
      !e.success()) {
    return e;
  }
  const bool wide = index_type == ACL_INT64;
  const size_t width = wide ? 8 : 4;
  DeviceMemory extremes;  // [smallest, largest]
  if (ffi::Error e = extremes.Allocate(cann, launch, op, 2 * width, DeviceMemory::kCheck);
      !e.success()) {
    return e;
  }
  AclObjects objects(cann);
  aclTensor* self = objects.Tensor(ContiguousView(indices, index_type));
  aclTensor* smallest = objects.Tensor(Element(extremes.data(), index_type, 0));
  aclTensor* largest = objects.Tensor(Element(extremes.data(), index_type, 1));
  if (ffi::Error e = objects.error(op); !e.success()) return e;
  for (const auto& [gws, run, out, gws_name, run_name] :
       {std::tuple{cann.reduce_min_get_workspace_size, cann.reduce_min, smallest,
                   "aclnnMinGetWorkspaceSize", "aclnnMin"},
        std::tuple{cann.reduce_max_get_workspace_size, cann.reduce_max, largest,
                   "aclnnMaxGetWorkspaceSize", "aclnnMax"}}) {
    uint64_t workspace_size = 0;
    aclOpExecutor* executor = nullptr;
    const aclnnStatus status = gws(self, out, &workspace_size, &executor);
    if (ffi::Error e = RunExecutor(cann, launch, op, gws_name, status, workspace_size, executor,
                                   run_name, run);
        !e.success()) {
      return e;
    }
  }
  // aclrtMemcpy waits for no stream (hicann/runtime docs/api_docs/aclrtMemcpy.md).
  if (const aclError e = cann.synchronize_stream(launch.stream); e != 0) {
    return RuntimeFailure(cann, op, "aclrtSynchronizeStream (before reading the check)", e);
  }
  unsigned char host[16];
  if (const aclError e = cann.rt_memcpy(host, sizeof host, extremes.data(), 2 * width,
                                        ACL_MEMCPY_DEVICE_TO_HOST);
      e != 0) {
    return RuntimeFailure(cann, op, "aclrtMemcpy (the check's result to the host)", e);
  }
  int64_t low, high;
  if (wide) {
    std::memcpy(&low, host, 8);
    std::memcpy(&high, host + 8, 8);
  } else {
    int32_t v[2];
    std::memcpy(v, host, 8);
    low = v[0];
    high = v[1];
  }
  if (low >= 0 && high < g.out_plane()) return ffi::Error::Success();
  // Which index, and where: the CPU's message. Only on this error path are the indices
  // copied; the stream has drained, so they are final.
  const int64_t count = static_cast<int64_t>(indices.element_count());
  std::vector<unsigned char> copy(static_cast<size_t>(count) * width);
  if (const aclError e = cann.rt_memcpy(copy.data(), copy.size(), indices.untyped_data(),
                                        copy.size(), ACL_MEMCPY_DEVICE_TO_HOST);
      e != 0) {
    return RuntimeFailure(cann, op, "aclrtMemcpy (the indices to the host)", e);
  }
  if (ffi::Error e = FirstOutOfRange(op, g, copy.data(), wide, count); !e.success()) return e;
  return ffi::Error::Internal(std::string(op) + ": aclnnMin and aclnnMax gave indices " +
                              std::to_string(low) + " and " + std::to_string(high) +
                              ", outside [0, " + std::to_string(g.out_plane()) +
                              "), but the indices copied to the host have none");
}

}  // namespace jax_unpool::npu
