// livefuse-bert: run (and time) a BERT encoder from Hugging Face weights or a random seed.
// Exit status: 0 done, 2 bad command line, 1 anything else (bad file, bad input, runtime error).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "examples/bert/bert.hpp"
#include "livefuse/inspect.hpp"
#include "examples/bert/npy.hpp"
#include "examples/bert/run.hpp"
#include "tools/bert/bert_args.hpp"
#include "tools/profiler_range.hpp"

namespace lfb = livefuse::bert;
using nlohmann::json;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// An integer .npy of shape [batch, seq] as i64 values, checked against the expected shape.
std::vector<int64_t> read_int_matrix(const std::string& path, const char* flag,
                                     std::vector<int64_t>& shape) {
  const livefuse::npy::Array a = livefuse::npy::read(path);
  LF_CHECK(a.kind == 'i' || a.kind == 'u' || a.kind == 'b', "livefuse-bert", flag, " ", path,
           ": dtype ", a.descr(), " is not an integer type (int32/int64 expected)");
  LF_CHECK(a.shape.size() == 2, "livefuse-bert", flag, " ", path,
           ": expected rank 2 [batch, seq], got rank ", a.shape.size());
  LF_CHECK(a.shape[0] > 0 && a.shape[1] > 0, "livefuse-bert", flag, " ", path, ": empty array");
  shape = a.shape;
  return a.to_int64s();
}

json config_json(const lfb::BertConfig& c) { return json::parse(c.to_json()); }

json timing_json(const lfb::Timing& t) {
  return {{"iters", t.iter_ms.size()},
          {"warmup_iters", t.warmup_ms.size()},
          {"mean_ms", t.mean_ms},
          {"median_ms", t.median_ms},
          {"min_ms", t.min_ms},
          {"p90_ms", t.p90_ms},
          {"first_ms", t.first_ms},
          {"iters_to_steady", t.iters_to_steady},
          {"time_to_steady_ms", t.time_to_steady_ms},
          {"iter_ms", t.iter_ms},
          {"warmup_ms", t.warmup_ms}};
}

int run(const lfb::BertArgs& args) {
  using namespace livefuse;
  const Device device = args.device.empty() ? default_device() : parse_device(args.device);
  LF_CHECK(!device.is_cuda() || cuda_available(), "livefuse-bert", "--device ", args.device,
           ": no usable CUDA device (CPU-only build, or no GPU)");
  const DType dtype = parse_dtype(args.dtype);
  // Fail before minutes of loading and timing, not after, when an output cannot be written.
  for (const std::string& path : {args.out, args.json}) {
    if (path.empty()) continue;
    std::ofstream probe(path, std::ios::app);
    LF_CHECK(probe.good(), "livefuse-bert", path, ": cannot open for writing");
  }

  // Model.
  const auto t_load = std::chrono::steady_clock::now();
  const lfb::BertConfig cfg = args.random_seed ? lfb::BertConfig::preset(args.preset)
                                               : lfb::BertConfig::from_json_file(args.config);
  lfb::BertModel model =
      args.random_seed ? lfb::BertModel::random(cfg, *args.random_seed, dtype, device)
                       : lfb::BertModel::from_safetensors(cfg, args.weights, dtype, device);
  if (args.weights_memory != "owned") model.wrap_parameters(args.weights_memory == "wrapped-immutable");
  synchronize(device);
  const double load_ms = ms_since(t_load);

  // Inputs.
  int64_t batch = args.batch.value_or(1), seq = args.seq.value_or(128);
  Tensor ids, mask;
  if (!args.ids.empty()) {
    std::vector<int64_t> shape;
    const std::vector<int64_t> v = read_int_matrix(args.ids, "--ids", shape);
    LF_CHECK(!args.batch || *args.batch == shape[0], "livefuse-bert", "--batch ", *args.batch,
             " disagrees with --ids ", args.ids, " of batch ", shape[0]);
    LF_CHECK(!args.seq || *args.seq == shape[1], "livefuse-bert", "--seq ", *args.seq,
             " disagrees with --ids ", args.ids, " of sequence length ", shape[1]);
    batch = shape[0];
    seq = shape[1];
    for (size_t i = 0; i < v.size(); ++i)
      LF_CHECK(v[i] >= 0 && v[i] < cfg.vocab_size, "livefuse-bert", "--ids ", args.ids,
               ": token id ", v[i], " at flat index ", i, " is outside [0, vocab_size ",
               cfg.vocab_size, ")");
    ids = from_int64s(v, {batch, seq}, DType::i64, device);
  }
  LF_CHECK(seq <= cfg.max_position_embeddings, "livefuse-bert", "sequence length ", seq,
           " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings);
  if (!ids.defined())
    ids = lfb::random_input_ids(batch, seq, cfg.vocab_size, args.input_seed, device);
  if (!args.mask.empty()) {
    std::vector<int64_t> shape;
    const std::vector<int64_t> v = read_int_matrix(args.mask, "--mask", shape);
    LF_CHECK(shape[0] == batch && shape[1] == seq, "livefuse-bert", "--mask ", args.mask,
             " has shape [", shape[0], ", ", shape[1], "], expected [", batch, ", ", seq, "]");
    for (size_t i = 0; i < v.size(); ++i)
      LF_CHECK(v[i] == 0 || v[i] == 1, "livefuse-bert", "--mask ", args.mask, ": value ", v[i],
               " at flat index ", i, " is not 0 or 1");
    mask = from_int64s(v, {batch, seq}, DType::i64, device);
  }

  // First (cold, eager) forward.
  const auto t_first = std::chrono::steady_clock::now();
  std::vector<float> first = model.forward(ids, mask).to_floats();
  const double first_ms = ms_since(t_first);

  json report = {{"tool", "livefuse-bert"},
                 {"version", LIVEFUSE_VERSION},
                 {"mode", std::string(mode_name(config().mode))},
                 {"config", config_json(cfg)},
                 {"weights", args.random_seed ? json(nullptr) : json(args.weights)},
                 {"random_seed", args.random_seed ? json(*args.random_seed) : json(nullptr)},
                 {"preset", args.random_seed ? json(args.preset) : json(nullptr)},
                 {"dtype", args.dtype},
                 {"weights_memory", args.weights_memory},
                 {"device", device.str()},
                 {"batch", batch},
                 {"seq", seq},
                 {"masked", mask.defined()},
                 {"parameters", model.num_parameters()},
                 {"load_ms", load_ms},
                 {"first_forward_ms", first_ms}};

  std::vector<float> last = first;
  if (args.iters > 0) {
    lfb::TimingOptions topt;
    topt.iters = args.iters;
    topt.warmup = args.warmup;
    topt.warmup_ms = args.warmup_ms;
    topt.max_warmup_ms = std::max(args.max_warmup_ms, args.warmup_ms);
    const lfb::Timing t = lfb::time_forward(model, ids, mask, topt);
    report["timing"] = timing_json(t);
    // The output after timing comes from the steady (fused) state: compare it with the
    // first, eager one so a fused-vs-eager difference shows up in every benchmark run.
    if (args.profile_final) livefuse::tools::profiler_range(true);
    last = model.forward(ids, mask).to_floats();
    if (args.profile_final) livefuse::tools::profiler_range(false);
    double max_abs = 0;
    for (size_t i = 0; i < last.size(); ++i)
      max_abs = std::max(max_abs, static_cast<double>(std::abs(last[i] - first[i])));
    report["first_vs_steady_max_abs"] = max_abs;
    if (!args.quiet) {
      std::cout << std::fixed << std::setprecision(4) << "steady state: median " << t.median_ms
                << " ms, mean " << t.mean_ms << " ms, min " << t.min_ms << " ms, p90 " << t.p90_ms
                << " ms over " << t.iter_ms.size() << " iterations (after " << t.warmup_ms.size()
                << " warm-up; steady after ~" << t.iters_to_steady << " iterations / "
                << t.time_to_steady_ms << " ms); first-vs-steady max |diff| " << max_abs << "\n";
    }
  }
  bool finite = true;
  for (float v : last) finite = finite && std::isfinite(v);
  report["output_finite"] = finite;
  {
    const Snapshot snap = inspect();
    for (const char* c : {"calls", "served", "snapshots", "snapshot_bytes"})
      report["matcher"][c] = snap.counter("matcher", c).value_or(0);
  }

  if (!args.out.empty()) {
    npy::write_f32(args.out, last, {batch, seq, cfg.hidden_size});
    report["out"] = args.out;
  }
  if (!args.json.empty()) {
    std::ofstream f(args.json, std::ios::trunc);
    LF_CHECK(f.good(), "livefuse-bert", "--json ", args.json, ": cannot open for writing");
    f << report.dump(2) << "\n";
    LF_CHECK(f.good(), "livefuse-bert", "--json ", args.json, ": write failed");
  }
  if (!args.quiet) {
    std::cout << std::fixed << std::setprecision(2) << "bert (" << cfg.num_hidden_layers
              << " layers, hidden " << cfg.hidden_size << ", " << model.num_parameters()
              << " parameters) " << args.dtype << " on " << device.str() << ", mode "
              << mode_name(config().mode) << ": batch " << batch << ", seq " << seq << "; load "
              << load_ms << " ms, first forward " << first_ms << " ms"
              << (finite ? "" : "; WARNING: non-finite values in the output") << "\n";
  }
  return finite ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const lfb::BertArgs args = lfb::parse_bert_args({argv + 1, argv + argc});
    if (args.help) {
      std::cout << lfb::bert_usage();
      return 0;
    }
    return run(args);
  } catch (const lfb::UsageError& e) {
    std::cerr << "livefuse-bert: " << e.what() << "\n(see livefuse-bert --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "livefuse-bert: error: " << e.what() << "\n";
    return 1;
  }
}
