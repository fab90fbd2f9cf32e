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
// Every index the unpool op gets is inside its plane (index_safety.h): checked on the host
// in host-emulation mode; on a device clamped there (the default targets) or checked there
// (the *Checked targets, OUT_OF_RANGE).
#include <string>
#include <type_traits>
#include <utility>

#include "common/buffer_checks.h"
#include "common/geometry.h"
#include "common/unpool_checks.h"
#include "common/value_types.h"
#include "npu/aclnn_call.h"
#include "npu/handlers.h"
#include "npu/index_safety.h"

namespace jax_unpool::npu {
namespace {

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
  if (!launch.device) {
    safety = CheckIndicesOnHost(t.op, *planes, indices);
  } else if (checked) {
    safety = CheckIndicesOnDevice(lib, launch, t.op, *planes, indices, *index_type);
  } else {
    safety = ClampIndices(lib, launch, t.op, *planes, indices, *index_type, &safe);
    index_data = safe.data();
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
  return WithPositionsNote(RunExecutor(lib, launch, t.op, t.get_workspace_size_name, status,
                                       workspace_size, executor, t.run_name, run),
                           t.k);
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

// Host memory: the indices are checked on the host whichever target (checked or not)
// this handler is registered for.
template <const auto& target>
ffi::Error OnHostImpl(ffi::AnyBuffer values, ffi::AnyBuffer indices,
                      ffi::Result<ffi::AnyBuffer> out, LayoutAttribute<target.k> layout) {
  return OnHost([&](const Launch& launch) {
    return MaxUnpoolAclnn(target, true, launch, values, indices, out, layout);
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

// The 2-D targets take channels_last; the 3-D ones bind every attribute to refuse it.
// *DeviceChecked: the same calling convention as *Device, checked indices. The handlers
// are parenthesised: the macro would split a template's argument list at its comma.
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dAclnnDevice, (OnDeviceImpl<kMaxUnpool2d, false>),
                              DeviceBinding().Attr<bool>("channels_last"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dAclnnDeviceChecked, (OnDeviceImpl<kMaxUnpool2d, true>),
                              DeviceBinding().Attr<bool>("channels_last"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dAclnnHost, OnHostImpl<kMaxUnpool2d>,
                              HostBinding().Attr<bool>("channels_last"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnDevice,
                              (OnDeviceImpl<kMaxUnpool2dBackward, false>),
                              DeviceBinding().Attr<bool>("channels_last"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnDeviceChecked,
                              (OnDeviceImpl<kMaxUnpool2dBackward, true>),
                              DeviceBinding().Attr<bool>("channels_last"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnHost, OnHostImpl<kMaxUnpool2dBackward>,
                              HostBinding().Attr<bool>("channels_last"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dAclnnDevice, (OnDeviceImpl<kMaxUnpool3d, false>),
                              DeviceBinding().Attrs<AttributeNames>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dAclnnDeviceChecked, (OnDeviceImpl<kMaxUnpool3d, true>),
                              DeviceBinding().Attrs<AttributeNames>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dAclnnHost, OnHostImpl<kMaxUnpool3d>,
                              HostBinding().Attrs<AttributeNames>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnDevice,
                              (OnDeviceImpl<kMaxUnpool3dBackward, false>),
                              DeviceBinding().Attrs<AttributeNames>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnDeviceChecked,
                              (OnDeviceImpl<kMaxUnpool3dBackward, true>),
                              DeviceBinding().Attrs<AttributeNames>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnHost, OnHostImpl<kMaxUnpool3dBackward>,
                              HostBinding().Attrs<AttributeNames>());

}  // namespace jax_unpool::npu
