// libopapi.so (or libopapi_nn.so) of the emulated CANN: the aclnn entry points, forwarded
// to the state in libnnopbase.so.
#include "forward_to_core.h"

using fakecann::forward_core;

// build.py compiles this file once per opapi library of a layout; FAKECANN_OPS chooses
// which entry points the library holds: bit 0 the forward, bit 1 the backward.
#ifndef FAKECANN_OPS
#define FAKECANN_OPS 3
#endif

#if FAKECANN_OPS & 1

FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool2dGetWorkspaceSize(
    const aclTensor *self, const aclTensor *indices, const aclIntArray *outputSize, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor) {
  return forward_core().max_unpool2d_get_workspace_size(self, indices, outputSize, out,
                                                        workspaceSize, executor);
}

FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool2d(void *workspace, uint64_t workspaceSize,
                                             aclOpExecutor *executor, aclrtStream stream) {
  return forward_core().max_unpool2d(workspace, workspaceSize, executor, stream);
}

#endif

#if FAKECANN_OPS & 2
FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool2dBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *indices,
    const aclIntArray *outputSize, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor) {
  return forward_core().max_unpool2d_backward_get_workspace_size(
      gradOutput, self, indices, outputSize, out, workspaceSize, executor);
}

FAKECANN_EXPORT aclnnStatus aclnnMaxUnpool2dBackward(void *workspace, uint64_t workspaceSize,
                                                     aclOpExecutor *executor, aclrtStream stream) {
  return forward_core().max_unpool2d_backward(workspace, workspaceSize, executor, stream);
}
#endif
