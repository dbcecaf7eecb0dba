#include "kernels/jit/render.hpp"

#include <cstdio>

#include "kernels/jit/render_detail.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit {

void render_pointwise(const KernelSpec& spec, RenderedKernel& rk);
void render_row(const KernelSpec& spec, RenderedKernel& rk);

RenderedKernel render_cuda(const KernelSpec& spec) {
  validate(spec);
  RenderedKernel rk;
  rk.layout = arg_layout(spec);
  LF_CHECK(rk.layout.words <= kMaxArgWords, "fused kernel", spec.name, " needs ", rk.layout.words,
           " parameter words (limit ", kMaxArgWords, "): too many inputs");
  char buf[32];
  std::snprintf(buf, sizeof buf, "lf_%016llx", static_cast<unsigned long long>(structure_hash(spec)));
  rk.prefix = buf;
  // A kernel whose every result is f16/bf16 takes exp as one MUFU instruction (lf_math.cuh):
  // its error is 100x below half an f16 ulp, and f16 rows are issue-bound on expf.
  bool low_precision = true;
  for (const KernelPart& part : spec.parts)
    for (const IoDesc& o : part.outputs) low_precision = low_precision && (o.dtype == DType::f16 || o.dtype == DType::bf16);
  const bool row = spec.kind == SpecKind::Row;
  bool packs = false;  // a variant of this kind with 16-byte accesses
  for (unsigned i = 0; i < kNumVariants; ++i) {
    const Variant v = static_cast<Variant>(i);
    packs = packs || ((row ? is_vec_row(v) : is_vec_pointwise(v)) && wants_variant(spec, v));
  }
  rk.head = {low_precision, packs, row};
  // The kernel's own code lives in a namespace named after it, so the bodies of several kernels
  // can follow one head in one program (program_source); the entry points are extern "C".
  rk.body = "namespace " + rk.prefix + " {\nstruct LfArgs { long long w[" + std::to_string(rk.layout.words) + "]; };\n";
  if (spec.kind == SpecKind::Pointwise) render_pointwise(spec, rk);
  else render_row(spec, rk);
  // Expensive scalar functions called out of line (set_outline_heavy_ops): one copy per kernel.
  std::string outlined;
  for (OpId op : render_detail::kOutlinedOps)
    if (const std::string fn = render_detail::outlined_fn(op); rk.body.find(fn + "(") != std::string::npos)
      outlined += "__device__ __noinline__ float " + fn + "(float a) { return " + std::string(op_info(op).expr) + "; }\n";
  if (!outlined.empty()) {
    const size_t at = rk.body.find("};\n") + 3;  // after the kernel's LfArgs
    rk.body.insert(at, outlined);
  }
  rk.body += "}  // namespace " + rk.prefix + "\n";
  rk.source = program_head(rk.head) + rk.body;
  return rk;
}

std::string program_head(const ProgramHead& h) {
  return (h.fast_exp ? "#define LF_FAST_EXP 1\n" : "") + render_detail::preamble(h.packs, h.rows) + "\n";
}

std::string program_source(const std::vector<const RenderedKernel*>& kernels) {
  LF_CHECK(!kernels.empty(), "jit", "program_source: no kernels");
  ProgramHead h = kernels[0]->head;
  for (const RenderedKernel* k : kernels) {
    LF_CHECK(k->head.fast_exp == h.fast_exp, "jit", "program_source: ", k->prefix, " takes exp ",
             k->head.fast_exp ? "fast" : "exact", ", the program the other way");
    h.packs = h.packs || k->head.packs;
    h.rows = h.rows || k->head.rows;
  }
  std::string s = program_head(h);
  for (const RenderedKernel* k : kernels) s += k->body;
  return s;
}

}  // namespace livefuse::jit
