#include "npu/cann_library.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
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
// The aclnn op libraries ("providers"), in the order tried; exactly one is opened (with its
// ops-math library, below). CANN 9.x
// splits ops by domain (the MaxUnpool2d ops are in libopapi_nn.so) and documents that the
// deprecated all-in-one libopapi.so must not be used together with the split libraries;
// CANN 8.x installs made with --feature have the libaclnn_ops_{train,infer}.so pair.
// Custom op packages (libcust_opapi.so) are not looked for: they live elsewhere
// (vendors/*/op_api/lib) and would override the official MaxUnpool2d ops.
// Each provider's ops-math library ("" where the provider holds every domain): aclnnClamp,
// aclnnMax and aclnnMin are `@domain aclnn_math` (hicann/ops-math's headers), opened only
// from the provider's own directory, where present.
struct Provider {
  std::vector<std::string> libraries;
  std::string math;
};
const std::vector<Provider> kProviders = {
    {{"libopapi_nn.so"}, "libopapi_math.so"},
    {{"libopapi.so"}, ""},
    {{"libaclnn_ops_train.so", "libaclnn_ops_infer.so"}, "libaclnn_math.so"},
};
constexpr const char* kProvidersText =
    "libopapi_nn.so, libopapi.so or libaclnn_ops_train.so + libaclnn_ops_infer.so";
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

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? buf : path;
}

// Whether `name` (a bare file name) is already loaded in the process: dlopen with
// RTLD_NOLOAD matches it against the SONAMEs and names of the loaded objects.
bool IsLoaded(const std::string& name) {
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);  // balances the reference NOLOAD took
  return h != nullptr;
}

std::string DlError() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// The path of the loaded object that defines `symbol`, as it was loaded (through
// whatever symlinks), or "" if unknown.
std::string LoadedPathOf(void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// The path a dlopen handle's object was loaded from, as loaded.
std::string HandlePath(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return "";
  }
  return map->l_name;
}

// The resolved path of the file that defines `symbol`.
std::string FileOf(void* symbol) {
  const std::string path = LoadedPathOf(symbol);
  return path.empty() ? "(unknown file)" : RealPath(path);
}

// Whether two paths name one file: CANN's latest/ holds per-file symlinks into versioned
// directories (hicann/ops-nn scripts/package/ops_nn/scripts/opp_common.sh), so one
// library is reached through several directories.
bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn) {
  void* p = dlsym(handle, name);
  if (p == nullptr) return false;
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

// Opens the runtime, libnnopbase and one provider with its ops-math library where there
// is one (full paths under `dir`, or bare names for the loader's search when `dir` is
// empty) and resolves every symbol the handlers use. On failure returns nullopt and says
// why in *why.
std::optional<CannLibrary> Open(const std::string& dir, const Provider& provider,
                                std::string* why) {
  auto path = [&](const std::string& name) { return dir.empty() ? name : dir + "/" + name; };
  // RTLD_LOCAL: CANN's symbols stay out of the global namespace (other copies, e.g.
  // torch_npu's, may be loaded). Dependencies first, so that the opapi library's
  // DT_NEEDED entries match the already loaded ones. A file that is already loaded (by
  // the PJRT plugin, say) is not loaded again: dlopen returns the loaded object.
  const auto open = [&](const std::string& name) {
    void* h = dlopen(path(name).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr && why->empty()) *why = DlError();
    return h;
  };
  why->clear();
  void* acl = open(kAscendcl);
  void* nnop = acl ? open(kNnopbase) : nullptr;
  std::vector<void*> ops;
  for (const std::string& name : provider.libraries) ops.push_back(nnop ? open(name) : nullptr);
  if (!why->empty()) return std::nullopt;
  // Optional: a CANN without it still serves everything but the device unpools. Never
  // from another install: from the directory the provider was loaded from.
  std::vector<void*> math_ops = ops;
  if (const std::string loaded = HandlePath(ops[0]); !provider.math.empty() && !loaded.empty()) {
    const std::string math = DirOf(loaded) + "/" + provider.math;
    if (IsFile(math)) {
      if (void* h = dlopen(math.c_str(), RTLD_NOW | RTLD_LOCAL)) math_ops.push_back(h);
    }
  }

  CannLibrary lib;
  std::vector<std::string> missing;
  auto need = [&](void* handle, const char* name, auto* fn) {
    if (!Resolve(handle, name, fn)) missing.push_back(name);
  };
  std::vector<void*> op_symbols;  // the aclnn ops found, whose files opapi_path names
  auto find_in = [&](const std::vector<void*>& handles, const char* name, auto* fn) {
    for (void* h : handles) {
      if (Resolve(h, name, fn)) {
        op_symbols.push_back(reinterpret_cast<void*>(*fn));
        return true;
      }
    }
    return false;
  };
  auto find_aclnn = [&](const char* name, auto* fn) { return find_in(ops, name, fn); };
  auto need_aclnn = [&](const char* name, auto* fn) {
    if (!find_aclnn(name, fn)) missing.push_back(name);
  };
  auto find_math = [&](const char* name, auto* fn) { find_in(math_ops, name, fn); };
  need(nnop, "aclCreateTensor", &lib.create_tensor);
  need(nnop, "aclDestroyTensor", &lib.destroy_tensor);
  need(nnop, "aclCreateIntArray", &lib.create_int_array);
  need(nnop, "aclDestroyIntArray", &lib.destroy_int_array);
  Resolve(nnop, "aclSetAclOpExecutorRepeatable", &lib.set_executor_repeatable);
  Resolve(nnop, "aclDestroyAclOpExecutor", &lib.destroy_executor);
  if (!Resolve(nnop, "aclCreateScalar", &lib.create_scalar) ||
      !Resolve(nnop, "aclDestroyScalar", &lib.destroy_scalar)) {
    lib.create_scalar = nullptr;  // one without the other is of no use
    lib.destroy_scalar = nullptr;
  }
  need(acl, "aclGetRecentErrMsg", &lib.get_recent_err_msg);
  need(acl, "aclrtSynchronizeStream", &lib.synchronize_stream);
  need(acl, "aclrtMalloc", &lib.rt_malloc);
  need(acl, "aclrtFree", &lib.rt_free);
  need(acl, "aclrtGetCurrentContext", &lib.get_current_context);
  Resolve(acl, "aclrtGetSocName", &lib.get_soc_name);
  Resolve(acl, "aclrtGetDevice", &lib.get_device);
  Resolve(acl, "aclrtMemcpy", &lib.rt_memcpy);
  need_aclnn("aclnnMaxUnpool2dBackwardGetWorkspaceSize",
             &lib.max_unpool2d_backward_get_workspace_size);
  need_aclnn("aclnnMaxUnpool2dBackward", &lib.max_unpool2d_backward);
  // Optional (CannLibrary): left null when absent.
  find_aclnn("aclnnMaxUnpool2dGetWorkspaceSize", &lib.max_unpool2d_get_workspace_size);
  find_aclnn("aclnnMaxUnpool2d", &lib.max_unpool2d);
  find_aclnn("aclnnMaxUnpool3dGetWorkspaceSize", &lib.max_unpool3d_get_workspace_size);
  find_aclnn("aclnnMaxUnpool3d", &lib.max_unpool3d);
  find_aclnn("aclnnMaxUnpool3dBackwardGetWorkspaceSize",
             &lib.max_unpool3d_backward_get_workspace_size);
  find_aclnn("aclnnMaxUnpool3dBackward", &lib.max_unpool3d_backward);
  find_aclnn("aclnnMaxPool2dWithIndicesGetWorkspaceSize",
             &lib.max_pool2d_with_indices_get_workspace_size);
  find_aclnn("aclnnMaxPool2dWithIndices", &lib.max_pool2d_with_indices);
  find_aclnn("aclnnMaxPool3dWithArgmaxGetWorkspaceSize",
             &lib.max_pool3d_with_argmax_get_workspace_size);
  find_aclnn("aclnnMaxPool3dWithArgmax", &lib.max_pool3d_with_argmax);
  find_math("aclnnClampGetWorkspaceSize", &lib.clamp_get_workspace_size);
  find_math("aclnnClamp", &lib.clamp);
  find_math("aclnnMaxGetWorkspaceSize", &lib.reduce_max_get_workspace_size);
  find_math("aclnnMax", &lib.reduce_max);
  find_math("aclnnMinGetWorkspaceSize", &lib.reduce_min_get_workspace_size);
  find_math("aclnnMin", &lib.reduce_min);
  if (!missing.empty()) {
    *why = "missing symbols: " + Join(missing, ", ");
    return std::nullopt;
  }

  lib.ascendcl_path = FileOf(reinterpret_cast<void*>(lib.get_recent_err_msg));
  lib.nnopbase_path = FileOf(reinterpret_cast<void*>(lib.create_tensor));
  std::vector<std::string> opapi_files;
  for (void* fn : op_symbols) {
    std::string file = FileOf(fn);
    bool seen = false;
    for (const std::string& f : opapi_files) seen = seen || f == file;
    if (!seen) opapi_files.push_back(file);
  }
  lib.opapi_path = Join(opapi_files, ", ");
  return lib;
}

// The provider to open from `dir`: one already loaded in the process (when `reuse`),
// else the first whose files are all in `dir`; nullptr if none is.
const Provider* ChooseProvider(const std::string& dir, bool reuse) {
  if (reuse) {
    for (const Provider& provider : kProviders) {
      bool loaded = true;
      for (const std::string& name : provider.libraries) loaded = loaded && IsLoaded(name);
      if (loaded) return &provider;
    }
  }
  for (const Provider& provider : kProviders) {
    bool present = true;
    for (const std::string& name : provider.libraries) {
      present = present && IsFile(dir + "/" + name);
    }
    if (present) return &provider;
  }
  return nullptr;
}

// Opens CANN from `dir`, or says in *why what is missing.
std::optional<CannLibrary> OpenDir(const std::string& dir, bool reuse, std::string* why) {
  if (!IsDir(dir)) {
    *why = "no such directory";
    return std::nullopt;
  }
  std::vector<std::string> absent;
  for (const char* name : {kAscendcl, kNnopbase}) {
    if (!IsFile(dir + "/" + name)) absent.push_back(name);
  }
  const Provider* provider = ChooseProvider(dir, reuse);
  if (provider == nullptr) absent.push_back(kProvidersText);
  if (!absent.empty()) {
    *why = "no " + Join(absent, ", no ");
    return std::nullopt;
  }
  return Open(dir, *provider, why);
}

std::string EnvironmentText() {
  std::vector<std::string> env;
  for (const char* var : {"ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "LD_LIBRARY_PATH"}) {
    const std::string value = Env(var);
    env.push_back(std::string(var) + "=" + (value.empty() ? std::string("<unset>") : value));
  }
  return Join(env, ", ");
}

std::string CannotLoad(const std::vector<std::string>& lines,
                       const std::string& context = "Tried") {
  return "cannot load the CANN runtime (libascendcl.so, libnnopbase.so, and " +
         std::string(kProvidersText) + "). " + context + ", in order:\n  " + Join(lines, "\n  ") +
         "\nEnvironment variables consulted: " + EnvironmentText() +
         ".\nInstall the CANN toolkit and source its set_env.sh (it sets "
         "ASCEND_TOOLKIT_HOME), or pass library_dir=<toolkit>/lib64.";
}

// The path (as loaded) of the libascendcl.so already loaded in the process (by a PJRT
// plugin, say), or "" if none is.
std::string LoadedRuntime() {
  void* h = dlopen(kAscendcl, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return "";
  void* symbol = dlsym(h, "aclrtMalloc");
  dlclose(h);
  return symbol ? LoadedPathOf(symbol) : "";
}

struct Candidate {
  std::string dir, origin, unset;  // `unset`: the env var naming it is not set
};

// The directories of the default search (header, 2-5).
std::vector<Candidate> SearchDirs() {
  std::vector<Candidate> candidates;
  for (const char* var : kEnvVars) {
    const std::string value = Env(var);
    const std::string origin = "$" + std::string(var) + "/lib64";
    candidates.push_back({value + "/lib64", origin, value.empty() ? origin : ""});
  }
  candidates.push_back({"/usr/local/Ascend/ascend-toolkit/latest/lib64", "default location", ""});
  candidates.push_back({"/usr/local/Ascend/cann/lib64", "default location, newer packages", ""});
  return candidates;
}

// Opens CANN around the already loaded runtime `runtime`: from library_dir, which must
// hold that very file, or from the first directory that holds it and the other libraries
// -- the one it was loaded from, the search's, its real one. Files, not directory names,
// are compared: through latest/ each library is a symlink into its package's versioned
// directory, so the runtime's real directory may hold nothing else.
LoadResult LocateAround(const std::string& runtime, const std::string& library_dir) {
  std::string why;
  if (!library_dir.empty()) {
    if (!SameFile(library_dir + "/" + kAscendcl, runtime)) {
      return {std::nullopt,
              "libascendcl.so is already loaded in this process from " + runtime +
                  " (by the PJRT plugin?); library_dir='" + library_dir + "' holds " +
                  (IsFile(library_dir + "/" + kAscendcl) ? "another" : "no") +
                  " libascendcl.so and would load a second CANN runtime, whose calls see no "
                  "device context. Pass library_dir=None, or a directory whose "
                  "libascendcl.so is that file."};
    }
    if (auto lib = OpenDir(library_dir, true, &why)) return {std::move(lib), ""};
    return {std::nullopt, CannotLoad({library_dir + " (library_dir argument): " + why})};
  }
  std::vector<Candidate> candidates = {
      {DirOf(runtime), "the directory libascendcl.so was loaded from", ""}};
  for (const Candidate& c : SearchDirs()) candidates.push_back(c);
  candidates.push_back({DirOf(RealPath(runtime)), "libascendcl.so's real directory", ""});
  std::vector<std::string> lines, looked;
  for (const Candidate& c : candidates) {
    if (!c.unset.empty()) {
      lines.push_back(c.unset + ": not set");
      continue;
    }
    bool seen = false;
    for (const std::string& d : looked) seen = seen || d == c.dir;
    if (seen) continue;
    looked.push_back(c.dir);
    if (!SameFile(c.dir + "/" + kAscendcl, runtime)) {
      lines.push_back(
          c.dir + " (" + c.origin + "): " +
          (IsFile(c.dir + "/" + kAscendcl) ? "another libascendcl.so" : "no libascendcl.so"));
      continue;
    }
    if (auto lib = OpenDir(c.dir, true, &why)) return {std::move(lib), ""};
    lines.push_back(c.dir + " (" + c.origin + "): " + why);
  }
  return {std::nullopt, CannotLoad(lines, "libascendcl.so is already loaded in this process from " +
                                              runtime + "; looked for its install")};
}

// Finds and opens CANN (see the search order in the header). `reuse`: a runtime already
// loaded in the process wins over the search (LocateAround).
LoadResult Locate(const std::string& library_dir, bool reuse) {
  std::string why;
  if (reuse) {
    if (const std::string runtime = LoadedRuntime(); !runtime.empty()) {
      return LocateAround(runtime, library_dir);
    }
  }
  if (!library_dir.empty()) {
    // An explicit directory is the only place looked at: never a CANN found elsewhere.
    if (auto lib = OpenDir(library_dir, reuse, &why)) return {std::move(lib), ""};
    return {std::nullopt, CannotLoad({library_dir + " (library_dir argument): " + why})};
  }
  std::vector<std::string> lines;
  for (const Candidate& c : SearchDirs()) {
    if (!c.unset.empty()) {
      lines.push_back(c.unset + ": not set");
      continue;
    }
    if (auto lib = OpenDir(c.dir, reuse, &why)) return {std::move(lib), ""};
    lines.push_back(c.dir + " (" + c.origin + "): " + why);
  }
  std::vector<std::string> tried;
  for (const auto& provider : kProviders) {
    if (auto lib = Open("", provider, &why)) return {std::move(lib), ""};
    tried.push_back(why);
  }
  const std::string ld_path = Env("LD_LIBRARY_PATH");
  lines.push_back("the dynamic loader's search path (LD_LIBRARY_PATH=" +
                  (ld_path.empty() ? std::string("<unset>") : ld_path) +
                  ", then ld.so.cache and the system directories): " + Join(tried, "; "));
  return {std::nullopt, CannotLoad(lines)};
}

std::mutex g_load_mutex;
std::atomic<const CannLibrary*> g_loaded{nullptr};

// Why a load in the other mode than `loaded`'s is refused: the two never share a runtime.
std::string OtherMode(const CannLibrary& loaded) {
  const std::string from =
      " from " + loaded.ascendcl_path + ", " + loaded.nnopbase_path + ", " + loaded.opapi_path;
  if (loaded.host) {
    return "CANN is loaded in this process for the host-emulation mode (register('cpu', "
           "library_dir))" +
           from +
           ": it is handed host memory, so it cannot serve an NPU platform, and no second "
           "runtime can be loaded next to it (its libraries would satisfy the other's "
           "dependencies). Register the NPU platform in a process that does not use the "
           "host emulation.";
  }
  return "CANN is loaded in this process for an NPU platform" + from +
         ": the host-emulation mode would hand it host memory as device memory. Run the "
         "host emulation in a process of its own.";
}

// Whether `dir` holds the very files `loaded` was opened from (the op library's by their
// base names), compared as files (stat), without opening any.
bool HoldsLoadedFiles(const std::string& dir, const CannLibrary& loaded) {
  std::vector<std::string> files = {loaded.ascendcl_path, loaded.nnopbase_path};
  for (size_t start = 0; start <= loaded.opapi_path.size();) {
    const size_t comma = loaded.opapi_path.find(", ", start);
    const size_t end = comma == std::string::npos ? loaded.opapi_path.size() : comma;
    files.push_back(loaded.opapi_path.substr(start, end - start));
    start = end + 2;
  }
  for (const std::string& f : files) {
    const size_t slash = f.rfind('/');
    if (!SameFile(dir + "/" + (slash == std::string::npos ? f : f.substr(slash + 1)), f)) {
      return false;
    }
  }
  return true;
}

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
  if (const CannLibrary* loaded = LoadedCann()) {
    // Compared by file, never opened: dlopen would map the other install's libraries
    // (and run their initialisers) in a process that already talks to one CANN.
    if (library_dir.empty() || HoldsLoadedFiles(library_dir, *loaded)) return {*loaded, ""};
    return {std::nullopt,
            "CANN is already loaded in this process from " + loaded->ascendcl_path + ", " +
                loaded->nnopbase_path + ", " + loaded->opapi_path + "; library_dir='" +
                library_dir +
                "' does not hold those files, and is not opened: a process uses one CANN "
                "runtime (restart it to use another)."};
  }
  return Locate(library_dir, /*reuse=*/library_dir.empty());
}

LoadResult LoadCann(const std::string& library_dir, bool host) {
  if (host && library_dir.empty()) {
    return {std::nullopt,
            "the host-emulation mode needs an explicit library_dir naming an emulated CANN "
            "(e.g. tests/fake_cann): a real CANN found through the environment would be "
            "handed host memory as device memory"};
  }
  std::lock_guard<std::mutex> lock(g_load_mutex);
  const CannLibrary* loaded = g_loaded.load(std::memory_order_acquire);
  if (loaded != nullptr && loaded->host != host) return {std::nullopt, OtherMode(*loaded)};
  if (loaded != nullptr && library_dir.empty()) return {*loaded, ""};
  LoadResult found = Locate(library_dir, /*reuse=*/!host);
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
  CannLibrary* installed = new CannLibrary(*found.library);
  installed->host = host;
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

std::map<std::string, std::string> LoadCannOrThrow(const std::string& library_dir, bool host) {
  return DescribeOrThrow(LoadCann(library_dir, host));
}

std::map<std::string, std::string> ProbeCannOrThrow(const std::string& library_dir) {
  return DescribeOrThrow(ProbeCann(library_dir));
}

}  // namespace jax_unpool::cann
