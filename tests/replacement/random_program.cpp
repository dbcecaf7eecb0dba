#include "random_program.hpp"

namespace lf = livefuse;

namespace lftest {

namespace {
float soft_clip_cpu(float a, float, float) { return a / (1.0f + std::fabs(a)); }
const lf::OpId kUnary[] = {lf::OpId::neg,  lf::OpId::abs,  lf::OpId::tanh,      lf::OpId::sigmoid,
                           lf::OpId::relu, lf::OpId::gelu, lf::OpId::gelu_tanh, lf::OpId::silu,
                           lf::OpId::erf,  lf::OpId::exp};
const lf::OpId kBinary[] = {lf::OpId::add, lf::OpId::sub, lf::OpId::mul, lf::OpId::maximum,
                            lf::OpId::minimum};
}  // namespace

RandomProgram::RandomProgram(uint64_t seed, lf::Device dev, lf::DType dtype)
    : dev_(dev), dtype_(dtype) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const int64_t rows_choices[] = {1, 3, 7, 16, 33}, cols_choices[] = {1, 5, 8, 32, 67};
  rows_ = rows_choices[pick(5)];
  cols_ = cols_choices[pick(5)];
  soft_clip_ = lf::register_elementwise("soft_clip", 1, "a / (1.0f + lf_abs(a))", soft_clip_cpu);
  reseed_inputs(seed * 7919 + 1);
  shape_of_ = {0, 0, 1, -1, 1, 1, 2};  // W (index 3) is only used by linear/matmul
  const int n_steps = 3 + pick(10);
  auto value_with = [&](int shape) {
    std::vector<int> c;
    for (int i = 0; i < static_cast<int>(shape_of_.size()); ++i)
      if (shape_of_[i] == shape) c.push_back(i);
    return c[pick(static_cast<int>(c.size()))];
  };
  auto any_value = [&]() {
    int i;
    do i = pick(static_cast<int>(shape_of_.size()));
    while (shape_of_[i] < 0);
    return i;
  };
  auto full = [&]() { return value_with(0); };
  for (int k = 0; k < n_steps; ++k) {
    Step st;
    int out_shape = 0;
    const int r = pick(112);
    if (r < 25) {
      st.kind = Unary, st.op = kUnary[pick(10)], st.a = any_value(), out_shape = shape_of_[st.a];
    } else if (r < 45) {
      st.kind = Binary, st.op = kBinary[pick(5)], st.a = full(), st.b = any_value();
      if (pick(2)) std::swap(st.a, st.b);
      out_shape = 0;
    } else if (r < 55) {
      st.kind = Scalar, st.op = kBinary[pick(5)], st.a = any_value(), st.s = 0.25 + pick(8) * 0.5;
      out_shape = shape_of_[st.a];
    } else if (r < 62) {
      st.kind = Reduce,
      st.op = pick(3) == 0 ? lf::OpId::max : (pick(2) ? lf::OpId::sum : lf::OpId::mean);
      st.a = full(), out_shape = 2;
    } else if (r < 68) {
      st.kind = Softmax, st.a = full(), st.b = pick(2) ? value_with(1) : -1,
      st.s = 0.5 + pick(3) * 0.25;
    } else if (r < 74) {
      st.kind = LayerNorm, st.a = full();
    } else if (r < 78) {
      st.kind = RmsNorm, st.a = full();
    } else if (r < 84) {
      st.kind = Linear, st.a = full();
    } else if (r < 87) {
      st.kind = Matmul, st.a = full();
    } else if (r < 90) {
      st.kind = Transpose2, st.a = full();
    } else if (r < 93) {
      st.kind = Reshape2, st.a = full();
    } else if (r < 97) {
      st.kind = Custom, st.a = any_value(), out_shape = shape_of_[st.a];
    } else if (r < 100) {
      st.kind = Where, st.a = full(), st.b = full(), st.c = any_value();
    } else if (r < 103) {
      st.kind = Rotate, st.a = full(), st.c = pick(static_cast<int>(cols_) + 1);
    } else if (r < 106) {
      st.kind = CastRound, st.a = any_value(), out_shape = shape_of_[st.a], st.c = pick(2);
    } else if (r < 109) {
      st.kind = Expand, st.a = full(), st.b = value_with(2);
    } else {
      st.kind = Clamp, st.a = any_value(), out_shape = shape_of_[st.a], st.s = 0.25 + pick(4) * 0.5;
    }
    steps_.push_back(st);
    shape_of_.push_back(out_shape);
  }
  const int n_values = static_cast<int>(shape_of_.size());
  kept_.push_back(n_values - 1);
  if (pick(3) == 0 && n_values - 2 >= 7)
    kept_.push_back(7 + pick(n_values - 8));  // an escaping intermediate
  text_ = "program seed=" + std::to_string(seed) + " rows=" + std::to_string(rows_) +
          " cols=" + std::to_string(cols_) + " steps=" + std::to_string(steps_.size()) +
          " dtype=" + std::string(lf::dtype_name(dtype_));
}

std::vector<std::pair<void*, size_t>> RandomProgram::reach_inputs() const {
  std::vector<std::pair<void*, size_t>> r;
  for (const lf::Tensor& t : inputs_) r.emplace_back(t.data_ptr(), t.nbytes());
  return r;
}

void RandomProgram::reseed_inputs(uint64_t seed) {
  auto rnd = [&](lf::Shape s, double lo, double hi) {
    return lf::rand_uniform(s, seed++, lo, hi, dtype_, dev_);
  };
  inputs_ = {rnd({rows_, cols_}, -2, 2),     rnd({rows_, cols_}, -2, 2), rnd({cols_}, -1, 1),
             rnd({cols_, cols_}, -0.5, 0.5), rnd({cols_}, -0.5, 0.5),    rnd({cols_}, 0.5, 1.5),
             rnd({rows_, 1}, -1, 1)};
}

std::vector<lf::Tensor> RandomProgram::run() const {
  std::vector<lf::Tensor> v(inputs_.begin(), inputs_.end());
  size_t calls = 0;
  for (const Step& st : steps_) {
    lf::Tensor out;
    switch (st.kind) {
      case Unary:
        out = st.op == lf::OpId::exp ? lf::exp(lf::tanh(v[st.a])) : [&] {
          switch (st.op) {
            case lf::OpId::neg:
              return lf::neg(v[st.a]);
            case lf::OpId::abs:
              return lf::abs(v[st.a]);
            case lf::OpId::tanh:
              return lf::tanh(v[st.a]);
            case lf::OpId::sigmoid:
              return lf::sigmoid(v[st.a]);
            case lf::OpId::relu:
              return lf::relu(v[st.a]);
            case lf::OpId::gelu:
              return lf::gelu(v[st.a]);
            case lf::OpId::gelu_tanh:
              return lf::gelu_tanh(v[st.a]);
            case lf::OpId::silu:
              return lf::silu(v[st.a]);
            default:
              return lf::erf(v[st.a]);
          }
        }();
        break;
      case Binary:
      case Scalar: {
        const bool sc = st.kind == Scalar;
        switch (st.op) {
          case lf::OpId::add:
            out = sc ? lf::add(v[st.a], st.s) : lf::add(v[st.a], v[st.b]);
            break;
          case lf::OpId::sub:
            out = sc ? lf::sub(v[st.a], st.s) : lf::sub(v[st.a], v[st.b]);
            break;
          case lf::OpId::mul:
            out = sc ? lf::mul(v[st.a], st.s) : lf::mul(v[st.a], v[st.b]);
            break;
          case lf::OpId::maximum:
            out = sc ? lf::maximum(v[st.a], st.s) : lf::maximum(v[st.a], v[st.b]);
            break;
          default:
            out = sc ? lf::minimum(v[st.a], st.s) : lf::minimum(v[st.a], v[st.b]);
            break;
        }
        break;
      }
      case Reduce:
        out = st.op == lf::OpId::max ? lf::max(v[st.a], 1, true)
                                     : (st.op == lf::OpId::sum ? lf::sum(v[st.a], 1, true)
                                                               : lf::mean(v[st.a], 1, true));
        break;
      case Softmax:
        out = lf::softmax(v[st.a], st.s, st.b >= 0 ? v[st.b] : lf::Tensor());
        break;
      case LayerNorm:
        out = lf::layer_norm(v[st.a], v[5], v[4], 1e-5);
        break;
      case RmsNorm:
        out = lf::rms_norm(v[st.a], v[5], 1e-6);
        break;
      case Linear:
        out = lf::linear(v[st.a], v[3], v[4]);
        break;
      case Matmul:
        out = lf::matmul(v[st.a], lf::transpose(v[3], 0, 1));
        break;
      case Transpose2:
        out = lf::transpose(lf::mul(lf::transpose(v[st.a], 0, 1), 0.5), 0, 1);
        break;
      case Reshape2:
        out = lf::reshape(lf::add(lf::reshape(v[st.a], {rows_ * cols_}), 1.0), {rows_, cols_});
        break;
      case Custom:
        out = soft_clip_(v[st.a]);
        break;
      case Where:
        out = lf::where(lf::cast(lf::relu(v[st.a]), lf::DType::boolean), v[st.b], v[st.c]);
        break;
      case Rotate:
        out = lf::concat({lf::slice(v[st.a], 1, st.c, cols_), lf::slice(v[st.a], 1, 0, st.c)}, 1);
        break;
      case CastRound: {
        // The other float dtypes, in a fixed order: st.c picks one that is not the program's.
        const lf::DType others[3] = {lf::DType::f32, lf::DType::f16, lf::DType::bf16};
        lf::DType via = dtype_;
        for (int k = 0, seen = 0; k < 3; ++k)
          if (others[k] != dtype_ && seen++ == st.c) via = others[k];
        out = lf::cast(lf::cast(v[st.a], via), dtype_);
        break;
      }
      case Expand:
        out = lf::mul(v[st.a], lf::expand(v[st.b], {rows_, cols_}));
        break;
      case Clamp:
        out = lf::clamp(v[st.a], -st.s, st.s);
        break;
    }
    ++calls;
    v.push_back(out);
  }
  (void)calls;
  std::vector<lf::Tensor> kept;
  for (int k : kept_) kept.push_back(v[k]);
  return kept;
}

}  // namespace lftest
