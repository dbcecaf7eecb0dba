// OpCall -> plans for contiguous, concat and embedding.
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/ops_host.hpp"
#include "livefuse/config.hpp"
#include "runtime/append.hpp"

namespace livefuse::cuda {

void run_layout(const OpCall& call, const Tensor& out, cudaStream_t s) {
  const size_t es = dtype_size(out.dtype());
  switch (call.op) {
    case OpId::contiguous: {
      const Tensor& x = call.inputs[0];
      // The output's own strides: dense for the op, a view of the destination for copy_into.
      StridedLayout l = make_layout(x.shape());
      add_operand(l, out.shape(), out.strides());
      add_operand(l, x.shape(), x.strides());
      return launch_copy(out.impl()->data(), x.impl()->data(), es, l, s);
    }
    case OpId::concat: {
      std::vector<CopyJob> jobs;
      concat_copies(call, out, jobs);
      return launch_copies(jobs.data(), static_cast<int>(jobs.size()), s);
    }
    default:
      // reshape / permute / slice are views: the executor resolves them (a reshape that needs
      // a copy arrives here as `contiguous`).
      LF_ASSERT(false, "layout op ", op_name(call.op), " should not reach the CUDA backend");
  }
}

void concat_copies(const OpCall& call, const Tensor& out, std::vector<CopyJob>& jobs) {
  // Each input into its slab of the output: the output's strides, offset along the concat dim.
  const size_t es = dtype_size(out.dtype());
  const int dim = static_cast<int>(call.attrs.i[0]);
  const Strides ost = out.strides();
  int64_t at = 0;
  for (const Tensor& x : call.inputs) {
    char* dst = x.numel() > 0 ? static_cast<char*>(out.impl()->data()) + at * ost[dim] * static_cast<int64_t>(es)
                              : nullptr;
    // An input already where the output wants it (the cache whose block the output took over,
    // runtime/append.hpp) is not copied.
    if (dst && !append::same_place(x.impl()->data(), x.strides(), dst, ost, x.shape())) {
      CopyJob j{dst, x.impl()->data(), es, make_layout(x.shape())};
      add_operand(j.l, x.shape(), ost);
      add_operand(j.l, x.shape(), x.strides());
      jobs.push_back(j);
    }
    at += x.shape()[dim];
  }
}

void run_copies(std::span<const Tensor> dsts, std::span<const Tensor> srcs, void* stream) {
  LF_ASSERT(dsts.size() == srcs.size(), "run_copies: ", dsts.size(), " destinations for ",
            srcs.size(), " sources");
  std::vector<CopyJob> jobs;
  for (size_t i = 0; i < dsts.size(); ++i) {
    const Tensor &d = dsts[i], &x = srcs[i];
    if (x.numel() == 0) continue;
    CopyJob j{d.impl()->data(), x.impl()->data(), dtype_size(x.dtype()), make_layout(x.shape())};
    add_operand(j.l, d.shape(), d.strides());
    add_operand(j.l, x.shape(), x.strides());
    jobs.push_back(j);
  }
  launch_copies(jobs.data(), static_cast<int>(jobs.size()), static_cast<cudaStream_t>(stream));
}

void run_embedding(const OpCall& call, const Tensor& out, cudaStream_t s) {
  const Tensor& w = call.inputs[0];
  const Tensor& ids = call.inputs[1];
  GatherPlan p;
  p.weight = w.impl()->data();
  p.dtype = w.dtype();
  p.num = w.shape()[0];
  p.dim = w.shape()[1];
  p.w_row_stride = w.strides()[0];
  p.w_col_stride = p.dim == 1 ? 1 : w.strides()[1];
  p.ids = ids.impl()->data();
  p.ids_dtype = ids.dtype();
  p.n_ids = ids.numel();
  p.ids_layout = make_layout(ids.shape());
  add_operand(p.ids_layout, ids.shape(), ids.strides());
  coalesce(p.ids_layout);
  p.out = out.impl()->data();
  launch_gather(p, s);
  // Ids are validated on the device (see gather.cu for why not at the call); the flag is read
  // back only under LIVEFUSE_VERIFY, since reading it is a host sync -- and impossible while
  // the stream is being captured into a graph.
  if (config().verify > 0) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    LF_CUDA_CALL(cudaStreamIsCapturing(s, &cap));
    if (cap == cudaStreamCaptureStatusNone) {
      int64_t example = 0;
      const int64_t bad = take_gather_error(s, &example);
      LF_CHECK(bad == 0, "embedding", bad, " id(s) out of range [0, ", p.num, ") (e.g. ", example,
               "); their output rows are NaN. ids ", ids.shape().str(), " ",
               dtype_name(ids.dtype()), ", weight ", w.shape().str());
    }
  }
}

}  // namespace livefuse::cuda
