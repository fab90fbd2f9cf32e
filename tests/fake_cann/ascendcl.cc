// libascendcl.so of the emulated CANN: forwards to the state in libnnopbase.so.
#include "forward_to_core.h"

using fakecann::forward_core;

FAKECANN_EXPORT const char *aclGetRecentErrMsg() { return forward_core().get_recent_err_msg(); }

FAKECANN_EXPORT aclError aclrtMalloc(void **devPtr, size_t size, int policy) {
  return forward_core().rt_malloc(devPtr, size, policy);
}

FAKECANN_EXPORT aclError aclrtFree(void *devPtr) { return forward_core().rt_free(devPtr); }

FAKECANN_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream) {
  return forward_core().rt_synchronize_stream(stream);
}

FAKECANN_EXPORT aclError aclrtGetCurrentContext(void **context) {
  return forward_core().rt_get_current_context(context);
}

FAKECANN_EXPORT const char *aclrtGetSocName() { return forward_core().rt_get_soc_name(); }

FAKECANN_EXPORT aclError aclrtGetDevice(int32_t *deviceId) {
  return forward_core().rt_get_device(deviceId);
}

FAKECANN_EXPORT aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                                     int kind) {
  return forward_core().rt_memcpy(dst, destMax, src, count, kind);
}
