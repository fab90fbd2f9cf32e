// aclnn max pooling with indices, PyTorch's max_pool{2,3}d(..., return_indices=True):
// (values, indices) = pool(x) by aclnnMaxPool2dWithIndices (k = 2) or
// aclnnMaxPool3dWithArgmax (k = 3), (self=x, kernelSize, stride, padding, dilation,
// ceilMode, out=values, indices). Indices are flat positions in each input plane
// (h * W + w) or volume ((d * H + h) * W + w), as PyTorch's.
//
// The handler checks the call as every platform's does (CheckPoolCall, the CPU's messages),
// then what aclnn needs beyond that -- k elements per window attribute, float16, bfloat16
// or float32 values -- and leaves CANN's own limits (dilation 1 on Atlas A2/A3, INT32-only
// 3-D indices there) to CANN, whose refusal reaches the caller with its message; the NPU
// lowering routes only calls CANN takes (backends/npu.py, _aclnn_pool_takes).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer_checks.h"
#include "common/pool_checks.h"
#include "common/value_types.h"
#include "npu/aclnn_call.h"
#include "npu/handlers.h"

namespace jax_unpool::npu {
namespace {

// What differs between the two ops.
struct PoolOp {
  const char* name;  // of the public function, in messages
  int k;             // spatial rank
  const char* get_workspace_size_name;
  const char* run_name;
  MaxPoolGetWorkspaceSizeFn CannLibrary::*get_workspace_size;
  AclnnRunFn CannLibrary::*run;
};

constexpr PoolOp kPool2d{"max_pool2d_with_indices",
                         2,
                         "aclnnMaxPool2dWithIndicesGetWorkspaceSize",
                         "aclnnMaxPool2dWithIndices",
                         &CannLibrary::max_pool2d_with_indices_get_workspace_size,
                         &CannLibrary::max_pool2d_with_indices};
constexpr PoolOp kPool3d{"max_pool3d_with_indices",
                         3,
                         "aclnnMaxPool3dWithArgmaxGetWorkspaceSize",
                         "aclnnMaxPool3dWithArgmax",
                         &CannLibrary::max_pool3d_with_argmax_get_workspace_size,
                         &CannLibrary::max_pool3d_with_argmax};

// The dtypes both ops list (hicann/ops-nn pooling/max_pool3d_with_argmax_v2/op_api: the
// Atlas A2/A3 and Ascend 950 lists). They compare values, so nothing else can stand in.
std::optional<aclDataType> PoolValueType(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::F32: return ACL_FLOAT;
    case ffi::DataType::F16: return ACL_FLOAT16;
    case ffi::DataType::BF16: return ACL_BF16;
    default: return std::nullopt;
  }
}

// The window attributes of a call, as bound (BindPoolOperands).
struct PoolAttributes {
  bool channels_last;
  ffi::Span<const int64_t> kernel, stride, padding, dilation;
  bool ceil_mode;
};

ffi::Error MaxPoolAclnn(const PoolOp& op, const Launch& launch, ffi::AnyBuffer x,
                        ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::AnyBuffer> indices,
                        const PoolAttributes& w) {
  auto cann = RequireCann(op.name, launch);
  if (cann.has_error()) return cann.error();
  const CannLibrary& lib = **cann;
  const MaxPoolGetWorkspaceSizeFn get_workspace_size = lib.*op.get_workspace_size;
  const AclnnRunFn run = lib.*op.run;
  if (ffi::Error e = RequireSymbols(lib, op.name,
                                    {{op.get_workspace_size_name, get_workspace_size != nullptr},
                                     {op.run_name, run != nullptr}});
      !e.success()) {
    return e;
  }

  if (w.kernel.size() != static_cast<size_t>(op.k)) {
    return buffer_checks::Invalid(op.name, std::string(op.run_name) + " pools " +
                                               std::to_string(op.k) + " spatial dims, got " +
                                               "kernel_size=" + ShapeString(w.kernel));
  }
  const auto checked = CheckPoolCall(x, *values, *indices, w.channels_last, w.kernel, w.stride,
                                     w.padding, w.dilation, w.ceil_mode);
  if (checked.has_error()) return checked.error();
  if (values->element_count() == 0) return ffi::Error::Success();  // N or C is 0
  const auto value_type = PoolValueType(x.element_type());
  if (!value_type) {
    return buffer_checks::Invalid(op.name, std::string(op.run_name) +
                                               " takes float16, bfloat16 or float32 values, "
                                               "got " +
                                               DataTypeName(x.element_type()));
  }
  const auto index_type = PresentedIndexType(indices->element_type());  // int32/int64: checked

  AclObjects objects(lib);
  aclTensor* self = objects.Tensor(PlanesView(x, w.channels_last, *value_type, op.k));
  aclTensor* out = objects.Tensor(PlanesView(*values, w.channels_last, *value_type, op.k));
  aclTensor* idx = objects.Tensor(PlanesView(*indices, w.channels_last, *index_type, op.k));
  const auto array = [&](ffi::Span<const int64_t> v) {
    return objects.IntArray(std::vector<int64_t>(v.begin(), v.end()));
  };
  aclIntArray* kernel = array(w.kernel);
  aclIntArray* stride = array(w.stride);
  aclIntArray* padding = array(w.padding);
  aclIntArray* dilation = array(w.dilation);
  if (ffi::Error e = objects.error(op.name); !e.success()) return e;

  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = get_workspace_size(self, kernel, stride, padding, dilation,
                                                w.ceil_mode, out, idx, &workspace_size, &executor);
  return RunExecutor(lib, launch, op.name, op.get_workspace_size_name, status, workspace_size,
                     executor, op.run_name, run);
}

template <const PoolOp& op>
ffi::Error OnDeviceImpl(void* stream, std::optional<int32_t> device_ordinal,
                        ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                        ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::AnyBuffer> indices,
                        bool channels_last, ffi::Span<const int64_t> kernel,
                        ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                        ffi::Span<const int64_t> dilation, bool ceil_mode) {
  return OnDevice(stream, device_ordinal, scratch, [&](const Launch& launch) {
    return MaxPoolAclnn(op, launch, x, values, indices,
                        {channels_last, kernel, stride, padding, dilation, ceil_mode});
  });
}

template <const PoolOp& op>
ffi::Error OnHostImpl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> values,
                      ffi::Result<ffi::AnyBuffer> indices, bool channels_last,
                      ffi::Span<const int64_t> kernel, ffi::Span<const int64_t> stride,
                      ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                      bool ceil_mode) {
  return OnHost([&](const Launch& launch) {
    return MaxPoolAclnn(op, launch, x, values, indices,
                        {channels_last, kernel, stride, padding, dilation, ceil_mode});
  });
}

// Whether the op takes a pool of a 2x2(x2) plane (volume) with a 2x2(x2) window of
// `dtype` (Takes). GetWorkspaceSize reads no data; the memory is real and disjoint all the
// same.
std::optional<bool> ProbePool(const CannLibrary& cann, const PoolOp& op, aclDataType dtype) {
  alignas(64) static unsigned char self_memory[64], out_memory[64], index_memory[64];
  const size_t rank = static_cast<size_t>(op.k) + 2;
  std::vector<int64_t> x(rank, 2), pooled(rank, 1), x_strides(rank, 1), ones(rank, 1);
  x[0] = x[1] = 1;
  for (size_t i = rank - 1; i-- > 0;) x_strides[i] = x_strides[i + 1] * x[i + 1];
  AclObjects objects(cann);
  aclTensor* self = objects.Tensor({x, x_strides, x, 0, dtype, self_memory});
  aclTensor* out = objects.Tensor({pooled, ones, pooled, 0, dtype, out_memory});
  aclTensor* idx = objects.Tensor({pooled, ones, pooled, 0, ACL_INT32, index_memory});
  const std::vector<int64_t> window(op.k, 2), zeros(op.k, 0), unit(op.k, 1);
  aclIntArray* kernel = objects.IntArray(window);
  aclIntArray* stride = objects.IntArray(window);
  aclIntArray* padding = objects.IntArray(zeros);
  aclIntArray* dilation = objects.IntArray(unit);
  if (!objects.error(op.name).success()) return false;
  return Takes(cann, [&](uint64_t* workspace_size, aclOpExecutor** executor) {
    return (cann.*op.get_workspace_size)(self, kernel, stride, padding, dilation, false, out, idx,
                                         workspace_size, executor);
  });
}

// The CPU pool target's operands and attributes (BindPoolOperands), after the context.
auto DeviceBinding() {
  return BindPoolOperands(ffi::Ffi::Bind()
                              .Ctx<ffi::PlatformStream<void*>>()
                              .Ctx<DeviceOrdinalIfKnown>()
                              .Ctx<ffi::ScratchAllocator>());
}

auto HostBinding() { return BindPoolOperands(ffi::Ffi::Bind()); }

}  // namespace

std::vector<std::string> AcceptedPoolDtypes(int k) {
  const CannLibrary* cann = LoadedCann();
  const PoolOp& op = k == 3 ? kPool3d : kPool2d;
  if (cann == nullptr || cann->*op.get_workspace_size == nullptr || cann->*op.run == nullptr) {
    return {};
  }
  std::vector<std::string> accepted;
  for (const auto& [name, dtype] : {std::pair<const char*, aclDataType>{"float16", ACL_FLOAT16},
                                    {"bfloat16", ACL_BF16},
                                    {"float32", ACL_FLOAT}}) {
    try {
      const std::optional<bool> takes = ProbePool(*cann, op, dtype);
      if (!takes) return {"float32"};  // every doc lists it; asking more would leak
      if (*takes) accepted.push_back(name);
    } catch (...) {  // std::bad_alloc: not accepted, as far as anyone can tell
    }
  }
  return accepted;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxPool2dAclnnDevice, OnDeviceImpl<kPool2d>, DeviceBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxPool2dAclnnHost, OnHostImpl<kPool2d>, HostBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxPool3dAclnnDevice, OnDeviceImpl<kPool3d>, DeviceBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxPool3dAclnnHost, OnHostImpl<kPool3d>, HostBinding());

}  // namespace jax_unpool::npu
