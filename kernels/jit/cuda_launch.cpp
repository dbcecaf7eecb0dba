#include "kernels/jit/cuda_launch.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/jit/cuda_driver.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit {
bool prefer_pipelined_rows(int plain_blocks, int pipelined_blocks, int warps_per_row, bool late_loads) {
  if (warps_per_row >= 16) return true;
  if (warps_per_row <= 1) return pipelined_blocks >= plain_blocks;
  return !late_loads || 4 * pipelined_blocks >= 3 * plain_blocks;
}

bool rows_in_one_pass(int64_t rows, int sms, int pipelined_blocks_per_sm, unsigned rows_per_block) {
  return 2 * rows <= int64_t{sms} * pipelined_blocks_per_sm * rows_per_block;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool aligned(const void* p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

// Row launch shape: threads per row (a power of two, 32..kRowMaxThreads, about `items` columns
// each: short rows get one warp and no __syncthreads at all) and rows per block. Measured on an
// H200: 8 columns a thread for rows up to 2048 f32 and 16 beyond; twice that for 2-byte dtypes,
// whose 16-byte packs hold 8 columns. A variant that holds the row in registers takes `regs`
// columns a thread (fewer never won in a sweep: the unused ones still cost the registers).
void row_shape(int64_t cols, int row_vec, int regs, unsigned& tpr, unsigned& rpb) {
  const int64_t items = regs > 0 ? regs : (cols <= 2048 ? 8 : 16) * (row_vec >= 8 ? 2 : 1);
  int64_t t = 32;
  while (t < kRowMaxThreads && t * items < cols) t *= 2;
  tpr = static_cast<unsigned>(t);
  rpb = std::max<unsigned>(1, 256 / tpr);
}

int variant_index(const CompiledKernel& k, Variant v) {
  for (size_t i = 0; i < k.rendered.variants.size(); ++i)
    if (k.rendered.variants[i] == v) return static_cast<int>(i);
  return -1;
}

// The body choice of register rows with both bodies (row_tuner.hpp): the launch shape's entry,
// its pending timings read, and this launch's body; a timed launch is bracketed by start/stop.
class RowTimer {
 public:
  int pipelined_blocks_per_sm = 1;

  bool pick(CompiledKernel& k, const LaunchChoice& c, int64_t rows, int sms, const LoadedFunction& pipe,
            const LoadedFunction* plain, void* stream) {
    key_ = CompiledKernel::row_shape_key(c.block_x, c.block_y, rows);
    const int threads = static_cast<int>(c.block_x * c.block_y);
    auto make = [&] {
      const int pipe_blocks = resident_blocks_per_sm(pipe, threads, static_cast<int>(c.smem));
      const bool one_pass = plain && rows_in_one_pass(rows, sms, pipe_blocks, c.block_y);
      const bool guess = !plain || (!one_pass && prefer_pipelined_rows(resident_blocks_per_sm(*plain, threads, 0), pipe_blocks,
                                                                      static_cast<int>(c.block_x / 32),
                                                                      k.rendered.row_late_loads));
      auto shape = std::make_unique<CompiledKernel::RowShape>(pipe_blocks, guess);
      if (!plain || one_pass) shape->tuner.abandon();  // decided: the guess, untimed
      return shape;
    };
    BodyTuner::Pick p;
    k.with_row_shape(key_, make, [&](CompiledKernel::RowShape& rs) {
      pipelined_blocks_per_sm = rs.pipelined_blocks_per_sm;
      read_timings(rs);
      p = rs.tuner.next(!rs.tuner.decided() && !stream_capturing(stream));
      if (p.timed) {
        start_ = timing_event();
        end_ = timing_event();
        if (!start_ || !end_) {
          rs.tuner.abandon();
          p = {rs.tuner.choice(), false};
          release();
        }
      }
    });
    pipelined_ = p.pipelined;
    return p.pipelined;
  }
  void start(void* stream) {
    if (start_ && !record_event(start_, stream)) release();
  }
  void stop(CompiledKernel& k, void* stream) {
    if (!start_) return;
    const bool ok = record_event(end_, stream);
    k.with_row_shape(key_, [] { return std::unique_ptr<CompiledKernel::RowShape>(); }, [&](CompiledKernel::RowShape& rs) {
      if (ok) rs.pending.push_back({start_, end_, pipelined_});
      else rs.tuner.abandon();
    });
    if (ok) start_ = end_ = nullptr;
  }
  ~RowTimer() { release(); }

 private:
  static void read_timings(CompiledKernel::RowShape& rs) {
    for (size_t i = 0; i < rs.pending.size();) {
      const CompiledKernel::RowShape::Timing t = rs.pending[i];
      float ms = 0;
      const int r = elapsed_ms(t.start, t.end, &ms);
      if (r == 0) {
        ++i;
        continue;
      }
      if (r > 0) rs.tuner.result(t.pipelined, 1e3 * ms);
      else rs.tuner.abandon();
      destroy_event(t.start);
      destroy_event(t.end);
      rs.pending.erase(rs.pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  void release() {
    destroy_event(start_);
    destroy_event(end_);
    start_ = end_ = nullptr;
  }
  uint64_t key_ = 0;
  bool pipelined_ = false;
  void* start_ = nullptr;
  void* end_ = nullptr;
};

}  // namespace

namespace {
bool rendered(const CompiledKernel& k, Variant v) {
  return std::find(k.rendered.variants.begin(), k.rendered.variants.end(), v) != k.rendered.variants.end();
}
// The first candidate the kernel can run; else the first one it lacks (to be compiled).
bool pick(const CompiledKernel& k, std::initializer_list<std::pair<Variant, bool>> candidates, LaunchChoice& c,
          const std::string& name, std::string* error) {
  for (const auto& [v, valid] : candidates)
    if (valid && k.usable(v)) {
      c.variant = v;
      return true;
    }
  for (const auto& [v, valid] : candidates)
    if (valid && !rendered(k, v)) {
      c.missing = v;
      *error = "[jit] " + name + ": variant " + std::string(variant_suffix(v)) + " not compiled";
      return false;
    }
  *error = "[jit] " + name + ": every usable variant spills registers";
  return false;
}
}  // namespace

LaunchChoice choose_launch(const KernelSpec& spec, const CompiledKernel& k, std::span<const PartGeometry> geos,
                           int smem_optin, std::string* error) {
  LaunchChoice c;
  bool i32 = true;
  for (const auto& g : geos) i32 &= g.fits_i32;
  if (spec.kind == SpecKind::Pointwise) {
    const int vec = k.rendered.vec;
    bool dense = true;
    for (size_t p = 0; p < geos.size(); ++p) {
      dense &= geos[p].dense;
      for (size_t j = 0; j < geos[p].inputs.size(); ++j)
        dense &= aligned(geos[p].inputs[j].data, std::min<size_t>(16, vec * dtype_size(spec.parts[p].inputs[j].dtype)));
      for (size_t j = 0; j < geos[p].outputs.size(); ++j)
        dense &= aligned(geos[p].outputs[j].data, std::min<size_t>(16, vec * dtype_size(spec.parts[p].outputs[j].dtype)));
    }
    // Exact: no part has a tail after its packs, so the variant without tail code serves.
    bool exact = true;
    for (const auto& g : geos) exact &= g.numel % vec == 0;
    if (!pick(k, {{Variant::VecExactI32, exact && dense && i32}, {Variant::VecI32, dense && i32}, {Variant::StridedI32, i32},
                  {Variant::VecExactI64, exact && dense}, {Variant::VecI64, dense}, {Variant::StridedI64, true}},
              c, spec.name, error))
      return c;
    const bool is_vec = is_vec_pointwise(c.variant);
    int64_t blocks = 0;
    for (const auto& g : geos) {
      const int64_t work = is_vec ? std::max(g.numel / vec, g.numel - (g.numel / vec) * vec) : g.numel;
      blocks += g.numel == 0 ? 0 : ceil_div(work, kPointwiseBlock);
    }
    c.grid = static_cast<unsigned>(blocks);
    c.block_x = kPointwiseBlock;
    return c;
  }
  const PartGeometry& g = geos[0];
  const int ncache = k.rendered.ncache, regs = k.rendered.row_regs;
  const int64_t per_row = regs > 0 ? 0 : static_cast<int64_t>(ncache) * g.cols * 4;
  const bool cache_ok = ncache > 0 && (regs > 0 ? g.cols <= int64_t{kRowMaxThreads} * regs : per_row <= smem_optin);
  // 16-byte column packs: unit column strides, packs that never straddle a row, aligned rows.
  const int rv = k.rendered.row_vec;
  bool vec_ok = rv > 1 && g.cols % rv == 0;
  auto check_io = [&](const IoGeometry& io, const IoDesc& d) {
    if (d.space != Space::Full) return;
    vec_ok = vec_ok && io.col_stride == 1 && aligned(io.data, std::min<size_t>(16, rv * dtype_size(d.dtype)));
    for (int j = 0; j < io.strides.rank; ++j) vec_ok = vec_ok && io.strides.v[j] % rv == 0;
  };
  for (size_t j = 0; j < g.inputs.size(); ++j) check_io(g.inputs[j], spec.parts[0].inputs[j]);
  for (size_t j = 0; j < g.outputs.size(); ++j) check_io(g.outputs[j], spec.parts[0].outputs[j]);
  // The pipelined register body first (launch_spec_cuda may still prefer the plain one, whose
  // launch shape is the same), then the plain one.
  const bool pipe_ok = vec_ok && cache_ok && regs > 0;
  if (!pick(k, {{Variant::VecPipeI32, pipe_ok && i32 && rendered(k, Variant::VecPipeI32)},
                {Variant::VecCacheI32, vec_ok && cache_ok && i32}, {Variant::CacheI32, cache_ok && i32},
                {Variant::VecRecomputeI32, vec_ok && i32}, {Variant::RecomputeI32, i32},
                {Variant::VecPipeI64, pipe_ok && rendered(k, Variant::VecPipeI64)},
                {Variant::VecCacheI64, vec_ok && cache_ok}, {Variant::CacheI64, cache_ok},
                {Variant::VecRecomputeI64, vec_ok}, {Variant::RecomputeI64, true}},
            c, spec.name, error))
    return c;
  const bool cached = is_cache_row(c.variant);
  row_shape(g.cols, rv, cached ? regs : 0, c.block_x, c.block_y);
  if (cached && per_row > 0) {
    while (c.block_y > 1 && c.block_y * per_row > smem_optin) c.block_y /= 2;
    c.smem = static_cast<unsigned>(static_cast<int64_t>(c.block_y) * per_row);
  }
  if (is_pipe_row(c.variant)) {
    c.smem = c.block_x * c.block_y * static_cast<unsigned>(k.rendered.row_stage_bytes);
    // A staging area beyond what a block may have (many packs of many inputs): the plain body.
    const Variant plain = plain_row_variant(c.variant);
    if (static_cast<int64_t>(c.smem) > smem_optin && k.usable(plain)) {
      c.variant = plain;
      c.smem = 0;
    }
  }
  c.grid = static_cast<unsigned>(ceil_div(g.numel, c.block_y));
  return c;
}

std::string launch_spec_cuda(const KernelSpec& spec, CompiledKernel& k, std::span<const PartBinding> parts,
                             void* stream, std::optional<Variant>* missing) {
  LF_ASSERT(parts.size() == spec.parts.size(), "launch of ", spec.name, " with ", parts.size(), " bindings");
  std::string err;
  auto mod = k.module(&err);
  if (!mod) return err;
  std::vector<PartGeometry> geos;
  for (size_t p = 0; p < parts.size(); ++p) geos.push_back(make_geometry(spec.parts[p], spec.kind, parts[p]));
  // Leave room for the kernel's static shared memory (the reduction scratch).
  static const int optin = current_device_smem_optin() - 1024;
  LaunchChoice c = choose_launch(spec, k, geos, optin, &err);
  if (missing) *missing = c.missing;
  if (!err.empty()) return err;
  if (c.grid == 0) return "";

  const ArgLayout& L = k.rendered.layout;
  std::vector<long long> w(L.words, 0);
  auto put_io = [&](int word, const IoGeometry& io, bool row) {
    w[word] = static_cast<long long>(reinterpret_cast<uintptr_t>(io.data));
    for (int d = 0; d < kMaxDims; ++d) w[word + 1 + d] = d < io.strides.rank ? io.strides.v[d] : 0;
    if (row) w[word + 9] = io.col_stride;
  };
  const bool is_vec = is_vec_pointwise(c.variant);
  long long block_begin = 0;
  for (size_t p = 0; p < geos.size(); ++p) {
    const PartGeometry& g = geos[p];
    const int b = L.parts[p].base;
    const bool row = spec.kind == SpecKind::Row;
    w[b + 0] = g.numel;
    w[b + 1] = g.shape.rank;
    for (int d = 0; d < kMaxDims; ++d) w[b + 2 + d] = d < g.shape.rank ? g.shape.v[d] : 1;
    if (row) {
      w[b + 10] = g.cols;
    } else {
      const int vec = k.rendered.vec;
      const long long nvec = is_vec ? g.numel / vec : 0;
      const long long work = is_vec ? std::max<long long>(nvec, g.numel - nvec * vec) : g.numel;
      w[b + 10] = block_begin;
      w[b + 11] = nvec;
      block_begin += g.numel == 0 ? 0 : ceil_div(work, kPointwiseBlock);
    }
    for (size_t j = 0; j < g.inputs.size(); ++j) put_io(L.parts[p].in[j], g.inputs[j], row);
    for (size_t j = 0; j < g.outputs.size(); ++j) put_io(L.parts[p].out[j], g.outputs[j], row);
  }
  int vi = variant_index(k, c.variant);
  LF_ASSERT(vi >= 0, "variant not rendered");
  RowTimer timer;
  if (is_pipe_row(c.variant)) {
    // Pipelined rows loop over rows: one wave of resident blocks, each streaming its rows -- or
    // the plain body, whichever this launch shape measured faster (row_tuner.hpp).
    static const int sms = current_device_sm_count();
    const Variant plain = plain_row_variant(c.variant);
    const int pi = variant_index(k, plain);
    const bool pipelined = timer.pick(k, c, geos[0].numel, sms, mod->functions[vi],
                                      pi >= 0 && k.usable(plain) ? &mod->functions[pi] : nullptr, stream);
    if (pipelined) {
      c.grid = std::min<unsigned>(c.grid, static_cast<unsigned>(sms * timer.pipelined_blocks_per_sm));
    } else {
      c.variant = plain;
      c.smem = 0;
      vi = pi;
    }
  }
  LoadedFunction& f = mod->functions[vi];
  if (c.smem > 32 * 1024 && !set_dynamic_smem(f, static_cast<int>(c.smem), &err)) return err;
  void* params[] = {w.data()};
  timer.start(stream);
  if (!launch_function(f, c.grid, c.block_x, c.block_y, c.smem, stream, params, &err)) return err;
  timer.stop(k, stream);
  return "";
}

}  // namespace livefuse::jit
