# A pip build installs again what the previous one installed when nothing it is built from
# has changed, instead of compiling.
#
# pip builds in a new isolated environment every time, and scikit-build-core then clears
# CMake's cache and object files in its persistent build directory ([tool.scikit-build]
# build-dir in pyproject.toml; "New isolated environment ..., clearing cache" in
# scikit_build_core/cmake.py), so CMake's own incremental build never gets a chance: every
# `pip install '.[extra]'` compiled from scratch. So a pip build keeps the files it
# installs in the build directory, under a digest of everything they are built from, and
# the next build with the same digest installs those files. A fresh clone (no build
# directory) and any build outside pip (the sanitizer build, `cmake -B ...`) compile as
# always.

# What a build is made from: the sources and the build scripts, the compiler and its
# flags, the Python ABI, nanobind's version, the XLA FFI headers' contents, every
# JAX_UNPOOL_* option, and whether and for which GPUs the CUDA module is built. Whatever
# else comes to change the build (a new option, a new
# compiler language) belongs here too.
function(jax_unpool_build_digest out)
  file(GLOB_RECURSE _sources LIST_DIRECTORIES false RELATIVE "${PROJECT_SOURCE_DIR}"
       "${PROJECT_SOURCE_DIR}/ffi/*" "${PROJECT_SOURCE_DIR}/cmake/*")
  file(GLOB_RECURSE _headers LIST_DIRECTORIES false RELATIVE "${XLA_FFI_INCLUDE_DIR}"
       "${XLA_FFI_INCLUDE_DIR}/xla/ffi/*")
  set(_text "")
  foreach(_name IN LISTS _sources ITEMS CMakeLists.txt)
    file(SHA256 "${PROJECT_SOURCE_DIR}/${_name}" _hash)
    string(APPEND _text "${_name} ${_hash}\n")
  endforeach()
  foreach(_name IN LISTS _headers)
    file(SHA256 "${XLA_FFI_INCLUDE_DIR}/${_name}" _hash)
    string(APPEND _text "headers/${_name} ${_hash}\n")
  endforeach()
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --version
                  OUTPUT_VARIABLE _nanobind OUTPUT_STRIP_TRAILING_WHITESPACE
                  COMMAND_ERROR_IS_FATAL ANY)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _config)
  get_cmake_property(_variables CACHE_VARIABLES)
  list(FILTER _variables INCLUDE REGEX "^JAX_UNPOOL_")
  foreach(_variable IN ITEMS CMAKE_CXX_COMPILER CMAKE_CXX_COMPILER_ID
                             CMAKE_CXX_COMPILER_VERSION CMAKE_BUILD_TYPE CMAKE_CXX_FLAGS
                             CMAKE_CXX_FLAGS_${_config} CMAKE_SHARED_LINKER_FLAGS
                             CMAKE_MODULE_LINKER_FLAGS Python_SOABI _build_cuda
                             CMAKE_CUDA_COMPILER CMAKE_CUDA_ARCHITECTURES ${_variables})
    string(APPEND _text "${_variable}=${${_variable}}\n")
  endforeach()
  string(APPEND _text "nanobind=${_nanobind}\n")
  string(SHA256 _digest "${_text}")
  set(${out} "${_digest}" PARENT_SCOPE)
endfunction()

# Where the files of the last pip build are kept, one folder named by its digest.
set(JAX_UNPOOL_KEPT_ROOT "${CMAKE_BINARY_DIR}/kept-install")
if(SKBUILD)
  jax_unpool_build_digest(_jax_unpool_digest)
  message(STATUS "jax_unpool: digest of the build's inputs ${_jax_unpool_digest}")
  set(JAX_UNPOOL_KEPT "${JAX_UNPOOL_KEPT_ROOT}/${_jax_unpool_digest}")
endif()

# Whether this pip build can install the files kept from a build with the same inputs.
function(jax_unpool_can_reuse out)
  set(${out} FALSE PARENT_SCOPE)
  if(SKBUILD AND IS_DIRECTORY "${JAX_UNPOOL_KEPT}")
    message(STATUS "jax_unpool: nothing it is built from has changed since the last pip "
                   "build; installing its files from ${JAX_UNPOOL_KEPT}")
    set(${out} TRUE PARENT_SCOPE)
  endif()
endfunction()

# Installs the kept files.
function(jax_unpool_install_kept)
  install(DIRECTORY "${JAX_UNPOOL_KEPT}/" DESTINATION . USE_SOURCE_PERMISSIONS)
endfunction()

# At the end of a pip build's install: keeps what it installed (the files under the
# install prefix are this CMake project's alone; scikit-build-core adds the Python files
# later), unless they came from the kept folder.
function(jax_unpool_keep_install)
  if(NOT SKBUILD)
    return()
  endif()
  install(CODE "
    if(NOT IS_DIRECTORY \"${JAX_UNPOOL_KEPT}\")
      file(REMOVE_RECURSE \"${JAX_UNPOOL_KEPT_ROOT}\")
      file(COPY \"\${CMAKE_INSTALL_PREFIX}/\" DESTINATION \"${JAX_UNPOOL_KEPT}.partial\")
      file(RENAME \"${JAX_UNPOOL_KEPT}.partial\" \"${JAX_UNPOOL_KEPT}\")
    endif()")
endfunction()
