#pragma once
// The decode-step lab's host reference (tools/gpu/lab/decode_step.cu): one decode step in double
// precision, rounding to the 16-bit dtype where the GPU stores 16-bit values, so that the
// launches form's tokens and logits can be checked against it. Standalone (nvcc alone).
#include <algorithm>
#include <cmath>
#include <vector>

#include "decode_step_arch.cuh"

namespace step {
struct HostLayer {
  std::vector<float> n1_g, n1_b, w_qkv, b_qkv, w_o, b_o, n2_g, n2_b, w_1, b_1, w_2, b_2, k, v;
};
struct HostNet {
  std::vector<HostLayer> l;
  std::vector<float> nf_g, nf_b, wte, wpe;
};

template <class A>
void norm(const std::vector<float>& x, const std::vector<float>& g, const std::vector<float>& b,
          std::vector<double>& out) {
  const size_t k = x.size();
  double mean = 0, var = 0;
  if (A::norm == lab::Norm::layer) {
    for (float v : x) mean += v;
    mean /= k;
  }
  for (float v : x) var += (v - mean) * (v - mean);
  const double rstd = 1.0 / std::sqrt(var / k + A::eps);
  out.resize(k);
  for (size_t i = 0; i < k; ++i) out[i] = (x[i] - mean) * rstd * g[i] + (b.empty() ? 0.0 : b[i]);
}
double dot_row(const std::vector<float>& w, size_t row, const std::vector<double>& x) {
  const float* r = w.data() + row * x.size();
  double a = 0;
  for (size_t i = 0; i < x.size(); ++i) a += r[i] * x[i];
  return a;
}
double bias_at(const std::vector<float>& b, int r) { return b.empty() ? 0.0 : b[r]; }
// Rotate-half of a head's 64 values at position pos, as lab::rope gives cos / sin.
template <class A>
void rotate(float* h, int pos) {
  float out[kHD];
  for (int e = 0; e < kHD; ++e) {
    const double inv = std::pow(double(A::theta), -2.0 * (e % (kHD / 2)) / kHD);
    const double ang = pos * inv, c = std::cos(ang), s = std::sin(ang);
    out[e] = lab::round_to<typename A::T>(e < kHD / 2 ? h[e] * c - h[e + kHD / 2] * s
                                                      : h[e] * c + h[e - kHD / 2] * s);
  }
  std::copy(out, out + kHD, h);
}

// One decode step on the host; the caches grow in `net`. Returns the argmax; logits out.
template <class A>
int reference_step(HostNet& net, int tok, int pos, std::vector<float>& logits) {
  using T = typename A::T;
  auto rnd = [](double v) { return lab::round_to<T>(v); };
  constexpr int G = A::HQ / A::HKV;
  std::vector<float> x(A::D), xm(A::D), attn(A::D), f(A::F), q(A::HQ * kHD);
  for (int i = 0; i < A::D; ++i)
    x[i] = rnd(double(net.wte[size_t(tok) * A::D + i]) +
               (A::positions ? net.wpe[size_t(pos) * A::D + i] : 0.f));
  std::vector<double> xn, xd;
  for (int l = 0; l < A::LAYERS; ++l) {
    HostLayer& w = net.l[l];
    norm<A>(x, w.n1_g, w.n1_b, xn);
    constexpr int nq = A::HQ * kHD, nkv = A::HKV * kHD;
    for (int r = 0; r < kQkvRows<A>; ++r) {
      const float y = rnd(dot_row(w.w_qkv, r, xn) + bias_at(w.b_qkv, r));
      if (r < nq) {
        q[r] = y;
      } else {
        const int j = (r - nq) % nkv, h = j / kHD, e = j % kHD;
        (r < nq + nkv ? w.k : w.v)[(size_t(h) * LMAX + pos) * kHD + e] = y;
      }
    }
    if (A::rotary) {
      for (int h = 0; h < A::HQ; ++h) rotate<A>(q.data() + h * kHD, pos);
      for (int h = 0; h < A::HKV; ++h) rotate<A>(w.k.data() + (size_t(h) * LMAX + pos) * kHD, pos);
    }
    const int keys = pos + 1;
    for (int h = 0; h < A::HQ; ++h) {
      const int kvh = h / G;
      std::vector<double> sc(keys);
      double mx = -INFINITY;
      for (int j = 0; j < keys; ++j) {
        double a = 0;
        for (int e = 0; e < kHD; ++e)
          a += double(q[h * kHD + e]) * w.k[(size_t(kvh) * LMAX + j) * kHD + e];
        sc[j] = a * 0.125;
        mx = std::max(mx, sc[j]);
      }
      double den = 0;
      for (double& v : sc) den += (v = std::exp(v - mx));
      for (int e = 0; e < kHD; ++e) {
        double o = 0;
        for (int j = 0; j < keys; ++j) o += sc[j] * w.v[(size_t(kvh) * LMAX + j) * kHD + e];
        attn[h * kHD + e] = rnd(o / den);
      }
    }
    xd.assign(attn.begin(), attn.end());
    for (int r = 0; r < A::D; ++r) xm[r] = rnd(x[r] + (dot_row(w.w_o, r, xd) + bias_at(w.b_o, r)));
    norm<A>(xm, w.n2_g, w.n2_b, xn);
    for (int r = 0; r < A::F; ++r) {
      if (A::gated) {
        const double g = rnd(dot_row(w.w_1, r, xn)), u = rnd(dot_row(w.w_1, r + A::F, xn));
        f[r] = rnd(rnd(g / (1 + std::exp(-g))) * u);
      } else {
        const double a = dot_row(w.w_1, r, xn) + bias_at(w.b_1, r);
        f[r] = rnd(0.5 * a * (1 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a))));
      }
    }
    xd.assign(f.begin(), f.end());
    for (int r = 0; r < A::D; ++r) x[r] = rnd(xm[r] + (dot_row(w.w_2, r, xd) + bias_at(w.b_2, r)));
  }
  norm<A>(x, net.nf_g, net.nf_b, xn);
  logits.resize(A::V);
  int best = 0;
  for (int r = 0; r < A::V; ++r) {
    logits[r] = static_cast<float>(dot_row(net.wte, r, xn));
    if (logits[r] > logits[best]) best = r;
  }
  return best;
}

}  // namespace step
