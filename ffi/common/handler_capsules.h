// How the extension modules (ffi/module.cc, ffi/cuda/module.cc) hand their FFI handlers to
// Python: a dict of target name -> capsule of the handler's address, which
// jax_unpool/backends/ registers with jax.ffi.register_ffi_target.
#pragma once

#include <nanobind/nanobind.h>

#include <initializer_list>
#include <utility>

#include "xla/ffi/api/c_api.h"

namespace jax_unpool {

inline nanobind::dict HandlerCapsules(
    std::initializer_list<std::pair<const char*, XLA_FFI_Handler*>> handlers) {
  nanobind::dict d;
  for (const auto& [name, handler] : handlers) {
    d[name] = nanobind::capsule(reinterpret_cast<void*>(handler));
  }
  return d;
}

}  // namespace jax_unpool
