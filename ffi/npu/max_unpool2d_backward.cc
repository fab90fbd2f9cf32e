// aclnn backward: out[n, c, i] = grad_output[n, c, indices[n, c, i]], by
// aclnnMaxUnpool2dBackward(gradOutput, self, indices, outputSize=grad's (H, W), out).
#include "common/buffer_checks.h"
#include "npu/aclnn_call.h"
#include "npu/handlers.h"

namespace jax_unpool::npu {
namespace {

constexpr const char* kOp = "max_unpool2d_backward";

ffi::Error MaxUnpool2dBackwardAclnn(const Launch& launch, ffi::AnyBuffer grad_output,
                                    ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                                    bool channels_last) {
  auto cann = RequireCann(kOp);
  if (cann.has_error()) return cann.error();
  const CannLibrary& lib = **cann;

  if (ffi::Error e = CheckBackwardBuffers(kOp, grad_output, indices, *out, channels_last);
      !e.success()) {
    return e;
  }
  ffi::Error answer;  // aclnn refuses an empty gradOutput with a non-empty self
  const auto value_type =
      ValuesTypeOrAnswer(kOp, AclnnOp::kMaxUnpool2dBackward, "aclnnMaxUnpool2dBackward",
                         "grad_output", grad_output, *out, &answer);
  if (!value_type) return answer;
  const auto index_type = PresentedIndexType(indices.element_type());  // int32/int64: checked

  AclObjects objects(lib);
  const TensorView grad_view = PlanesView(grad_output, channels_last, *value_type);
  const TensorView out_view = PlanesView(*out, channels_last, *value_type);
  aclTensor* grad = objects.Tensor(grad_view);
  // `self` is the forward's input. The primitive has no such operand -- x matters only for
  // its shape, which is out's -- but aclnn wants one, of out's shape and gradOutput's dtype,
  // and reads only those (its data is never used: see aclnn_max_unpool2d_backward.cpp in
  // hicann/ops-nn). So it is described with out's shape and dtype over grad_output's
  // memory with all strides 0: no buffer of its own, and no aliasing of the output `out`,
  // which checking runtimes (e.g. the emulator in tests/fake_cann) reject for an input.
  aclTensor* self = objects.Tensor(BroadcastFirstElement(out_view, grad_view));
  aclTensor* idx = objects.Tensor(PlanesView(indices, channels_last, *index_type));
  aclTensor* result = objects.Tensor(out_view);
  const size_t rank = grad_view.dims.size();
  aclIntArray* output_size =
      objects.IntArray({grad_view.dims[rank - 2], grad_view.dims[rank - 1]});
  if (ffi::Error e = objects.error(kOp); !e.success()) return e;

  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = lib.max_unpool2d_backward_get_workspace_size(
      grad, self, idx, output_size, result, &workspace_size, &executor);
  return WithPositionsNote(RunExecutor(lib, launch, kOp,
                                       "aclnnMaxUnpool2dBackwardGetWorkspaceSize", status,
                                       workspace_size, executor, "aclnnMaxUnpool2dBackward",
                                       lib.max_unpool2d_backward));
}

ffi::Error OnDeviceImpl(void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad_output,
                        ffi::AnyBuffer indices, ffi::Result<ffi::AnyBuffer> out,
                        bool channels_last) {
  return OnDevice(stream, scratch, [&](const Launch& launch) {
    return MaxUnpool2dBackwardAclnn(launch, grad_output, indices, out, channels_last);
  });
}

ffi::Error OnHostImpl(ffi::AnyBuffer grad_output, ffi::AnyBuffer indices,
                      ffi::Result<ffi::AnyBuffer> out, bool channels_last) {
  return OnHost([&](const Launch& launch) {
    return MaxUnpool2dBackwardAclnn(launch, grad_output, indices, out, channels_last);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnDevice, OnDeviceImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()  // grad_output
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<bool>("channels_last"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxUnpool2dBackwardAclnnHost, OnHostImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // grad_output
                                  .Arg<ffi::AnyBuffer>()  // indices
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<bool>("channels_last"));

}  // namespace jax_unpool::npu
