#pragma once
// Segment: the DAG of one hot op sequence, as the planner sees it (DESIGN.md "The walk").
// Nodes are op calls in their original order (a topological order); each input is "output k
// of node j" or "external slot e" -- the wiring of runtime/plan.hpp's PlanInput and of the
// monitor's Candidate. Values are numbered: externals 0..E-1, then every node's outputs in
// order (value_id()).
//
// Shapes are those of one representative occurrence; dims that were seen to vary are marked,
// and nothing in a fused kernel depends on them (they are launch parameters).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/op_call.hpp"

namespace livefuse::monitor {
struct Candidate;
}

namespace livefuse::planner {

struct ValueRef {
  int node = -1;      // >= 0: output `output` of node `node`
  int output = 0;
  int external = -1;  // >= 0: external slot
  bool is_external() const { return external >= 0; }
  bool operator==(const ValueRef&) const = default;
  static ValueRef ext(int e) { return ValueRef{-1, 0, e}; }
  static ValueRef of(int node, int output = 0) { return ValueRef{node, output, -1}; }
};

struct SegmentNode {
  OpId op = OpId::kCount;
  Attrs attrs;                      // normalised (infer_outputs)
  std::vector<ValueRef> inputs;
  std::vector<OutputInfo> outputs;  // representative shapes, dtypes
  std::shared_ptr<const std::vector<OutputSpec>> out_specs;  // opaque ops
};

struct ExternalInfo {
  Shape shape;
  DType dtype = DType::f32;
  Strides strides;  // representative layout (contiguous unless the caller knew better)
};

struct Segment {
  std::vector<ExternalInfo> externals;
  std::vector<SegmentNode> nodes;
  // Values that must hold their eager contents after the segment (observable by the user).
  std::vector<ValueRef> outputs;
  // Per value id: which dims varied between occurrences (empty: none known).
  std::vector<std::vector<bool>> varying;
  // From a candidate: each value before the last node that some occurrence saw held or read
  // after the sequence, how often, and whether it became an output (the report shows it: a
  // plan made with a value written out can lose its best fusion).
  std::string escapes;

  int num_values() const;
  int value_id(const ValueRef& r) const;
  ValueRef value_ref(int id) const;
  const Shape& shape(const ValueRef& r) const;
  DType dtype(const ValueRef& r) const;
  bool is_output(const ValueRef& r) const;
  // Node `j` as an op call whose inputs are taken from `values` (one tensor per value id; the
  // node's inputs must be bound).
  OpCall call_of(int j, std::span<const Tensor> values) const;
  // Consumers of every value: (node, input index).
  std::vector<std::vector<std::pair<int, int>>> users() const;
  std::string str() const;  // one node a line
};

// Builds segments directly (tests, benchmarks, and the adapters below). Every node is
// validated and its attrs normalised by the runtime's own infer_outputs.
class SegmentBuilder {
 public:
  ValueRef input(const Shape& shape, DType dtype = DType::f32);
  ValueRef input_strided(const Shape& shape, const Strides& strides, DType dtype = DType::f32);
  // Appends a node; returns its output 0.
  ValueRef add(OpId op, std::vector<ValueRef> inputs, Attrs attrs = {});
  ValueRef scalar_op(OpId op, ValueRef a, double s);  // add(x, 2.0) and friends
  ValueRef opaque(uint32_t kernel_id, std::vector<ValueRef> inputs, std::vector<OutputSpec> outs);
  void output(ValueRef v);
  Segment build() const { return seg_; }
  const Segment& segment() const { return seg_; }

 private:
  Segment seg_;
};

// A segment from real calls (runtime side): `calls[j]`'s inputs are matched to earlier
// outputs by identity; anything else becomes an external slot (the same value, the same slot).
// `live` lists the values that must be written.
Segment segment_from_calls(const std::vector<OpCall>& calls, const std::vector<TensorList>& outputs,
                           const std::vector<ValueRef>& live);

// A segment from a monitor candidate: representative attrs, wiring, the most frequent shape
// tuple, and liveness (must_materialize values become outputs).
Segment from_candidate(const monitor::Candidate& c);

// A pending tensor of the given layout, for shape inference: no storage, and its `pending`
// tag is shape_only_tag() (no matcher window has that address, so no flush ever waits on it).
Tensor shape_only_tensor(const Shape& shape, DType dtype, const Strides& strides = {}, Device device = Device::cpu());
void* shape_only_tag();

}  // namespace livefuse::planner
