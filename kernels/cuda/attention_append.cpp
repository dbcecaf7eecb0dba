// A KV cache's append that lands before the attention reads it (AttentionArgs::first_new):
// launch_attention's way for every kernel but the decode one, which appends as it reads
// (attention_decode.cu). One launch of independent copies (layout.hpp), as the concats it
// replaces made.
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/layout.hpp"
#include "livefuse/dtype.hpp"

namespace livefuse::cuda {
namespace {

Shape rows_shape(const AttentionArgs& a, int64_t rows, int64_t cols) {
  return Shape{a.batch, a.heads, rows, cols};
}

Strides strides_of(const int64_t (&st)[4]) { return Strides{st[0], st[1], st[2], st[3]}; }

// Rows [from, to) of a [batch, heads, rows, cols] operand from src (its row 0 being row `from`).
void add_rows(std::vector<CopyJob>& jobs, const AttentionArgs& a, const void* src,
              const int64_t (&src_st)[4], void* dst, const int64_t (&dst_st)[4], int64_t from,
              int64_t to, int64_t cols) {
  if (to <= from || a.batch * a.heads * cols == 0) return;
  const size_t es = dtype_size(a.dtype);
  const Shape s = rows_shape(a, to - from, cols);
  CopyJob j{static_cast<char*>(dst) + from * dst_st[2] * static_cast<int64_t>(es), src, es,
            make_layout(s)};
  add_operand(j.l, s, strides_of(dst_st));
  add_operand(j.l, s, strides_of(src_st));
  jobs.push_back(j);
}

}  // namespace

void launch_append_copies(const AttentionArgs& a, void* stream) {
  std::vector<CopyJob> jobs;
  if (a.copy_old_k) add_rows(jobs, a, a.k, a.k_st, a.k_dst, a.k_dst_st, 0, a.first_new, a.d);
  if (a.copy_old_v) add_rows(jobs, a, a.v, a.v_st, a.v_dst, a.v_dst_st, 0, a.first_new, a.dv);
  add_rows(jobs, a, a.k_new, a.k_new_st, a.k_dst, a.k_dst_st, a.first_new, a.sk, a.d);
  add_rows(jobs, a, a.v_new, a.v_new_st, a.v_dst, a.v_dst_st, a.first_new, a.sk, a.dv);
  if (!jobs.empty())
    launch_copies(jobs.data(), static_cast<int>(jobs.size()), static_cast<cudaStream_t>(stream));
}

}  // namespace livefuse::cuda
