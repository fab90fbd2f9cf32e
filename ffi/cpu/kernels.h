// The CPU handlers (XLA FFI, typed API). Both take (values, indices) -> out and the
// `channels_last` attribute; see max_unpool2d.cc and max_unpool2d_backward.cc.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardCpu);

}  // namespace jax_unpool
