#pragma once
// Random valid op programs for the differential tests: straight-line code over a few inputs,
// mixing elementwise ops (with broadcasts and scalars), reductions, norms, softmax, matmul,
// linear, views and a custom op -- the kinds of code livefuse must serve unchanged.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "livefuse/detail/op_table.hpp"
#include "livefuse/livefuse.hpp"

namespace lftest {

class RandomProgram {
 public:
  RandomProgram(uint64_t seed, livefuse::Device dev, livefuse::DType dtype);
  // Runs the program on its inputs; returns the values a user keeps (the result and a few
  // intermediates, which must then be written out by any plan).
  std::vector<livefuse::Tensor> run() const;
  // Fresh inputs of the same shapes (to check plans do not bake values in).
  void reseed_inputs(uint64_t seed);
  // The inputs as a program reaches them: each input's address from data_ptr() (which exposes
  // it) and its byte count; the program may then write them between calls.
  std::vector<std::pair<void*, size_t>> reach_inputs() const;
  std::string describe() const { return text_; }
  size_t ops_per_run() const { return n_calls_; }

 private:
  enum Kind {
    Unary,
    Binary,
    Scalar,
    Reduce,
    Softmax,
    LayerNorm,
    RmsNorm,
    Linear,
    Matmul,
    Transpose2,
    Reshape2,
    Custom,
    Where,
    Rotate,     // columns rotated: concat of two slices (an empty one when the cut is at an end)
    CastRound,  // through another float dtype and back: its rounding, exactly
    Expand,     // times a column broadcast by expand (a stride-0 view)
    Clamp
  };
  struct Step {
    Kind kind;
    livefuse::OpId op = livefuse::OpId::kCount;
    int a = 0, b = 0, c = 0;  // operand value indices
    double s = 0;
  };
  livefuse::Device dev_;
  livefuse::DType dtype_;
  int64_t rows_, cols_;
  std::vector<livefuse::Tensor>
      inputs_;                 // X [R,C], Y [R,C], v [C], W [C,C], bias [C], gamma [C], col [R,1]
  std::vector<int> shape_of_;  // per value: 0 = [R,C], 1 = [C], 2 = [R,1]
  std::vector<Step> steps_;
  std::vector<int> kept_;
  std::string text_;
  size_t n_calls_ = 0;
  livefuse::CustomOp soft_clip_;
};

}  // namespace lftest
