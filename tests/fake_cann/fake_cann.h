// Emulated CANN runtime for testing jax-unpool's aclnn path without an Ascend device.
//
// The CANN types below are declared from the public headers' signatures (see
// shared/notes/cann-api.md). The three libraries share one state: libnnopbase.so holds it
// and exports `fakecann_core()`, a table of the functions that the real CANN puts in
// libascendcl.so and libopapi.so; those two libraries forward to it. Each forwarding
// library finds the libnnopbase.so of its own directory at first use (dladdr + dlopen by
// full path, dlsym on that handle), so two builds loaded into one process never share or
// mix state, whatever the RTLD_GLOBAL/LOCAL flags of the loader under test.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
typedef int32_t aclnnStatus;
typedef int aclError;
typedef void *aclrtStream;
typedef struct aclTensor aclTensor;
typedef struct aclIntArray aclIntArray;
typedef struct aclScalar aclScalar;
typedef struct aclOpExecutor aclOpExecutor;
typedef int32_t aclDataType;  // an enum in CANN; int-sized
typedef int32_t aclFormat;    // an enum in CANN; int-sized
}

namespace fakecann {

enum : int32_t {
  kFloat = 0,
  kFloat16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kUint8 = 4,
  kInt16 = 6,
  kUint16 = 7,
  kUint32 = 8,
  kInt64 = 9,
  kUint64 = 10,
  kDouble = 11,
  kBool = 12,
  kBf16 = 27,
};
enum : int32_t { kFormatNchw = 0, kFormatNhwc = 1, kFormatNd = 2 };

constexpr aclnnStatus kSuccess = 0;
constexpr aclnnStatus kErrParamNullptr = 161001;
constexpr aclnnStatus kErrParamInvalid = 161002;
constexpr aclnnStatus kErrRuntime = 361001;
constexpr aclnnStatus kErrInner = 561000;
constexpr aclnnStatus kErrInnerNullptr = 561103;  // an l0op gave no tensor
constexpr aclError kAclErrInvalidParam = 100000;   // ACL_ERROR_INVALID_PARAM
constexpr aclError kAclErrMemAllocation = 207001;  // ACL_ERROR_RT_MEMORY_ALLOCATION
constexpr aclError kAclErrContextNull = 107002;    // ACL_ERROR_RT_CONTEXT_NULL

// The aclnn ops' signatures. GetWorkspaceSize differs per op (the two pools share one);
// the second phase, which runs the executor, is the same for all.
using MaxUnpool2dGws = aclnnStatus (*)(const aclTensor *self, const aclTensor *indices,
                                       const aclIntArray *output_size, aclTensor *out,
                                       uint64_t *workspace_size, aclOpExecutor **executor);
using MaxUnpool2dBackwardGws = aclnnStatus (*)(const aclTensor *grad_output,
                                               const aclTensor *self, const aclTensor *indices,
                                               const aclIntArray *output_size, aclTensor *out,
                                               uint64_t *workspace_size,
                                               aclOpExecutor **executor);
using MaxUnpool3dGws = aclnnStatus (*)(const aclTensor *self, const aclTensor *indices,
                                       const aclIntArray *output_size, const aclIntArray *stride,
                                       const aclIntArray *padding, aclTensor *out,
                                       uint64_t *workspace_size, aclOpExecutor **executor);
using MaxUnpool3dBackwardGws = aclnnStatus (*)(
    const aclTensor *grad_output, const aclTensor *self, const aclTensor *indices,
    const aclIntArray *output_size, const aclIntArray *stride, const aclIntArray *padding,
    aclTensor *out, uint64_t *workspace_size, aclOpExecutor **executor);
// aclnnMaxPool2dWithIndices and aclnnMaxPool3dWithArgmax.
using MaxPoolGws = aclnnStatus (*)(const aclTensor *self, const aclIntArray *kernel_size,
                                   const aclIntArray *stride, const aclIntArray *padding,
                                   const aclIntArray *dilation, bool ceil_mode, aclTensor *out,
                                   aclTensor *indices, uint64_t *workspace_size,
                                   aclOpExecutor **executor);
// ops-math: aclnnClamp, and aclnnMax / aclnnMin (reduce every element).
using ClampGws = aclnnStatus (*)(const aclTensor *self, const aclScalar *clip_value_min,
                                 const aclScalar *clip_value_max, aclTensor *out,
                                 uint64_t *workspace_size, aclOpExecutor **executor);
using ReduceGws = aclnnStatus (*)(const aclTensor *self, aclTensor *out,
                                  uint64_t *workspace_size, aclOpExecutor **executor);
using RunPhase = aclnnStatus (*)(void *workspace, uint64_t workspace_size,
                                 aclOpExecutor *executor, aclrtStream stream);

// Functions of libascendcl.so and libopapi.so, implemented in libnnopbase.so.
struct CoreTable {
  uint32_t abi_version;
  const char *(*get_recent_err_msg)();
  aclError (*rt_malloc)(void **dev_ptr, size_t size, int policy);
  aclError (*rt_free)(void *dev_ptr);
  aclError (*rt_synchronize_stream)(aclrtStream stream);
  aclError (*rt_get_current_context)(void **context);
  MaxUnpool2dGws max_unpool2d_get_workspace_size;
  RunPhase max_unpool2d;
  MaxUnpool2dBackwardGws max_unpool2d_backward_get_workspace_size;
  RunPhase max_unpool2d_backward;
  MaxUnpool3dGws max_unpool3d_get_workspace_size;
  RunPhase max_unpool3d;
  MaxUnpool3dBackwardGws max_unpool3d_backward_get_workspace_size;
  RunPhase max_unpool3d_backward;
  MaxPoolGws max_pool2d_with_indices_get_workspace_size;
  RunPhase max_pool2d_with_indices;
  MaxPoolGws max_pool3d_with_argmax_get_workspace_size;
  RunPhase max_pool3d_with_argmax;
  const char *(*rt_get_soc_name)();  // aclrtGetSocName, of libascendcl.so
  aclError (*rt_get_device)(int32_t *device_id);  // aclrtGetDevice, of libascendcl.so
  aclError (*rt_memcpy)(void *dst, size_t dest_max, const void *src, size_t count,
                        int kind);  // aclrtMemcpy, of libascendcl.so
  ClampGws clamp_get_workspace_size;
  RunPhase clamp;
  ReduceGws max_get_workspace_size;
  RunPhase max;
  ReduceGws min_get_workspace_size;
  RunPhase min;
};
constexpr uint32_t kCoreAbiVersion = 7;

}  // namespace fakecann

#define FAKECANN_EXPORT extern "C" __attribute__((visibility("default")))
