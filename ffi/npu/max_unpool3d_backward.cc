// aclnn backward over volumes: out[n, c, i] = grad_output[n, c, indices[n, c, i]], i flat
// over (D, H, W), by aclnnMaxUnpool3dBackward(gradOutput, self, indices, outputSize=grad's
// (D, H, W), stride, padding, out).
#include "common/buffer_checks.h"
#include "npu/aclnn_call.h"
#include "npu/handlers.h"
#include "common/value_types.h"

namespace jax_unpool::npu {
namespace {

constexpr const char* kOp = "max_unpool3d_backward";
constexpr int kSpatialRank = 3;

ffi::Error MaxUnpool3dBackwardAclnn(const Launch& launch, ffi::AnyBuffer grad_output,
                                    ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                                    const AttributeNames& attrs) {
  if (ffi::Error e = RefuseAttributes(kOp, attrs); !e.success()) return e;
  auto cann = RequireCann(kOp);
  if (cann.has_error()) return cann.error();
  const CannLibrary& lib = **cann;
  if (ffi::Error e =
          RequireSymbols(lib, kOp,
                         {{"aclnnMaxUnpool3dBackwardGetWorkspaceSize",
                           lib.max_unpool3d_backward_get_workspace_size != nullptr},
                          {"aclnnMaxUnpool3dBackward", lib.max_unpool3d_backward != nullptr}});
      !e.success()) {
    return e;
  }

  if (ffi::Error e = CheckBackwardBuffers(kOp, grad_output, indices, *out,
                                          /*channels_last=*/false, kSpatialRank);
      !e.success()) {
    return e;
  }
  if (indices.element_type() != ffi::DataType::S64) {
    // Unlike the forward, CANN refuses INT32 here; the NPU lowering converts.
    return ffi::Error::InvalidArgument(std::string(kOp) +
                                       ": aclnnMaxUnpool3dBackward takes int64 indices only, got " +
                                       DataTypeName(indices.element_type()));
  }
  ffi::Error answer;  // aclnn refuses an empty gradOutput with a non-empty self
  const auto value_type =
      ValuesTypeOrAnswer(kOp, AclnnOp::kMaxUnpool3dBackward, "aclnnMaxUnpool3dBackward",
                         "grad_output", grad_output, *out, &answer);
  if (!value_type) return answer;

  AclObjects objects(lib);
  // As the forward: the buffers as they are, contiguous as aclnn wants out.
  const TensorView grad_view = ContiguousView(grad_output, *value_type);
  const TensorView out_view = ContiguousView(*out, *value_type);
  aclTensor* grad = objects.Tensor(grad_view);
  // `self`, the forward's input, as in the 2-D backward: aclnn reads only its shape and
  // dtype (aclnn_max_unpool3d_backward.cpp in hicann/ops-nn checks them, then gathers from
  // gradOutput and indices alone), so it is out's shape over grad_output's memory with
  // all strides 0 -- no buffer of its own, no aliasing of `out`.
  aclTensor* self = objects.Tensor(BroadcastFirstElement(out_view, grad_view));
  aclTensor* idx = objects.Tensor(ContiguousView(indices, ACL_INT64));
  aclTensor* result = objects.Tensor(out_view);
  const Unpool3dArrays arrays = MakeUnpool3dArrays(objects, grad_view);
  if (ffi::Error e = objects.error(kOp); !e.success()) return e;

  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = lib.max_unpool3d_backward_get_workspace_size(
      grad, self, idx, arrays.output_size, arrays.stride, arrays.padding, result, &workspace_size,
      &executor);
  return WithPositionsNote(
      RunExecutor(lib, launch, kOp, "aclnnMaxUnpool3dBackwardGetWorkspaceSize", status,
                  workspace_size, executor, "aclnnMaxUnpool3dBackward", lib.max_unpool3d_backward),
      kSpatialRank);
}

ffi::Error OnDeviceImpl(void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad_output,
                        ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                        AttributeNames attrs) {
  return OnDevice(stream, scratch, [&](const Launch& launch) {
    return MaxUnpool3dBackwardAclnn(launch, grad_output, indices, out, attrs);
  });
}

ffi::Error OnHostImpl(ffi::AnyBuffer grad_output, ffi::AnyBuffer indices,
                      ffi::Result<ffi::AnyBuffer> out, AttributeNames attrs) {
  return OnHost([&](const Launch& launch) {
    return MaxUnpool3dBackwardAclnn(launch, grad_output, indices, out, attrs);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnDevice, OnDeviceImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()       // grad_output
                                  .Arg<ffi::AnyBuffer>()       // indices
                                  .Ret<ffi::AnyBuffer>()       // out
                                  .Attrs<AttributeNames>());  // any is refused

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool3dBackwardAclnnHost, OnHostImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()       // grad_output
                                  .Arg<ffi::AnyBuffer>()       // indices
                                  .Ret<ffi::AnyBuffer>()       // out
                                  .Attrs<AttributeNames>());  // any is refused

}  // namespace jax_unpool::npu
