// inspect(): assembles a Snapshot from the config, the runtime's own counters, registered
// providers, the PlanTable and the decision log.
#include "livefuse/inspect.hpp"

#include <unistd.h>

#include <chrono>
#include <fstream>

#include "livefuse/config.hpp"
#include "livefuse/device.hpp"
#include "livefuse/memory.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"

namespace livefuse {

PlanInfo plan_info(Plan& p);  // inspect_plans.cpp

namespace {

std::string program_name() {
  std::ifstream f("/proc/self/comm");
  std::string name;
  std::getline(f, name);
  return name;
}

std::string yes_no(bool b) { return b ? "1" : "0"; }

// The value in force of each LIVEFUSE_* variable, as text, by the name config.cpp records in
// Config::sources (so the two lists cannot disagree on names).
std::string config_value(const Config& c, std::string_view name) {
  if (name == "LIVEFUSE") return std::string(mode_name(c.mode));
  if (name == "LIVEFUSE_HOT") return std::to_string(c.hot);
  if (name == "LIVEFUSE_MAX_SEGMENT") return std::to_string(c.max_segment);
  if (name == "LIVEFUSE_GRAPHS") return yes_no(c.graphs);
  if (name == "LIVEFUSE_FUSION") return yes_no(c.fusion);
  if (name == "LIVEFUSE_COMPILE_THREADS") return std::to_string(c.compile_threads);
  if (name == "LIVEFUSE_CPU_THREADS") return std::to_string(c.cpu_threads);
  if (name == "LIVEFUSE_CACHE_DIR") return c.cache_dir.empty() ? "off" : c.cache_dir;
  if (name == "LIVEFUSE_VERIFY") return std::to_string(c.verify);
  if (name == "LIVEFUSE_SAMPLE") return std::to_string(c.sample);
  if (name == "LIVEFUSE_PROFILE") return yes_no(c.profile);
  if (name == "LIVEFUSE_ATTENTION") return c.attention < 0 ? "auto" : yes_no(c.attention == 1);
  if (name == "LIVEFUSE_GEMM_SIBLINGS") return yes_no(c.gemm_siblings);
  if (name == "LIVEFUSE_ROTARY") return yes_no(c.rotary);
  if (name == "LIVEFUSE_SEAM") return yes_no(c.seam);
  if (name == "LIVEFUSE_SETTLE") return yes_no(c.settle);
  if (name == "LIVEFUSE_FAMILY_GRAPH") return yes_no(c.family_graph);
  if (name == "LIVEFUSE_FAMILY_RECORD") return yes_no(c.family_record);
  if (name == "LIVEFUSE_WRITE_BATCH") return yes_no(c.write_batch);
  if (name == "LIVEFUSE_APPEND") return yes_no(c.append);
  if (name == "LIVEFUSE_INFER_MEMO") return yes_no(c.infer_memo);
  if (name == "LIVEFUSE_GEMV") return yes_no(c.gemv);
  if (name == "LIVEFUSE_GEMM_TC") return yes_no(c.gemm_tc);
  if (name == "LIVEFUSE_GEMM_F32X3") return yes_no(c.gemm_f32x3);
  if (name == "LIVEFUSE_GEMV_NORM") return std::to_string(c.gemv_norm);
  if (name == "LIVEFUSE_GEMV_PAIR") return std::to_string(c.gemv_pair);
  if (name == "LIVEFUSE_GEMV_ROTARY") return yes_no(c.gemv_rotary);
  if (name == "LIVEFUSE_PACK_CACHE") return yes_no(c.pack_cache);
  if (name == "LIVEFUSE_GEMM_TUNE") return yes_no(c.gemm_tune);
  if (name == "LIVEFUSE_ATTENTION_SPLIT") return yes_no(c.attention_split);
  if (name == "LIVEFUSE_DECODE_LEAN") return yes_no(c.decode_lean);
  if (name == "LIVEFUSE_ATTENTION_APPEND") return yes_no(c.attention_append);
  if (name == "LIVEFUSE_DECODE_TC") return yes_no(c.decode_tc);
  if (name == "LIVEFUSE_DECODE_STREAM_KEYS") return std::to_string(c.decode_stream_keys);
  if (name == "LIVEFUSE_SPLIT_K_ROWS") return yes_no(c.split_k_rows);
  if (name == "LIVEFUSE_ROW_EARLY_LOADS") return yes_no(c.row_early_loads);
  if (name == "LIVEFUSE_PDL") return yes_no(c.pdl);
  if (name == "LIVEFUSE_EARLY_READS") return yes_no(c.early_reads);
  if (name == "LIVEFUSE_REPORT") return c.report_path;
  if (name == "LIVEFUSE_REPORT_MS") return std::to_string(c.report_ms);
  if (name == "LIVEFUSE_TRACE") return c.trace_path;
  if (name == "LIVEFUSE_LOG") {
    constexpr const char* names[] = {"error", "warn", "info", "debug"};
    return names[static_cast<int>(c.log)];
  }
  if (name == "LIVEFUSE_FMA") return yes_no(c.fma);
  if (name == "LIVEFUSE_FAST_COMPILE") return yes_no(c.fast_compile);
  if (name == "LIVEFUSE_JIT") return c.jit_lto ? "lto" : "nvrtc";
  if (name == "LIVEFUSE_CUDA_CACHE") return yes_no(c.cuda_cache);
  if (name == "LIVEFUSE_CACHE_MAX_MB") return std::to_string(c.cache_max_mb);
  if (name == "LIVEFUSE_DEVICE") return c.device;
  return "?";  // a variable added to config.cpp but not here yet
}

CounterGroup matcher_group() {
  const MatcherCounters& m = matcher_counters();
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {"matcher",
          {{"calls", v(m.calls)},
           {"deferred", v(m.deferred)},
           {"served", v(m.served)},
           {"completions", v(m.completions)},
           {"flush_divergent", v(m.flush_divergent)},
           {"flush_sync", v(m.flush_sync)},
           {"flush_escaped", v(m.flush_escaped)},
           {"flush_error", v(m.flush_error)},
           {"plan_declined", v(m.plan_declined)},
           {"shadow_would_serve", v(m.shadow_would_serve)},
           {"verify_mismatches", v(m.verify_mismatches)},
           {"early_launches", v(m.early_launches)},
           {"early_wasted", v(m.early_wasted)},
           {"snapshots", v(m.snapshots)},
           {"snapshot_bytes", v(m.snapshot_bytes)},
           {"samples_put_off", v(m.samples_put_off)},
           {"samples_cold", v(m.samples_cold)},
           {"samples_no_slot", v(m.samples_no_slot)},
           {"samples_lost", v(m.samples_lost)},
           {"writes_held", v(m.writes_held)},
           {"write_launches", v(m.write_launches)},
           {"appends_in_place", v(m.appends_in_place)},
           {"infer_memo_hits", v(m.infer_memo_hits)},
           {"infer_memo_misses", v(m.infer_memo_misses)}}};
}

CounterGroup memory_group(Device d) {
  const MemoryStats m = memory_stats(d);
  return {"memory." + d.str(),
          {{"bytes_in_use", m.bytes_in_use},
           {"bytes_cached", m.bytes_cached},
           {"peak_bytes_in_use", m.peak_in_use},
           {"allocations", m.allocations},
           {"cache_evictions", m.cache_evictions},
           {"cache_bytes_returned", m.bytes_returned},
           {"pool_trims", m.pool_trims}}};
}

CounterGroup plans_group(const std::vector<PlanInfo>& plans) {
  CounterGroup g{"plans", {{"total", plans.size()}}};
  for (std::string_view s : kPlanStates) {
    uint64_t n = 0;
    for (const PlanInfo& p : plans) n += p.state == s;
    g.values.emplace_back(std::string(s), n);
  }
  uint64_t hits = 0;
  for (const PlanInfo& p : plans) hits += p.hits;
  g.values.emplace_back("replays", hits);
  return g;
}

}  // namespace

bool is_valid_plan_state(std::string_view s) {
  for (std::string_view k : kPlanStates)
    if (k == s) return true;
  return false;
}

const PlanInfo* Snapshot::find_plan(uint64_t id) const {
  for (const PlanInfo& p : plans)
    if (p.id == id) return &p;
  return nullptr;
}

std::optional<uint64_t> find_counter(const std::vector<CounterGroup>& groups,
                                     std::string_view group, std::string_view name) {
  for (const CounterGroup& g : groups) {
    if (g.name != group) continue;
    for (const auto& [n, v] : g.values)
      if (n == name) return v;
  }
  return std::nullopt;
}

std::optional<uint64_t> Snapshot::counter(std::string_view group, std::string_view name) const {
  return find_counter(counters, group, name);
}

namespace {

// The runtime's own groups: the matcher's, and the memory of each device.
std::vector<CounterGroup> runtime_counters() {
  std::vector<CounterGroup> out;
  out.push_back(matcher_group());
  out.push_back(memory_group(Device::cpu()));
  if (cuda_available()) {
    // At exit the CUDA runtime may already be unloading: its figures are then left out
    // rather than costing the final report.
    try {
      out.push_back(memory_group(Device::cuda(0)));
    } catch (const std::exception&) {
    }
  }
  return out;
}

}  // namespace

std::vector<CounterGroup> counters() {
  std::vector<CounterGroup> out = runtime_counters();
  inspect_detail::collect_counters(out);
  return out;
}

Snapshot inspect() {
  trace::Scope scope("inspect", "snapshot");
  Snapshot s;
  s.livefuse_version = LIVEFUSE_VERSION;
  s.program = program_name();
  s.pid = static_cast<int64_t>(::getpid());
  s.time_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  s.uptime_ms = uptime_ms();
  const Config& c = config();
  s.mode = std::string(mode_name(c.mode));
  for (const auto& [name, source] : c.sources)
    s.config.push_back({name, config_value(c, name), source});

  // Plans first: the "plans" counter group summarises them.
  std::vector<uint64_t> live;
  const auto table = PlanTable::get().snapshot();
  for (const auto& p : table->plans) {
    s.plans.push_back(plan_info(*p));
    live.push_back(p->id);
  }
  std::vector<PlanInfo> listed;
  inspect_detail::collect_plans(listed);
  for (PlanInfo& p : listed) {
    if (s.find_plan(p.id)) continue;  // published meanwhile: the table's view wins
    live.push_back(p.id);
    s.plans.push_back(std::move(p));
  }
  inspect_detail::prune_histories(live);

  s.counters = runtime_counters();
  s.counters.push_back(plans_group(s.plans));
  inspect_detail::copy_decisions(s.decisions, &s.decisions_dropped);
  // Providers run before the "inspect" group is made, so it counts their failures of now.
  std::vector<CounterGroup> provided;
  inspect_detail::collect_counters(provided);
  const trace::Stats ts = trace::stats();
  s.counters.push_back({"inspect",
                        {{"decisions", s.decisions.size() + s.decisions_dropped},
                         {"decisions_dropped", s.decisions_dropped},
                         {"trace_events", ts.events},
                         {"trace_dropped", ts.dropped},
                         {"provider_errors", inspect_detail::provider_errors()}}});
  for (CounterGroup& g : provided) s.counters.push_back(std::move(g));
  return s;
}

}  // namespace livefuse
