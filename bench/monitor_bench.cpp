// livefuse-bench-monitor: what watching the op stream costs.
//   trace_record        host time of Monitor::on_call for one op (3 inputs, 1 output; the call
//                       the executor makes per op), queue push included, consumer paused so
//                       every push lands. Target: <= 100 ns per op.
//   trace_release       the same for a released value (on_release).
//   monitor_throughput  events per second through detection (Detector::consume: windows,
//                       program points, cuts, canonical sequences, counts), on one core, for
//                       an encoder-like stream (12 layers x 22 ops, releases, a sync per
//                       forward) and for a random op stream. Target: >= 2 M events/s.
// Every figure is a median over repetitions.
// Usage: livefuse-bench-monitor [--json PATH] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_record.hpp"
#include "livefuse/livefuse.hpp"
#include "monitor/detector.hpp"
#include "monitor/monitor.hpp"
#include "monitor/synthetic_trace.hpp"

namespace {

namespace lf = livefuse;
namespace mon = livefuse::monitor;
using Clock = std::chrono::steady_clock;

using lfbench::median;
using lfbench::Record;
using lfbench::write_json;

// ---- recording ---------------------------------------------------------------------------------

// ns per call of `record` (run on a fresh thread, so its queue has the capacity set here).
template <class F>
double time_recording(int per_batch, int batches, F record) {
  mon::Monitor& m = mon::Monitor::instance();
  mon::MonitorOptions o;
  o.queue_capacity = static_cast<uint32_t>(per_batch + 16);
  m.reset(o);
  std::vector<double> ns;
  std::thread t([&] {
    for (int b = 0; b < batches; ++b) {
      m.pause_for_testing(true);
      const auto t0 = Clock::now();
      for (int k = 0; k < per_batch; ++k) record();
      const double dt = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      ns.push_back(dt / per_batch);
      m.pause_for_testing(false);
      m.drain();
    }
  });
  t.join();
  if (m.counters().drops != 0) std::fprintf(stderr, "warning: drops while timing recording\n");
  return median(ns);
}

void bench_record(std::vector<Record>& out, bool quick) {
  mon::ensure_started();
  mon::Monitor& m = mon::Monitor::instance();
  if (!m.running()) m.start();
  const lf::Tensor x = lf::rand_uniform({8, 64}, 1), w = lf::rand_uniform({64, 64}, 2),
                   b = lf::rand_uniform({64}, 3);
  const lf::Tensor y = lf::rand_uniform({8, 64}, 4);
  lf::OpCall call;
  call.op = lf::OpId::linear;
  call.inputs.push_back(x);
  call.inputs.push_back(w);
  call.inputs.push_back(b);
  call.attrs.push_int(1);
  call.attrs.push_int(0);
  const std::span<const lf::Tensor> outs(&y, 1);
  const int per_batch = 4000, batches = quick ? 5 : 25;
  const double rec = time_recording(per_batch, batches, [&] { m.on_call(call, outs, 0); });
  out.push_back({"trace_record", "on_call", "linear 3 in / 1 out", rec / 1000, {{"ns_per_op", rec}}});
  const double rel = time_recording(per_batch, batches, [&] { m.on_release(12345); });
  out.push_back({"trace_release", "on_release", "-", rel / 1000, {{"ns_per_op", rel}}});
}

// ---- detection ---------------------------------------------------------------------------------

std::vector<mon::TraceEvent> encoder_stream(int forwards) {
  namespace synth = mon::synth;
  mon::EventSynth s;
  const int S = 16, D = 64;
  std::vector<synth::SynthLayer> layers;
  for (int l = 0; l < 12; ++l) layers.push_back(synth::layer_weights(s, D));
  for (int f = 0; f < forwards; ++f) {
    lf::ValueId x = s.call(lf::OpId::mul, {s.value({S, D})}, {S, D});
    for (const auto& L : layers) {
      const lf::ValueId y = synth::encoder_layer(s, x, L, S, D);
      s.release(x);
      x = y;
    }
    const lf::ValueId r = s.call(lf::OpId::sum, {x}, {S}, synth::ints({1, 0}));
    s.sync();
    s.release(x);
    s.release(r);
  }
  return std::move(s.events());
}

std::vector<mon::TraceEvent> random_stream(int ops) {
  mon::EventSynth s;
  std::mt19937 rng(3);
  std::vector<lf::ValueId> pool;
  for (int k = 0; k < 8; ++k) pool.push_back(s.value({16, 64}));
  const lf::OpId unary[] = {lf::OpId::relu, lf::OpId::exp, lf::OpId::neg, lf::OpId::tanh};
  const lf::OpId binary[] = {lf::OpId::add, lf::OpId::mul, lf::OpId::sub, lf::OpId::maximum};
  for (int k = 0; k < ops; ++k) {
    const lf::ValueId a = pool[rng() % 8];
    const lf::ValueId y = rng() % 2 ? s.call(unary[rng() % 4], {a}, {16, 64})
                                    : s.call(binary[rng() % 4], {a, pool[rng() % 8]}, {16, 64});
    const size_t v = rng() % 8;
    s.release(pool[v]);
    pool[v] = y;
  }
  return std::move(s.events());
}

double events_per_s(const std::vector<mon::TraceEvent>& evs, int reps) {
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    mon::Detector d{mon::MonitorOptions{}};
    const auto t0 = Clock::now();
    for (const mon::TraceEvent& ev : evs) d.consume(ev);
    d.flush();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(evs.size()) / s);
  }
  return median(rates);
}

void bench_detect(std::vector<Record>& out, bool quick) {
  const int reps = quick ? 3 : 9;
  const auto enc = encoder_stream(quick ? 20 : 100);
  const double e = events_per_s(enc, reps);
  out.push_back({"monitor_throughput", "encoder 12x22", std::to_string(enc.size()) + " events",
                 1e6 / e, {{"events_per_s", e}}});
  const auto rnd = random_stream(quick ? 20000 : 100000);
  const double r = events_per_s(rnd, reps);
  out.push_back({"monitor_throughput", "random", std::to_string(rnd.size()) + " events", 1e6 / r,
                 {{"events_per_s", r}}});
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--quick")
      quick = true;
    else {
      std::puts("usage: livefuse-bench-monitor [--json PATH] [--quick]");
      return a == "--help" ? 0 : 2;
    }
  }
  std::vector<Record> out;
  bench_record(out, quick);
  bench_detect(out, quick);
  std::printf("%-20s %-16s %-22s %14s %16s\n", "name", "variant", "size", "median_us", "value");
  for (const Record& r : out)
    std::printf("%-20s %-16s %-22s %14.4f %12.4g %s\n", r.name.c_str(), r.variant.c_str(),
                r.size.c_str(), r.median_us, r.derived[0].second, r.derived[0].first.c_str());
  std::printf("targets: trace_record <= 100 ns_per_op, monitor_throughput >= 2e6 events_per_s\n");
  if (!json.empty()) {
    write_json(json, out);
    std::printf("wrote %zu records to %s\n", out.size(), json.c_str());
  }
  return 0;
}
