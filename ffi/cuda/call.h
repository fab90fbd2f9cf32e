// What every CUDA handler body shares (unpool_call.h, pool_call.h): the device they run
// on, and the rule that no exception crosses the FFI boundary.
//
// A device has Forward / Gather / FindFirstBad / Pool / WindowIndices(launch), which launch a plan
// (unpool_plan.h, pool_plan.h) without waiting for it, Zero(device pointer, bytes),
// CopyToHost(host, device, bytes), which waits for the copy, and Status(op): the first
// failure of any of them as an ffi::Error. gpu_stream.h is the GPU on XLA's stream; the
// host emulation (tests/backends/cuda/emulation.cc) runs the plans with a looping launcher.
#pragma once

#include "common/no_throw.h"  // NoThrow, shared with the CPU handlers
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {
namespace cuda {

namespace ffi = xla::ffi;

}  // namespace cuda
}  // namespace jax_unpool
