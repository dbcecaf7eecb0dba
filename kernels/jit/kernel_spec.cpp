#include "kernels/jit/kernel_spec.hpp"

#include <sstream>

#include "livefuse/error.hpp"

namespace livefuse::jit {

int KernelSpec::num_inputs() const {
  int n = 0;
  for (const auto& p : parts) n += static_cast<int>(p.inputs.size());
  return n;
}
int KernelSpec::num_outputs() const {
  int n = 0;
  for (const auto& p : parts) n += static_cast<int>(p.outputs.size());
  return n;
}

DType compute_type(OpId op, std::span<const DType> operands, DType result) {
  if (!op_info(op).int_ok) return DType::f32;
  bool any_f = is_floating(result), any_i64 = result == DType::i64;
  for (size_t k = op == OpId::where ? 1 : 0; k < operands.size(); ++k) {
    any_f |= is_floating(operands[k]);
    any_i64 |= operands[k] == DType::i64;
  }
  return any_f ? DType::f32 : any_i64 ? DType::i64 : DType::i32;
}

std::string_view space_name(Space s) {
  switch (s) {
    case Space::Full: return "full";
    case Space::RowKeep: return "row";
    case Space::RowFlat: return "rowflat";
  }
  return "?";
}

std::string_view instr_kind_name(InstrKind k) {
  switch (k) {
    case InstrKind::Load: return "load";
    case InstrKind::Op: return "op";
    case InstrKind::Custom: return "custom";
    case InstrKind::Const: return "const";
    case InstrKind::ColCount: return "cols";
    case InstrKind::ReduceSum: return "reduce_sum";
    case InstrKind::ReduceMax: return "reduce_max";
    case InstrKind::Store: return "store";
  }
  return "?";
}

namespace {
// FNV-1a over explicit fields (never over struct padding).
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <class T> void add(const T& v) { bytes(&v, sizeof(T)); }
};
}  // namespace

uint64_t structure_hash(const KernelSpec& spec) {
  Hasher h;
  h.add(static_cast<uint8_t>(spec.kind));
  h.add(spec.variants);
  h.add(spec.parts.size());
  for (const auto& p : spec.parts) {
    h.add(p.instrs.size());
    for (const Instr& in : p.instrs) {
      h.add(static_cast<uint8_t>(in.kind));
      h.add(static_cast<uint16_t>(in.op));
      h.add(in.custom_id);
      for (int a : in.arg) h.add(a);
      h.add(in.nargs);
      h.add(in.s[0]);
      h.add(in.s[1]);
      h.add(in.scalar_operand);
      h.add(static_cast<uint8_t>(in.dtype));
      h.add(static_cast<uint8_t>(in.compute));
      h.add(static_cast<uint8_t>(in.space));
      h.add(in.io);
    }
    for (const auto* ios : {&p.inputs, &p.outputs}) {
      h.add(ios->size());
      for (const IoDesc& d : *ios) {
        h.add(static_cast<uint8_t>(d.dtype));
        h.add(static_cast<uint8_t>(d.space));
      }
    }
  }
  return h.h;
}

std::string to_string(const KernelSpec& spec) {
  std::ostringstream os;
  os << (spec.kind == SpecKind::Pointwise ? "pointwise" : "row") << " kernel " << spec.name
     << " (" << spec.parts.size() << " part" << (spec.parts.size() == 1 ? "" : "s") << ")\n";
  for (size_t pi = 0; pi < spec.parts.size(); ++pi) {
    const KernelPart& p = spec.parts[pi];
    if (spec.parts.size() > 1) os << " part " << pi << ":\n";
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& in = p.instrs[i];
      os << "  ";
      if (in.has_value()) os << "%" << i << " = ";
      os << instr_kind_name(in.kind);
      if (in.kind == InstrKind::Op) os << " " << op_name(in.op);
      if (in.kind == InstrKind::Custom) os << " #" << in.custom_id;
      if (in.kind == InstrKind::Load) os << " in" << in.io;
      if (in.kind == InstrKind::Store) os << " out" << in.io;
      for (int a = 0; a < in.nargs; ++a) os << (a ? ", %" : " %") << in.arg[a];
      if (in.scalar_operand) os << ", " << in.s[0];
      if (in.kind == InstrKind::Const) os << " " << in.s[0];
      if (in.kind == InstrKind::Op && (in.op == OpId::clamp)) os << " [" << in.s[0] << ", " << in.s[1] << "]";
      os << " : " << dtype_name(in.dtype) << " " << space_name(in.space);
      if (in.kind == InstrKind::Op && in.compute != in.dtype) os << " (compute " << dtype_name(in.compute) << ")";
      os << "\n";
    }
  }
  return os.str();
}

void validate(const KernelSpec& spec) {
  LF_ASSERT(!spec.parts.empty(), "kernel spec ", spec.name, " has no parts");
  LF_ASSERT(spec.kind == SpecKind::Pointwise || spec.parts.size() == 1,
            "row kernel spec ", spec.name, " has several parts");
  for (const KernelPart& p : spec.parts) {
    std::vector<bool> loaded(p.inputs.size()), stored(p.outputs.size());
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& in = p.instrs[i];
      for (int a = 0; a < in.nargs; ++a) {
        LF_ASSERT(in.arg[a] >= 0 && static_cast<size_t>(in.arg[a]) < i, "instr ", i, " of ",
                  spec.name, " uses %", in.arg[a]);
        LF_ASSERT(p.instrs[in.arg[a]].has_value(), "instr ", i, " uses a store");
      }
      if (spec.kind == SpecKind::Pointwise) {
        LF_ASSERT(in.kind != InstrKind::ReduceSum && in.kind != InstrKind::ReduceMax &&
                      in.kind != InstrKind::ColCount,
                  "pointwise spec ", spec.name, " has a row instruction");
      }
      if (in.kind == InstrKind::Load) {
        LF_ASSERT(in.io >= 0 && static_cast<size_t>(in.io) < p.inputs.size(), "bad load io");
        loaded[in.io] = true;
        LF_ASSERT(p.inputs[in.io].dtype == in.dtype, "load dtype differs from its input");
      }
      if (in.kind == InstrKind::Store) {
        LF_ASSERT(in.io >= 0 && static_cast<size_t>(in.io) < p.outputs.size(), "bad store io");
        LF_ASSERT(!stored[in.io], "output ", in.io, " of ", spec.name, " stored twice");
        stored[in.io] = true;
        const Instr& v = p.instrs[in.arg[0]];
        LF_ASSERT(is_row_space(v.space) == is_row_space(p.outputs[in.io].space),
                  "store space of output ", in.io, " of ", spec.name);
      }
      if (in.is_reduction()) {
        LF_ASSERT(p.instrs[in.arg[0]].space == Space::Full, "reduction of a row value");
      }
    }
    for (bool s : stored) LF_ASSERT(s, "an output of ", spec.name, " is never stored");
  }
}

// ---- builder ---------------------------------------------------------------------------
Space PartBuilder::result_space(std::span<const int> args) const {
  for (int a : args)
    if (part_.instrs[a].space == Space::Full) return Space::Full;
  return args.empty() ? Space::Full : Space::RowKeep;
}

int PartBuilder::load(DType dtype, Space space) {
  Instr in;
  in.kind = InstrKind::Load;
  in.dtype = dtype;
  in.compute = dtype;
  in.space = space == Space::Full ? Space::Full : Space::RowKeep;
  in.io = static_cast<int>(part_.inputs.size());
  part_.inputs.push_back({dtype, space});
  part_.instrs.push_back(in);
  return static_cast<int>(part_.instrs.size()) - 1;
}

int PartBuilder::op(OpId id, std::span<const int> args, DType result, std::array<double, 2> s,
                    bool scalar_operand) {
  LF_ASSERT(op_info(id).category == OpCategory::Elementwise && id != OpId::custom,
            op_name(id), " is not a table elementwise op");
  Instr in;
  in.kind = InstrKind::Op;
  in.op = id;
  in.nargs = static_cast<int8_t>(args.size());
  DType operand_dtypes[3];
  for (size_t k = 0; k < args.size(); ++k) {
    in.arg[k] = args[k];
    operand_dtypes[k] = part_.instrs[args[k]].dtype;
  }
  in.s = s;
  in.scalar_operand = scalar_operand;
  in.dtype = result;
  in.compute = compute_type(id, std::span<const DType>(operand_dtypes, args.size()), result);
  in.space = result_space(args);
  part_.instrs.push_back(in);
  return static_cast<int>(part_.instrs.size()) - 1;
}

int PartBuilder::custom(uint32_t id, std::span<const int> args, DType result) {
  Instr in;
  in.kind = InstrKind::Custom;
  in.op = OpId::custom;
  in.custom_id = id;
  in.nargs = static_cast<int8_t>(args.size());
  for (size_t k = 0; k < args.size(); ++k) in.arg[k] = args[k];
  in.dtype = result;
  in.compute = custom_compute_type();
  in.space = result_space(args);
  part_.instrs.push_back(in);
  return static_cast<int>(part_.instrs.size()) - 1;
}

int PartBuilder::constant(double v, DType dtype) {
  Instr in;
  in.kind = InstrKind::Const;
  in.s[0] = v;
  in.dtype = dtype;
  in.compute = dtype;
  in.space = Space::RowKeep;
  part_.instrs.push_back(in);
  return static_cast<int>(part_.instrs.size()) - 1;
}

int PartBuilder::col_count() {
  Instr in;
  in.kind = InstrKind::ColCount;
  in.dtype = DType::f32;
  in.compute = DType::f32;
  in.space = Space::RowKeep;
  part_.instrs.push_back(in);
  return static_cast<int>(part_.instrs.size()) - 1;
}

int PartBuilder::reduce_sum(int arg, DType result) {
  Instr in;
  in.kind = InstrKind::ReduceSum;
  in.arg[0] = arg;
  in.nargs = 1;
  in.dtype = result;
  in.compute = DType::f32;
  in.space = Space::RowKeep;
  part_.instrs.push_back(in);
  return static_cast<int>(part_.instrs.size()) - 1;
}

int PartBuilder::reduce_max(int arg, DType result) {
  int i = reduce_sum(arg, result);
  part_.instrs[i].kind = InstrKind::ReduceMax;
  return i;
}

void PartBuilder::store(int value, DType dtype, Space space) {
  Instr in;
  in.kind = InstrKind::Store;
  in.arg[0] = value;
  in.nargs = 1;
  in.dtype = dtype;
  in.space = part_.instrs[value].space;
  in.io = static_cast<int>(part_.outputs.size());
  part_.outputs.push_back({dtype, space});
  part_.instrs.push_back(in);
}

}  // namespace livefuse::jit
