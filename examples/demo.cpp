// livefuse-demo: a small transformer encoder (a few blocks) run in a loop, as eager code.
// Prints latency per iteration and a summary line. With fusion on, the latency falls as the
// runtime finds the repeating layer, plans it and starts serving it from plans.
// --model bert runs the BERT encoder of examples/bert instead (tiny on the CPU, base on a GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "examples/bert/run.hpp"
#include "examples/demo_decisions.hpp"
#include "examples/demo_decoder.hpp"
#include "examples/demo_gpt.hpp"
#include "examples/demo_stats.hpp"
#include "examples/encoder_block.hpp"
#include "livefuse/inspect.hpp"

namespace {
void usage() {
  std::puts(
      "usage: livefuse-demo [--model encoder|bert|decoder|gpt] [--iters N] [--device cpu|cuda] [--layers N]\n"
      "                     [--seq N] [--batch N] [--dtype f32|f16|bf16] [--cache concat|static]\n"
      "                     [--report PATH] [--quiet]\n"
      "  --report PATH: write the runtime's report (every plan, its kernels, timings, history)\n"
      "  at the end, for livefuse-inspect\n"
      "  --model bert: BERT with random weights (tiny on the CPU, base on a GPU), timed to its\n"
      "  steady state; --layers does not apply\n"
      "  --model decoder: GPT-style layers decoding token by token over a KV cache grown by concat;\n"
      "  --seq is the tokens a sequence (default 64), --iters the sequences (default 8), --batch 1\n"
      "  --model gpt: GPT-2 (examples/decoder; tiny on the CPU, GPT-2 small on a GPU) generating\n"
      "  --seq new tokens (default 64) --iters times (default 8), tokens/s as plans come in; its KV\n"
      "  cache grown by concat, or with --cache static preallocated and written in place");
}
// Writes the report when asked, then says what was decided: the demo's last lines.
int finish(const std::string& report) {
  if (!report.empty()) lf::write_report(report, /*final=*/true);
  for (const std::string& line : demo::decision_lines(report)) std::printf("%s\n", line.c_str());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  int iters = -1, layers = 4;
  int64_t seq = -1, batch = 2;
  std::string device_arg, dtype_arg, model = "encoder", cache = "concat";
  bool quiet = false, batch_given = false;
  std::string report;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw lf::Error("[demo] " + a + " needs a value");
        return argv[++i];
      };
      auto next_int = [&]() {
        const std::string v = next();
        size_t pos = 0;
        int r = 0;
        try {
          r = std::stoi(v, &pos);
        } catch (...) {
          pos = 0;
        }
        if (pos != v.size() || r <= 0)
          throw lf::Error("[demo] " + a + " expects a positive integer, got '" + v + "'");
        return r;
      };
      if (a == "--model") {
        model = next();
        if (model != "encoder" && model != "bert" && model != "decoder" && model != "gpt")
          throw lf::Error("[demo] --model expects encoder, bert, decoder or gpt, got '" + model + "'");
      } else if (a == "--cache") {
        cache = next();
        if (cache != "concat" && cache != "static")
          throw lf::Error("[demo] --cache expects concat or static, got '" + cache + "'");
      } else if (a == "--iters")
        iters = next_int();
      else if (a == "--layers")
        layers = next_int();
      else if (a == "--seq")
        seq = next_int();
      else if (a == "--batch")
        batch = next_int(), batch_given = true;
      else if (a == "--device")
        device_arg = next();
      else if (a == "--dtype")
        dtype_arg = next();
      else if (a == "--report")
        report = next();
      else if (a == "--quiet")
        quiet = true;
      else if (a == "--help" || a == "-h")
        return usage(), 0;
      else
        throw lf::Error("[demo] unknown argument '" + a + "'");
    }
    const lf::Device dev = device_arg.empty() ? lf::default_device() : lf::parse_device(device_arg);
    if (dev.is_cuda() && !lf::cuda_available())
      throw lf::Error("[demo] --device cuda but no GPU is available");
    const lf::DType dt = dtype_arg.empty() ? (dev.is_cuda() ? lf::DType::f16 : lf::DType::f32)
                                           : lf::parse_dtype(dtype_arg);
    if (model == "bert") {
      lf::bert::DemoOptions o;
      o.device = dev;
      o.dtype = dt;
      o.batch = batch;
      o.seq = seq > 0 ? seq : (dev.is_cuda() ? 128 : 32);
      o.iters = iters > 0 ? iters : (dev.is_cuda() ? 200 : 20);
      // Long enough on a GPU for the layer plan to be compiled, sampled and serving.
      o.warmup_ms = dev.is_cuda() ? 3000 : 500;
      std::printf("livefuse-demo: BERT, mode %s\n",
                  std::string(lf::mode_name(lf::config().mode)).c_str());
      std::fflush(stdout);
      const lf::bert::DemoResult r = lf::bert::run_bert_demo(o, &std::cout);
      std::printf("summary: first=%.3f ms steady_median=%.3f ms mean_abs=%.6f %s\n",
                  r.timing.first_ms, r.timing.median_ms, r.mean_abs,
                  demo::summary_fields().c_str());
      return finish(report);
    }
    if (model == "gpt") {
      demo::GptOptions o;
      o.device = dev;
      o.dtype = dt;
      o.tokens = seq > 0 ? seq : 64;
      o.sequences = iters > 0 ? iters : 8;
      o.static_cache = cache == "static";
      o.quiet = quiet;
      const demo::GptResult r = demo::run_gpt_demo(o);
      std::printf("summary: first=%.3f ms/token steady_median=%.3f ms/token tokens_per_s=%.1f last_token=%lld %s\n",
                  r.first_ms, r.steady_ms, r.tokens_per_s, (long long)r.last_token,
                  demo::summary_fields().c_str());
      return finish(report);
    }
    if (model == "decoder") {
      demo::DecoderOptions o;
      o.device = dev;
      o.dtype = dt;
      o.layers = layers;
      o.batch = batch_given ? batch : 1;
      o.tokens = seq > 0 ? seq : 64;
      o.sequences = iters > 0 ? iters : 8;
      o.quiet = quiet;
      const demo::DecoderResult r = demo::run_decoder_demo(o);
      std::printf(
          "summary: first=%.3f ms/token steady_median=%.3f ms/token steady_p10=%.3f ms/token "
          "checksum=%.6f %s\n",
          r.first_ms, r.steady_ms, r.steady_p10_ms, r.checksum, demo::summary_fields().c_str());
      return finish(report);
    }
    const int64_t hidden = dev.is_cuda() ? 768 : 256, heads = dev.is_cuda() ? 12 : 4,
                  ffn = 4 * hidden;
    if (seq < 0) seq = 64;
    if (dev.is_cuda()) seq = std::max<int64_t>(seq, 128);
    // A few seconds of work: long enough on the GPU for plans to be compiled and take over.
    if (iters < 0) iters = dev.is_cuda() ? 5000 : 60;

    std::vector<demo::EncoderBlock> blocks;
    for (int l = 0; l < layers; ++l)
      blocks.emplace_back(hidden, heads, ffn, dt, dev, 1000 + 100 * l);
    const lf::Tensor x = lf::rand_uniform({batch, seq, hidden}, 7, -1, 1, dt, dev);
    std::printf(
        "livefuse-demo: %d-layer encoder, hidden %lld, heads %lld, batch %lld, seq %lld, %s on %s, "
        "mode %s\n",
        layers, (long long)hidden, (long long)heads, (long long)batch, (long long)seq,
        std::string(lf::dtype_name(dt)).c_str(), dev.str().c_str(),
        std::string(lf::mode_name(lf::config().mode)).c_str());

    std::vector<double> ms;
    float checksum = 0;
    for (int it = 0; it < iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      lf::Tensor h = x;
      for (const auto& b : blocks) h = b(h, lf::Tensor());
      lf::synchronize(dev);
      const double dt_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ms.push_back(dt_ms);
      if (it == iters - 1) checksum = h.to_floats()[0];
      if (!quiet && (it < 10 || it % std::max(1, iters / 20) == 0 || it == iters - 1))
        std::printf("iter %4d  %8.3f ms  %s\n", it, dt_ms, demo::progress_note().c_str());
    }
    std::vector<double> tail(
        ms.end() - std::min<size_t>(ms.size(), std::max<size_t>(1, ms.size() / 4)), ms.end());
    std::sort(tail.begin(), tail.end());
    std::vector<double> head(ms.begin(), ms.begin() + std::min<size_t>(ms.size(), 3));
    std::sort(head.begin(), head.end());
    // p10 next to the median: on a machine shared with other work the fast runs are the ones
    // that were not preempted, so it moves less with the load.
    std::printf("summary: first=%.3f ms steady_median=%.3f ms steady_p10=%.3f ms checksum=%.6f %s\n",
                head[head.size() / 2], tail[tail.size() / 2], tail[tail.size() / 10], checksum,
                demo::summary_fields().c_str());
    return finish(report);
  } catch (const lf::Error& e) {
    std::fprintf(stderr, "livefuse-demo: %s\n", e.what());
    return 2;
  }
}
