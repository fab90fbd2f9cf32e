// The four aclnn unpool targets, one template:
//   forward:  out = zeros; out[n, c, indices[n, c, i]] = x[n, c, i], by
//             aclnnMaxUnpool2d(self=x, indices, outputSize=out's (H, W), out) and
//             aclnnMaxUnpool3d(self=x, indices, outputSize=out's (D, H, W), stride, padding,
//             outRef=out);
//   backward: out[n, c, i] = grad_output[n, c, indices[n, c, i]], by
//             aclnnMaxUnpool2dBackward(gradOutput, self, indices, outputSize=grad's (H, W),
//             out) and aclnnMaxUnpool3dBackward(..., outputSize=grad's (D, H, W), stride,
//             padding, out).
// The 2-D targets take `channels_last` (NHWC buffers are presented as strided NCHW views,
// PlanesView); the 3-D ones refuse any attribute and take channels-first buffers as they
// are, contiguous as aclnn wants outRef: (N, C, D, H, W), or (C, D, H, W), which aclnn
// reads as (N, D, H, W) -- the same scatter, one volume per leading index.
// Every index the unpool op gets is inside its plane (index_safety.h): clamped by
// aclnnClamp (the default targets) or checked (the *Checked targets, OUT_OF_RANGE).
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/buffer_checks.h"
#include "common/geometry.h"
#include "common/unpool_checks.h"
#include "common/value_types.h"
#include "npu/aclnn_call.h"
#include "npu/handlers.h"
#include "npu/index_safety.h"

namespace jax_unpool::npu {
namespace {

// Whether aclnnMaxUnpool2d takes indices of `type` (Takes), asked with a one-element call.
std::optional<bool> ForwardTakes(const CannLibrary& cann, aclDataType type) {
  if (cann.max_unpool2d_get_workspace_size == nullptr) return std::nullopt;
  // GetWorkspaceSize reads no data; the memory is real and disjoint all the same.
  alignas(16) static unsigned char x_memory[16], index_memory[16], out_memory[16];
  const std::vector<int64_t> one = {1, 1, 1, 1};
  AclObjects objects(cann);
  aclTensor* x = objects.Tensor({one, one, one, 0, ACL_FLOAT, x_memory});
  aclTensor* indices = objects.Tensor({one, one, one, 0, type, index_memory});
  aclTensor* out = objects.Tensor({one, one, one, 0, ACL_FLOAT, out_memory});
  aclIntArray* output_size = objects.IntArray({1, 1});
  if (!objects.error("aclnnMaxUnpool2d").success()) return std::nullopt;
  return Takes(cann, [&](uint64_t* workspace_size, aclOpExecutor** executor) {
    return cann.max_unpool2d_get_workspace_size(x, indices, output_size, out, workspace_size,
                                                executor);
  });
}

// What differs between the four targets. GetWorkspaceSizeFn is the op's first phase, whose
// arguments differ (GetWorkspaceSize below passes them).
template <typename GetWorkspaceSizeFn>
struct UnpoolTarget {
  const char* op;  // in messages
  int k;           // spatial rank: 2 or 3
  AclnnOp aclnn_op;
  const char* get_workspace_size_name;
  const char* run_name;
  GetWorkspaceSizeFn CannLibrary::* get_workspace_size;
  AclnnRunFn CannLibrary::* run;
  const char* advice;  // when the loaded CANN lacks the op
  bool int64_indices_only;

  bool forward() const {
    return aclnn_op == AclnnOp::kMaxUnpool2d || aclnn_op == AclnnOp::kMaxUnpool3d;
  }
};

// Optional: the backwards alone are on the Atlas training series (aclnnMaxUnpool2d.md in
// hicann/ops-nn); the NPU lowering runs the jnp reference where this CANN has no forward.
constexpr UnpoolTarget<MaxUnpool2dGetWorkspaceSizeFn> kMaxUnpool2d{
    "max_unpool2d",
    2,
    AclnnOp::kMaxUnpool2d,
    "aclnnMaxUnpool2dGetWorkspaceSize",
    "aclnnMaxUnpool2d",
    &CannLibrary::max_unpool2d_get_workspace_size,
    &CannLibrary::max_unpool2d,
    "this CANN has no forward unpool op; the NPU lowering runs the jnp reference instead",
    false};
// The loader requires this op's entry points, so its RequireSymbols always passes.
constexpr UnpoolTarget<MaxUnpool2dBackwardGetWorkspaceSizeFn> kMaxUnpool2dBackward{
    "max_unpool2d_backward",
    2,
    AclnnOp::kMaxUnpool2dBackward,
    "aclnnMaxUnpool2dBackwardGetWorkspaceSize",
    "aclnnMaxUnpool2dBackward",
    &CannLibrary::max_unpool2d_backward_get_workspace_size,
    &CannLibrary::max_unpool2d_backward,
    kNewerCann,
    false};
constexpr UnpoolTarget<MaxUnpool3dGetWorkspaceSizeFn> kMaxUnpool3d{
    "max_unpool3d",
    3,
    AclnnOp::kMaxUnpool3d,
    "aclnnMaxUnpool3dGetWorkspaceSize",
    "aclnnMaxUnpool3d",
    &CannLibrary::max_unpool3d_get_workspace_size,
    &CannLibrary::max_unpool3d,
    kNewerCann,
    false};
// Unlike the forward, CANN refuses INT32 indices here; the NPU lowering converts.
constexpr UnpoolTarget<MaxUnpool3dBackwardGetWorkspaceSizeFn> kMaxUnpool3dBackward{
    "max_unpool3d_backward",
    3,
    AclnnOp::kMaxUnpool3dBackward,
    "aclnnMaxUnpool3dBackwardGetWorkspaceSize",
    "aclnnMaxUnpool3dBackward",
    &CannLibrary::max_unpool3d_backward_get_workspace_size,
    &CannLibrary::max_unpool3d_backward,
    kNewerCann,
    true};

// The aclnn arguments of a call; grad only for the backwards.
struct UnpoolTensors {
  aclTensor *grad = nullptr, *self = nullptr, *indices = nullptr, *out = nullptr;
  UnpoolArrays arrays;
};

aclnnStatus GetWorkspaceSize(MaxUnpool2dGetWorkspaceSizeFn f, const UnpoolTensors& t,
                             uint64_t* size, aclOpExecutor** executor) {
  return f(t.self, t.indices, t.arrays.output_size, t.out, size, executor);
}
aclnnStatus GetWorkspaceSize(MaxUnpool2dBackwardGetWorkspaceSizeFn f, const UnpoolTensors& t,
                             uint64_t* size, aclOpExecutor** executor) {
  return f(t.grad, t.self, t.indices, t.arrays.output_size, t.out, size, executor);
}
aclnnStatus GetWorkspaceSize(MaxUnpool3dGetWorkspaceSizeFn f, const UnpoolTensors& t,
                             uint64_t* size, aclOpExecutor** executor) {
  return f(t.self, t.indices, t.arrays.output_size, t.arrays.stride, t.arrays.padding, t.out, size,
           executor);
}
aclnnStatus GetWorkspaceSize(MaxUnpool3dBackwardGetWorkspaceSizeFn f, const UnpoolTensors& t,
                             uint64_t* size, aclOpExecutor** executor) {
  return f(t.grad, t.self, t.indices, t.arrays.output_size, t.arrays.stride, t.arrays.padding,
           t.out, size, executor);
}

// The layout attribute: a 2-D target's channels_last; a 3-D target binds every attribute
// to refuse them all (XLA checks the attribute count only for handlers that bind some, and
// channels_last=True would otherwise be ignored and an NDHWC buffer read as NCDHW).
template <int k>
using LayoutAttribute = std::conditional_t<k == 2, bool, AttributeNames>;

ffi::Error ReadLayout(const char*, bool channels_last, bool* out) {
  *out = channels_last;
  return ffi::Error::Success();
}
ffi::Error ReadLayout(const char* op, const AttributeNames& attrs, bool* out) {
  *out = false;
  return RefuseAttributes(op, attrs);
}

// values: the forward's x or the backward's grad_output. `checked`: on a device, an index
// outside its plane fails the call instead of being clamped.
template <typename Target, typename Layout>
ffi::Error MaxUnpoolAclnn(const Target& t, bool checked, const Launch& launch,
                          ffi::AnyBuffer values, ffi::AnyBuffer indices,
                          ffi::Result<ffi::AnyBuffer> out, const Layout& layout) {
  bool channels_last = false;
  if (ffi::Error e = ReadLayout(t.op, layout, &channels_last); !e.success()) return e;
  auto cann = RequireCann(t.op, launch);
  if (cann.has_error()) return cann.error();
  const CannLibrary& lib = **cann;
  const auto get_workspace_size = lib.*t.get_workspace_size;
  const AclnnRunFn run = lib.*t.run;
  if (ffi::Error e = RequireSymbols(lib, t.op,
                                    {{t.get_workspace_size_name, get_workspace_size != nullptr},
                                     {t.run_name, run != nullptr}},
                                    t.advice);
      !e.success()) {
    return e;
  }

  const bool forward = t.forward();
  const ffi::ErrorOr<Geometry> planes =
      CheckUnpoolCall(t.op, forward ? UnpoolOp::kForward : UnpoolOp::kBackward, values, indices,
                      *out, channels_last, t.k);
  if (planes.has_error()) return planes.error();
  if (t.int64_indices_only && indices.element_type() != ffi::DataType::S64) {
    return ffi::Error::InvalidArgument(std::string(t.op) + ": " + t.run_name +
                                       " takes int64 indices only, got " +
                                       DataTypeName(indices.element_type()));
  }
  ffi::Error answer;  // the answer without aclnn: a dtype it cannot take, or empty buffers
  const auto value_type = ValuesTypeOrAnswer(t.op, t.aclnn_op, t.run_name,
                                             forward ? "x" : "grad_output", values, *out, &answer);
  if (!value_type) return answer;
  const auto index_type = PresentedIndexType(indices.element_type());  // int32/int64: checked
  DeviceMemory safe;  // the clamped indices, held until the launch
  void* index_data = indices.untyped_data();
  ffi::Error safety;
  if (!checked) {
    safety = ClampIndices(lib, launch, t.op, *planes, indices, *index_type, &safe);
    index_data = safe.data();
  } else if (launch.device) {
    safety = CheckIndicesOnDevice(lib, launch, t.op, *planes, indices, *index_type);
  } else {
    safety = CheckIndicesOnHost(t.op, *planes, indices);
  }
  if (!safety.success()) return safety;

  AclObjects objects(lib);
  const TensorView values_view = PlanesView(values, channels_last, *value_type, t.k);
  const TensorView out_view = PlanesView(*out, channels_last, *value_type, t.k);
  UnpoolTensors tensors;
  if (forward) {
    tensors.self = objects.Tensor(values_view);
  } else {
    tensors.grad = objects.Tensor(values_view);
    // `self` is the forward's input. The primitive has no such operand -- x matters only
    // for its shape, which is out's -- but aclnn wants one, of out's shape and gradOutput's
    // dtype, and reads only those (its data is never used: see
    // aclnn_max_unpool{2,3}d_backward.cpp in hicann/ops-nn). So it is described with out's
    // shape and dtype over grad_output's memory with all strides 0: no buffer of its own,
    // and no aliasing of the output `out`, which checking runtimes (e.g. the emulator in
    // tests/fake_cann) reject for an input.
    tensors.self = objects.Tensor(BroadcastFirstElement(out_view, values_view));
  }
  TensorView index_view = PlanesView(indices, channels_last, *index_type, t.k);
  index_view.data = index_data;
  tensors.indices = objects.Tensor(index_view);
  tensors.out = objects.Tensor(out_view);
  // outputSize: the plane the indices address.
  tensors.arrays = MakeUnpoolArrays(objects, forward ? out_view : values_view, t.k);
  if (ffi::Error e = objects.error(t.op); !e.success()) return e;

  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status =
      GetWorkspaceSize(get_workspace_size, tensors, &workspace_size, &executor);
  ffi::Error result = RunExecutor(lib, launch, t.op, t.get_workspace_size_name, status,
                                  workspace_size, executor, t.run_name, run);
  if (status == ACLNN_ERR_PARAM_INVALID && t.aclnn_op == AclnnOp::kMaxUnpool2d &&
      *index_type == ACL_INT32 && ForwardTakes(lib, ACL_INT32) == std::optional<bool>(false) &&
      ForwardTakes(lib, ACL_INT64) == std::optional<bool>(true)) {
    // CANN 8.0.RC1-RC3 refuse INT32 indices here, with a message that does not say so.
    return ffi::Error::InvalidArgument(
        std::string(t.op) + ": this CANN's " + t.run_name +
        " takes int64 indices only (CANN before 8.0.0), got int32: convert them to int64, as "
        "the NPU lowering does");
  }
  return WithPositionsNote(std::move(result), t.k);
}

// `checked`: the *DeviceChecked targets (the same calling convention, indices checked).
template <const auto& target, bool checked>
ffi::Error OnDeviceImpl(void* stream, std::optional<int32_t> device_ordinal,
                        ffi::ScratchAllocator scratch, ffi::AnyBuffer values,
                        ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                        LayoutAttribute<target.k> layout) {
  return OnDevice(stream, device_ordinal, scratch, [&](const Launch& launch) {
    return MaxUnpoolAclnn(target, checked, launch, values, indices, out, layout);
  });
}

// Host memory: the device's handling (clamped or checked indices) on the host.
template <const auto& target, bool checked>
ffi::Error OnHostImpl(ffi::AnyBuffer values, ffi::AnyBuffer indices,
                      ffi::Result<ffi::AnyBuffer> out, LayoutAttribute<target.k> layout) {
  return OnHost([&](const Launch& launch) {
    return MaxUnpoolAclnn(target, checked, launch, values, indices, out, layout);
  });
}

template <typename Binding>
auto WithBuffers(Binding binding) {
  return std::move(binding)
      .template Arg<ffi::AnyBuffer>()   // x (forward) or grad_output (backward)
      .template Arg<ffi::AnyBuffer>()   // indices
      .template Ret<ffi::AnyBuffer>();  // out
}

auto DeviceBinding() {
  return WithBuffers(ffi::Ffi::Bind()
                         .Ctx<ffi::PlatformStream<void*>>()
                         .Ctx<DeviceOrdinalIfKnown>()
                         .Ctx<ffi::ScratchAllocator>());
}

auto HostBinding() { return WithBuffers(ffi::Ffi::Bind()); }

}  // namespace

std::vector<std::string> ForwardIndexDtypes() {
  const CannLibrary* cann = LoadedCann();
  if (cann == nullptr || cann->max_unpool2d_get_workspace_size == nullptr) return {};
  return IndexDtypesTaken([&](aclDataType type) { return ForwardTakes(*cann, type); });
}

// Each target's four handlers: Name##Device, ##DeviceChecked (the same calling convention,
// checked indices), ##Host and ##HostChecked. The 2-D targets take channels_last; the 3-D
// ones bind every attribute to refuse it. The handlers are parenthesised: the macro would
// split a template's argument list at its comma.
#define JAX_UNPOOL_ACLNN_UNPOOL_HANDLERS(Name, target, layout)                                  \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##Device, (OnDeviceImpl<target, false>),                    \
                                DeviceBinding().layout);                                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##DeviceChecked, (OnDeviceImpl<target, true>),              \
                                DeviceBinding().layout);                                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##Host, (OnHostImpl<target, false>), HostBinding().layout); \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##HostChecked, (OnHostImpl<target, true>), HostBinding().layout)

JAX_UNPOOL_ACLNN_UNPOOL_HANDLERS(MaxUnpool2dAclnn, kMaxUnpool2d, Attr<bool>("channels_last"));
JAX_UNPOOL_ACLNN_UNPOOL_HANDLERS(MaxUnpool2dBackwardAclnn, kMaxUnpool2dBackward,
                                 Attr<bool>("channels_last"));
JAX_UNPOOL_ACLNN_UNPOOL_HANDLERS(MaxUnpool3dAclnn, kMaxUnpool3d, Attrs<AttributeNames>());
JAX_UNPOOL_ACLNN_UNPOOL_HANDLERS(MaxUnpool3dBackwardAclnn, kMaxUnpool3dBackward,
                                 Attrs<AttributeNames>());

}  // namespace jax_unpool::npu
