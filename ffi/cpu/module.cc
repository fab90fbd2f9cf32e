// The CPU part of the extension module _jax_unpool (ffi/module.cc): the CPU handlers'
// capsules, which jax_unpool/backends/cpu.py registers for platform "cpu".
#include <nanobind/nanobind.h>

#include "common/handler_capsules.h"
#include "cpu/handlers.h"
#include "cpu/simd.h"

namespace jax_unpool {

void RegisterCpu(nanobind::module_& m) {
  m.def("cpu_registrations", []() {
    // Entry<Handler> static_asserts that Handler has the FFI handler's signature.
    return HandlerCapsules({
        Entry<MaxUnpool2dCpu>("max_unpool2d"),
        Entry<MaxUnpool2dBackwardCpu>("max_unpool2d_backward"),
        Entry<MaxUnpoolCpu>("max_unpool"),
        Entry<MaxUnpoolBackwardCpu>("max_unpool_backward"),
        Entry<MaxPoolCpu>("max_pool"),
        Entry<MaxPoolWindowCpu>("max_pool_window"),
        Entry<MaxUnpoolWindowCpu>("max_unpool_window"),
        Entry<MaxUnpoolBackwardWindowCpu>("max_unpool_backward_window"),
        Entry<WindowIndicesCpu>("window_offsets"),
    });
  });
  // How the CPU unpool backward gathers 4- and 8-byte values: "avx2" (vpgather*) or
  // "scalar" (loads), by CPU and JAX_UNPOOL_CPU_GATHER (cpu/simd.h).
  m.def("cpu_gather", []() { return UseVectorGathers() ? "avx2" : "scalar"; });
}

}  // namespace jax_unpool
