// What the aclnn unpool handlers do to the indices before the unpool op: CANN's
// aclnnMaxUnpool{2,3}d(Backward) do not range-check them (ScatterElements /
// GatherElements would write or read out of bounds), and the handlers trust nothing that
// Python checked, so every index CANN gets is inside its plane.
//   - The default targets: clamped into [0, plane - 1] by aclnnClamp, into memory of the
//     call (ClampIndices): no host round trip. An index below 0 reads or writes position
//     0, one past the plane the plane's last position. The only clamp: the NPU lowering
//     converts the indices' dtype where an op needs it, and clamps nothing (issue 47).
//     Host-emulation mode does the same on host memory, as a device would.
//   - The checked targets: OUT_OF_RANGE with the CPU handlers' message, at the cost of a
//     stream synchronisation per call on a device (CheckIndicesOnDevice); on the host
//     (CheckIndicesOnHost) in host-emulation mode.
#pragma once

#include "common/geometry.h"
#include "npu/aclnn_call.h"

namespace jax_unpool::npu {

// OUT_OF_RANGE for the first index (in flat order) outside its plane, as the CPU handlers
// say it; Success if there is none. Host memory only.
ffi::Error CheckIndicesOnHost(const char* op, const Geometry& g, const ffi::AnyBuffer& indices);

// `indices` clamped into [0, g.out_plane() - 1] by aclnnClamp on launch's stream into
// `*safe` (DeviceMemory of the indices' size, slot kIndices): the data the unpool op takes
// instead. FAILED_PRECONDITION where the loaded CANN lacks aclnnClamp or aclCreateScalar
// (nothing runs then).
ffi::Error ClampIndices(const CannLibrary& cann, const Launch& launch, const char* op,
                        const Geometry& g, const ffi::AnyBuffer& indices, aclDataType index_type,
                        DeviceMemory* safe);

// OUT_OF_RANGE, as CheckIndicesOnHost says it, if an index of `indices` (device memory) is
// outside [0, g.out_plane()): aclnnMin and aclnnMax on launch's stream into two elements of
// device memory, aclrtSynchronizeStream, and one copy of those two to the host; the indices
// themselves are copied (the stream drained already) only to name the first bad one.
// FAILED_PRECONDITION where the loaded CANN lacks aclnnMin, aclnnMax or aclrtMemcpy.
ffi::Error CheckIndicesOnDevice(const CannLibrary& cann, const Launch& launch, const char* op,
                                const Geometry& g, const ffi::AnyBuffer& indices,
                                aclDataType index_type);

}  // namespace jax_unpool::npu
