// The aclnn handlers (XLA FFI, typed API): (values, indices) -> out. The 2-D ones take the
// `channels_last` attribute, the same calling convention as the CPU handlers; the 3-D
// ones (MaxUnpool3d*) refuse any attribute: channels-first (C, D, H, W) or
// (N, C, D, H, W) buffers.
// The pools (MaxPool2d*, MaxPool3d*): x -> (values, indices), with the window attributes
// kernel_size, stride, padding, dilation (k elements each), ceil_mode and channels_last.
// *Device: for a PJRT plugin platform (e.g. "ascend"): XLA's stream, XLA scratch memory.
// *Host: host-emulation mode on the CPU platform: host memory, no stream (the CPU
// platform has none to give), for testing against an emulated CANN.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jax_unpool::npu {

XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool2dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool2dAclnnHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool3dAclnnDevice);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPool3dAclnnHost);

}  // namespace jax_unpool::npu
