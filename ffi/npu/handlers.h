// The aclnn handlers (XLA FFI, typed API): (values, indices) -> out. The 2-D ones take the
// `channels_last` attribute, the same calling convention as the CPU handlers; the 3-D
// ones (MaxUnpool3d*) refuse any attribute: channels-first (C, D, H, W) or
// (N, C, D, H, W) buffers.
// The pools (MaxPool2d*, MaxPool3d*): x -> (values, indices), with the window attributes
// kernel_size, stride, padding, dilation (k elements each), ceil_mode and channels_last.
// *Device: for a PJRT plugin platform (e.g. "ascend"): XLA's stream, XLA scratch memory;
// the unpools' indices clamped into their plane there. *DeviceChecked (unpools): the same,
// but an index outside its plane fails the call (OUT_OF_RANGE) -- a stream sync per call.
// *Host, *HostChecked: the same in host-emulation mode on the CPU platform: host memory, no
// stream (the CPU platform has none to give), for testing against an emulated CANN.
#pragma once

#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace jax_unpool::npu {

XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dAclnnDeviceChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dAclnnHostChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnDeviceChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnHostChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dAclnnDeviceChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dAclnnHostChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnDeviceChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnHostChecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool2dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool2dAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool3dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool3dAclnnHost);

// What the loaded CANN takes, as GetWorkspaceSize answers on the calling thread (nothing
// runs; each executor is released as CANN documents, aclnn_call.h's Takes). Empty when
// the op is absent or no CANN is loaded.
//
// The value dtypes ("float16", "bfloat16", "float32") for which the pool op of spatial
// rank k (2 or 3) accepts a small pool with INT32 indices. Versions differ: CANN
// 8.0.RC2's aclnnMaxPool2dWithIndices takes FLOAT only, newer ones FLOAT16 and BF16 too.
// {"float32"} unasked where no executor can be released.
std::vector<std::string> AcceptedPoolDtypes(int k);
// The index dtypes ("int32", "int64") aclnnClamp takes, with which the unpool handlers make
// indices safe: int64 on the 910B AI Core is listed in ops-math but unverified.
std::vector<std::string> ClampIndexDtypes();
// The index dtypes aclnnMaxUnpool2d takes: CANN before 8.0.0 took INT64 only.
std::vector<std::string> ForwardIndexDtypes();
// Both of these say {"int32", "int64"} where CANN refuses both or cannot be asked (no
// context on the calling thread, no way to release an executor): every call then gets
// CANN's own answer, as before it was asked.

}  // namespace jax_unpool::npu
