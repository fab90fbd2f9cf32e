// The extension module _jax_unpool: each platform's part registers its functions
// (cpu/module.cc, npu/module.cc); the CUDA kernels are a module of their own
// (cuda/module.cc), built only with a CUDA compiler.
#include <nanobind/nanobind.h>

namespace jax_unpool {
void RegisterCpu(nanobind::module_& m);
namespace npu {
void RegisterNpu(nanobind::module_& m);
}  // namespace npu
}  // namespace jax_unpool

NB_MODULE(_jax_unpool, m) {
  jax_unpool::RegisterCpu(m);
  jax_unpool::npu::RegisterNpu(m);
}
