// libopapi.so (or libopapi_nn.so) of the emulated CANN: the aclnn entry points, forwarded
// to the state in libnnopbase.so.
#include "forward_to_core.h"

using fakecann::forward_core;

// build.py compiles this file once per opapi library of a layout; FAKECANN_OPS chooses
// which entry points the library holds: bit 0 the 2-D forward, bit 1 the 2-D backward,
// bit 2 the 3-D forward, bit 3 the 3-D backward, bit 4 aclnnMaxPool2dWithIndices, bit 5
// aclnnMaxPool3dWithArgmax, bit 6 the ops-math ops aclnnClamp, aclnnMax and aclnnMin.
#ifndef FAKECANN_OPS
#define FAKECANN_OPS 127
#endif

// The second phase of every op has one signature, and so have the two pools' first.
#define FAKECANN_FORWARD_RUN(name, member)                                                        \
  FAKECANN_EXPORT aclnnStatus name(void *workspace, uint64_t workspaceSize,                       \
                                   aclOpExecutor *executor, aclrtStream stream) {                 \
    return forward_core().member(workspace, workspaceSize, executor, stream);                     \
  }
#define FAKECANN_FORWARD_POOL_GWS(name, member)                                                   \
  FAKECANN_EXPORT aclnnStatus name(const aclTensor *self, const aclIntArray *kernelSize,          \
                                   const aclIntArray *stride, const aclIntArray *padding,         \
                                   const aclIntArray *dilation, bool ceilMode,                    \
                                   aclTensor *out, aclTensor *indices,                            \
                                   uint64_t *workspaceSize, aclOpExecutor **executor) {           \
    return forward_core().member(self, kernelSize, stride, padding, dilation, ceilMode,           \
                                 out, indices, workspaceSize, executor);                          \
  }

#if FAKECANN_OPS & 1

FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool2dGetWorkspaceSize(
    const aclTensor *self, const aclTensor *indices, const aclIntArray *outputSize, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor) {
  return forward_core().max_unpool2d_get_workspace_size(self, indices, outputSize, out,
                                                        workspaceSize, executor);
}

FAKECANN_FORWARD_RUN(aclnnMaxUnpool2d, max_unpool2d)

#endif

#if FAKECANN_OPS & 2
FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool2dBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *indices,
    const aclIntArray *outputSize, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor) {
  return forward_core().max_unpool2d_backward_get_workspace_size(
      gradOutput, self, indices, outputSize, out, workspaceSize, executor);
}

FAKECANN_FORWARD_RUN(aclnnMaxUnpool2dBackward, max_unpool2d_backward)
#endif

#if FAKECANN_OPS & 4
FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool3dGetWorkspaceSize(
    const aclTensor *self, const aclTensor *indices, const aclIntArray *outputSize,
    const aclIntArray *stride, const aclIntArray *padding, aclTensor *outRef,
    uint64_t *workspaceSize, aclOpExecutor **executor) {
  return forward_core().max_unpool3d_get_workspace_size(self, indices, outputSize, stride, padding,
                                                        outRef, workspaceSize, executor);
}

FAKECANN_FORWARD_RUN(aclnnMaxUnpool3d, max_unpool3d)
#endif

#if FAKECANN_OPS & 8
FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool3dBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *indices,
    const aclIntArray *outputSize, const aclIntArray *stride, const aclIntArray *padding,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) {
  return forward_core().max_unpool3d_backward_get_workspace_size(
      gradOutput, self, indices, outputSize, stride, padding, out, workspaceSize, executor);
}

FAKECANN_FORWARD_RUN(aclnnMaxUnpool3dBackward, max_unpool3d_backward)
#endif

#if FAKECANN_OPS & 16
FAKECANN_FORWARD_POOL_GWS(aclnnMaxPool2dWithIndicesGetWorkspaceSize,
                          max_pool2d_with_indices_get_workspace_size)

FAKECANN_FORWARD_RUN(aclnnMaxPool2dWithIndices, max_pool2d_with_indices)
#endif

#if FAKECANN_OPS & 32
FAKECANN_FORWARD_POOL_GWS(aclnnMaxPool3dWithArgmaxGetWorkspaceSize,
                          max_pool3d_with_argmax_get_workspace_size)

FAKECANN_FORWARD_RUN(aclnnMaxPool3dWithArgmax, max_pool3d_with_argmax)
#endif

#if FAKECANN_OPS & 64
FAKECANN_EXPORT aclnnStatus aclnnClampGetWorkspaceSize(const aclTensor *self,
                                                       const aclScalar *clipValueMin,
                                                       const aclScalar *clipValueMax,
                                                       aclTensor *out, uint64_t *workspaceSize,
                                                       aclOpExecutor **executor) {
  return forward_core().clamp_get_workspace_size(self, clipValueMin, clipValueMax, out,
                                                 workspaceSize, executor);
}

FAKECANN_FORWARD_RUN(aclnnClamp, clamp)

FAKECANN_EXPORT aclnnStatus aclnnMaxGetWorkspaceSize(const aclTensor *self, aclTensor *out,
                                                     uint64_t *workspaceSize,
                                                     aclOpExecutor **executor) {
  return forward_core().max_get_workspace_size(self, out, workspaceSize, executor);
}

FAKECANN_FORWARD_RUN(aclnnMax, max)

FAKECANN_EXPORT aclnnStatus aclnnMinGetWorkspaceSize(const aclTensor *self, aclTensor *out,
                                                     uint64_t *workspaceSize,
                                                     aclOpExecutor **executor) {
  return forward_core().min_get_workspace_size(self, out, workspaceSize, executor);
}

FAKECANN_FORWARD_RUN(aclnnMin, min)
#endif
