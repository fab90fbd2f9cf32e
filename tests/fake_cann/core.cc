// libnnopbase.so of the emulated CANN: the shared state (object registry, error messages,
// injected failures, counters), the aclTensor/aclIntArray API, the test controls
// (fakecann_*), and the implementations that libascendcl.so and libopapi.so forward to.
//
// The emulator's purpose is to catch a wrong caller: every documented argument check of
// the six aclnn ops (MaxUnpool2d, MaxUnpool3d and their backwards, MaxPool2dWithIndices,
// MaxPool3dWithArgmax) is enforced with the documented status code, objects are tracked so
// leaks and double destroys are visible, executors are single-use, and the workspace must
// be exactly the size GetWorkspaceSize returned (it is overwritten with a canary). The
// ops-math ops the handlers use on indices (Clamp, Max, Min) are emulated for INT32 and
// INT64 tensors, with their documented checks and the emulator's own (see clamp_gws).
#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fake_cann.h"

struct aclTensor {
  std::vector<int64_t> view;
  std::vector<int64_t> strides;
  std::vector<int64_t> storage;
  int64_t offset = 0;  // in elements
  aclDataType dtype = 0;
  aclFormat format = 0;
  void *data = nullptr;
};

struct aclIntArray {
  std::vector<int64_t> values;
};

struct aclScalar {
  aclDataType dtype = 0;
  unsigned char value[8] = {};  // the element_size(dtype) bytes aclCreateScalar copied
};

enum class Op {
  kForward,
  kBackward,
  kForward3d,
  kBackward3d,
  kPool2d,
  kPool3d,
  kClamp,
  kMax,
  kMin,
};

struct aclOpExecutor {
  Op op = Op::kForward;
  // Forwards: self, indices, out. Backwards: gradOutput, self, indices, out.
  // Pools: self, out, indices.
  std::vector<aclTensor> tensors;
  std::vector<int64_t> output_size;
  // Pools: the window, one element per spatial dim.
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false;
  // Clamp: the bounds, as int64.
  int64_t lo = 0, hi = 0;
  uint64_t workspace_size = 0;
  // aclSetAclOpExecutorRepeatable was called: executions keep it, and only such an
  // executor may be destroyed (CANN's docs of aclDestroyAclOpExecutor).
  bool repeatable = false;
};

namespace fakecann {
namespace {

constexpr bool is_forward(Op op) { return op == Op::kForward || op == Op::kForward3d; }
constexpr bool is_pool(Op op) { return op == Op::kPool2d || op == Op::kPool3d; }
constexpr bool is_math(Op op) { return op == Op::kClamp || op == Op::kMax || op == Op::kMin; }
// 2 for the MaxUnpool2d and MaxPool2d ops, 3 for the 3-D ones.
constexpr int spatial_rank(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kPool2d ? 2 : 3;
}

// The two entry points of each op, in Op's order.
struct OpNames {
  const char *gws;  // first phase: GetWorkspaceSize
  const char *run;  // second phase: the execution
};
constexpr OpNames kOpNames[] = {
    {"aclnnMaxUnpool2dGetWorkspaceSize", "aclnnMaxUnpool2d"},
    {"aclnnMaxUnpool2dBackwardGetWorkspaceSize", "aclnnMaxUnpool2dBackward"},
    {"aclnnMaxUnpool3dGetWorkspaceSize", "aclnnMaxUnpool3d"},
    {"aclnnMaxUnpool3dBackwardGetWorkspaceSize", "aclnnMaxUnpool3dBackward"},
    {"aclnnMaxPool2dWithIndicesGetWorkspaceSize", "aclnnMaxPool2dWithIndices"},
    {"aclnnMaxPool3dWithArgmaxGetWorkspaceSize", "aclnnMaxPool3dWithArgmax"},
    {"aclnnClampGetWorkspaceSize", "aclnnClamp"},
    {"aclnnMaxGetWorkspaceSize", "aclnnMax"},
    {"aclnnMinGetWorkspaceSize", "aclnnMin"},
};
constexpr const char *gws_name(Op op) { return kOpNames[static_cast<int>(op)].gws; }
constexpr const char *run_name(Op op) { return kOpNames[static_cast<int>(op)].run; }

constexpr int kMaxDims = 8;
// Destroyed objects are kept (not freed) for this many further destroys, so a second
// destroy of the same pointer is recognised instead of hitting a reused address.
constexpr size_t kQuarantine = size_t{1} << 16;

enum Kind : int { kTensor = 0, kIntArray = 1, kExecutor = 2, kScalar = 3 };
const char *kind_name(Kind k) {
  switch (k) {
    case kTensor:
      return "aclTensor";
    case kIntArray:
      return "aclIntArray";
    case kExecutor:
      return "aclOpExecutor";
    case kScalar:
      return "aclScalar";
  }
  return "?";
}

struct Injected {
  int32_t status;
  std::string message;
};

struct State {
  std::mutex mu;
  std::unordered_map<const void *, Kind> live;
  std::unordered_map<const void *, Kind> dead;  // destroyed, still quarantined
  std::deque<std::pair<void *, Kind>> quarantine;
  int64_t live_count[4] = {0, 0, 0, 0};
  int64_t bad_destroys = 0;
  std::unordered_map<void *, size_t> allocations;
  int64_t bad_frees = 0;
  std::unordered_map<std::string, Injected> fail_next;
  std::unordered_map<std::string, int64_t> calls;
  std::unordered_map<std::string, int32_t> last_dtype;
  std::unordered_map<std::string, int32_t> last_indices_dtype;
  std::unordered_map<std::string, void *> last_stream;
  std::unordered_map<std::string, void *> last_workspace;
  // Per execution entry point: the indices an unpool run received (flat, (n, c, i) order)
  // and the data pointers of its tensors.
  std::unordered_map<std::string, std::vector<int64_t>> last_indices;
  std::unordered_map<std::string, std::vector<void *>> last_data;
  uint64_t last_workspace_size = 0;
  std::string last_error;  // process-wide copy of the newest message
  bool int64_indices_only = false;  // CANN 8.0.RC1-RC3 forward: INT64 indices only
  bool no_context = false;          // aclrtGetCurrentContext reports none
  std::string soc_name;             // what aclrtGetSocName returns (set_default_soc_name)
  bool soc_name_null = false;       // ... or nullptr
  int32_t device = 0;               // aclrtGetDevice's answer; -1: no device
  int last_memcpy_kind = -1;        // aclrtMemcpy's last kind
  bool pool2d_float_only = false;   // CANN 8.0.RC2's aclnnMaxPool2dWithIndices
  bool clamp_int32_only = false;    // aclnnClamp refusing INT64 (an unverified AI Core)
};

// The emulated chip's SoC name: $FAKECANN_SOC_NAME, "Ascend910B1" (an Atlas A2) when it
// is unset; nullptr (aclrtGetSocName failing) when it is set but empty.
void set_default_soc_name(State &s) {
  const char *env = std::getenv("FAKECANN_SOC_NAME");
  s.soc_name = env ? env : "Ascend910B1";
  s.soc_name_null = env && !*env;
}

// Never destroyed: other libraries' static destructors may still call in at exit.
State &state() {
  static State *s = [] {
    auto *fresh = new State;
    set_default_soc_name(*fresh);
    return fresh;
  }();
  return *s;
}

// ---- the chip ---------------------------------------------------------------------------
// aclrtGetSocName() returns the chip's SoC_version, the name of its platform config
// (hicann/runtime src/acl/aclrt_impl/acl_rt_impl_base.cpp, aclrtGetSocNameImpl, and
// src/platform/platform_config/{cann,cann-dev}/<SoC_version>.ini). The ops decide by the
// config's NpuArch and name the chip by its Short_SoC_version (hicann/opbase
// src/nnopbase/composite_op/utils/platform.cpp: InitNpuArch, InitSocVersion, ToString).
// The configs, by SoC_version: Ascend910A, Ascend910B, Ascend910ProA, Ascend910ProB,
// Ascend910PremiumA -> Ascend910, 1001 (Ascend910B is the first 910's 30-core bin, not an
// Atlas A2); Ascend910B1..B4, B2C, B4-1 -> Ascend910B, 2201; Ascend910_93xx ->
// Ascend910_93, 2201; Ascend950PR_xxxx, Ascend950DT_xxxx -> Ascend950, 3510; Ascend350_xxxx
// -> Ascend350, 3510; Ascend310P1/3/5/7 -> Ascend310P, 2002; Ascend310B1..4 -> Ascend310B,
// 3002; Ascend910 is loaded as Ascend910A (src/platform/platform_info.cpp). Any other name
// (or none) counts as an unknown chip: no NpuArch, "UnknownSocVersion".
struct Chip {
  std::string short_name = "UnknownSocVersion";
  int arch = 0;  // NpuArch: DAV_1001, DAV_2002, DAV_2201, DAV_3002, DAV_3510; 0 unknown
};

bool starts_with(const std::string &s, const char *prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

Chip current_chip() {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    if (state().soc_name_null) return {};
    name = state().soc_name;
  }
  for (const char *n : {"Ascend910", "Ascend910A", "Ascend910B", "Ascend910ProA",
                        "Ascend910ProB", "Ascend910PremiumA"})
    if (name == n) return {"Ascend910", 1001};
  const std::pair<const char *, Chip> prefixes[] = {
      {"Ascend910B", {"Ascend910B", 2201}}, {"Ascend910_93", {"Ascend910_93", 2201}},
      {"Ascend950", {"Ascend950", 3510}},   {"Ascend350", {"Ascend350", 3510}},
      {"Ascend310P", {"Ascend310P", 2002}}, {"Ascend310B", {"Ascend310B", 3002}}};
  for (const auto &[prefix, chip] : prefixes)
    if (starts_with(name, prefix)) return chip;
  return {};
}

// Ops::NN::AclnnUtil::IsRegbase (hicann/ops-nn common/inc/op_api/aclnn_util.h): DAV_3510.
bool is_regbase(const Chip &chip) { return chip.arch == 3510; }

// Bumped by fakecann_reset(); a thread's pending messages from an older generation are
// dropped on its next use.
std::atomic<uint64_t> g_generation{1};

struct ThreadErrors {
  std::string pending;   // newest first, '\n'-separated
  std::string returned;  // storage behind the last aclGetRecentErrMsg() pointer
  uint64_t generation = 0;
};
thread_local ThreadErrors t_errors;

void refresh_thread_errors() {
  const uint64_t gen = g_generation.load();
  if (t_errors.generation != gen) {
    t_errors.pending.clear();
    t_errors.generation = gen;
  }
}

// Records a message for aclGetRecentErrMsg (thread-level, as CANN's default
// err_msg_mode) and for fakecann_last_error_message (process-level). Call unlocked.
void set_error(std::string msg) {
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().last_error = msg;
  }
  refresh_thread_errors();
  if (!t_errors.pending.empty()) msg += "\n" + t_errors.pending;
  if (msg.size() > 16384) msg.resize(16384);
  t_errors.pending = std::move(msg);
}

std::string strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

const char *status_name(int32_t status) {
  switch (status) {
    case kErrParamNullptr:
      return "ACLNN_ERR_PARAM_NULLPTR";
    case kErrParamInvalid:
      return "ACLNN_ERR_PARAM_INVALID";
    case kErrRuntime:
      return "ACLNN_ERR_RUNTIME_ERROR";
    case kErrInner:
      return "ACLNN_ERR_INNER";
    case kErrInnerNullptr:
      return "ACLNN_ERR_INNER_NULLPTR";
    default:
      return "error";
  }
}

// Returns status after recording "<fn>: <what> [<status> <name>]" as the error message.
int32_t fail(const char *fn, int32_t status, const std::string &what) {
  set_error(strf("%s: %s [%d %s]", fn, what.c_str(), status, status_name(status)));
  return status;
}

// Counts the call. If a failure was injected for fn, consumes it, sets its message and
// returns true with *status set.
bool take_injected(const char *fn, int32_t *status) {
  State &s = state();
  std::string msg;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.calls[fn];
    auto it = s.fail_next.find(fn);
    if (it == s.fail_next.end()) return false;
    *status = it->second.status;
    msg = std::move(it->second.message);
    s.fail_next.erase(it);
  }
  set_error(msg.empty() ? strf("%s: injected failure %d", fn, *status) : msg);
  return true;
}

void delete_object(void *p, Kind k) {
  switch (k) {
    case kTensor:
      delete static_cast<aclTensor *>(p);
      break;
    case kIntArray:
      delete static_cast<aclIntArray *>(p);
      break;
    case kExecutor:
      delete static_cast<aclOpExecutor *>(p);
      break;
    case kScalar:
      delete static_cast<aclScalar *>(p);
      break;
  }
}

void register_locked(State &s, void *p, Kind k) {
  s.live.emplace(p, k);
  ++s.live_count[k];
}

void retire_locked(State &s, void *p, Kind k) {
  s.live.erase(p);
  --s.live_count[k];
  s.dead.emplace(p, k);
  s.quarantine.emplace_back(p, k);
  if (s.quarantine.size() > kQuarantine) {
    auto [old, old_kind] = s.quarantine.front();
    s.quarantine.pop_front();
    s.dead.erase(old);
    delete_object(old, old_kind);
  }
}

// Describes what p is, for messages about a pointer that is not a live object of kind k.
std::string describe_locked(State &s, const void *p, Kind k) {
  auto it = s.live.find(p);
  if (it != s.live.end())
    return strf("%p is a live %s, not an %s", p, kind_name(it->second), kind_name(k));
  auto d = s.dead.find(p);
  if (d != s.dead.end()) {
    if (d->second == k) return strf("%p is an %s that was already destroyed", p, kind_name(k));
    return strf("%p is a destroyed %s, not an %s", p, kind_name(d->second), kind_name(k));
  }
  return strf("%p is not an %s created by this runtime", p, kind_name(k));
}

int32_t destroy(const char *fn, const void *p, Kind k) {
  State &s = state();
  int32_t injected_status;
  if (take_injected(fn, &injected_status)) return injected_status;
  if (!p) return kSuccess;  // like delete nullptr
  std::string what;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.live.find(p);
    if (it != s.live.end() && it->second == k) {
      retire_locked(s, const_cast<void *>(p), k);
      return kSuccess;
    }
    ++s.bad_destroys;
    what = describe_locked(s, p, k);
  }
  return fail(fn, kErrParamInvalid, what + " (double destroy or foreign pointer)");
}

// ---- dtypes, shapes -------------------------------------------------------------------

size_t element_size(aclDataType dt) {
  switch (dt) {
    case kInt8:
    case kUint8:
    case kBool:
      return 1;
    case kFloat16:
    case kInt16:
    case kUint16:
    case kBf16:
      return 2;
    case kFloat:
    case kInt32:
    case kUint32:
      return 4;
    case kInt64:
    case kUint64:
    case kDouble:
      return 8;
    default:
      return 0;
  }
}

const char *dtype_name(aclDataType dt) {
  switch (dt) {
    case kFloat:
      return "FLOAT";
    case kFloat16:
      return "FLOAT16";
    case kInt8:
      return "INT8";
    case kInt32:
      return "INT32";
    case kUint8:
      return "UINT8";
    case kInt16:
      return "INT16";
    case kUint16:
      return "UINT16";
    case kUint32:
      return "UINT32";
    case kInt64:
      return "INT64";
    case kUint64:
      return "UINT64";
    case kDouble:
      return "DOUBLE";
    case kBool:
      return "BOOL";
    case kBf16:
      return "BF16";
    default:
      return "UNKNOWN";
  }
}

std::string dtype_str(aclDataType dt) { return strf("%s (%d)", dtype_name(dt), dt); }

bool forward_dtype_ok(aclDataType dt) {
  switch (dt) {
    case kFloat:
    case kFloat16:
    case kInt8:
    case kInt16:
    case kInt32:
    case kInt64:
    case kUint8:
    case kDouble:
      return true;
    default:
      return false;
  }
}
constexpr const char *kForwardDtypes = "FLOAT, FLOAT16, INT8, INT16, INT32, INT64, UINT8, DOUBLE";

// Also the list of both MaxUnpool3d ops (aclnn_max_unpool3d{,_backward}.cpp).
bool backward_dtype_ok(aclDataType dt) { return forward_dtype_ok(dt) || dt == kBool; }
constexpr const char *kBackwardDtypes =
    "FLOAT, FLOAT16, DOUBLE, INT32, INT64, INT16, INT8, UINT8, BOOL";

std::string shape_str(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t numel(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Element offsets (relative to data) of the first and last element the view touches.
void view_extent(const aclTensor &t, int64_t *lo, int64_t *hi) {
  *lo = *hi = t.offset;
  for (size_t i = 0; i < t.view.size(); ++i) {
    const int64_t span = (t.view[i] - 1) * t.strides[i];
    (span < 0 ? *lo : *hi) += span;
  }
}

bool overlaps(const aclTensor &a, const aclTensor &b) {
  if (numel(a.view) == 0 || numel(b.view) == 0) return false;
  int64_t alo, ahi, blo, bhi;
  view_extent(a, &alo, &ahi);
  view_extent(b, &blo, &bhi);
  const char *a0 = static_cast<const char *>(a.data) + alo * int64_t(element_size(a.dtype));
  const char *a1 = static_cast<const char *>(a.data) + (ahi + 1) * int64_t(element_size(a.dtype));
  const char *b0 = static_cast<const char *>(b.data) + blo * int64_t(element_size(b.dtype));
  const char *b1 = static_cast<const char *>(b.data) + (bhi + 1) * int64_t(element_size(b.dtype));
  return a0 < b1 && b0 < a1;
}

struct Failure {
  int32_t status = kSuccess;
  std::string what;
  explicit operator bool() const { return status != kSuccess; }
};
Failure invalid(std::string what) { return {kErrParamInvalid, std::move(what)}; }

bool int64_indices_only() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().int64_indices_only;
}

struct NamedTensor {
  const char *name;
  const aclTensor *t;
};

// Checks that go beyond the documented contract but catch a wrong caller with no false
// positives: missing data, a view that leaves its storage, an output aliasing another
// tensor. The last `outputs` tensors are the outputs.
Failure check_memory(const std::vector<NamedTensor> &tensors, size_t outputs = 1) {
  for (const auto &[name, t] : tensors) {
    if (numel(t->view) == 0) continue;
    if (!t->data)
      return {kErrParamNullptr, strf("%s has %lld elements but a null data pointer", name,
                                     (long long)numel(t->view))};
    int64_t lo, hi;
    view_extent(*t, &lo, &hi);
    const int64_t storage = numel(t->storage);
    if (lo < 0 || hi >= storage)
      return invalid(strf(
          "%s view (shape %s, strides %s, offset %lld) reaches elements "
          "[%lld, %lld] outside its storage of %lld elements (storage dims %s)",
          name, shape_str(t->view).c_str(), shape_str(t->strides).c_str(), (long long)t->offset,
          (long long)lo, (long long)hi, (long long)storage, shape_str(t->storage).c_str()));
  }
  for (size_t o = tensors.size() - outputs; o < tensors.size(); ++o)
    for (size_t i = 0; i < o; ++i)
      if (overlaps(*tensors[o].t, *tensors[i].t))
        return invalid(strf("%s overlaps the memory of %s %s", tensors[o].name,
                            i < tensors.size() - outputs ? "input" : "output", tensors[i].name));
  return {};
}

Failure check_format(const std::vector<NamedTensor> &tensors) {
  for (const auto &[name, t] : tensors)
    if (t->format != kFormatNd)
      return invalid(strf("%s format must be ND (%d), got %d", name, kFormatNd, t->format));
  return {};
}

Failure check_output_size(const std::vector<int64_t> &osz) {
  if (osz.size() != 2)
    return invalid(strf("outputSize must have exactly 2 elements, got %zu: %s", osz.size(),
                        shape_str(osz).c_str()));
  if (osz[0] <= 0 || osz[1] <= 0)
    return invalid("outputSize elements must be > 0, got " + shape_str(osz));
  return {};
}

std::vector<int64_t> leading_plus(const std::vector<int64_t> &dims,
                                  const std::vector<int64_t> &osz) {
  std::vector<int64_t> r(dims.begin(), dims.end() - 2);
  r.insert(r.end(), osz.begin(), osz.end());
  return r;
}

Failure validate_forward(const aclTensor &self, const aclTensor &indices,
                         const std::vector<int64_t> &osz, const aclTensor &out) {
  const size_t rank = self.view.size();
  if (rank != 3 && rank != 4)
    return invalid(strf("self must be 3-D (C, H, W) or 4-D (N, C, H, W), got %zu-D shape %s", rank,
                        shape_str(self.view).c_str()));
  if (Failure f = check_output_size(osz)) return f;
  if (indices.view != self.view)
    return invalid("indices shape " + shape_str(indices.view) + " must equal self shape " +
                   shape_str(self.view));
  const auto expected_out = leading_plus(self.view, osz);
  if (out.view != expected_out)
    return invalid("out shape " + shape_str(out.view) +
                   " must be self's leading dims + outputSize = " + shape_str(expected_out));
  const int64_t hw = self.view[rank - 2] * self.view[rank - 1];
  if (osz[0] * osz[1] < hw)
    return invalid(strf("outputSize %s: oH*oW = %lld must be >= self's H*W = %lld",
                        shape_str(osz).c_str(), (long long)(osz[0] * osz[1]), (long long)hw));
  if (!forward_dtype_ok(self.dtype))
    return invalid("self dtype " + dtype_str(self.dtype) +
                   " is not supported; supported: " + kForwardDtypes);
  if (indices.dtype != kInt32 && indices.dtype != kInt64)
    return invalid("indices dtype " + dtype_str(indices.dtype) + " must be INT32 or INT64");
  if (indices.dtype != kInt64 && int64_indices_only())
    return invalid("indices dtype " + dtype_str(indices.dtype) +
                   " must be INT64 (legacy mode: CANN before 8.0.0)");
  if (out.dtype != self.dtype)
    return invalid("out dtype " + dtype_str(out.dtype) + " must equal self dtype " +
                   dtype_str(self.dtype));
  if (Failure f = check_format({{"self", &self}, {"indices", &indices}, {"out", &out}})) return f;
  return check_memory({{"self", &self}, {"indices", &indices}, {"out", &out}});
}

Failure validate_backward(const aclTensor &grad, const aclTensor &self, const aclTensor &indices,
                          const std::vector<int64_t> &osz, const aclTensor &out) {
  const size_t rank = self.view.size();
  if (rank != 3 && rank != 4)
    return invalid(strf("self must be 3-D (C, H, W) or 4-D (N, C, H, W), got %zu-D shape %s", rank,
                        shape_str(self.view).c_str()));
  if (grad.view.size() != rank)
    return invalid(strf("gradOutput must have self's rank %zu, got %zu-D shape %s", rank,
                        grad.view.size(), shape_str(grad.view).c_str()));
  if (Failure f = check_output_size(osz)) return f;
  if (indices.view != self.view)
    return invalid("indices shape " + shape_str(indices.view) + " must equal self shape " +
                   shape_str(self.view));
  if (out.view != self.view)
    return invalid("out shape " + shape_str(out.view) + " must equal self shape " +
                   shape_str(self.view));
  const auto expected_grad = leading_plus(self.view, osz);
  if (grad.view != expected_grad)
    return invalid("gradOutput shape " + shape_str(grad.view) +
                   " must be self's leading dims + outputSize = " + shape_str(expected_grad));
  if (!backward_dtype_ok(grad.dtype))
    return invalid("gradOutput dtype " + dtype_str(grad.dtype) +
                   " is not supported; supported: " + kBackwardDtypes);
  if (self.dtype != grad.dtype)
    return invalid("self dtype " + dtype_str(self.dtype) + " must equal gradOutput dtype " +
                   dtype_str(grad.dtype));
  if (indices.dtype != kInt32 && indices.dtype != kInt64)
    return invalid("indices dtype " + dtype_str(indices.dtype) + " must be INT32 or INT64");
  if (out.dtype != grad.dtype)
    return invalid("out dtype " + dtype_str(out.dtype) + " must equal gradOutput dtype " +
                   dtype_str(grad.dtype) + " (the emulator only moves bits, it does not cast)");
  if (Failure f = check_format(
          {{"gradOutput", &grad}, {"self", &self}, {"indices", &indices}, {"out", &out}}))
    return f;
  return check_memory(
      {{"gradOutput", &grad}, {"self", &self}, {"indices", &indices}, {"out", &out}});
}

// ---- the MaxUnpool3d ops ----------------------------------------------------------------
// The checks of aclnn_max_unpool3d.cpp / aclnn_max_unpool3d_backward.cpp and
// CheckInpuNullTensorMaxUnPool3D / CheckIntArrayShapeMaxUnPool3D (level2_base.h) of
// hicann/ops-nn, in their order, then the emulator's own (format, memory). self is
// (N, D, H, W) or (N, C, D, H, W): a rank-4 tensor has one channel per leading index.

// op::IsContiguous of CANN's opbase: row-major strides for the view's dims, dims of size 1
// skipped; an empty or one-element view always is. The offset is not looked at.
bool is_contiguous(const aclTensor &t) {
  if (numel(t.view) <= 1) return true;
  int64_t expected = 1;
  for (size_t i = t.view.size(); i-- > 0;) {
    if (t.view[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.view[i];
  }
  return true;
}

Failure check_contiguous(const char *name, const aclTensor &t) {
  if (is_contiguous(t)) return {};
  return invalid(strf("%s must be contiguous, got shape %s strides %s", name,
                      shape_str(t.view).c_str(), shape_str(t.strides).c_str()));
}

// CheckShape's rank rule, for self.
Failure check_rank_3d(const aclTensor &self) {
  const size_t rank = self.view.size();
  if (rank == 4 || rank == 5) return {};
  return invalid(strf("Input to max_unpooling3d should be a 4d or 5d Tensor, but got a tensor "
                      "with dim %zu: self shape %s",
                      rank, shape_str(self.view).c_str()));
}

Failure check_same_shape(const char *name, const aclTensor &t, const aclTensor &self) {
  if (t.view.size() != self.view.size())
    return invalid(strf("%s rank %zu must equal self rank %zu", name, t.view.size(),
                        self.view.size()));
  if (t.view != self.view)
    return invalid(std::string(name) + " shape " + shape_str(t.view) + " must equal self shape " +
                   shape_str(self.view));
  return {};
}

// CheckInpuNullTensorMaxUnPool3D: every dim of self but the first > 0.
Failure check_volumes_not_empty(const aclTensor &self) {
  for (size_t i = 1; i < self.view.size(); ++i)
    if (self.view[i] <= 0)
      return invalid(strf("max_unpool3d(): Expected input to have non-zero size for non-batch "
                          "dimensions, but self has shape %s with dimension %zu being empty",
                          shape_str(self.view).c_str(), i));
  return {};
}

// The last three dims.
std::vector<int64_t> volume_dims(const std::vector<int64_t> &dims) {
  return {dims.end() - 3, dims.end()};
}

// CheckIntArrayShapeMaxUnPool3D: three elements each; stride and outputSize > 0 (padding's
// values are not looked at); the output volume at least self's.
Failure check_int_arrays_3d(const aclTensor &self, const std::vector<int64_t> &osz,
                            const std::vector<int64_t> &stride,
                            const std::vector<int64_t> &padding) {
  for (const auto &[name, a] : {std::pair<const char *, const std::vector<int64_t> *>{
                                    "outputSize", &osz},
                                {"stride", &stride},
                                {"padding", &padding}})
    if (a->size() != 3)
      return invalid(strf("There should be exactly three elements (depth, height, width) in "
                          "%s, but got %zu elements: %s",
                          name, a->size(), shape_str(*a).c_str()));
  for (size_t i = 0; i < 3; ++i) {
    if (stride[i] <= 0)
      return invalid(strf("stride[%zu] should be greater than zero, but got %lld", i,
                          (long long)stride[i]));
    if (osz[i] <= 0)
      return invalid(strf("outputSize[%zu] should be greater than zero, but got %lld", i,
                          (long long)osz[i]));
  }
  const auto v = volume_dims(self.view);
  if (osz[0] * osz[1] * osz[2] < v[0] * v[1] * v[2])
    return invalid(strf("The output dimensions are of size %lld x %lld x %lld, should be "
                        "greater than or equal to self of size %lld x %lld x %lld",
                        (long long)osz[0], (long long)osz[1], (long long)osz[2],
                        (long long)v[0], (long long)v[1], (long long)v[2]));
  return {};
}

// `t` (outRef, gradOutput) against self: its rank, N and C (rank 5; rank 4: the first dim)
// and a volume of outputSize.
Failure check_volumes_of_output_size(const char *name, const aclTensor &t, const aclTensor &self,
                                     const std::vector<int64_t> &osz) {
  const size_t rank = self.view.size();
  if (t.view.size() != rank)
    return invalid(strf("%s rank %zu must equal self rank %zu: %s shape %s", name,
                        t.view.size(), rank, name, shape_str(t.view).c_str()));
  const std::vector<int64_t> lead(t.view.begin(), t.view.end() - 3);
  const std::vector<int64_t> self_lead(self.view.begin(), self.view.end() - 3);
  if (lead != self_lead)
    return invalid(strf("%s N and C %s must equal self's %s", name, shape_str(lead).c_str(),
                        shape_str(self_lead).c_str()));
  if (volume_dims(t.view) != osz)
    return invalid(strf("%s D, H, W %s must equal outputSize %s", name,
                        shape_str(volume_dims(t.view)).c_str(), shape_str(osz).c_str()));
  return {};
}

Failure validate_forward_3d(const aclTensor &self, const aclTensor &indices,
                            const std::vector<int64_t> &osz, const std::vector<int64_t> &stride,
                            const std::vector<int64_t> &padding, const aclTensor &out) {
  if (Failure f = check_contiguous("outRef", out)) return f;
  if (!forward_dtype_ok(self.dtype))
    return invalid("self dtype " + dtype_str(self.dtype) +
                   " is not supported; supported: " + kForwardDtypes);
  if (out.dtype != self.dtype)
    return invalid("outRef dtype " + dtype_str(out.dtype) + " must equal self dtype " +
                   dtype_str(self.dtype));
  if (indices.dtype != kInt32 && indices.dtype != kInt64)
    return invalid("indices dtype " + dtype_str(indices.dtype) + " must be INT32 or INT64");
  if (Failure f = check_rank_3d(self)) return f;
  if (Failure f = check_same_shape("indices", indices, self)) return f;
  if (Failure f = check_volumes_not_empty(self)) return f;
  if (Failure f = check_int_arrays_3d(self, osz, stride, padding)) return f;
  if (Failure f = check_volumes_of_output_size("outRef", out, self, osz)) return f;
  if (Failure f = check_format({{"self", &self}, {"indices", &indices}, {"outRef", &out}}))
    return f;
  return check_memory({{"self", &self}, {"indices", &indices}, {"outRef", &out}});
}

Failure validate_backward_3d(const aclTensor &grad, const aclTensor &self,
                             const aclTensor &indices, const std::vector<int64_t> &osz,
                             const std::vector<int64_t> &stride,
                             const std::vector<int64_t> &padding, const aclTensor &out) {
  if (Failure f = check_contiguous("out", out)) return f;
  for (const auto &[name, t] : {NamedTensor{"gradOutput", &grad}, NamedTensor{"self", &self},
                                NamedTensor{"out", &out}})
    if (!forward_dtype_ok(t->dtype))
      return invalid(std::string(name) + " dtype " + dtype_str(t->dtype) +
                     " is not supported; supported: " + kForwardDtypes);
  for (const auto &[name, t] : {NamedTensor{"self", &self}, NamedTensor{"out", &out}})
    if (t->dtype != grad.dtype)
      return invalid(std::string(name) + " dtype " + dtype_str(t->dtype) +
                     " must equal gradOutput dtype " + dtype_str(grad.dtype));
  if (indices.dtype != kInt64)
    return invalid("indices dtype " + dtype_str(indices.dtype) +
                   " must be INT64 (aclnnMaxUnpool3dBackward takes no INT32)");
  if (Failure f = check_rank_3d(self)) return f;
  if (indices.view.size() != self.view.size() || out.view.size() != self.view.size())
    return invalid(strf("indices rank %zu and out rank %zu must equal self rank %zu",
                        indices.view.size(), out.view.size(), self.view.size()));
  if (Failure f = check_same_shape("indices", indices, self)) return f;
  if (Failure f = check_same_shape("out", out, self)) return f;
  if (Failure f = check_volumes_not_empty(self)) return f;
  if (Failure f = check_int_arrays_3d(self, osz, stride, padding)) return f;
  if (Failure f = check_volumes_of_output_size("gradOutput", grad, self, osz)) return f;
  const std::vector<NamedTensor> all = {
      {"gradOutput", &grad}, {"self", &self}, {"indices", &indices}, {"out", &out}};
  if (Failure f = check_format(all)) return f;
  return check_memory(all);
}

// ---- the MaxPool ops --------------------------------------------------------------------
// The checks of aclnnMaxPool2dWithIndices and aclnnMaxPool3dWithArgmax (hicann/ops-nn,
// pooling/max_pool3d_with_argmax_v2/op_api/aclnn_max_pool{2d_with_indices,3d_with_argmax}.cpp
// and the l0op max_pool3d_with_argmax_v2.cpp), in their order, with the chip-dependent ones
// for the emulated chip (current_chip()). On an Atlas A2/A3 (910B, 910_93; DAV_2201):
// dtypes FLOAT16, FLOAT, BF16; dilation 1 only; 3-D indices INT32 only. On the Ascend 950
// (DAV_3510, regbase) the 2-D op takes dilation > 0 and the 3-D op any dilation and INT32
// or INT64 indices. On every other chip the 2-D op's dtype list is empty ("support for
// <chip> is not implemented") and the 3-D op's CheckPlatform refuses before any other check.
// The array arguments take 1 or k elements (stride also 0: the kernel's).

bool pool_dtype_ok(aclDataType dt) { return dt == kFloat16 || dt == kFloat || dt == kBf16; }

// A window attribute expanded to k elements: a single value repeats; stride's empty
// array is the kernel.
std::vector<int64_t> expand(const std::vector<int64_t> &v, size_t k,
                            const std::vector<int64_t> &empty_default = {}) {
  if (v.empty()) return empty_default;
  return v.size() == 1 ? std::vector<int64_t>(k, v[0]) : v;
}

// PyTorch's pooling_output_shape, which both ops' PoolingOutShape repeat.
int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                    bool ceil_mode) {
  const int64_t num = size + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = num / stride - ((num % stride != 0) && (num < 0)) + 1;  // floor division
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

// The window of an executor, checked: sizes and values of kernel, stride, padding and
// dilation. `lengths` names the allowed sizes ("one or two", "1 or 3").
Failure check_window(aclOpExecutor &e, size_t k, const Chip &chip,
                     const std::vector<int64_t> &kernel, const std::vector<int64_t> &stride,
                     const std::vector<int64_t> &padding, const std::vector<int64_t> &dilation) {
  const bool two = k == 2;
  auto sized = [&](const std::vector<int64_t> &v, bool may_be_empty) {
    return v.size() == 1 || v.size() == k || (may_be_empty && v.empty());
  };
  if (!sized(kernel, false))
    return invalid(two ? strf("The size of kernelSize must be one or two, but got %zu.",
                              kernel.size())
                       : std::string("The length of kernelSize can be only 1 or 3"));
  if (two && !sized(stride, true))
    return invalid(strf("The size of stride must be zero, one or two, but got %zu.",
                        stride.size()));
  if (two && !sized(padding, false))
    return invalid(strf("The size of padding must be one or two, but got %zu.", padding.size()));
  if (two && !sized(dilation, false))
    return invalid(strf("The size of dilation must be one or two, but got %zu.",
                        dilation.size()));
  e.kernel = expand(kernel, k);
  for (int64_t v : e.kernel)
    if (v <= 0)
      return invalid("The value of kernel should be greater than 0, but got " +
                     shape_str(e.kernel));
  if (!two && !sized(stride, true)) return invalid("The length of stride can be only 1 or 3");
  e.stride = expand(stride, k, e.kernel);
  for (int64_t v : e.stride)
    if (v <= 0)
      return invalid("The value of stride should be greater than 0, but got " +
                     shape_str(e.stride));
  if (!two && !sized(padding, false)) return invalid("The length of padding can be only 1 or 3");
  e.padding = expand(padding, k);
  for (size_t a = 0; a < k; ++a)
    if (e.padding[a] < 0 || e.padding[a] > e.kernel[a] / 2)
      return invalid("pad should be >= 0 and <= half of kernel size, but got kernel " +
                     shape_str(e.kernel) + ", padding " + shape_str(e.padding));
  if (!two && !sized(dilation, false))
    return invalid("The length of dilation can be only 1 or 3");
  e.dilation = expand(dilation, k);
  // The 2-D op: > 0 on regbase, else 1; the 3-D op: 1 on DAV_2201 and DAV_1001, else any.
  for (int64_t v : e.dilation) {
    if (two && is_regbase(chip) && v <= 0)
      return invalid("dilation should be greater than 0, but got " + shape_str(e.dilation));
    if ((two ? !is_regbase(chip) : chip.arch == 2201 || chip.arch == 1001) && v != 1)
      return invalid("dilation only support 1 (Atlas A2/A3), but got " + shape_str(e.dilation));
  }
  return {};
}

// The pooled shape of self (rank k + 1 or k + 2, channels first) under e's window.
std::vector<int64_t> pooled_shape(const aclTensor &self, const aclOpExecutor &e, size_t k) {
  std::vector<int64_t> shape = self.view;
  for (size_t a = 0; a < k; ++a) {
    int64_t &d = shape[shape.size() - k + a];
    d = pooled_size(d, e.kernel[a], e.stride[a], e.padding[a], e.dilation[a], e.ceil_mode);
  }
  return shape;
}

// aclnnMaxPool2dWithIndices up to the empty-tensor return: CheckDtypeValid, CheckFormat,
// CheckShape (with CheckOutAndIndicesShape).
Failure validate_pool2d(aclOpExecutor &e, const std::vector<int64_t> &kernel,
                        const std::vector<int64_t> &stride, const std::vector<int64_t> &padding,
                        const std::vector<int64_t> &dilation) {
  const aclTensor &self = e.tensors[0], &out = e.tensors[1], &indices = e.tensors[2];
  const Chip chip = current_chip();
  // GetDtypeSupportListBySocVersion: a list on DAV_3510 and DAV_2201 only.
  if (chip.arch != 3510 && chip.arch != 2201)
    return invalid("support for " + chip.short_name + " is not implemented");
  bool float_only;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    float_only = state().pool2d_float_only;
  }
  if (float_only ? self.dtype != kFloat : !pool_dtype_ok(self.dtype))
    return invalid("self dtype " + dtype_str(self.dtype) + " is not supported; supported: " +
                   (float_only ? "FLOAT" : "FLOAT16, FLOAT, BF16"));
  if (out.dtype != self.dtype)
    return invalid("out dtype " + dtype_str(out.dtype) + " must equal self dtype " +
                   dtype_str(self.dtype));
  if (float_only ? indices.dtype != kInt32 : indices.dtype != kInt32 && indices.dtype != kInt64)
    return invalid("indices dtype " + dtype_str(indices.dtype) + " must be " +
                   (float_only ? "INT32" : "INT64 or INT32"));
  if (self.format != out.format)
    return invalid(strf("Format of input and output should be same, self [%d], out [%d].",
                        self.format, out.format));
  const size_t rank = self.view.size();
  if (rank != 3 && rank != 4)
    return invalid("3D or 4D tensor expected for inputs, got self shape " +
                   shape_str(self.view));
  if (Failure f = check_window(e, 2, chip, kernel, stride, padding, dilation)) return f;
  for (size_t i = rank - 3; i < rank; ++i)
    if (self.view[i] == 0)
      return invalid("Expected tensor with optional 0 dim batch size, but got self shape " +
                     shape_str(self.view));
  const std::vector<int64_t> want = pooled_shape(self, e, 2);
  if (want[rank - 2] <= 0 || want[rank - 1] <= 0)
    return invalid("Given input size " + shape_str(self.view) + ", calc out size " +
                   shape_str(want));
  if (out.view != want)
    return invalid("out shape " + shape_str(out.view) + " must be " + shape_str(want));
  if (indices.view != out.view)
    return invalid("indices shape " + shape_str(indices.view) + " must equal out shape " +
                   shape_str(out.view));
  return {};
}

// aclnnMaxPool3dWithArgmax up to the empty-tensor return, after CheckPlatform and the
// nullptr checks: CheckDtypeValid, CheckFormat, CheckParamsValid.
Failure validate_pool3d(aclOpExecutor &e, const std::vector<int64_t> &kernel,
                        const std::vector<int64_t> &stride, const std::vector<int64_t> &padding,
                        const std::vector<int64_t> &dilation) {
  const aclTensor &self = e.tensors[0], &out = e.tensors[1], &indices = e.tensors[2];
  if (!pool_dtype_ok(self.dtype))
    return invalid("self dtype " + dtype_str(self.dtype) +
                   " is not supported; supported: BF16, FLOAT16, FLOAT");
  const Chip chip = current_chip();
  if (indices.dtype != kInt32 && !(is_regbase(chip) && indices.dtype == kInt64))
    return invalid("indices dtype " + dtype_str(indices.dtype) + " is not supported; supported: " +
                   (is_regbase(chip) ? "INT32, INT64" : "INT32 (Atlas A2/A3)"));
  if (out.dtype != self.dtype)
    return invalid("out dtype " + dtype_str(out.dtype) + " must equal self dtype " +
                   dtype_str(self.dtype));
  if (self.format != out.format)
    return invalid(strf("Format of input and output should be same, self [%d], out [%d].",
                        self.format, out.format));
  if (self.format != indices.format)
    return invalid(strf("Format of input and indices should be same, self [%d], indices [%d].",
                        self.format, indices.format));
  if (self.view.size() != 4 && self.view.size() != 5)
    return invalid("4D or 5D tensor expected for inputs, got self shape " +
                   shape_str(self.view));
  return check_window(e, 3, chip, kernel, stride, padding, dilation);
}

// After the empty-tensor return: the l0op's volume limit (it returns no tensor, which the
// aclnn layer reports as ACLNN_ERR_INNER_NULLPTR), then CheckReduceOutShape of out and
// indices against the inferred shape (the 2-D op has checked them already).
Failure check_pool_kernel_shapes(const aclOpExecutor &e) {
  const int k = spatial_rank(e.op);
  const aclTensor &self = e.tensors[0];
  const std::vector<int64_t> spatial(self.view.end() - k, self.view.end());
  if (numel(spatial) > INT32_MAX)
    return {kErrInnerNullptr, "product of depth, height and width can't be greater than "
                              "INT_MAX, got self shape " + shape_str(self.view)};
  const std::vector<int64_t> want = pooled_shape(self, e, size_t(k));
  for (const auto &[name, t] : {NamedTensor{"out", &e.tensors[1]},
                                NamedTensor{"indices", &e.tensors[2]}})
    if (t->view != want && !(numel(t->view) == 1 && numel(want) == 1))
      return invalid(strf("The %s tensor's shape%s is not equal with inferOut shape%s.", name,
                          shape_str(t->view).c_str(), shape_str(want).c_str()));
  return {};
}

// Size-dependent (so a hard-coded size is caught) and different per op (so mixing up the
// ops' sizes is caught); capped so the canary fill stays cheap.
// The MaxUnpool3d ops return 0 for an empty self (forward) or gradOutput (backward), as
// the real ones do before building any kernel.
// The MaxPool ops return 0 for an empty self or out.
uint64_t workspace_size_for(Op op, const std::vector<aclTensor> &tensors) {
  if (is_math(op)) {
    if (numel(tensors[0].view) == 0) return 0;
    const uint64_t data = std::min<uint64_t>(uint64_t(numel(tensors[0].view)) * 4, 1u << 20);
    return (op == Op::kClamp ? 272 : op == Op::kMax ? 304 : 336) + (data + 31) / 32 * 32;
  }
  if (is_pool(op)) {
    if (numel(tensors[0].view) == 0 || numel(tensors[1].view) == 0) return 0;
    const uint64_t data = std::min<uint64_t>(uint64_t(numel(tensors[1].view)) * 4, 1u << 20);
    return (op == Op::kPool2d ? 200 : 240) + (data + 31) / 32 * 32;  // 8, 16 mod 32
  }
  if (spatial_rank(op) == 3 && numel(tensors[0].view) == 0) return 0;
  const aclTensor &indices = tensors[is_forward(op) ? 1 : 2];
  const uint64_t data = std::min<uint64_t>(uint64_t(numel(indices.view)) * 4, uint64_t{1} << 20);
  const uint64_t base[] = {64, 96, 128, 160};  // per Op
  return base[static_cast<int>(op)] + (data + 31) / 32 * 32;
}

// ---- GetWorkspaceSize -----------------------------------------------------------------

struct TensorArg {
  const char *name;
  const aclTensor *ptr;
};

struct IntArrayArg {
  const char *name;
  const aclIntArray *ptr;
};

// Records the dtypes of the data and indices tensors the caller presented, before
// validating, so a test can see e.g. that a bf16 array arrived as INT16 even when the call
// is rejected. A pointer that is not a live tensor is not read.
void record_dtypes(const char *fn, const aclTensor *data, const aclTensor *indices) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto live_tensor = [&](const aclTensor *t) {
    auto it = t ? s.live.find(t) : s.live.end();
    return it != s.live.end() && it->second == kTensor;
  };
  if (live_tensor(data)) s.last_dtype[fn] = data->dtype;
  if (live_tensor(indices)) s.last_indices_dtype[fn] = indices->dtype;
}

// Copies the arguments that are live objects of their kind: the tensors of `tensors` and
// then of `later_tensors` into *tensor_copies, the arrays' values into *array_values.
// Returns "" when all are live, else why the first that is not (in the order tensors,
// arrays, later_tensors) is not.
std::string copy_live_args(const std::vector<TensorArg> &tensors,
                           const std::vector<IntArrayArg> &arrays,
                           const std::vector<TensorArg> &later_tensors,
                           std::vector<aclTensor> *tensor_copies,
                           std::vector<std::vector<int64_t>> *array_values) {
  State &s = state();
  std::string bad;
  std::lock_guard<std::mutex> lock(s.mu);
  auto live_as = [&](const void *p, Kind k, const char *name) {
    auto it = s.live.find(p);
    if (it != s.live.end() && it->second == k) return true;
    if (bad.empty()) bad = std::string(name) + ": " + describe_locked(s, p, k);
    return false;
  };
  for (const auto &[name, ptr] : tensors)
    if (live_as(ptr, kTensor, name)) tensor_copies->push_back(*ptr);
  for (const auto &[name, ptr] : arrays)
    if (live_as(ptr, kIntArray, name)) array_values->push_back(ptr->values);
  for (const auto &[name, ptr] : later_tensors)
    if (live_as(ptr, kTensor, name)) tensor_copies->push_back(*ptr);
  return bad;
}

// Registers a validated executor (its workspace size from workspace_size_for) and hands
// it to the caller.
int32_t hand_out(aclOpExecutor *made, uint64_t *workspace_size, aclOpExecutor **executor) {
  made->workspace_size = workspace_size_for(made->op, made->tensors);
  {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    register_locked(s, made, kExecutor);
    s.last_workspace_size = made->workspace_size;
  }
  *workspace_size = made->workspace_size;
  *executor = made;
  return kSuccess;
}

// Shared by the ops: nullptr checks (each op's order), liveness, validation, executor.
// `arrays`: outputSize first, then (3-D ops) stride and padding.
int32_t get_workspace_size(Op op, const std::vector<TensorArg> &inputs,
                           const std::vector<IntArrayArg> &arrays, TensorArg out,
                           uint64_t *workspace_size, aclOpExecutor **executor) {
  const char *fn = gws_name(op);
  int32_t injected_status;
  if (take_injected(fn, &injected_status)) return injected_status;
  record_dtypes(fn, inputs[0].ptr, inputs.back().ptr);
  // The 3-D ops check these two first (OP_CHECK_COMM_INPUT), the 2-D ones last.
  if (spatial_rank(op) == 3 && (!workspace_size || !executor))
    return fail(fn, kErrParamNullptr, "The workspaceSize or executor is nullptr");
  for (const auto &[name, ptr] : inputs)
    if (!ptr) return fail(fn, kErrParamNullptr, strf("%s is nullptr", name));
  for (const auto &[name, ptr] : arrays)
    if (!ptr) return fail(fn, kErrParamNullptr, strf("%s is nullptr", name));
  if (!out.ptr) return fail(fn, kErrParamNullptr, strf("%s is nullptr", out.name));
  if (!workspace_size) return fail(fn, kErrParamNullptr, "workspaceSize is nullptr");
  if (!executor) return fail(fn, kErrParamNullptr, "executor is nullptr");

  std::vector<aclTensor> tensors;  // copies: inputs..., out
  std::vector<std::vector<int64_t>> values;  // of `arrays`
  const std::string bad = copy_live_args(inputs, arrays, {out}, &tensors, &values);
  if (!bad.empty()) return fail(fn, kErrParamInvalid, bad);

  const auto &t = tensors;
  Failure f;
  switch (op) {
    case Op::kForward:
      f = validate_forward(t[0], t[1], values[0], t[2]);
      break;
    case Op::kBackward:
      f = validate_backward(t[0], t[1], t[2], values[0], t[3]);
      break;
    case Op::kForward3d:
      f = validate_forward_3d(t[0], t[1], values[0], values[1], values[2], t[2]);
      break;
    case Op::kBackward3d:
      f = validate_backward_3d(t[0], t[1], t[2], values[0], values[1], values[2], t[3]);
      break;
    case Op::kPool2d:
    case Op::kPool3d:  // pool_get_workspace_size
    case Op::kClamp:   // clamp_get_workspace_size
    case Op::kMax:     // reduce_get_workspace_size
    case Op::kMin:
      std::abort();
  }
  if (f) return fail(fn, f.status, f.what);

  auto *e = new aclOpExecutor;
  e->op = op;
  e->tensors = std::move(tensors);
  e->output_size = std::move(values[0]);
  return hand_out(e, workspace_size, executor);
}

// The MaxPool ops' first phase: the 3-D op's CheckPlatform, nullptr checks in signature
// order, liveness, the op's
// validation, the empty-tensor return (workspace 0), the kernel's shape checks, the
// emulator's own format and memory checks, executor.
template <Op op>
int32_t pool_get_workspace_size(const aclTensor *self, const aclIntArray *kernel,
                                const aclIntArray *stride, const aclIntArray *padding,
                                const aclIntArray *dilation, bool ceil_mode, aclTensor *out,
                                aclTensor *indices, uint64_t *workspace_size,
                                aclOpExecutor **executor) {
  static_assert(is_pool(op));
  const char *fn = gws_name(op);
  int32_t injected_status;
  if (take_injected(fn, &injected_status)) return injected_status;
  record_dtypes(fn, self, indices);
  // aclnnMaxPool3dWithArgmax's CheckPlatform comes before every other check: DAV_2201 or
  // regbase.
  const Chip chip = current_chip();
  if (op == Op::kPool3d && chip.arch != 2201 && !is_regbase(chip))
    return fail(fn, kErrParamInvalid, "aclnnMaxPool3dWithArgmax is not supported on this platform");
  const std::vector<TensorArg> tensor_args = {{"self", self}, {"out", out}, {"indices", indices}};
  const std::vector<IntArrayArg> array_args = {
      {"kernelSize", kernel}, {"stride", stride}, {"padding", padding}, {"dilation", dilation}};
  // CheckNotNullPtr's order: self, kernelSize, stride, padding, dilation, out, indices.
  const std::vector<std::pair<const char *, const void *>> in_order = {
      {"self", self},         {"kernelSize", kernel}, {"stride", stride}, {"padding", padding},
      {"dilation", dilation}, {"out", out},           {"indices", indices}};
  for (const auto &[name, ptr] : in_order)
    if (!ptr) return fail(fn, kErrParamNullptr, strf("%s is nullptr", name));
  if (!workspace_size) return fail(fn, kErrParamNullptr, "workspaceSize is nullptr");
  if (!executor) return fail(fn, kErrParamNullptr, "executor is nullptr");

  aclOpExecutor e;
  e.op = op;
  e.ceil_mode = ceil_mode;
  std::vector<std::vector<int64_t>> window;  // kernel, stride, padding, dilation
  const std::string bad = copy_live_args(tensor_args, array_args, {}, &e.tensors, &window);
  if (!bad.empty()) return fail(fn, kErrParamInvalid, bad);

  Failure f = op == Op::kPool2d
                  ? validate_pool2d(e, window[0], window[1], window[2], window[3])
                  : validate_pool3d(e, window[0], window[1], window[2], window[3]);
  if (f) return fail(fn, f.status, f.what);
  const bool empty = numel(e.tensors[0].view) == 0 || numel(e.tensors[1].view) == 0;
  const std::vector<NamedTensor> all = {
      {"self", &e.tensors[0]}, {"out", &e.tensors[1]}, {"indices", &e.tensors[2]}};
  if (!empty) {
    if ((f = check_pool_kernel_shapes(e))) return fail(fn, f.status, f.what);
  }
  if ((f = check_format(all)) || (f = check_memory(all, 2))) return fail(fn, f.status, f.what);

  return hand_out(new aclOpExecutor(std::move(e)), workspace_size, executor);
}


// ---- the ops-math ops -------------------------------------------------------------------
// aclnnClamp (hicann/ops-math conversion/clip_by_value_v2/op_api/aclnn_clamp.cpp) and
// aclnnMax / aclnnMin (math/reduce_max, math/reduce_min: the largest / smallest element
// into out), with their documented checks on an Atlas A2, emulated for INT32 and INT64
// tensors -- what the handlers pass -- and refused (161002, "not emulated") for the other
// listed dtypes. The emulator's own checks: out's dtype is self's (it does not cast), a
// clamp bound is an integer that out's dtype holds (the real op converts it to out's
// dtype, ConvertToTensor, silently wrapping), and the usual format and memory checks.

// Clamp's dtype list on Atlas A2/A3 (Ascend910B_dtype_support_list); the reductions'
// (DTYPE_SUPPORT_GE910B_LIST) adds BOOL.
bool math_dtype_listed(Op op, aclDataType dt) {
  switch (dt) {
    case kFloat16:
    case kFloat:
    case kInt32:
    case kInt64:
    case kInt16:
    case kInt8:
    case kUint8:
    case kDouble:
    case kBf16:
      return true;
    case kBool:
      return op != Op::kClamp;
    default:
      return false;
  }
}

// Element i (row-major over the view) of an INT32 or INT64 tensor.
char *element_at(const aclTensor &t, int64_t i) {
  int64_t e = t.offset;
  for (size_t j = t.view.size(); j-- > 0; i /= t.view[j]) e += (i % t.view[j]) * t.strides[j];
  return static_cast<char *>(t.data) + e * int64_t(element_size(t.dtype));
}

int64_t read_int(const aclTensor &t, int64_t i) {
  if (t.dtype == kInt32) {
    int32_t v;
    std::memcpy(&v, element_at(t, i), 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, element_at(t, i), 8);
  return v;
}

void write_int(const aclTensor &t, int64_t i, int64_t v) {
  if (t.dtype == kInt32) {
    const int32_t w = int32_t(v);
    std::memcpy(element_at(t, i), &w, 4);
  } else {
    std::memcpy(element_at(t, i), &v, 8);
  }
}

// An integer scalar's value; false for any other dtype.
bool scalar_int(const aclScalar &a, int64_t *v) {
  switch (a.dtype) {
    case kInt8: {
      int8_t x;
      std::memcpy(&x, a.value, 1);
      *v = x;
      return true;
    }
    case kUint8:
      *v = a.value[0];
      return true;
    case kInt16: {
      int16_t x;
      std::memcpy(&x, a.value, 2);
      *v = x;
      return true;
    }
    case kInt32: {
      int32_t x;
      std::memcpy(&x, a.value, 4);
      *v = x;
      return true;
    }
    case kInt64:
      std::memcpy(v, a.value, 8);
      return true;
    default:
      return false;
  }
}

Failure check_math_tensors(Op op, const aclTensor &self, const aclTensor &out) {
  for (const auto &[name, t] : {NamedTensor{"self", &self}, NamedTensor{"out", &out}})
    if (!math_dtype_listed(op, t->dtype))
      return invalid(std::string(name) + " dtype " + dtype_str(t->dtype) + " is not supported");
  if (self.view.size() > kMaxDims || out.view.size() > kMaxDims)
    return invalid("self and out may have at most 8 dims");
  if (self.dtype != kInt32 && self.dtype != kInt64)
    return invalid("self dtype " + dtype_str(self.dtype) +
                   " is not emulated (the emulator runs INT32 and INT64 only)");
  if (out.dtype != self.dtype)
    return invalid("out dtype " + dtype_str(out.dtype) + " must equal self dtype " +
                   dtype_str(self.dtype) + " (the emulator does not cast)");
  return {};
}

// Copies the live tensors and scalars among `tensors` and `scalars` (null scalars are
// skipped: "none"); "" when all are live, else why the first is not.
using ScalarArg = std::pair<const char *, const aclScalar *>;
std::string copy_live_math_args(const std::vector<TensorArg> &tensors,
                                const std::vector<ScalarArg> &scalars,
                                std::vector<aclTensor> *tensor_copies,
                                std::vector<const aclScalar *> *scalar_copies) {
  if (std::string bad = copy_live_args(tensors, {}, {}, tensor_copies, nullptr); !bad.empty())
    return bad;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto &[name, ptr] : scalars) {
    if (ptr == nullptr) {
      scalar_copies->push_back(nullptr);
      continue;
    }
    auto it = s.live.find(ptr);
    if (it == s.live.end() || it->second != kScalar)
      return std::string(name) + ": " + describe_locked(s, ptr, kScalar);
    scalar_copies->push_back(new aclScalar(*ptr));  // freed by the caller
  }
  return "";
}

int32_t clamp_get_workspace_size(const aclTensor *self, const aclScalar *clip_min,
                                 const aclScalar *clip_max, aclTensor *out,
                                 uint64_t *workspace_size, aclOpExecutor **executor) {
  const char *fn = gws_name(Op::kClamp);
  int32_t injected_status;
  if (take_injected(fn, &injected_status)) return injected_status;
  record_dtypes(fn, self, nullptr);
  if (!self) return fail(fn, kErrParamNullptr, "self is nullptr");
  if (!out) return fail(fn, kErrParamNullptr, "out is nullptr");
  if (!clip_min && !clip_max)
    return fail(fn, kErrParamNullptr, "clamp: At least one of 'min' or 'max' must not be None.");
  if (!workspace_size) return fail(fn, kErrParamNullptr, "workspaceSize is nullptr");
  if (!executor) return fail(fn, kErrParamNullptr, "executor is nullptr");

  aclOpExecutor e;
  e.op = Op::kClamp;
  std::vector<const aclScalar *> bounds;
  const std::string bad = copy_live_math_args({{"self", self}, {"out", out}},
                                              {{"clipValueMin", clip_min},
                                               {"clipValueMax", clip_max}},
                                              &e.tensors, &bounds);
  const aclScalar lo_copy = bounds.size() > 0 && bounds[0] ? *bounds[0] : aclScalar{};
  const aclScalar hi_copy = bounds.size() > 1 && bounds[1] ? *bounds[1] : aclScalar{};
  const bool has_lo = bounds.size() > 0 && bounds[0], has_hi = bounds.size() > 1 && bounds[1];
  for (const aclScalar *b : bounds) delete b;
  if (!bad.empty()) return fail(fn, kErrParamInvalid, bad);
  const aclTensor &t_self = e.tensors[0], &t_out = e.tensors[1];
  Failure f = check_math_tensors(Op::kClamp, t_self, t_out);
  bool int32_only;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    int32_only = state().clamp_int32_only;
  }
  if (!f && int32_only && (t_self.dtype == kInt64 || t_out.dtype == kInt64))
    f = invalid("self dtype INT64 is not supported: INT32 only (fakecann_set_clamp_int32_only)");
  if (!f && t_self.view != t_out.view)
    f = invalid("out shape " + shape_str(t_out.view) + " must equal self shape " +
                shape_str(t_self.view));
  const bool wide = t_out.dtype == kInt64;
  e.lo = wide ? INT64_MIN : INT32_MIN;
  e.hi = wide ? INT64_MAX : INT32_MAX;
  for (const auto &[name, has, scalar, bound] :
       {std::tuple{"clipValueMin", has_lo, &lo_copy, &e.lo},
        std::tuple{"clipValueMax", has_hi, &hi_copy, &e.hi}}) {
    if (f || !has) continue;
    int64_t v;
    if (!scalar_int(*scalar, &v))
      f = invalid(strf("%s dtype %s: an integer out takes integer bounds in the emulator", name,
                       dtype_str(scalar->dtype).c_str()));
    else if (!wide && (v < INT32_MIN || v > INT32_MAX))
      f = invalid(strf("%s %lld does not fit out's INT32 (the real op would wrap it)", name,
                       (long long)v));
    else
      *bound = v;
  }
  if (!f) f = check_format({{"self", &t_self}, {"out", &t_out}});
  if (!f) f = check_memory({{"self", &t_self}, {"out", &t_out}});
  if (f) return fail(fn, f.status, f.what);
  return hand_out(new aclOpExecutor(std::move(e)), workspace_size, executor);
}

template <Op op>
int32_t reduce_get_workspace_size(const aclTensor *self, aclTensor *out,
                                  uint64_t *workspace_size, aclOpExecutor **executor) {
  static_assert(op == Op::kMax || op == Op::kMin);
  const char *fn = gws_name(op);
  int32_t injected_status;
  if (take_injected(fn, &injected_status)) return injected_status;
  record_dtypes(fn, self, nullptr);
  if (!self) return fail(fn, kErrParamNullptr, "self is nullptr");
  if (!out) return fail(fn, kErrParamNullptr, "out is nullptr");
  if (!workspace_size) return fail(fn, kErrParamNullptr, "workspaceSize is nullptr");
  if (!executor) return fail(fn, kErrParamNullptr, "executor is nullptr");
  aclOpExecutor e;
  e.op = op;
  const std::string bad = copy_live_args({{"self", self}, {"out", out}}, {}, {}, &e.tensors,
                                         nullptr);
  if (!bad.empty()) return fail(fn, kErrParamInvalid, bad);
  const aclTensor &t_self = e.tensors[0], &t_out = e.tensors[1];
  Failure f = check_math_tensors(op, t_self, t_out);
  // The reduction of every dim without keepdim: a 0-d result (CheckShapeAndScalarSame).
  if (!f && numel(t_out.view) != 1)
    f = invalid("out shape " + shape_str(t_out.view) + " must hold one element");
  if (!f) f = check_format({{"self", &t_self}, {"out", &t_out}});
  if (!f) f = check_memory({{"self", &t_self}, {"out", &t_out}});
  if (f) return fail(fn, f.status, f.what);
  return hand_out(new aclOpExecutor(std::move(e)), workspace_size, executor);
}

void run_math(const aclOpExecutor &e) {
  const aclTensor &self = e.tensors[0], &out = e.tensors[1];
  const int64_t n = numel(self.view);
  if (e.op == Op::kClamp) {
    for (int64_t i = 0; i < n; ++i)
      write_int(out, i, std::min(std::max(read_int(self, i), e.lo), e.hi));
    return;
  }
  if (n == 0) return;  // the real ops return before any kernel
  int64_t r = read_int(self, 0);
  for (int64_t i = 1; i < n; ++i)
    r = e.op == Op::kMax ? std::max(r, read_int(self, i)) : std::min(r, read_int(self, i));
  write_int(out, 0, r);
}

// ---- execution ------------------------------------------------------------------------

// A tensor of rank k + 1 or k + 2 seen as (N, C, S) with i flat over its k spatial dims
// (S = H*W for the 2-D ops, D*H*W for the 3-D ones); rank k + 1 has N = 1.
struct Volumes {
  char *base;
  int64_t es;
  int64_t offset;
  int64_t n, c, size;
  int64_t sn, sc;
  std::vector<int64_t> dims, strides;  // spatial

  Volumes(const aclTensor &t, int k)
      : base(static_cast<char *>(t.data)), es(int64_t(element_size(t.dtype))), offset(t.offset) {
    const size_t r = t.view.size(), batched = size_t(k) + 2;
    n = r == batched ? t.view[0] : 1;
    sn = r == batched ? t.strides[0] : 0;
    c = t.view[r - k - 1], sc = t.strides[r - k - 1];
    dims.assign(t.view.end() - k, t.view.end());
    strides.assign(t.strides.end() - k, t.strides.end());
    size = numel(dims);
  }
  char *at(int64_t in, int64_t ic, int64_t i) const {
    int64_t e = offset + in * sn + ic * sc;
    for (size_t j = dims.size(); j-- > 0; i /= dims[j]) e += (i % dims[j]) * strides[j];
    return base + e * es;
  }
};

int64_t read_index(const Volumes &p, int64_t n, int64_t c, int64_t i) {
  if (p.es == 4) {
    int32_t v;
    std::memcpy(&v, p.at(n, c, i), 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, p.at(n, c, i), 8);
  return v;
}

// "(6, 7)"
std::string tuple_str(const std::vector<int64_t> &v) {
  std::string s = shape_str(v);
  return "(" + s.substr(1, s.size() - 2) + ")";
}

// Returns a runtime failure naming the first out-of-range index, before anything is written.
Failure check_indices(const Volumes &idx, const std::vector<int64_t> &osz) {
  const int64_t limit = numel(osz);
  for (int64_t n = 0; n < idx.n; ++n)
    for (int64_t c = 0; c < idx.c; ++c)
      for (int64_t i = 0; i < idx.size; ++i) {
        const int64_t v = read_index(idx, n, c, i);
        if (v < 0 || v >= limit)
          return {kErrRuntime,
                  strf("index %lld at position (n=%lld, c=%lld, i=%lld) is out of range "
                       "[0, %lld) for outputSize %s; nothing was written",
                       (long long)v, (long long)n, (long long)c, (long long)i, (long long)limit,
                       tuple_str(osz).c_str())};
      }
  return {};
}

void run_forward(const aclOpExecutor &e) {
  const int k = spatial_rank(e.op);
  const Volumes self(e.tensors[0], k), idx(e.tensors[1], k), out(e.tensors[2], k);
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t c = 0; c < out.c; ++c)
      for (int64_t j = 0; j < out.size; ++j) std::memset(out.at(n, c, j), 0, size_t(out.es));
  // Sequential in flat order per volume: the last writer of a duplicated index wins.
  for (int64_t n = 0; n < self.n; ++n)
    for (int64_t c = 0; c < self.c; ++c)
      for (int64_t i = 0; i < self.size; ++i)
        std::memcpy(out.at(n, c, read_index(idx, n, c, i)), self.at(n, c, i), size_t(self.es));
}

void run_backward(const aclOpExecutor &e) {
  const int k = spatial_rank(e.op);
  const Volumes grad(e.tensors[0], k), idx(e.tensors[2], k), out(e.tensors[3], k);
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t c = 0; c < out.c; ++c)
      for (int64_t i = 0; i < out.size; ++i)
        std::memcpy(out.at(n, c, i), grad.at(n, c, read_index(idx, n, c, i)), size_t(out.es));
}

// A FLOAT, FLOAT16 or BF16 element as a float (exact).
float read_float(const char *p, aclDataType dt) {
  if (dt == kFloat) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  uint32_t bits;
  if (dt == kBf16) {
    bits = uint32_t(h) << 16;
  } else {  // IEEE half: sign, 5-bit exponent, 10-bit mantissa
    const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0x1F) {
      bits = sign | 0x7F800000 | (man << 13);
    } else if (exp != 0) {
      bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | ((112 - e) << 23) | ((m & 0x3FF) << 13);
    }
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// PyTorch's max pooling with indices (aten/src/ATen/native/cpu/MaxPoolKernel.cpp): per
// window, start from the first in-bounds position with -inf, scan the taps in row-major
// order, and take a tap when `val > maxval || isnan(val)`: the first maximum wins ties, the
// last NaN wins, padding is never selected. The value is the element at the index, copied
// bit for bit.
void run_pool(const aclOpExecutor &e) {
  const int k = spatial_rank(e.op);
  const Volumes self(e.tensors[0], k), out(e.tensors[1], k), idx(e.tensors[2], k);
  const aclDataType dt = e.tensors[0].dtype;
  std::vector<int64_t> o(k), start(k), t(k), t0(k), t1(k);
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t c = 0; c < out.c; ++c)
      for (int64_t j = 0; j < out.size; ++j) {
        int64_t r = j;
        for (int a = k - 1; a >= 0; --a) {
          o[a] = r % out.dims[a];
          r /= out.dims[a];
        }
        // PyTorch's loop bounds: per axis the taps [t0, t1) inside the input, the first
        // of them where the scan starts (past the input for a window of padding only).
        int64_t best_index = 0;
        bool empty = false;
        for (int a = 0; a < k; ++a) {
          start[a] = o[a] * e.stride[a] - e.padding[a];
          const int64_t d = e.dilation[a];
          t0[a] = start[a] < 0 ? (-start[a] + d - 1) / d : 0;
          t1[a] = start[a] >= self.dims[a]
                      ? 0
                      : std::min(e.kernel[a], (self.dims[a] - 1 - start[a]) / d + 1);
          empty = empty || t0[a] >= t1[a];
          best_index = best_index * self.dims[a] + start[a] + t0[a] * d;
        }
        float best = -INFINITY;
        t = t0;
        for (bool more = !empty; more;) {
          int64_t flat = 0;
          for (int a = 0; a < k; ++a)
            flat = flat * self.dims[a] + start[a] + t[a] * e.dilation[a];
          const float v = read_float(self.at(n, c, flat), dt);
          if (v > best || std::isnan(v)) {
            best = v;
            best_index = flat;
          }
          more = false;  // next tap, row-major
          for (int a = k - 1; a >= 0 && !more; --a) {
            if (++t[a] < t1[a]) more = true;
            else t[a] = t0[a];
          }
        }
        if (empty) {  // PyTorch's -inf; the index past the input is not read
          const uint32_t minus_inf = dt == kFloat ? 0xff800000u : dt == kBf16 ? 0xff80u : 0xfc00u;
          std::memcpy(out.at(n, c, j), &minus_inf, size_t(out.es));  // little-endian
        } else {
          std::memcpy(out.at(n, c, j), self.at(n, c, best_index), size_t(out.es));
        }
        if (idx.es == 4) {
          const int32_t v = int32_t(best_index);
          std::memcpy(idx.at(n, c, j), &v, 4);
        } else {
          std::memcpy(idx.at(n, c, j), &best_index, 8);
        }
      }
}

// The second phase of every op (aclnnMaxUnpool2d, ...): checks the executor and the
// workspace, then runs the op.
template <Op op>
int32_t execute(void *workspace, uint64_t workspace_size, aclOpExecutor *executor,
                aclrtStream stream) {
  const char *fn = run_name(op);
  State &s = state();
  aclOpExecutor e;
  bool consumed = false, injected = false;
  int32_t injected_status = 0;
  std::string injected_msg, not_executor;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.calls[fn];
    s.last_stream[fn] = stream;
    s.last_workspace[fn] = workspace;
    auto inj = s.fail_next.find(fn);
    if (inj != s.fail_next.end()) {
      injected = true;
      injected_status = inj->second.status;
      injected_msg = std::move(inj->second.message);
      s.fail_next.erase(inj);
    }
    if (executor) {
      auto it = s.live.find(executor);
      if (it != s.live.end() && it->second == kExecutor) {
        e = *executor;
        // Single-use, consumed on success or failure, unless made repeatable.
        if (!e.repeatable) retire_locked(s, executor, kExecutor);
        consumed = true;
        s.last_dtype[fn] = e.tensors[0].dtype;
        if (!is_math(e.op)) s.last_indices_dtype[fn] = e.tensors[is_forward(e.op) ? 1 : 2].dtype;
        std::vector<void *> &data = s.last_data[fn];
        data.clear();
        for (const aclTensor &t : e.tensors) data.push_back(t.data);
      } else {
        not_executor = describe_locked(s, executor, kExecutor);
      }
    }
  }
  if (injected) {
    set_error(injected_msg.empty() ? strf("%s: injected failure %d", fn, injected_status)
                                   : injected_msg);
    return injected_status;
  }
  if (!executor) return fail(fn, kErrParamNullptr, "executor is nullptr");
  if (!consumed)
    return fail(fn, kErrParamInvalid,
                not_executor + " (an executor is single-use: execution consumes it)");
  const char *made_for = gws_name(e.op);
  if (e.op != op)
    return fail(fn, kErrParamInvalid,
                strf("executor %p was created by %s; it cannot run %s (it is consumed now)",
                     static_cast<void *>(executor), made_for, fn));
  if (workspace_size != e.workspace_size)
    return fail(
        fn, kErrParamInvalid,
        strf("workspaceSize %llu differs from the %llu returned by %s",
             (unsigned long long)workspace_size, (unsigned long long)e.workspace_size, made_for));
  if (!workspace && e.workspace_size > 0)
    return fail(fn, kErrParamInvalid,
                strf("workspace is nullptr but %s asked for %llu bytes", made_for,
                     (unsigned long long)e.workspace_size));
  aclTensor ws;
  ws.view = ws.storage = {int64_t(workspace_size)};
  ws.strides = {1};
  ws.dtype = kUint8;
  ws.data = workspace;
  for (const aclTensor &t : e.tensors)
    if (overlaps(ws, t))
      return fail(fn, kErrParamInvalid, "workspace overlaps the memory of a tensor argument");
  // Prove the workspace is writable memory of that size (ASan/valgrind see the writes).
  for (uint64_t i = 0; i < workspace_size; ++i)
    static_cast<unsigned char *>(workspace)[i] = static_cast<unsigned char>(0xA5 ^ (i & 0xFF));

  if (is_pool(op)) {
    run_pool(e);
    return kSuccess;
  }
  if (is_math(op)) {
    run_math(e);
    return kSuccess;
  }
  const aclTensor &idx_t = e.tensors[is_forward(op) ? 1 : 2];
  const Volumes idx(idx_t, spatial_rank(op));
  std::vector<int64_t> received;  // what a test reads back: fakecann_last_indices
  for (int64_t n = 0; n < idx.n; ++n)
    for (int64_t c = 0; c < idx.c; ++c)
      for (int64_t i = 0; i < idx.size; ++i) received.push_back(read_index(idx, n, c, i));
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.last_indices[fn] = std::move(received);
  }
  if (Failure f = check_indices(idx, e.output_size)) return fail(fn, f.status, f.what);
  if (is_forward(op))
    run_forward(e);
  else
    run_backward(e);
  return kSuccess;
}

// ---- libascendcl.so -------------------------------------------------------------------

const char *get_recent_err_msg() {
  int32_t st;
  if (take_injected("aclGetRecentErrMsg", &st)) return nullptr;
  refresh_thread_errors();
  if (t_errors.pending.empty()) return nullptr;     // documented: nullptr when there is none
  t_errors.returned = std::move(t_errors.pending);  // "obtains and clears"
  t_errors.pending.clear();
  return t_errors.returned.c_str();
}

aclError rt_malloc(void **dev_ptr, size_t size, int /*policy*/) {
  const char *fn = "aclrtMalloc";
  int32_t st;
  if (take_injected(fn, &st)) return st;
  if (!dev_ptr) return fail(fn, kAclErrInvalidParam, "devPtr is nullptr");
  if (size == 0) return fail(fn, kAclErrInvalidParam, "size is 0");
  void *p = nullptr;
  if (posix_memalign(&p, 64, size) != 0 || !p)
    return fail(fn, kAclErrMemAllocation, strf("cannot allocate %zu bytes", size));
  std::memset(p, 0xCD, size);  // device memory starts as garbage, never as zeros
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().allocations.emplace(p, size);
  }
  *dev_ptr = p;
  return 0;
}

aclError rt_free(void *dev_ptr) {
  const char *fn = "aclrtFree";
  int32_t st;
  if (take_injected(fn, &st)) return st;
  if (!dev_ptr) return fail(fn, kAclErrInvalidParam, "devPtr is nullptr");
  {
    std::lock_guard<std::mutex> lock(state().mu);
    if (state().allocations.erase(dev_ptr) == 0) {
      ++state().bad_frees;
    } else {
      std::free(dev_ptr);
      return 0;
    }
  }
  return fail(fn, kAclErrInvalidParam,
              strf("%p was not allocated by aclrtMalloc or was already freed", dev_ptr));
}

// Host memory on both sides in the emulator; counted (fakecann_call_count) and checked
// as the real one checks its arguments.
aclError rt_memcpy(void *dst, size_t dest_max, const void *src, size_t count, int kind) {
  const char *fn = "aclrtMemcpy";
  int32_t st;
  if (take_injected(fn, &st)) return st;
  if (!dst || !src) return fail(fn, kAclErrInvalidParam, "dst or src is nullptr");
  if (count > dest_max)
    return fail(fn, kAclErrInvalidParam, strf("count %zu exceeds destMax %zu", count, dest_max));
  if (kind < 0 || kind > 3) return fail(fn, kAclErrInvalidParam, strf("unknown kind %d", kind));
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().last_memcpy_kind = kind;
  }
  std::memmove(dst, src, count);
  return 0;
}

aclError rt_get_current_context(void **context) {
  const char *fn = "aclrtGetCurrentContext";
  int32_t st;
  if (take_injected(fn, &st)) return st;
  if (!context) return fail(fn, kAclErrInvalidParam, "context is nullptr");
  bool none;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    none = state().no_context;
  }
  // Real ACL: error 107002 (ACL_ERROR_RT_CONTEXT_NULL) when the thread has no context.
  if (none) return fail(fn, kAclErrContextNull, "the calling thread has no ACL context");
  static int the_context;
  *context = &the_context;
  return 0;
}

// The emulated chip's SoC name (set_default_soc_name, fakecann_set_soc_name); nullptr when
// it has none, as aclrtGetSocName does when the runtime cannot tell. The pointer stays
// valid until the thread's next call.
const char *rt_get_soc_name() {
  int32_t st;
  if (take_injected("aclrtGetSocName", &st)) return nullptr;
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().soc_name_null) return nullptr;
  copy = state().soc_name;
  return copy.c_str();
}

aclError rt_synchronize_stream(aclrtStream stream) {
  int32_t st;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().last_stream["aclrtSynchronizeStream"] = stream;
  }
  if (take_injected("aclrtSynchronizeStream", &st)) return st;
  return 0;  // every launch already completed synchronously
}

// The device of the calling thread's context: 0 unless fakecann_set_device() says
// otherwise; 107002 (no context) for -1, and while fakecann_set_no_context is on.
aclError rt_get_device(int32_t *device_id) {
  const char *fn = "aclrtGetDevice";
  int32_t st;
  if (take_injected(fn, &st)) return st;
  if (!device_id) return fail(fn, kAclErrInvalidParam, "deviceId is nullptr");
  int32_t device;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    device = state().no_context ? -1 : state().device;
  }
  if (device < 0) return fail(fn, kAclErrContextNull, "the calling thread has no ACL context");
  *device_id = device;
  return 0;
}

int32_t fwd_gws(const aclTensor *self, const aclTensor *indices, const aclIntArray *output_size,
                aclTensor *out, uint64_t *workspace_size, aclOpExecutor **executor) {
  return get_workspace_size(Op::kForward, {{"self", self}, {"indices", indices}},
                            {{"outputSize", output_size}}, {"out", out}, workspace_size,
                            executor);
}

int32_t bwd_gws(const aclTensor *grad_output, const aclTensor *self, const aclTensor *indices,
                const aclIntArray *output_size, aclTensor *out, uint64_t *workspace_size,
                aclOpExecutor **executor) {
  return get_workspace_size(Op::kBackward,
                            {{"gradOutput", grad_output}, {"self", self}, {"indices", indices}},
                            {{"outputSize", output_size}}, {"out", out}, workspace_size,
                            executor);
}

int32_t fwd3d_gws(const aclTensor *self, const aclTensor *indices, const aclIntArray *output_size,
                  const aclIntArray *stride, const aclIntArray *padding, aclTensor *out,
                  uint64_t *workspace_size, aclOpExecutor **executor) {
  return get_workspace_size(
      Op::kForward3d, {{"self", self}, {"indices", indices}},
      {{"outputSize", output_size}, {"stride", stride}, {"padding", padding}}, {"outRef", out},
      workspace_size, executor);
}

int32_t bwd3d_gws(const aclTensor *grad_output, const aclTensor *self, const aclTensor *indices,
                  const aclIntArray *output_size, const aclIntArray *stride,
                  const aclIntArray *padding, aclTensor *out, uint64_t *workspace_size,
                  aclOpExecutor **executor) {
  return get_workspace_size(
      Op::kBackward3d, {{"gradOutput", grad_output}, {"self", self}, {"indices", indices}},
      {{"outputSize", output_size}, {"stride", stride}, {"padding", padding}}, {"out", out},
      workspace_size, executor);
}

const CoreTable kCoreTable = {
    kCoreAbiVersion,
    get_recent_err_msg,
    rt_malloc,
    rt_free,
    rt_synchronize_stream,
    rt_get_current_context,
    fwd_gws,
    execute<Op::kForward>,
    bwd_gws,
    execute<Op::kBackward>,
    fwd3d_gws,
    execute<Op::kForward3d>,
    bwd3d_gws,
    execute<Op::kBackward3d>,
    pool_get_workspace_size<Op::kPool2d>,
    execute<Op::kPool2d>,
    pool_get_workspace_size<Op::kPool3d>,
    execute<Op::kPool3d>,
    rt_get_soc_name,
    rt_get_device,
    rt_memcpy,
    clamp_get_workspace_size,
    execute<Op::kClamp>,
    reduce_get_workspace_size<Op::kMax>,
    execute<Op::kMax>,
    reduce_get_workspace_size<Op::kMin>,
    execute<Op::kMin>,
};

}  // namespace
}  // namespace fakecann

using namespace fakecann;

FAKECANN_EXPORT const CoreTable *fakecann_core() { return &kCoreTable; }

// ---- libnnopbase.so: aclTensor / aclIntArray ------------------------------------------

FAKECANN_EXPORT aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
                                           aclDataType dataType, const int64_t *stride,
                                           int64_t offset, aclFormat format,
                                           const int64_t *storageDims, uint64_t storageDimsNum,
                                           void *tensorData) {
  const char *fn = "aclCreateTensor";
  int32_t st;
  if (take_injected(fn, &st)) return nullptr;
  std::string bad;
  if (viewDimsNum > kMaxDims || storageDimsNum > kMaxDims)
    bad = strf("at most %d dims, got viewDimsNum %llu, storageDimsNum %llu", kMaxDims,
               (unsigned long long)viewDimsNum, (unsigned long long)storageDimsNum);
  else if (viewDimsNum > 0 && !viewDims)
    bad = "viewDims is nullptr";
  else if (viewDimsNum > 0 && !stride)
    bad = "stride is nullptr";
  else if (storageDimsNum > 0 && !storageDims)
    bad = "storageDims is nullptr";
  else if (element_size(dataType) == 0)
    bad = strf("unknown dataType %d", dataType);
  else if (offset < 0)
    bad = strf("negative offset %lld", (long long)offset);
  else if (format < -1)
    bad = strf("unknown format %d", format);
  if (bad.empty()) {
    for (uint64_t i = 0; i < viewDimsNum; ++i)
      if (viewDims[i] < 0) bad = strf("negative view dim %lld", (long long)viewDims[i]);
    for (uint64_t i = 0; i < storageDimsNum; ++i)
      if (storageDims[i] < 0) bad = strf("negative storage dim %lld", (long long)storageDims[i]);
  }
  if (!bad.empty()) {
    fail(fn, kErrParamInvalid, bad);
    return nullptr;
  }
  auto *t = new aclTensor;
  t->view.assign(viewDims, viewDims + viewDimsNum);
  t->strides.assign(stride, stride + viewDimsNum);
  t->storage.assign(storageDims, storageDims + storageDimsNum);
  t->offset = offset;
  t->dtype = dataType;
  t->format = format;
  t->data = tensorData;
  std::lock_guard<std::mutex> lock(state().mu);
  register_locked(state(), t, kTensor);
  return t;
}

FAKECANN_EXPORT aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
  return destroy("aclDestroyTensor", tensor, kTensor);
}

FAKECANN_EXPORT aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size) {
  const char *fn = "aclCreateIntArray";
  int32_t st;
  if (take_injected(fn, &st)) return nullptr;
  if (size > 0 && !value) {
    fail(fn, kErrParamNullptr, "value is nullptr");
    return nullptr;
  }
  auto *a = new aclIntArray;
  a->values.assign(value, value + size);
  std::lock_guard<std::mutex> lock(state().mu);
  register_locked(state(), a, kIntArray);
  return a;
}

FAKECANN_EXPORT aclnnStatus aclDestroyIntArray(const aclIntArray *array) {
  return destroy("aclDestroyIntArray", array, kIntArray);
}

FAKECANN_EXPORT aclScalar *aclCreateScalar(void *value, aclDataType dataType) {
  const char *fn = "aclCreateScalar";
  int32_t st;
  if (take_injected(fn, &st)) return nullptr;
  if (!value) {
    fail(fn, kErrParamNullptr, "value is nullptr");
    return nullptr;
  }
  if (element_size(dataType) == 0) {
    fail(fn, kErrParamInvalid, strf("unknown dataType %d", dataType));
    return nullptr;
  }
  auto *a = new aclScalar;
  a->dtype = dataType;
  std::memcpy(a->value, value, element_size(dataType));
  std::lock_guard<std::mutex> lock(state().mu);
  register_locked(state(), a, kScalar);
  return a;
}

FAKECANN_EXPORT aclnnStatus aclDestroyScalar(const aclScalar *scalar) {
  return destroy("aclDestroyScalar", scalar, kScalar);
}

// CANN's contract (the docs of aclSetAclOpExecutorRepeatable and aclDestroyAclOpExecutor,
// CANN 8.0 to 9.0): an executor made repeatable is kept by its executions and released
// with aclDestroyAclOpExecutor, which destroys only such executors; a plain one is
// consumed by its execution. 561103 for a null executor, as the docs say. Absent from a
// build with -DFAKECANN_NO_REPEATABLE_EXECUTOR (with -DFAKECANN_NO_DESTROY_EXECUTOR, both),
// as from CANN versions that predate them.
#if !defined(FAKECANN_NO_REPEATABLE_EXECUTOR) && !defined(FAKECANN_NO_DESTROY_EXECUTOR)
FAKECANN_EXPORT aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor) {
  const char *fn = "aclSetAclOpExecutorRepeatable";
  int32_t injected_status;
  if (take_injected(fn, &injected_status)) return injected_status;
  if (!executor) return fail(fn, kErrInnerNullptr, "executor is nullptr");
  State &s = state();
  std::string what;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.live.find(executor);
    if (it != s.live.end() && it->second == kExecutor) {
      executor->repeatable = true;
      return kSuccess;
    }
    what = describe_locked(s, executor, kExecutor);
  }
  return fail(fn, kErrParamInvalid, what);
}
#endif

#ifndef FAKECANN_NO_DESTROY_EXECUTOR
FAKECANN_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor) {
  const char *fn = "aclDestroyAclOpExecutor";
  int32_t injected_status;
  if (take_injected(fn, &injected_status)) return injected_status;
  if (!executor) return fail(fn, kErrInnerNullptr, "executor is nullptr");
  State &s = state();
  std::string what;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.live.find(executor);
    if (it != s.live.end() && it->second == kExecutor && executor->repeatable) {
      retire_locked(s, executor, kExecutor);
      return kSuccess;
    }
    ++s.bad_destroys;
    what = it != s.live.end() && it->second == kExecutor
               ? strf(
                     "executor %p was not made repeatable: aclDestroyAclOpExecutor destroys "
                     "only executors made so by aclSetAclOpExecutorRepeatable (a plain one is "
                     "consumed by its execution)",
                     static_cast<void *>(executor))
               : describe_locked(s, executor, kExecutor) + " (double destroy or foreign pointer)";
  }
  return fail(fn, kErrParamInvalid, what);
}
#endif

// ---- test controls --------------------------------------------------------------------

FAKECANN_EXPORT int64_t fakecann_live_objects() {
  std::lock_guard<std::mutex> lock(state().mu);
  const auto &c = state().live_count;
  return c[kTensor] + c[kIntArray] + c[kExecutor] + c[kScalar];
}

FAKECANN_EXPORT int64_t fakecann_live_scalars() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().live_count[kScalar];
}

FAKECANN_EXPORT int64_t fakecann_live_tensors() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().live_count[kTensor];
}

FAKECANN_EXPORT int64_t fakecann_live_int_arrays() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().live_count[kIntArray];
}

FAKECANN_EXPORT int64_t fakecann_live_executors() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().live_count[kExecutor];
}

FAKECANN_EXPORT int64_t fakecann_live_allocations() {
  std::lock_guard<std::mutex> lock(state().mu);
  return int64_t(state().allocations.size());
}

FAKECANN_EXPORT int64_t fakecann_bad_destroys() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().bad_destroys;
}

FAKECANN_EXPORT int64_t fakecann_bad_frees() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().bad_frees;
}

FAKECANN_EXPORT void fakecann_fail_next(const char *function_name, int32_t status,
                                        const char *message) {
  if (!function_name) return;
  std::lock_guard<std::mutex> lock(state().mu);
  state().fail_next[function_name] = Injected{status, message ? message : ""};
}

FAKECANN_EXPORT int64_t fakecann_call_count(const char *function_name) {
  if (!function_name) return 0;
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().calls.find(function_name);
  return it == state().calls.end() ? 0 : it->second;
}

FAKECANN_EXPORT uint64_t fakecann_last_workspace_size() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_workspace_size;
}

FAKECANN_EXPORT int32_t fakecann_last_dtype(const char *function_name) {
  if (!function_name) return -1;
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().last_dtype.find(function_name);
  return it == state().last_dtype.end() ? -1 : it->second;
}

FAKECANN_EXPORT int32_t fakecann_last_indices_dtype(const char *function_name) {
  if (!function_name) return -1;
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().last_indices_dtype.find(function_name);
  return it == state().last_indices_dtype.end() ? -1 : it->second;
}

FAKECANN_EXPORT void *fakecann_last_stream(const char *function_name) {
  if (!function_name) return nullptr;
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().last_stream.find(function_name);
  return it == state().last_stream.end() ? nullptr : it->second;
}

// The newest error message set in any thread (not cleared by aclGetRecentErrMsg); "" if
// none since the last reset. The pointer stays valid until this thread's next call.
// The workspace pointer the last execution of `function_name` got (NULL if never run).
FAKECANN_EXPORT void *fakecann_last_workspace(const char *function_name) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().last_workspace.find(function_name);
  return it == state().last_workspace.end() ? nullptr : it->second;
}

// The indices the last execution of the unpool entry point `function_name` received, in
// (n, c, i) order: copies up to `capacity` of them into `out` and returns how many there
// were; -1 if it never ran since the last reset.
FAKECANN_EXPORT int64_t fakecann_last_indices(const char *function_name, int64_t *out,
                                              int64_t capacity) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().last_indices.find(function_name ? function_name : "");
  if (it == state().last_indices.end()) return -1;
  const int64_t n = int64_t(it->second.size());
  for (int64_t i = 0; i < std::min(n, capacity); ++i) out[i] = it->second[i];
  return n;
}

// The data pointer of tensor `i` (in the op's signature order, out last; the pools: self,
// out, indices) of the last execution of `function_name`; NULL if none.
FAKECANN_EXPORT void *fakecann_last_tensor_data(const char *function_name, int64_t i) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().last_data.find(function_name ? function_name : "");
  if (it == state().last_data.end() || i < 0 || i >= int64_t(it->second.size())) return nullptr;
  return it->second[i];
}

// aclrtMemcpy's last kind (-1 if it never ran since the last reset).
FAKECANN_EXPORT int32_t fakecann_last_memcpy_kind() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_memcpy_kind;
}

FAKECANN_EXPORT const char *fakecann_last_error_message() {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(state().mu);
  copy = state().last_error;
  return copy.c_str();
}

// Clears injected failures, call counts, last_* records, bad destroy/free counts and all
// threads' pending error messages, ends the modes below and gives the chip its default SoC
// name again. Live objects and allocations are kept (and counted).
FAKECANN_EXPORT void fakecann_reset() {
  std::lock_guard<std::mutex> lock(state().mu);
  State &s = state();
  s.fail_next.clear();
  s.calls.clear();
  s.last_dtype.clear();
  s.last_indices_dtype.clear();
  s.last_stream.clear();
  s.last_workspace.clear();
  s.last_indices.clear();
  s.last_data.clear();
  s.last_memcpy_kind = -1;
  s.last_workspace_size = 0;
  s.bad_destroys = 0;
  s.bad_frees = 0;
  s.last_error.clear();
  s.int64_indices_only = false;
  s.no_context = false;
  s.device = 0;
  s.pool2d_float_only = false;
  s.clamp_int32_only = false;
  set_default_soc_name(s);
  ++g_generation;
}

// Legacy mode: the forward refuses INT32 indices, as aclnnMaxUnpool2d before CANN 8.0.0.
FAKECANN_EXPORT void fakecann_set_int64_indices_only(int on) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().int64_indices_only = on != 0;
}

// Makes aclrtGetCurrentContext report that the calling thread has no context (any thread).
FAKECANN_EXPORT void fakecann_set_no_context(int on) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().no_context = on != 0;
}

// The emulated chip: what aclrtGetSocName returns from now on (nullptr for NULL), and so
// which chip the pool ops check for (current_chip()). fakecann_reset() restores the default.
FAKECANN_EXPORT void fakecann_set_soc_name(const char *name) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().soc_name = name ? name : "";
  state().soc_name_null = name == nullptr;
}

// aclrtGetDevice's answer from now on (-1: no device, error 107002).
FAKECANN_EXPORT void fakecann_set_device(int32_t device) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().device = device;
}

// CANN 8.0.RC2's aclnnMaxPool2dWithIndices (its doc lists FLOAT self only on Atlas A2, and
// INT32 indices): GetWorkspaceSize refuses FLOAT16, BF16 and INT64 indices with 161002.
FAKECANN_EXPORT void fakecann_set_pool2d_float_only(int on) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().pool2d_float_only = on != 0;
}

// aclnnClampGetWorkspaceSize refuses INT64 self and out with 161002: an AI Core whose
// int64 clamp the ops-math list names but no one has verified (issue 47).
FAKECANN_EXPORT void fakecann_set_clamp_int32_only(int on) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().clamp_int32_only = on != 0;
}
