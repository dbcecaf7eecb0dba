#pragma once
// Wrapping a user's code.
//  * register_elementwise: a scalar function given twice, as CUDA source (for eager CUDA and
//    for fusion, compiled with NVRTC) and as a host function (for the CPU). It is then used
//    like a built-in and fuses like one.
//  * wrap_kernel: an opaque launch of the user's own kernel. livefuse never looks inside, and
//    runs it at its call, as eager execution does: never deferred, never in a plan or a CUDA
//    graph, so an error its launch raises comes out of that call and its launch function runs
//    once per call. Plans form before and after it.
#include <functional>
#include <string>
#include <vector>

#include "livefuse/tensor.hpp"

namespace livefuse {

// Host version of a custom elementwise op: compute-type (float) operands a, b, c; unused
// operands are 0.
using CpuScalarFn = float (*)(float a, float b, float c);

class CustomOp {
 public:
  CustomOp() = default;
  // Applies the op: inputs broadcast like a built-in binary op and share one float dtype.
  Tensor operator()(const Tensor& a) const;
  Tensor operator()(const Tensor& a, const Tensor& b) const;
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) const;
  uint32_t id() const { return id_; }

 private:
  explicit CustomOp(uint32_t id) : id_(id) {}
  uint32_t id_ = 0;
  friend CustomOp register_elementwise(const std::string&, int, const std::string&, CpuScalarFn);
};

// cuda_expr: a C expression over float operands a, b, c (may use lf_math.cuh helpers such as
// lf_exp, lf_tanh). Registering the same name twice with the same definition returns the same
// op; with a different definition it is an Error.
CustomOp register_elementwise(const std::string& name, int arity, const std::string& cuda_expr,
                              CpuScalarFn cpu_fn);

struct OutputSpec {
  Shape shape;
  DType dtype = DType::f32;
};

struct KernelArgs {
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<Shape> input_shapes;
  std::vector<Shape> output_shapes;
};

// launch(args, stream): enqueue the user's work on `stream` (a cudaStream_t, or nullptr on
// the CPU, where it runs synchronously). Must not synchronise: it may be captured in a graph.
using LaunchFn = std::function<void(const KernelArgs& args, void* stream)>;

class OpaqueKernel {
 public:
  OpaqueKernel() = default;
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs,
                                 const std::vector<OutputSpec>& outputs) const;
  uint32_t id() const { return id_; }

 private:
  explicit OpaqueKernel(uint32_t id) : id_(id) {}
  uint32_t id_ = 0;
  friend OpaqueKernel wrap_kernel(const std::string&, LaunchFn, bool);
};

// `capturable` is accepted for source compatibility; every wrapped kernel runs at its call
// (above), so none goes into a CUDA graph.
OpaqueKernel wrap_kernel(const std::string& name, LaunchFn launch, bool capturable = true);

}  // namespace livefuse
