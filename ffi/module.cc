// The extension module does one thing: hand the FFI handler capsules to Python.
#include <nanobind/nanobind.h>

#include "cpu/kernels.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule Capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_jax_unpool, m) {
  m.def("cpu_registrations", []() {
    nb::dict d;
    d["max_unpool2d"] = Capsule(jax_unpool::MaxUnpool2dCpu);
    d["max_unpool2d_backward"] = Capsule(jax_unpool::MaxUnpool2dBackwardCpu);
    return d;
  });
}
