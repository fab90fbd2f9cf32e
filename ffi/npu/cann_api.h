// The slice of the CANN C API the aclnn handlers use, declared from the public headers'
// signatures (aclnn/acl_meta.h, acl/acl_base.h, aclnnop/aclnn_max_unpool{2,3}d*.h,
// aclnnop/aclnn_max_pool2d_with_indices.h, aclnnop/aclnn_max_pool3d_with_argmax.h,
// aclnnop/aclnn_clamp.h, aclnnop/aclnn_max.h, aclnnop/aclnn_min.h) so that
// the package builds without a CANN toolkit: the functions are resolved with dlsym at run
// time (cann_library.cc). The enums are C enums in CANN, hence int-sized here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace jax_unpool::cann {

using aclnnStatus = int32_t;
using aclError = int;
using aclrtStream = void*;
using aclDataType = int32_t;
using aclFormat = int32_t;

struct aclTensor;  // opaque, owned by CANN
struct aclIntArray;
struct aclScalar;
struct aclOpExecutor;

// aclDataType values.
enum : aclDataType {
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_INT64 = 9,
  ACL_DOUBLE = 11,
  ACL_BF16 = 27,
};

// aclFormat values.
enum : aclFormat { ACL_FORMAT_ND = 2 };

// aclnn status codes: #defines of an internal CANN header, so spelled out here.
enum : aclnnStatus {
  ACLNN_SUCCESS = 0,
  ACLNN_ERR_PARAM_NULLPTR = 161001,
  ACLNN_ERR_PARAM_INVALID = 161002,
  ACLNN_ERR_RUNTIME_ERROR = 361001,
  ACLNN_ERR_INNER = 561000,
};

// The status code's name, e.g. "ACLNN_ERR_PARAM_INVALID"; "unknown status" otherwise.
inline const char* StatusName(aclnnStatus status) {
  switch (status) {
    case 0: return "ACLNN_SUCCESS";
    case 161001: return "ACLNN_ERR_PARAM_NULLPTR";
    case 161002: return "ACLNN_ERR_PARAM_INVALID";
    case 361001: return "ACLNN_ERR_RUNTIME_ERROR";
    case 561000: return "ACLNN_ERR_INNER";
    case 561001: return "ACLNN_ERR_INNER_INFERSHAPE_ERROR";
    case 561002: return "ACLNN_ERR_INNER_TILING_ERROR";
    case 561003: return "ACLNN_ERR_INNER_FIND_KERNEL_ERROR (is the op binary package installed?)";
    case 561101: return "ACLNN_ERR_INNER_CREATE_EXECUTOR";
    case 561102: return "ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR";
    case 561103: return "ACLNN_ERR_INNER_NULLPTR";
    case 561104: return "ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE";
    case 561105: return "ACLNN_ERR_INNER_KEY_CONFLICT";
    case 561106: return "ACLNN_ERR_INNER_INVALID_IMPL_MODE";
    case 561107: return "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND (is ASCEND_OPP_PATH set?)";
    case 561108: return "ACLNN_ERR_INNER_LOAD_JSON_FAILED";
    case 561109: return "ACLNN_ERR_INNER_JSON_VALUE_NOT_FOUND";
    case 561110: return "ACLNN_ERR_INNER_JSON_FORMAT_INVALID";
    case 561111: return "ACLNN_ERR_INNER_JSON_DTYPE_INVALID";
    case 561112: return "ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND";
    default: return "unknown status";
  }
}

// libnnopbase.so
using CreateTensorFn = aclTensor* (*)(const int64_t* view_dims, uint64_t view_dims_num,
                                      aclDataType data_type, const int64_t* stride,
                                      int64_t offset, aclFormat format,
                                      const int64_t* storage_dims, uint64_t storage_dims_num,
                                      void* tensor_data);
using DestroyTensorFn = aclnnStatus (*)(const aclTensor* tensor);
using CreateIntArrayFn = aclIntArray* (*)(const int64_t* value, uint64_t size);
using DestroyIntArrayFn = aclnnStatus (*)(const aclIntArray* array);
// An executor that will not run is released by these two, in this order: CANN's docs of
// aclDestroyAclOpExecutor (CANN 8.0 to 9.0, "Common APIs") allow it only for an executor
// made repeatable.
using SetExecutorRepeatableFn = aclnnStatus (*)(aclOpExecutor* executor);
using DestroyExecutorFn = aclnnStatus (*)(aclOpExecutor* executor);
// A host-side scalar: CANN copies the value of `data_type` at `value` (acl_meta.h).
using CreateScalarFn = aclScalar* (*)(void* value, aclDataType data_type);
using DestroyScalarFn = aclnnStatus (*)(const aclScalar* scalar);

// libascendcl.so
using GetRecentErrMsgFn = const char* (*)();
using SynchronizeStreamFn = aclError (*)(aclrtStream stream);
using RtMallocFn = aclError (*)(void** dev_ptr, size_t size, int policy);
using RtFreeFn = aclError (*)(void* dev_ptr);
// Synchronous copy; `kind` is an aclrtMemcpyKind (a C enum: HOST_TO_HOST 0, HOST_TO_DEVICE
// 1, DEVICE_TO_HOST 2, DEVICE_TO_DEVICE 3). It does not wait for any stream: synchronise
// the one whose kernels write `src` first.
using MemcpyFn = aclError (*)(void* dst, size_t dest_max, const void* src, size_t count,
                              int kind);
constexpr int ACL_MEMCPY_DEVICE_TO_HOST = 2;
using aclrtContext = void*;
using GetCurrentContextFn = aclError (*)(aclrtContext* context);
// The device of the calling thread's current context (acl_rt.h: "获取当前正在使用的Device的
// ID"). CANN has no public query of a stream's device or context: aclrtGetStreamAttribute
// reports failure mode, overflow check, tag, op-info cache and priority only (hicann/runtime
// include/external/acl/acl_rt.h).
using GetDeviceFn = aclError (*)(int32_t* device_id);
// The chip's SoC name (e.g. "Ascend910B1"), nullptr if the runtime cannot tell
// (hicann/runtime include/external/acl/acl_base_rt.h; src/acl/aclrt_impl/acl_rt_impl_base.cpp
// returns rtGetSocVersion's process-wide name, the SoC_version of the chip's platform config).
using GetSocNameFn = const char* (*)();
// aclrtGetCurrentContext's error when the calling thread has no context (acl_base.h).
constexpr aclError ACL_ERROR_RT_CONTEXT_NULL = 107002;
constexpr int ACL_MEM_MALLOC_HUGE_FIRST = 0;

// the aclnn op library (libopapi_nn.so, libopapi.so or libaclnn_ops_{train,infer}.so)
using MaxUnpool2dGetWorkspaceSizeFn = aclnnStatus (*)(const aclTensor* self,
                                                      const aclTensor* indices,
                                                      const aclIntArray* output_size,
                                                      aclTensor* out, uint64_t* workspace_size,
                                                      aclOpExecutor** executor);
using MaxUnpool2dBackwardGetWorkspaceSizeFn = aclnnStatus (*)(
    const aclTensor* grad_output, const aclTensor* self, const aclTensor* indices,
    const aclIntArray* output_size, aclTensor* out, uint64_t* workspace_size,
    aclOpExecutor** executor);
// stride and padding: validated by CANN, not used in the computation.
using MaxUnpool3dGetWorkspaceSizeFn = aclnnStatus (*)(
    const aclTensor* self, const aclTensor* indices, const aclIntArray* output_size,
    const aclIntArray* stride, const aclIntArray* padding, aclTensor* out,
    uint64_t* workspace_size, aclOpExecutor** executor);
using MaxUnpool3dBackwardGetWorkspaceSizeFn = aclnnStatus (*)(
    const aclTensor* grad_output, const aclTensor* self, const aclTensor* indices,
    const aclIntArray* output_size, const aclIntArray* stride, const aclIntArray* padding,
    aclTensor* out, uint64_t* workspace_size, aclOpExecutor** executor);
// aclnnMaxPool2dWithIndices and aclnnMaxPool3dWithArgmax: the same signature; kernelSize,
// stride, padding and dilation of 1 or k elements (stride also 0: the kernel's).
using MaxPoolGetWorkspaceSizeFn = aclnnStatus (*)(
    const aclTensor* self, const aclIntArray* kernel_size, const aclIntArray* stride,
    const aclIntArray* padding, const aclIntArray* dilation, bool ceil_mode, aclTensor* out,
    aclTensor* indices, uint64_t* workspace_size, aclOpExecutor** executor);
// ops-math (libopapi_math.so, libopapi.so or libaclnn_math.so; `@domain aclnn_math` in
// hicann/ops-math's headers): aclnnClamp, out = min(max(self, clipValueMin), clipValueMax)
// (conversion/clip_by_value_v2/op_api/aclnn_clamp.cpp), and aclnnMax / aclnnMin, the
// largest / smallest element of self into a 0-d out (math/reduce_max, reduce_min).
using ClampGetWorkspaceSizeFn = aclnnStatus (*)(const aclTensor* self,
                                                const aclScalar* clip_value_min,
                                                const aclScalar* clip_value_max, aclTensor* out,
                                                uint64_t* workspace_size,
                                                aclOpExecutor** executor);
using ReduceAllGetWorkspaceSizeFn = aclnnStatus (*)(const aclTensor* self, aclTensor* out,
                                                    uint64_t* workspace_size,
                                                    aclOpExecutor** executor);
using AclnnRunFn = aclnnStatus (*)(void* workspace, uint64_t workspace_size,
                                   aclOpExecutor* executor, aclrtStream stream);

}  // namespace jax_unpool::cann
