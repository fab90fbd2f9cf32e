// aclnn max pooling with indices, PyTorch's max_pool{2,3}d(..., return_indices=True):
// (values, indices) = pool(x) by aclnnMaxPool2dWithIndices (k = 2) or
// aclnnMaxPool3dWithArgmax (k = 3), (self=x, kernelSize, stride, padding, dilation,
// ceilMode, out=values, indices). Indices are flat positions in each input plane
// (h * W + w) or volume ((d * H + h) * W + w), as PyTorch's.
//
// The handler checks what keeps memory safe -- every buffer against the window
// attributes, which must have k elements each -- and leaves CANN's own limits (padding at
// most half the kernel, dilation 1 on Atlas A2/A3, INT32-only 3-D indices there) to CANN,
// whose refusal reaches the caller with its message.
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer_checks.h"
#include "common/pool_geometry.h"
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

struct Window {
  ffi::Span<const int64_t> kernel, stride, padding, dilation;
  bool ceil_mode;
};

// "(2, 2)"
std::string Tuple(ffi::Span<const int64_t> v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

std::string WindowText(const Window& w) {
  return "kernel_size " + Tuple(w.kernel) + ", stride " + Tuple(w.stride) + ", padding " +
         Tuple(w.padding) + ", dilation " + Tuple(w.dilation) +
         ", ceil_mode=" + (w.ceil_mode ? "true" : "false");
}

// k elements each; kernel, stride and dilation >= 1, padding >= 0.
ffi::Error CheckWindow(const PoolOp& op, const Window& w) {
  struct Attribute {
    const char* name;
    ffi::Span<const int64_t> values;
    int64_t min;
  };
  for (const Attribute& a :
       {Attribute{"kernel_size", w.kernel, 1}, Attribute{"stride", w.stride, 1},
        Attribute{"padding", w.padding, 0}, Attribute{"dilation", w.dilation, 1}}) {
    if (a.values.size() != static_cast<size_t>(op.k)) {
      return buffer_checks::Invalid(op.name, std::string(a.name) + " must have " +
                                                 std::to_string(op.k) + " elements, got " +
                                                 Tuple(a.values));
    }
    for (int64_t v : a.values) {
      if (v < a.min) {
        return buffer_checks::Invalid(op.name, std::string(a.name) +
                                                   " elements must be >= " + std::to_string(a.min) +
                                                   ", got " + Tuple(a.values));
      }
    }
  }
  return ffi::Error::Success();
}

// x of rank k + 1 or k + 2 with non-empty spatial dims; values (x's dtype) and indices
// (int32/int64) of x's shape with the spatial dims PyTorch's pooling of them gives.
ffi::Error CheckBuffers(const PoolOp& op, const ffi::AnyBuffer& x, const ffi::AnyBuffer& values,
                        const ffi::AnyBuffer& indices, bool channels_last, const Window& w) {
  const NamedBuffer xs{"x", x}, vs{"values", values}, is{"indices", indices};
  if (ffi::Error e = buffer_checks::Common(op.name, xs, is, vs, op.k); !e.success()) return e;
  const auto d = x.dimensions();
  const size_t s = channels_last ? d.size() - 1 - op.k : d.size() - op.k;  // first spatial
  std::vector<int64_t> expected(d.begin(), d.end());
  for (int a = 0; a < op.k; ++a) {
    if (d[s + a] <= 0) {
      return buffer_checks::Invalid(op.name, "x must have non-empty spatial dims (" +
                                                 buffer_checks::LayoutName(channels_last, op.k) +
                                                 "), got shape " + ShapeString(d));
    }
    const __int128 out =
        PooledSize(d[s + a], w.kernel[a], w.stride[a], w.padding[a], w.dilation[a], w.ceil_mode);
    if (out <= 0 || out > std::numeric_limits<int64_t>::max()) {
      return buffer_checks::Invalid(op.name, "pooling x of shape " + ShapeString(d) + " with " +
                                                 WindowText(w) + " gives no valid output size");
    }
    expected[s + a] = static_cast<int64_t>(out);
  }
  const ffi::Span<const int64_t> want(expected.data(), expected.size());
  for (const NamedBuffer& r : {vs, is}) {
    if (!buffer_checks::SameDims(r.dims(), want)) {
      return buffer_checks::Invalid(
          op.name, std::string(r.name) + " has shape " + ShapeString(r.dims()) +
                       " but pooling x of "
                       "shape " +
                       ShapeString(d) + " with " + WindowText(w) + " gives " + ShapeString(want));
    }
  }
  return ffi::Error::Success();
}

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

ffi::Error MaxPoolAclnn(const PoolOp& op, const Launch& launch, ffi::AnyBuffer x,
                        ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::AnyBuffer> indices,
                        const Window& w, bool channels_last) {
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

  if (ffi::Error e = CheckWindow(op, w); !e.success()) return e;
  if (ffi::Error e = CheckBuffers(op, x, *values, *indices, channels_last, w); !e.success()) {
    return e;
  }
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
  aclTensor* self = objects.Tensor(PlanesView(x, channels_last, *value_type, op.k));
  aclTensor* out = objects.Tensor(PlanesView(*values, channels_last, *value_type, op.k));
  aclTensor* idx = objects.Tensor(PlanesView(*indices, channels_last, *index_type, op.k));
  auto array = [&](ffi::Span<const int64_t> v) {
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
                        ffi::Span<const int64_t> kernel, ffi::Span<const int64_t> stride,
                        ffi::Span<const int64_t> padding, ffi::Span<const int64_t> dilation,
                        bool ceil_mode, bool channels_last) {
  return OnDevice(stream, device_ordinal, scratch, [&](const Launch& launch) {
    return MaxPoolAclnn(op, launch, x, values, indices,
                        {kernel, stride, padding, dilation, ceil_mode}, channels_last);
  });
}

template <const PoolOp& op>
ffi::Error OnHostImpl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> values,
                      ffi::Result<ffi::AnyBuffer> indices, ffi::Span<const int64_t> kernel,
                      ffi::Span<const int64_t> stride, ffi::Span<const int64_t> padding,
                      ffi::Span<const int64_t> dilation, bool ceil_mode, bool channels_last) {
  return OnHost([&](const Launch& launch) {
    return MaxPoolAclnn(op, launch, x, values, indices,
                        {kernel, stride, padding, dilation, ceil_mode}, channels_last);
  });
}

// A pool of a 2x2(x2) plane (volume) with a 2x2(x2) window, the dtypes of the probe.
// GetWorkspaceSize reads no data; the memory is real and disjoint all the same.
std::optional<aclnnStatus> ProbePool(const CannLibrary& cann, const PoolOp& op,
                                     aclDataType dtype) {
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
  if (!objects.error(op.name).success()) return std::nullopt;
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = (cann.*op.get_workspace_size)(
      self, kernel, stride, padding, dilation, false, out, idx, &workspace_size, &executor);
  if (executor != nullptr) cann.destroy_executor(executor);
  if (status != ACLNN_SUCCESS) cann.RecentErrorMessage();  // read: clears the refusal
  return status;
}

// The window and layout attributes of both targets.
template <typename Binding>
auto WithAttributes(Binding binding) {
  return std::move(binding)
      .template Attr<ffi::Span<const int64_t>>("kernel_size")
      .template Attr<ffi::Span<const int64_t>>("stride")
      .template Attr<ffi::Span<const int64_t>>("padding")
      .template Attr<ffi::Span<const int64_t>>("dilation")
      .template Attr<bool>("ceil_mode")
      .template Attr<bool>("channels_last");
}

auto DeviceBinding() {
  return WithAttributes(ffi::Ffi::Bind()
                            .Ctx<ffi::PlatformStream<void*>>()
                            .Ctx<DeviceOrdinalIfKnown>()
                            .Ctx<ffi::ScratchAllocator>()
                            .Arg<ffi::AnyBuffer>()    // x
                            .Ret<ffi::AnyBuffer>()    // values
                            .Ret<ffi::AnyBuffer>());  // indices
}

auto HostBinding() {
  return WithAttributes(ffi::Ffi::Bind()
                            .Arg<ffi::AnyBuffer>()    // x
                            .Ret<ffi::AnyBuffer>()    // values
                            .Ret<ffi::AnyBuffer>());  // indices
}

}  // namespace

std::vector<std::string> AcceptedPoolDtypes(int k) {
  const CannLibrary* cann = LoadedCann();
  const PoolOp& op = k == 3 ? kPool3d : kPool2d;
  if (cann == nullptr || cann->*op.get_workspace_size == nullptr || cann->*op.run == nullptr) {
    return {};
  }
  if (cann->destroy_executor == nullptr) return {"float32"};
  std::vector<std::string> accepted;
  for (const auto& [name, dtype] : {std::pair<const char*, aclDataType>{"float16", ACL_FLOAT16},
                                    {"bfloat16", ACL_BF16},
                                    {"float32", ACL_FLOAT}}) {
    try {
      if (ProbePool(*cann, op, dtype) == ACLNN_SUCCESS) accepted.push_back(name);
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
