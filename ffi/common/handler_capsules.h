// How the extension modules (cpu/module.cc, npu/module.cc, cuda/module.cc) hand their FFI
// handlers to Python: a dict of target name -> capsule of the handler's address, which
// jax_unpool/backends/ registers with jax.ffi.register_ffi_target.
#pragma once

#include <nanobind/nanobind.h>

#include <initializer_list>
#include <type_traits>
#include <utility>

#include "xla/ffi/api/c_api.h"

namespace jax_unpool {

using HandlerEntry = std::pair<const char*, XLA_FFI_Handler*>;

// `name` -> Handler, where Handler has the FFI handler's signature, as jax's examples/ffi
// asserts: a capsule of anything else would crash XLA at the call, not here.
template <auto Handler>
HandlerEntry Entry(const char* name) {
  static_assert(std::is_same_v<decltype(Handler), XLA_FFI_Handler*>,
                "a handler capsule must hold an XLA_FFI_Handler");
  return {name, Handler};
}

inline nanobind::capsule HandlerCapsule(XLA_FFI_Handler* handler) {
  return nanobind::capsule(reinterpret_cast<void*>(handler));
}

inline nanobind::dict HandlerCapsules(std::initializer_list<HandlerEntry> handlers) {
  nanobind::dict d;
  for (const auto& [name, handler] : handlers) d[name] = HandlerCapsule(handler);
  return d;
}

}  // namespace jax_unpool
