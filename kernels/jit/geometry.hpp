#pragma once
// Binding a KernelSpec part to concrete tensors: every input is broadcast into the part's
// iteration space and described by strides; dims that all operands walk contiguously are
// merged. Shapes are only known here, at launch, which is what lets one compiled kernel serve
// every shape a segment is seen with (varying dims are kernel parameters, never constants).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/jit/kernel_spec.hpp"
#include "livefuse/shape.hpp"

namespace livefuse::jit {

// A tensor as a kernel sees it. `data` points at element 0 (the view's offset applied).
struct TensorArg {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Strides strides;  // in elements
};

// The concrete operands of one part. `shape` is the iteration shape F (for row parts the
// reduced input's shape: R x [cols]).
struct PartBinding {
  Shape shape;
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
};

struct IoGeometry {
  void* data = nullptr;
  Strides strides;      // over PartGeometry::shape (pointwise: all dims; row: leading dims)
  int64_t col_stride = 0;  // row parts: stride along the columns (0 for row-space io)
};

struct PartGeometry {
  SpecKind kind = SpecKind::Pointwise;
  Shape shape;        // coalesced: pointwise all dims, row the leading (row) dims
  int64_t numel = 0;  // pointwise: elements; row: rows
  int64_t cols = 1;   // row parts only
  std::vector<IoGeometry> inputs, outputs;
  bool dense = false;   // pointwise: every io walks memory exactly in iteration order
  bool fits_i32 = true; // every index and offset fits in int32
};

// Throws livefuse::Error when an operand cannot broadcast into the iteration space.
PartGeometry make_geometry(const KernelPart& part, SpecKind kind, const PartBinding& b);

}  // namespace livefuse::jit
