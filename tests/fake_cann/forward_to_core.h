// Included by the forwarding libraries (libascendcl.so, libopapi.so): finds the
// libnnopbase.so that sits in the same directory as this library (as it was loaded, so
// through latest/'s symlinks) and returns its table. Where that directory has none (one
// directory per package), the libnnopbase.so already loaded, as a DT_NEEDED entry would
// resolve.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fake_cann.h"

namespace fakecann {
namespace {

const CoreTable &forward_core() {
  static const CoreTable *table = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&forward_core), &info) == 0 || !info.dli_fname) {
      std::fprintf(stderr, "fake CANN: dladdr failed, cannot locate libnnopbase.so\n");
      std::abort();
    }
    std::string path = info.dli_fname;
    const auto slash = path.rfind('/');
    path =
        (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/libnnopbase.so";
    void *handle = access(path.c_str(), F_OK) == 0
                       ? dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)
                       : dlopen("libnnopbase.so", RTLD_NOW | RTLD_NOLOAD);
    if (!handle) {
      std::fprintf(stderr, "fake CANN: cannot load %s: %s\n", path.c_str(), dlerror());
      std::abort();
    }
    using CoreFn = const CoreTable *(*)();
    auto fn = reinterpret_cast<CoreFn>(dlsym(handle, "fakecann_core"));
    const CoreTable *t = fn ? fn() : nullptr;
    if (!t || t->abi_version != kCoreAbiVersion) {
      std::fprintf(stderr, "fake CANN: %s has no matching fakecann_core table\n", path.c_str());
      std::abort();
    }
    return t;
  }();
  return *table;
}

}  // namespace
}  // namespace fakecann
