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
  rk.source = "#define LF_ARG_WORDS " + std::to_string(rk.layout.words) + "\n" + render_detail::preamble() + "\n";
  if (spec.kind == SpecKind::Pointwise) render_pointwise(spec, rk);
  else render_row(spec, rk);
  return rk;
}

}  // namespace livefuse::jit
