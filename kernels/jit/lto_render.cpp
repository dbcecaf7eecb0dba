#include "kernels/jit/lto_render.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "kernels/jit/lto_detail.hpp"
#include "kernels/jit/render_detail.hpp"
#include "livefuse/error.hpp"
#include "livefuse/shape.hpp"

namespace livefuse::jit {
namespace {
using namespace lto_detail;
using namespace render_detail;

// IR constants with the conversions of render_detail::literal (float rounding; integers through
// integer_literal).
std::string ir_const(double v, Cls c) {
  if (c == Cls::F) {
    const float f = static_cast<float>(v);
    const double d = static_cast<double>(f);  // LLVM spells a float as the double it widens to
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(bits));
    return buf;
  }
  return std::to_string(integer_literal(v, cls_dtype(c)));
}

// Builds one kernel's IR: body lines, and the declarations of the library functions it calls.
struct IrWriter {
  std::ostringstream os;
  std::map<std::string, std::string> decls;  // name -> declaration
  int tmp = 0;

  std::string fresh() { return "%q" + std::to_string(tmp++); }
  // %r = call RET @name(args...), declared once.
  std::string call(const std::string& ret, const std::string& name, const std::vector<std::pair<std::string, std::string>>& args) {
    std::string sig, list;
    for (const auto& [type, value] : args) {
      sig += (sig.empty() ? "" : ", ") + type;
      list += (list.empty() ? "" : ", ") + type + " " + value;
    }
    decls.emplace(name, "declare " + ret + " @" + name + "(" + sig + ")");
    const std::string r = fresh();
    os << "  " << r << " = call " << ret << " @" << name << "(" << list << ")\n";
    return r;
  }
  std::string word(int k) {  // A.w[k] as an i64
    const std::string p = fresh(), v = fresh();
    os << "  " << p << " = getelementptr %LfArgs, %LfArgs* %A, i64 0, i32 0, i64 " << k << "\n";
    os << "  " << v << " = load i64, i64* " << p << ", align 8\n";
    return v;
  }
  // A pack of `vec` elements of dtype d at element `base` (i64) of the pointer in word k, read or
  // written as words when the elements are narrower: a <8 x i16> access would become two 8-byte
  // ones, a <4 x i32> is one 16-byte access (the NVRTC kernel's LfPack is one too).
  struct Pack {
    std::string ptr, access_type, elem_type;
    int align = 0;
    int per_word = 0;  // elements a 4-byte word holds when the pack is accessed as words, else 0
  };
  Pack pack(int k, DType d, int vec, const std::string& base) {
    Pack pk;
    pk.elem_type = "<" + std::to_string(vec) + " x " + storage_ir(d) + ">";
    const size_t bytes = vec * dtype_size(d);
    pk.per_word = dtype_size(d) < 4 && bytes % 4 == 0 ? static_cast<int>(4 / dtype_size(d)) : 0;
    pk.access_type = pk.per_word ? "<" + std::to_string(bytes / 4) + " x i32>" : pk.elem_type;
    pk.align = static_cast<int>(std::min<size_t>(16, bytes));
    const std::string st = storage_ir(d), w = word(k), p = fresh(), q = fresh();
    pk.ptr = fresh();
    os << "  " << p << " = inttoptr i64 " << w << " to " << st << "*\n";
    os << "  " << q << " = getelementptr " << st << ", " << st << "* " << p << ", i64 " << base << "\n";
    os << "  " << pk.ptr << " = bitcast " << st << "* " << q << " to " << pk.access_type << "*\n";
    return pk;
  }
  // Loaded packs: either a vector of the elements, or (narrow elements) a vector of words the
  // elements are shifted out of -- a bitcast of the words would be folded back into a vector of
  // narrow elements, and that into two 8-byte accesses.
  struct Loaded {
    std::string value;
    int per_word = 0;  // Pack::per_word
  };
  Loaded load_pack(int k, DType d, int vec, const std::string& base) {
    const Pack pk = pack(k, d, vec, base);
    Loaded l{fresh(), pk.per_word};
    os << "  " << l.value << " = load " << pk.access_type << ", " << pk.access_type << "* " << pk.ptr << ", align " << pk.align << "\n";
    return l;
  }
  std::string element(const Loaded& l, DType d, int vec, int e) {
    const std::string st = storage_ir(d), x = fresh();
    const int per_word = l.per_word;
    if (!per_word) {
      os << "  " << x << " = extractelement <" << vec << " x " << st << "> " << l.value << ", i32 " << e << "\n";
      return x;
    }
    const int words = vec / per_word;
    const std::string h = fresh(), r = fresh();
    const std::string wt = "<" + std::to_string(per_word) + " x " + st + ">";
    os << "  " << x << " = extractelement <" << words << " x i32> " << l.value << ", i32 " << e / per_word << "\n";
    os << "  " << h << " = bitcast i32 " << x << " to " << wt << "\n";
    os << "  " << r << " = extractelement " << wt << " " << h << ", i32 " << e % per_word << "\n";
    return r;
  }
  // Stores `elements` (one storage value each) as one pack.
  void store_pack(int k, DType d, int vec, const std::string& base, const std::vector<std::string>& elements) {
    const Pack pk = pack(k, d, vec, base);
    const std::string st = storage_ir(d);
    std::string value = "undef";
    if (!pk.per_word) {
      for (int e = 0; e < vec; ++e) {
        const std::string v = fresh();
        os << "  " << v << " = insertelement " << pk.elem_type << " " << value << ", " << st << " " << elements[e] << ", i32 " << e << "\n";
        value = v;
      }
    } else {
      const int per_word = pk.per_word, words = vec / per_word, bits = 32 / per_word;
      for (int wi = 0; wi < words; ++wi) {
        std::string word_value;
        for (int j = 0; j < per_word; ++j) {
          const std::string z = fresh();
          os << "  " << z << " = zext " << st << " " << elements[wi * per_word + j] << " to i32\n";
          std::string part = z;
          if (j) {
            part = fresh();
            os << "  " << part << " = shl i32 " << z << ", " << j * bits << "\n";
          }
          if (word_value.empty()) {
            word_value = part;
          } else {
            const std::string o = fresh();
            os << "  " << o << " = or i32 " << word_value << ", " << part << "\n";
            word_value = o;
          }
        }
        const std::string v = fresh();
        os << "  " << v << " = insertelement <" << words << " x i32> " << value << ", i32 " << word_value << ", i32 " << wi << "\n";
        value = v;
      }
    }
    os << "  store " << pk.access_type << " " << value << ", " << pk.access_type << "* " << pk.ptr << ", align " << pk.align << "\n";
  }
};

}  // namespace

bool ir_covers(const KernelSpec& spec) {
  // Every pointwise variant (the renderer's list); spec.variants == 0 asks for all of them.
  if (spec.kind != SpecKind::Pointwise || spec.variants == 0) return false;
  for (const KernelPart& part : spec.parts) {
    for (const Instr& in : part.instrs) {
      switch (in.kind) {
        case InstrKind::Load:
        case InstrKind::Const: break;
        case InstrKind::Op:
          if (!op_has(in.op, compute_cls(in.compute)) || outlined_op(in.op)) return false;
          break;
        case InstrKind::Custom: break;
        case InstrKind::Store: {
          const Instr& x = part.instrs[in.arg[0]];
          if (!(has_bits(x) && x.dtype == in.dtype) && nat_cls(x.dtype) != nat_cls(in.dtype)) return false;
          break;
        }
        default: return false;  // row instructions
      }
    }
    std::vector<int> stores(part.outputs.size(), 0);
    for (const Instr& in : part.instrs)
      if (in.kind == InstrKind::Store) ++stores.at(in.io);
    for (int n : stores)
      if (n != 1) return false;
  }
  return true;
}

namespace {
// The ops of one element: `load(i)` gives Load instruction i's storage value, `store(io, v)`
// takes output io's. Mirrors render_detail::value_stmt call for call.
template <class LoadFn, class StoreFn>
void element_ops(IrWriter& w, const KernelPart& part, LoadFn load, StoreFn store) {
  std::vector<std::string> val(part.instrs.size()), bits(part.instrs.size());
  for (size_t i = 0; i < part.instrs.size(); ++i) {
    const Instr& in = part.instrs[i];
    switch (in.kind) {
      case InstrKind::Load:
        val[i] = w.call(ir_type(nat_cls(in.dtype)), fn_ld(in.dtype), {{storage_ir(in.dtype), load(i)}});
        break;
      case InstrKind::Const: {
        // value_stmt: float dtypes round the f32 literal to their natural form; bool is 0/1;
        // integers take the literal of their own type.
        const Cls c = nat_cls(in.dtype);
        const std::string k = in.dtype == DType::boolean ? (in.s[0] != 0 ? "1" : "0") : ir_const(in.s[0], c);
        val[i] = w.call(ir_type(c), fn_nat(in.dtype, c), {{ir_type(c), k}});
        break;
      }
      case InstrKind::Op:
      case InstrKind::Custom: {  // value_stmt: a custom op computes in float
        const bool custom = in.kind == InstrKind::Custom;
        const Cls c = custom ? Cls::F : compute_cls(in.compute);
        const std::string ct = ir_type(c);
        std::string args[3] = {"", "", ""};
        for (int k = 0; k < in.nargs; ++k) {
          const Cls n = nat_cls(part.instrs[in.arg[k]].dtype);
          const std::string fn = !custom && in.op == OpId::where && k == 0 ? fn_truth(c, n) : fn_cv(c, n);
          args[k] = w.call(ct, fn, {{ir_type(n), val[in.arg[k]]}});
        }
        if (in.scalar_operand) args[in.nargs] = ir_const(in.s[0], c);
        for (auto& a : args)
          if (a.empty()) a = c == Cls::F ? "0.0" : "0";
        const std::string r = w.call(ct, custom ? fn_custom(in.custom_id) : fn_op(in.op, c),
                                     {{ct, args[0]}, {ct, args[1]}, {ct, args[2]}, {ct, ir_const(in.s[0], c)}, {ct, ir_const(in.s[1], c)}});
        if (has_bits(in)) {  // value_stmt: the bits once, the natural value read back from them
          bits[i] = w.call("i16", fn_bits(in.dtype, c), {{ct, r}});
          val[i] = w.call("float", fn_ld(in.dtype), {{"i16", bits[i]}});
        } else {
          val[i] = w.call(ir_type(nat_cls(in.dtype)), fn_nat(in.dtype, c), {{ct, r}});
        }
        break;
      }
      case InstrKind::Store: {
        const int x = in.arg[0];
        const Instr& src = part.instrs[x];
        store(in.io, has_bits(src) && src.dtype == in.dtype
                         ? bits[x]
                         : w.call(storage_ir(in.dtype), fn_st(in.dtype), {{ir_type(nat_cls(in.dtype)), val[x]}}));
        break;
      }
      default: LF_ASSERT(false, "render_pointwise_ir: ", instr_kind_name(in.kind));
    }
  }
}

// The parameter word of a part's operand k: inputs, then outputs.
int io_word(const KernelPart& part, const ArgLayout::Part& lp, size_t k) {
  const size_t nin = part.inputs.size();
  return k < nin ? lp.in[k] : lp.out[k - nin];
}

// One element at given offsets (i64, one per operand: inputs, then outputs): the C kernel's _at.
void ops_at(IrWriter& w, const KernelPart& part, const ArgLayout::Part& lp, const std::vector<std::string>& off) {
  const size_t nin = part.inputs.size();
  auto elem_ptr = [&](size_t k, DType d) {
    const std::string st = storage_ir(d), x = w.word(io_word(part, lp, k)), p0 = w.fresh(), q = w.fresh();
    w.os << "  " << p0 << " = inttoptr i64 " << x << " to " << st << "*\n";
    w.os << "  " << q << " = getelementptr " << st << ", " << st << "* " << p0 << ", i64 " << off[k] << "\n";
    return q;
  };
  element_ops(
      w, part,
      [&](size_t i) {
        const Instr& in = part.instrs[i];
        const std::string st = storage_ir(in.dtype), ptr = elem_ptr(in.io, in.dtype), x = w.fresh();
        w.os << "  " << x << " = load " << st << ", " << st << "* " << ptr << ", align " << dtype_size(in.dtype) << "\n";
        return x;
      },
      [&](int io, const std::string& value) {
        const DType d = part.outputs[io].dtype;
        const std::string st = storage_ir(d), ptr = elem_ptr(nin + io, d);
        w.os << "  store " << st << " " << value << ", " << st << "* " << ptr << ", align " << dtype_size(d) << "\n";
      });
}

// A strided part (render_pointwise's _strided and _at): thread t is element t; each operand's
// offset comes from t's coordinates (render_detail::decompose: dims from the last, the runtime
// rank's outermost one without a division) times its strides; the part's words are those of
// the NVRTC kernel (rank at base+1, shape at base+2, an operand's strides after its pointer).
template <class WordI, class ToI64>
void strided_part(IrWriter& w, const KernelPart& part, const ArgLayout::Part& lp, const std::string& P, const std::string& I,
                  const std::string& t, WordI word_i, ToI64 to_i64) {
  const std::string numel = word_i(lp.base), ok = w.fresh();
  const std::string rank64 = w.word(lp.base + 1), rank = w.fresh();  // (int)A.w[rank word]
  w.os << "  " << rank << " = trunc i64 " << rank64 << " to i32\n";
  w.os << "  " << ok << " = icmp slt " << I << " " << t << ", " << numel << "\n";
  w.os << "  br i1 " << ok << ", label %" << P << ".d" << kMaxDims - 1 << ", label %exit\n";
  const size_t nio = part.inputs.size() + part.outputs.size();
  std::string r = t;
  std::vector<std::string> off(nio, "0");
  for (int d = kMaxDims - 1; d >= 0; --d) {
    const std::string test = P + ".d" + std::to_string(d), body = test + ".in", join = test + ".out";
    w.os << test << ":\n";
    const std::string act = w.fresh();
    w.os << "  " << act << " = icmp slt i32 " << d << ", " << rank << "\n";
    w.os << "  br i1 " << act << ", label %" << body << ", label %" << join << "\n" << body << ":\n";
    std::string c = r, r_next = r;
    if (d > 0) {
      const std::string n = word_i(lp.base + 2 + d), q = w.fresh(), qn = w.fresh();
      c = w.fresh();
      w.os << "  " << q << " = sdiv " << I << " " << r << ", " << n << "\n";
      w.os << "  " << qn << " = mul " << I << " " << q << ", " << n << "\n";
      w.os << "  " << c << " = sub " << I << " " << r << ", " << qn << "\n";
      r_next = q;
    }
    std::vector<std::string> off_next(nio);
    for (size_t k = 0; k < nio; ++k) {
      const std::string stride = word_i(io_word(part, lp, k) + 1 + d), cs = w.fresh();
      off_next[k] = w.fresh();
      w.os << "  " << cs << " = mul " << I << " " << c << ", " << stride << "\n";
      w.os << "  " << off_next[k] << " = add " << I << " " << off[k] << ", " << cs << "\n";
    }
    w.os << "  br label %" << join << "\n" << join << ":\n";
    if (d > 0) {
      const std::string rp = w.fresh();
      w.os << "  " << rp << " = phi " << I << " [ " << r_next << ", %" << body << " ], [ " << r << ", %" << test << " ]\n";
      r = rp;
    }
    for (size_t k = 0; k < nio; ++k) {
      const std::string op = w.fresh();
      w.os << "  " << op << " = phi " << I << " [ " << off_next[k] << ", %" << body << " ], [ " << off[k] << ", %" << test << " ]\n";
      off[k] = op;
    }
    w.os << "  br label %" << (d > 0 ? P + ".d" + std::to_string(d - 1) : P + ".at") << "\n";
  }
  w.os << P << ".at:\n";
  std::vector<std::string> off64;
  for (const std::string& o : off) off64.push_back(to_i64(o));
  ops_at(w, part, lp, off64);
  w.os << "  br label %exit\n";
}

// One entry point: the NVRTC kernel's render_entry, for a vec variant (packs, and when the
// variant is not exact, the numel % VEC elements after them one a thread).
void render_entry_ir(IrWriter& w, const KernelSpec& spec, const RenderedKernel& rk, Variant v) {
  const int vec = rk.vec;
  const bool wide = is_i64(v), exact = v == Variant::VecExactI32 || v == Variant::VecExactI64;
  const std::string I = wide ? "i64" : "i32";
  // An I value of word k (the C kernel's (I)A.w[k]).
  auto word_i = [&](int k) {
    const std::string x = w.word(k);
    if (wide) return x;
    const std::string t = w.fresh();
    w.os << "  " << t << " = trunc i64 " << x << " to i32\n";
    return t;
  };
  auto to_i64 = [&](const std::string& x) {
    if (wide) return x;
    const std::string t = w.fresh();
    w.os << "  " << t << " = sext i32 " << x << " to i64\n";
    return t;
  };
  w.os << "define void @" << rk.entry(v) << "(%LfArgs* byval align 8 %A) {\nentry:\n";
  w.decls.emplace(fn_pdl_wait(), "declare void @" + fn_pdl_wait() + "()");
  w.os << "  call void @" << fn_pdl_wait() << "()\n";  // first, as the NVRTC kernel's entry
  w.os << "  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n  %b = zext i32 %ctaid to i64\n";
  w.os << "  %tid32 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n";
  w.os << (wide ? "  %tid = zext i32 %tid32 to i64\n" : "  %tid = add i32 %tid32, 0\n") << "  br label %p0.test\n";
  const size_t np = spec.parts.size();
  for (size_t p = 0; p < np; ++p) {
    const KernelPart& part = spec.parts[p];
    const ArgLayout::Part& lp = rk.layout.parts[p];
    const std::string P = "p" + std::to_string(p);
    // A horizontal kernel's parts own consecutive block ranges: part p runs below part p+1's first.
    w.os << P << ".test:\n";
    if (p + 1 < np) {
      const std::string next = w.word(rk.layout.parts[p + 1].base + 10), in = w.fresh();
      w.os << "  " << in << " = icmp slt i64 %b, " << next << "\n";
      w.os << "  br i1 " << in << ", label %" << P << ".run, label %p" << p + 1 << ".test\n";
    } else {
      w.os << "  br label %" << P << ".run\n";
    }
    w.os << P << ".run:\n";
    const std::string begin = w.word(lp.base + 10), rel = w.fresh(), t0 = w.fresh(), t = w.fresh();
    w.os << "  " << rel << " = sub i64 %b, " << begin << "\n";
    std::string rel_i = rel;
    if (!wide) {
      rel_i = w.fresh();
      w.os << "  " << rel_i << " = trunc i64 " << rel << " to i32\n";
    }
    w.os << "  " << t0 << " = mul " << I << " " << rel_i << ", " << kPointwiseBlock << "\n  " << t << " = add " << I << " " << t0
         << ", %tid\n";
    if (!is_vec_pointwise(v)) {
      strided_part(w, part, lp, P, I, t, word_i, to_i64);
      continue;
    }
    const std::string nvec = word_i(lp.base + 11), ok = w.fresh();
    w.os << "  " << ok << " = icmp slt " << I << " " << t << ", " << nvec << "\n";
    w.os << "  br i1 " << ok << ", label %" << P << ".vec, label %" << P << ".tail\n" << P << ".vec:\n";
    {  // packs of VEC elements
      const std::string base_i = w.fresh();
      w.os << "  " << base_i << " = mul " << I << " " << t << ", " << vec << "\n";
      const std::string base = to_i64(base_i);
      std::vector<IrWriter::Loaded> packs(part.instrs.size());
      for (size_t i = 0; i < part.instrs.size(); ++i)
        if (part.instrs[i].kind == InstrKind::Load) packs[i] = w.load_pack(lp.in[part.instrs[i].io], part.instrs[i].dtype, vec, base);
      std::vector<std::vector<std::string>> out(part.outputs.size());
      for (int e = 0; e < vec; ++e)
        element_ops(
            w, part, [&](size_t i) { return w.element(packs[i], part.instrs[i].dtype, vec, e); },
            [&](int io, const std::string& value) { out[io].push_back(value); });
      for (size_t k = 0; k < part.outputs.size(); ++k) w.store_pack(lp.out[k], part.outputs[k].dtype, vec, base, out[k]);
      w.os << "  br label %" << P << ".tail\n";
    }
    w.os << P << ".tail:\n";
    if (exact) {
      w.os << "  br label %exit\n";
      continue;
    }
    {  // the numel % VEC elements after the packs, one a thread (the C kernel's _at at i)
      const std::string numel = word_i(lp.base), packed = w.fresh(), rest = w.fresh(), in_rest = w.fresh();
      w.os << "  " << packed << " = mul " << I << " " << nvec << ", " << vec << "\n";
      w.os << "  " << rest << " = sub " << I << " " << numel << ", " << packed << "\n";
      w.os << "  " << in_rest << " = icmp slt " << I << " " << t << ", " << rest << "\n";
      w.os << "  br i1 " << in_rest << ", label %" << P << ".one, label %exit\n" << P << ".one:\n";
      const std::string i_i = w.fresh();
      w.os << "  " << i_i << " = add " << I << " " << packed << ", " << t << "\n";
      ops_at(w, part, lp, std::vector<std::string>(part.inputs.size() + part.outputs.size(), to_i64(i_i)));
      w.os << "  br label %exit\n";
    }
  }
  w.os << "exit:\n  ret void\n}\n\n";
}
}  // namespace

std::string render_pointwise_ir(const KernelSpec& spec, const RenderedKernel& rk) {
  LF_CHECK(ir_covers(spec), "fused kernel", spec.name, ": not a kernel the IR renderer covers");
  IrWriter w;
  for (Variant v : rk.variants) render_entry_ir(w, spec, rk, v);

  std::ostringstream ir;
  ir << "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n";
  ir << "target triple = \"nvptx64-nvidia-cuda\"\n\n";
  ir << "%LfArgs = type { [" << rk.layout.words << " x i64] }\n\n";
  ir << "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\ndeclare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n";
  for (const auto& [name, decl] : w.decls) ir << decl << "\n";
  ir << "\n" << w.os.str() << "\n";
  const std::string fn_type = "void (%LfArgs*)*";
  // nvJitLink's link-time optimisation drops kernels nothing marks as used.
  ir << "@llvm.used = appending global [" << rk.variants.size() << " x i8*] [";
  for (size_t k = 0; k < rk.variants.size(); ++k)
    ir << (k ? ", " : "") << "i8* bitcast (" << fn_type << " @" << rk.entry(rk.variants[k]) << " to i8*)";
  ir << "], section \"llvm.metadata\"\n\n!nvvm.annotations = !{";
  const int n = static_cast<int>(rk.variants.size());
  for (int k = 0; k < 2 * n; ++k) ir << (k ? ", " : "") << "!" << k;
  ir << "}\n";
  for (int k = 0; k < n; ++k) {
    const std::string e = rk.entry(rk.variants[k]);
    ir << "!" << 2 * k << " = !{" << fn_type << " @" << e << ", !\"kernel\", i32 1}\n";
    ir << "!" << 2 * k + 1 << " = !{" << fn_type << " @" << e << ", !\"maxntidx\", i32 " << kPointwiseBlock << "}\n";
  }
  ir << "!nvvmir.version = !{!" << 2 * n << "}\n!" << 2 * n << " = !{i32 2, i32 0}\n";
  return ir.str();
}

}  // namespace livefuse::jit
