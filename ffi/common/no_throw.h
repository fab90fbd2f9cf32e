// No exception crosses the FFI boundary: every handler's body (CPU and CUDA) runs inside
// NoThrow.
#pragma once

#include <exception>
#include <string>

#include "common/value_types.h"
#include "xla/ffi/api/ffi.h"

namespace jax_unpool {

// body() -> ffi::Error; an exception (an allocation failure, e.g. while building a
// message) becomes INTERNAL naming op.
template <typename Body>
ffi::Error NoThrow(const char* op, Body body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(op) + ": " + e.what());
  } catch (...) {
    return ffi::Error::Internal(std::string(op) + ": unknown C++ exception");
  }
}

}  // namespace jax_unpool
