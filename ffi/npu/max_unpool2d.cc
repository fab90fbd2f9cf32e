// aclnn forward: out = zeros; out[n, c, indices[n, c, i]] = x[n, c, i], by
// aclnnMaxUnpool2d(self=x, indices, outputSize=out's (H, W), out).
#include "common/buffer_checks.h"
#include "npu/aclnn_call.h"
#include "npu/handlers.h"

namespace jax_unpool::npu {
namespace {

constexpr const char* kOp = "max_unpool2d";

ffi::Error MaxUnpool2dAclnn(const Launch& launch, ffi::AnyBuffer x, ffi::AnyBuffer indices,
                            ffi::Result<ffi::AnyBuffer> out, bool channels_last) {
  auto cann = RequireCann(kOp);
  if (cann.has_error()) return cann.error();
  const CannLibrary& lib = **cann;
  // Optional: the backwards alone are on the Atlas training series (aclnnMaxUnpool2d.md in
  // hicann/ops-nn); the NPU lowering runs the jnp reference where this CANN has no forward.
  if (ffi::Error e = RequireSymbols(
          lib, kOp,
          {{"aclnnMaxUnpool2dGetWorkspaceSize", lib.max_unpool2d_get_workspace_size != nullptr},
           {"aclnnMaxUnpool2d", lib.max_unpool2d != nullptr}},
          "this CANN has no forward unpool op; the NPU lowering runs the jnp reference "
          "instead");
      !e.success()) {
    return e;
  }

  if (ffi::Error e = CheckForwardBuffers(kOp, x, indices, *out, channels_last); !e.success()) {
    return e;
  }
  ffi::Error answer;  // aclnn refuses empty C, H or W
  const auto value_type =
      ValuesTypeOrAnswer(kOp, AclnnOp::kMaxUnpool2d, "aclnnMaxUnpool2d", "x", x, *out, &answer);
  if (!value_type) return answer;
  const auto index_type = PresentedIndexType(indices.element_type());  // int32/int64: checked

  AclObjects objects(lib);
  const TensorView out_view = PlanesView(*out, channels_last, *value_type);
  aclTensor* self = objects.Tensor(PlanesView(x, channels_last, *value_type));
  aclTensor* idx = objects.Tensor(PlanesView(indices, channels_last, *index_type));
  aclTensor* result = objects.Tensor(out_view);
  const size_t rank = out_view.dims.size();
  aclIntArray* output_size =
      objects.IntArray({out_view.dims[rank - 2], out_view.dims[rank - 1]});
  if (ffi::Error e = objects.error(kOp); !e.success()) return e;

  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = lib.max_unpool2d_get_workspace_size(
      self, idx, output_size, result, &workspace_size, &executor);
  return WithPositionsNote(RunExecutor(lib, launch, kOp, "aclnnMaxUnpool2dGetWorkspaceSize",
                                       status, workspace_size, executor, "aclnnMaxUnpool2d",
                                       lib.max_unpool2d));
}

ffi::Error OnDeviceImpl(void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                        ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                        bool channels_last) {
  return OnDevice(stream, scratch, [&](const Launch& launch) {
    return MaxUnpool2dAclnn(launch, x, indices, out, channels_last);
  });
}

ffi::Error OnHostImpl(ffi::AnyBuffer x, ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                      bool channels_last) {
  return OnHost([&](const Launch& launch) {
    return MaxUnpool2dAclnn(launch, x, indices, out, channels_last);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dAclnnDevice, OnDeviceImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<bool>("channels_last"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dAclnnHost, OnHostImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<bool>("channels_last"));

}  // namespace jax_unpool::npu
