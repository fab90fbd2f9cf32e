// The CPU handlers (XLA FFI, typed API). All take (values, indices) -> out and the
// `channels_last` attribute; see max_unpool.cc and max_unpool_backward.cc. The *2d*
// ones are the 2-D _v1 targets; MaxUnpoolCpu and MaxUnpoolBackwardCpu (the _v2 targets)
// also take `spatial_rank` (1, 2 or 3) and serve every rank. MaxPoolCpu (max_pool.cc) is
// the pool: x -> (values, indices), with its window as attributes.
//
// Window offsets (common/window_offsets.h): MaxPoolWindowCpu is the pool writing uint8
// offsets; MaxUnpoolWindowCpu (max_unpool_window.cc) and MaxUnpoolBackwardWindowCpu
// (max_unpool_backward_window.cc) take (values, offsets) -> out with the pool's window as
// attributes; WindowIndicesCpu (window_offsets.cc) converts flat indices to offsets.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpool2dBackwardCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolBackwardCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPoolCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxPoolWindowCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolWindowCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxUnpoolBackwardWindowCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(WindowIndicesCpu);

}  // namespace jax_unpool
