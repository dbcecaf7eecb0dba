// DLPack (v0.6 ABI, DLManagedTensor) import and export.
#include "livefuse/dlpack.hpp"

#include <dlpack/dlpack.h>

#include "livefuse/error.hpp"
#include "runtime/executor.hpp"

namespace livefuse {

namespace {
DType from_dl(DLDataType t) {
  LF_CHECK(t.lanes == 1, "from_dlpack", "vector dtypes (lanes=", int(t.lanes),
           ") are not supported");
  if (t.code == kDLFloat && t.bits == 32) return DType::f32;
  if (t.code == kDLFloat && t.bits == 16) return DType::f16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
  if (t.code == kDLInt && t.bits == 32) return DType::i32;
  if (t.code == kDLInt && t.bits == 64) return DType::i64;
  if (t.code == kDLUInt && t.bits == 8) return DType::boolean;
  throw Error(detail::concat("[from_dlpack] unsupported DLPack dtype code ", int(t.code), " bits ",
                             int(t.bits), "; expected f32, f16, bf16, i32, i64 or bool"));
}
DLDataType to_dl(DType t) {
  switch (t) {
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::f16:
      return {kDLFloat, 16, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
    case DType::boolean:
      return {kDLUInt, 8, 1};
  }
  return {kDLFloat, 32, 1};
}
struct ExportCtx {
  Tensor keep;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};
}  // namespace

Tensor from_dlpack(DLManagedTensor* m) {
  LF_CHECK(m != nullptr, "from_dlpack", "null DLManagedTensor");
  const DLTensor& t = m->dl_tensor;
  Device dev;
  if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost)
    dev = Device::cpu();
  else if (t.device.device_type == kDLCUDA)
    dev = Device::cuda(t.device.device_id);
  else
    throw Error(
        detail::concat("[from_dlpack] unsupported device type ", int(t.device.device_type)));
  LF_CHECK(t.ndim >= 0 && t.ndim <= kMaxDims, "from_dlpack", "rank ", t.ndim,
           " is not supported (max ", kMaxDims, ")");
  const DType dt = from_dl(t.dtype);
  Shape shape(std::span<const int64_t>(t.shape, t.ndim));
  Strides st =
      t.strides ? Strides(std::span<const int64_t>(t.strides, t.ndim)) : contiguous_strides(shape);
  LF_CHECK(t.byte_offset % dtype_size(dt) == 0, "from_dlpack", "byte_offset ", t.byte_offset,
           " is not a multiple of the element size");
  void* base = static_cast<char*>(t.data) + t.byte_offset;
  return Tensor::wrap(
      base, shape, dt, dev,
      [m](void*) {
        if (m->deleter) m->deleter(m);
      },
      st);
}

DLManagedTensor* to_dlpack(const Tensor& x) {
  LF_CHECK(x.defined(), "to_dlpack", "undefined Tensor");
  void* data = x.data_ptr();  // sync point; the storage is exposed from now on
  auto* ctx = new ExportCtx{x, {}, {}};
  for (int k = 0; k < x.rank(); ++k) ctx->shape[k] = x.shape()[k], ctx->strides[k] = x.strides()[k];
  auto* m = new DLManagedTensor{};
  m->dl_tensor.data = data;
  m->dl_tensor.device =
      x.device().is_cpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, x.device().index};
  m->dl_tensor.ndim = x.rank();
  m->dl_tensor.dtype = to_dl(x.dtype());
  m->dl_tensor.shape = ctx->shape;
  m->dl_tensor.strides = ctx->strides;
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = ctx;
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportCtx*>(self->manager_ctx);
    delete self;
  };
  return m;
}

}  // namespace livefuse
