#include "npu/cann_library.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace jax_unpool::cann {
namespace {

constexpr const char* kAscendcl = "libascendcl.so";
constexpr const char* kNnopbase = "libnnopbase.so";
// Where the aclnn symbols may live, in lookup order.
constexpr const char* kOpapiNames[] = {"libcust_opapi.so", "libopapi.so", "libopapi_nn.so"};
constexpr const char* kEnvVars[] = {"ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"};

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::string DlError() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// The resolved path of the file that defines `symbol`.
std::string FileOf(void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "(unknown file)";
  char buf[PATH_MAX];
  return realpath(info.dli_fname, buf) ? buf : info.dli_fname;
}

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn) {
  void* p = dlsym(handle, name);
  if (p == nullptr) return false;
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

// Opens the three parts (full paths, or bare names for the loader's search) and resolves
// every symbol the handlers use. On failure returns nullopt and says why in *why.
std::optional<CannLibrary> Open(const std::string& ascendcl, const std::string& nnopbase,
                                const std::vector<std::string>& opapis, std::string* why) {
  // RTLD_LOCAL: CANN's symbols stay out of the global namespace (other copies, e.g.
  // torch_npu's, may be loaded). Dependencies first, so that the opapi library's
  // DT_NEEDED entries match the already loaded ones.
  void* acl = dlopen(ascendcl.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (acl == nullptr) {
    *why = DlError();
    return std::nullopt;
  }
  void* nnop = dlopen(nnopbase.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nnop == nullptr) {
    *why = DlError();
    return std::nullopt;
  }
  std::vector<void*> ops;
  std::vector<std::string> op_errors;
  for (const std::string& name : opapis) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      ops.push_back(h);
    } else {
      op_errors.push_back(DlError());
    }
  }
  if (ops.empty()) {
    *why = "no aclnn library could be opened: " + Join(op_errors, "; ");
    return std::nullopt;
  }

  CannLibrary lib;
  std::vector<std::string> missing;
  auto need = [&](void* handle, const char* name, auto* fn) {
    if (!Resolve(handle, name, fn)) missing.push_back(name);
  };
  auto need_aclnn = [&](const char* name, auto* fn) {
    for (void* h : ops) {
      if (Resolve(h, name, fn)) return;
    }
    missing.push_back(name);
  };
  need(nnop, "aclCreateTensor", &lib.create_tensor);
  need(nnop, "aclDestroyTensor", &lib.destroy_tensor);
  need(nnop, "aclCreateIntArray", &lib.create_int_array);
  need(nnop, "aclDestroyIntArray", &lib.destroy_int_array);
  Resolve(nnop, "aclDestroyAclOpExecutor", &lib.destroy_executor);
  need(acl, "aclGetRecentErrMsg", &lib.get_recent_err_msg);
  need(acl, "aclrtSynchronizeStream", &lib.synchronize_stream);
  need(acl, "aclrtMalloc", &lib.rt_malloc);
  need(acl, "aclrtFree", &lib.rt_free);
  need_aclnn("aclnnMaxUnpool2dGetWorkspaceSize", &lib.max_unpool2d_get_workspace_size);
  need_aclnn("aclnnMaxUnpool2d", &lib.max_unpool2d);
  need_aclnn("aclnnMaxUnpool2dBackwardGetWorkspaceSize",
             &lib.max_unpool2d_backward_get_workspace_size);
  need_aclnn("aclnnMaxUnpool2dBackward", &lib.max_unpool2d_backward);
  if (!missing.empty()) {
    *why = "missing symbols: " + Join(missing, ", ");
    return std::nullopt;
  }

  lib.ascendcl_path = FileOf(reinterpret_cast<void*>(lib.get_recent_err_msg));
  lib.nnopbase_path = FileOf(reinterpret_cast<void*>(lib.create_tensor));
  std::vector<std::string> opapi_files;
  for (void* fn : {reinterpret_cast<void*>(lib.max_unpool2d_get_workspace_size),
                   reinterpret_cast<void*>(lib.max_unpool2d),
                   reinterpret_cast<void*>(lib.max_unpool2d_backward_get_workspace_size),
                   reinterpret_cast<void*>(lib.max_unpool2d_backward)}) {
    std::string file = FileOf(fn);
    bool seen = false;
    for (const std::string& f : opapi_files) seen = seen || f == file;
    if (!seen) opapi_files.push_back(file);
  }
  lib.opapi_path = Join(opapi_files, ", ");
  return lib;
}

// Tries the directories of the search order, then the loader's path.
LoadResult Locate(const std::string& library_dir) {
  struct Candidate {
    std::string dir, origin, unset;  // `unset`: the env var naming it is not set
  };
  std::vector<Candidate> candidates;
  if (!library_dir.empty()) candidates.push_back({library_dir, "library_dir argument", ""});
  for (const char* var : kEnvVars) {
    const std::string value = Env(var);
    const std::string origin = "$" + std::string(var) + "/lib64";
    candidates.push_back({value + "/lib64", origin, value.empty() ? origin : ""});
  }
  candidates.push_back({"/usr/local/Ascend/ascend-toolkit/latest/lib64", "default location", ""});
  candidates.push_back({"/usr/local/Ascend/cann/lib64", "default location, newer packages", ""});

  std::vector<std::string> lines;
  for (const Candidate& c : candidates) {
    if (!c.unset.empty()) {
      lines.push_back(c.unset + ": not set");
      continue;
    }
    const std::string where = c.dir + " (" + c.origin + ")";
    if (!IsDir(c.dir)) {
      lines.push_back(where + ": no such directory");
      continue;
    }
    std::vector<std::string> absent;
    for (const char* name : {kAscendcl, kNnopbase}) {
      if (!IsFile(c.dir + "/" + name)) absent.push_back(name);
    }
    std::vector<std::string> opapis;
    for (const char* name : kOpapiNames) {
      if (IsFile(c.dir + "/" + name)) opapis.push_back(c.dir + "/" + name);
    }
    if (!IsFile(c.dir + "/libopapi.so") && !IsFile(c.dir + "/libopapi_nn.so")) {
      absent.push_back("libopapi.so or libopapi_nn.so");
    }
    if (!absent.empty()) {
      lines.push_back(where + ": no " + Join(absent, ", no "));
      continue;
    }
    std::string why;
    if (auto lib = Open(c.dir + "/" + kAscendcl, c.dir + "/" + kNnopbase, opapis, &why)) {
      return {std::move(lib), ""};
    }
    lines.push_back(where + ": " + why);
  }
  std::string why;
  std::vector<std::string> bare;
  for (const char* name : kOpapiNames) bare.push_back(name);
  if (auto lib = Open(kAscendcl, kNnopbase, bare, &why)) return {std::move(lib), ""};
  const std::string ld_path = Env("LD_LIBRARY_PATH");
  lines.push_back("the dynamic loader's search path (LD_LIBRARY_PATH=" +
                  (ld_path.empty() ? std::string("<unset>") : ld_path) +
                  ", then ld.so.cache and the system directories): " + why);

  std::vector<std::string> env;
  for (const char* var : {"ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "LD_LIBRARY_PATH"}) {
    const std::string value = Env(var);
    env.push_back(std::string(var) + "=" + (value.empty() ? "<unset>" : value));
  }
  return {std::nullopt,
          "cannot load the CANN runtime (libascendcl.so, libnnopbase.so, and libopapi.so or "
          "libopapi_nn.so). Tried, in order:\n  " +
              Join(lines, "\n  ") + "\nEnvironment variables consulted: " + Join(env, ", ") +
              ".\nInstall the CANN toolkit and source its set_env.sh (it sets "
              "ASCEND_TOOLKIT_HOME), or pass library_dir=<toolkit>/lib64."};
}

std::mutex g_load_mutex;
std::atomic<const CannLibrary*> g_loaded{nullptr};

bool SameFiles(const CannLibrary& a, const CannLibrary& b) {
  return a.ascendcl_path == b.ascendcl_path && a.nnopbase_path == b.nnopbase_path &&
         a.opapi_path == b.opapi_path;
}

}  // namespace

std::string CannLibrary::RecentErrorMessage() const {
  const char* msg = get_recent_err_msg ? get_recent_err_msg() : nullptr;
  return (msg && *msg) ? msg : "(aclGetRecentErrMsg returned no message)";
}

std::map<std::string, std::string> CannLibrary::Describe() const {
  return {{"libascendcl", ascendcl_path}, {"libnnopbase", nnopbase_path}, {"opapi", opapi_path}};
}

LoadResult ProbeCann(const std::string& library_dir) {
  if (library_dir.empty()) {
    if (const CannLibrary* loaded = LoadedCann()) return {*loaded, ""};
  }
  return Locate(library_dir);
}

LoadResult LoadCann(const std::string& library_dir) {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  const CannLibrary* loaded = g_loaded.load(std::memory_order_acquire);
  if (loaded != nullptr && library_dir.empty()) return {*loaded, ""};
  LoadResult found = Locate(library_dir);
  if (!found.library) return found;
  if (loaded != nullptr) {
    if (SameFiles(*loaded, *found.library)) return {*loaded, ""};
    return {std::nullopt,
            "CANN is already loaded in this process from " + loaded->ascendcl_path + ", " +
                loaded->nnopbase_path + ", " + loaded->opapi_path + "; library_dir='" +
                library_dir + "' resolves to other files (" + found.library->ascendcl_path +
                ", ...). A process uses one CANN runtime: restart it to switch."};
  }
  // Never freed: compiled executables may call the handlers until the process exits.
  const CannLibrary* installed = new CannLibrary(*found.library);
  g_loaded.store(installed, std::memory_order_release);
  return {*installed, ""};
}

const CannLibrary* LoadedCann() { return g_loaded.load(std::memory_order_acquire); }

namespace {
std::map<std::string, std::string> DescribeOrThrow(const LoadResult& result) {
  if (!result.library) throw std::runtime_error(result.error);
  return result.library->Describe();
}
}  // namespace

std::map<std::string, std::string> LoadCannOrThrow(const std::string& library_dir) {
  return DescribeOrThrow(LoadCann(library_dir));
}

std::map<std::string, std::string> ProbeCannOrThrow(const std::string& library_dir) {
  return DescribeOrThrow(ProbeCann(library_dir));
}

}  // namespace jax_unpool::cann
