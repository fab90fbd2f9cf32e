// aclnn forward over volumes: out = zeros; out[n, c, indices[n, c, i]] = x[n, c, i], i flat
// over (D, H, W), by aclnnMaxUnpool3d(self=x, indices, outputSize=out's (D, H, W), stride,
// padding, outRef=out).
#include "common/buffer_checks.h"
#include "npu/aclnn_call.h"
#include "npu/handlers.h"

namespace jax_unpool::npu {
namespace {

constexpr const char* kOp = "max_unpool3d";
constexpr int kSpatialRank = 3;

ffi::Error MaxUnpool3dAclnn(const Launch& launch, ffi::AnyBuffer x, ffi::AnyBuffer indices,
                            ffi::Result<ffi::AnyBuffer> out, const AttributeNames& attrs) {
  if (ffi::Error e = RefuseAttributes(kOp, attrs); !e.success()) return e;
  auto cann = RequireCann(kOp);
  if (cann.has_error()) return cann.error();
  const CannLibrary& lib = **cann;
  if (ffi::Error e = RequireSymbols(
          lib, kOp,
          {{"aclnnMaxUnpool3dGetWorkspaceSize", lib.max_unpool3d_get_workspace_size != nullptr},
           {"aclnnMaxUnpool3d", lib.max_unpool3d != nullptr}});
      !e.success()) {
    return e;
  }

  if (ffi::Error e =
          CheckForwardBuffers(kOp, x, indices, *out, /*channels_last=*/false, kSpatialRank);
      !e.success()) {
    return e;
  }
  ffi::Error answer;  // aclnn refuses empty C, D, H or W
  const auto value_type =
      ValuesTypeOrAnswer(kOp, AclnnOp::kMaxUnpool3d, "aclnnMaxUnpool3d", "x", x, *out, &answer);
  if (!value_type) return answer;
  const auto index_type = PresentedIndexType(indices.element_type());  // int32/int64: checked

  AclObjects objects(lib);
  // The buffers as they are, contiguous as aclnn wants outRef: (N, C, D, H, W), or
  // (C, D, H, W), which aclnn reads as (N, D, H, W) -- the same scatter, one volume per
  // leading index.
  const TensorView out_view = ContiguousView(*out, *value_type);
  aclTensor* self = objects.Tensor(ContiguousView(x, *value_type));
  aclTensor* idx = objects.Tensor(ContiguousView(indices, *index_type));
  aclTensor* result = objects.Tensor(out_view);
  const Unpool3dArrays arrays = MakeUnpool3dArrays(objects, out_view);
  if (ffi::Error e = objects.error(kOp); !e.success()) return e;

  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status =
      lib.max_unpool3d_get_workspace_size(self, idx, arrays.output_size, arrays.stride,
                                          arrays.padding, result, &workspace_size, &executor);
  return WithPositionsNote(
      RunExecutor(lib, launch, kOp, "aclnnMaxUnpool3dGetWorkspaceSize", status, workspace_size,
                  executor, "aclnnMaxUnpool3d", lib.max_unpool3d),
      kSpatialRank);
}

ffi::Error OnDeviceImpl(void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                        ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                        AttributeNames attrs) {
  return OnDevice(stream, scratch, [&](const Launch& launch) {
    return MaxUnpool3dAclnn(launch, x, indices, out, attrs);
  });
}

ffi::Error OnHostImpl(ffi::AnyBuffer x, ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                      AttributeNames attrs) {
  return OnHost(
      [&](const Launch& launch) { return MaxUnpool3dAclnn(launch, x, indices, out, attrs); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dAclnnDevice, OnDeviceImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()       // x
                                  .Arg<ffi::AnyBuffer>()       // indices
                                  .Ret<ffi::AnyBuffer>()       // out
                                  .Attrs<AttributeNames>());  // any is refused

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dAclnnHost, OnHostImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()       // x
                                  .Arg<ffi::AnyBuffer>()       // indices
                                  .Ret<ffi::AnyBuffer>()       // out
                                  .Attrs<AttributeNames>());  // any is refused

}  // namespace jax_unpool::npu
