// Snapshot <-> JSON (schema: tools/inspect/SCHEMA.md). ordered_json keeps the order of
// counters and notes as the components gave them, so a round trip is exact.
//
// Reading is strict about what v1 requires (schema_version, counters, plans with id and state)
// and tolerant of everything else: unknown fields are ignored and missing optional ones take
// their defaults, so a newer writer that only adds fields stays readable.
#include <nlohmann/json.hpp>

#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"

namespace livefuse {

using Json = nlohmann::ordered_json;

namespace {

// ---- writing -----------------------------------------------------------------------------

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

Json plan_json(const PlanInfo& p) {
  Json ops = Json::array();
  for (const PlanOpInfo& o : p.ops)
    ops.push_back({{"op", o.op},
                   {"inputs", o.inputs},
                   {"dtypes", o.dtypes},
                   {"ranks", o.ranks},
                   {"attrs_hash", o.attrs_hash}});
  Json history = Json::array();
  for (const Transition& t : p.history)
    history.push_back(
        {{"t_ms", t.t_ms}, {"state", t.state}, {"reason", t.reason}, {"observed", t.observed}});
  const PlanDetails& d = p.details;
  Json groups = Json::array();
  for (const FusionGroupInfo& g : d.groups)
    groups.push_back({{"name", g.name},
                      {"kind", g.kind},
                      {"ops", g.ops},
                      {"kernel", g.kernel},
                      {"gpu_us", opt(g.gpu_us)}});
  Json kernels = Json::array();
  for (const KernelInfo& k : d.kernels)
    kernels.push_back({{"name", k.name},
                       {"compile_ms", opt(k.compile_ms)},
                       {"cache", k.cache},
                       {"source", k.source},
                       {"log", k.log},
                       {"bodies", k.bodies}});
  Json graphs = Json::array();
  for (const GraphInfo& g : d.graphs)
    graphs.push_back({{"shape", g.shape}, {"replays", g.replays}, {"nodes", g.nodes}});
  Json plan_decisions = Json::array();
  for (const auto& [what, why] : d.decisions)
    plan_decisions.push_back({{"what", what}, {"reason", why}});
  Json notes = Json::object();
  for (const auto& [k, v] : d.notes) notes[k] = v;
  return {{"id", p.id},
          {"name", p.name},
          {"state", p.state},
          {"device", p.device},
          {"origin", p.origin},
          {"signature", p.signature},
          {"description", p.description},
          {"n_external", p.n_external},
          {"ops", ops},
          {"hits", p.hits},
          {"eager_fallbacks", p.eager_fallbacks},
          {"sampling",
           {{"fused_us", p.sampled_fused_us},
            {"eager_us", p.sampled_eager_us},
            {"fused_median_us", opt(p.fused_us)},
            {"eager_median_us", opt(p.eager_us)},
            {"speedup", opt(p.speedup)}}},
          {"last_reason", p.last_reason},
          {"history", history},
          {"history_dropped", p.history_dropped},
          {"shape_pattern", d.shape_pattern},
          {"compile_ms", opt(d.compile_ms)},
          {"groups", groups},
          {"kernels", kernels},
          {"graphs", graphs},
          {"plan_decisions", plan_decisions},
          {"notes", notes}};
}

// ---- reading -----------------------------------------------------------------------------

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw Error("[inspect] report field '" + where + "' " + what);
}

const Json* field(const Json& j, const char* key, const std::string& where, bool required) {
  auto it = j.find(key);
  if (it == j.end() || (it->is_null() && required)) {
    if (required) bad(where + key, "is missing");
    return nullptr;
  }
  return &*it;
}

// Reads j[key] into `out` when present (a required one must be); a wrong type is an error.
template <class T>
void read(const Json& j, const char* key, T& out, const std::string& where, bool required = false) {
  const Json* v = field(j, key, where, required);
  if (!v) return;
  try {
    out = v->get<T>();
  } catch (const nlohmann::json::exception&) {
    bad(where + key, std::string("has the wrong type (") + v->type_name() + ")");
  }
}

void read_opt(const Json& j, const char* key, std::optional<double>& out,
              const std::string& where) {
  const Json* v = field(j, key, where, false);
  if (!v || v->is_null()) return void(out.reset());
  if (!v->is_number()) bad(where + key, std::string("has the wrong type (") + v->type_name() + ")");
  out = v->get<double>();
}

const Json& array_at(const Json& j, const char* key, const std::string& where, bool required) {
  static const Json empty = Json::array();
  const Json* v = field(j, key, where, required);
  if (!v) return empty;
  if (!v->is_array()) bad(where + key, std::string("should be an array, not ") + v->type_name());
  return *v;
}

const Json& object_at(const Json& j, const char* key, const std::string& where, bool required) {
  static const Json empty = Json::object();
  const Json* v = field(j, key, where, required);
  if (!v) return empty;
  if (!v->is_object()) bad(where + key, std::string("should be an object, not ") + v->type_name());
  return *v;
}

PlanInfo plan_from(const Json& j, const std::string& w) {
  if (!j.is_object()) bad(w.substr(0, w.size() - 1), "should be an object");
  PlanInfo p;
  read(j, "id", p.id, w, true);
  read(j, "state", p.state, w, true);
  if (!is_valid_plan_state(p.state))
    bad(w + "state", "is '" + p.state + "', not a known plan state");
  read(j, "name", p.name, w);
  read(j, "device", p.device, w);
  read(j, "origin", p.origin, w);
  read(j, "signature", p.signature, w);
  read(j, "description", p.description, w);
  read(j, "n_external", p.n_external, w);
  const Json& ops = array_at(j, "ops", w, false);
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::string ow = w + "ops[" + std::to_string(k) + "].";
    PlanOpInfo o;
    read(ops[k], "op", o.op, ow, true);
    read(ops[k], "inputs", o.inputs, ow);
    read(ops[k], "dtypes", o.dtypes, ow);
    read(ops[k], "ranks", o.ranks, ow);
    read(ops[k], "attrs_hash", o.attrs_hash, ow);
    p.ops.push_back(std::move(o));
  }
  read(j, "hits", p.hits, w);
  read(j, "eager_fallbacks", p.eager_fallbacks, w);
  const Json& smp = object_at(j, "sampling", w, false);
  const std::string sw = w + "sampling.";
  read(smp, "fused_us", p.sampled_fused_us, sw);
  read(smp, "eager_us", p.sampled_eager_us, sw);
  read_opt(smp, "fused_median_us", p.fused_us, sw);
  read_opt(smp, "eager_median_us", p.eager_us, sw);
  read_opt(smp, "speedup", p.speedup, sw);
  read(j, "last_reason", p.last_reason, w);
  const Json& hist = array_at(j, "history", w, false);
  for (size_t k = 0; k < hist.size(); ++k) {
    const std::string hw = w + "history[" + std::to_string(k) + "].";
    Transition t;
    read(hist[k], "t_ms", t.t_ms, hw, true);
    read(hist[k], "state", t.state, hw, true);
    read(hist[k], "reason", t.reason, hw);
    read(hist[k], "observed", t.observed, hw);
    p.history.push_back(std::move(t));
  }
  read(j, "history_dropped", p.history_dropped, w);
  PlanDetails& d = p.details;
  read(j, "shape_pattern", d.shape_pattern, w);
  read_opt(j, "compile_ms", d.compile_ms, w);
  const Json& groups = array_at(j, "groups", w, false);
  for (size_t k = 0; k < groups.size(); ++k) {
    const std::string gw = w + "groups[" + std::to_string(k) + "].";
    FusionGroupInfo g;
    read(groups[k], "name", g.name, gw);
    read(groups[k], "kind", g.kind, gw);
    read(groups[k], "ops", g.ops, gw);
    read(groups[k], "kernel", g.kernel, gw);
    read_opt(groups[k], "gpu_us", g.gpu_us, gw);
    d.groups.push_back(std::move(g));
  }
  const Json& kernels = array_at(j, "kernels", w, false);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const std::string kw = w + "kernels[" + std::to_string(k) + "].";
    KernelInfo ki;
    read(kernels[k], "name", ki.name, kw);
    read_opt(kernels[k], "compile_ms", ki.compile_ms, kw);
    read(kernels[k], "cache", ki.cache, kw);
    read(kernels[k], "source", ki.source, kw);
    read(kernels[k], "log", ki.log, kw);
    read(kernels[k], "bodies", ki.bodies, kw);
    d.kernels.push_back(std::move(ki));
  }
  const Json& graphs = array_at(j, "graphs", w, false);
  for (size_t k = 0; k < graphs.size(); ++k) {
    const std::string gw = w + "graphs[" + std::to_string(k) + "].";
    GraphInfo g;
    read(graphs[k], "shape", g.shape, gw);
    read(graphs[k], "replays", g.replays, gw);
    read(graphs[k], "nodes", g.nodes, gw);
    d.graphs.push_back(std::move(g));
  }
  const Json& pd = array_at(j, "plan_decisions", w, false);
  for (size_t k = 0; k < pd.size(); ++k) {
    const std::string dw = w + "plan_decisions[" + std::to_string(k) + "].";
    std::pair<std::string, std::string> e;
    read(pd[k], "what", e.first, dw, true);
    read(pd[k], "reason", e.second, dw);
    d.decisions.push_back(std::move(e));
  }
  for (const auto& [k, v] : object_at(j, "notes", w, false).items()) {
    if (!v.is_string()) bad(w + "notes." + k, "should be a string");
    d.notes.emplace_back(k, v.get<std::string>());
  }
  return p;
}

}  // namespace

std::string snapshot_to_json(const Snapshot& s, int indent) {
  Json config = Json::array();
  for (const ConfigEntry& c : s.config)
    config.push_back({{"name", c.name}, {"value", c.value}, {"source", c.source}});
  Json counters = Json::object();
  for (const CounterGroup& g : s.counters) {
    Json values = Json::object();
    for (const auto& [n, v] : g.values) values[n] = v;
    counters[g.name] = std::move(values);
  }
  Json plans = Json::array();
  for (const PlanInfo& p : s.plans) plans.push_back(plan_json(p));
  Json decisions = Json::array();
  for (const Decision& d : s.decisions)
    decisions.push_back({{"t_ms", d.t_ms},
                         {"component", d.component},
                         {"subject", d.subject},
                         {"what", d.what},
                         {"reason", d.reason}});
  const Json j = {{"schema", "livefuse-report"},
                  {"schema_version", s.schema_version},
                  {"livefuse_version", s.livefuse_version},
                  {"program", s.program},
                  {"pid", s.pid},
                  {"time_unix_ms", s.time_unix_ms},
                  {"uptime_ms", s.uptime_ms},
                  {"final", s.final},
                  {"mode", s.mode},
                  {"config", config},
                  {"counters", counters},
                  {"plans", plans},
                  {"decisions", {{"dropped", s.decisions_dropped}, {"entries", decisions}}}};
  // replace: a plan name or kernel log with invalid UTF-8 must not cost the whole report.
  return j.dump(indent, ' ', false, Json::error_handler_t::replace) + "\n";
}

Snapshot snapshot_from_json(std::string_view text) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw Error("[inspect] the report is empty (is the program still starting?)");
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(
        detail::concat("[inspect] the report is not valid JSON (truncated or corrupt) at byte ",
                       e.byte, " of ", text.size()));
  }
  if (!j.is_object() || !j.contains("schema_version"))
    throw Error("[inspect] not a livefuse report: no schema_version at the top level");
  Snapshot s;
  const std::string w;
  read(j, "schema_version", s.schema_version, w, true);
  if (s.schema_version > kReportSchemaVersion || s.schema_version < 1)
    throw Error(detail::concat("[inspect] the report has schema_version ", s.schema_version,
                               "; this reader understands 1..", kReportSchemaVersion,
                               " (use the livefuse-inspect of the livefuse that wrote it)"));
  read(j, "livefuse_version", s.livefuse_version, w);
  read(j, "program", s.program, w);
  read(j, "pid", s.pid, w);
  read(j, "time_unix_ms", s.time_unix_ms, w);
  read(j, "uptime_ms", s.uptime_ms, w);
  read(j, "final", s.final, w);
  read(j, "mode", s.mode, w);
  const Json& config = array_at(j, "config", w, false);
  for (size_t k = 0; k < config.size(); ++k) {
    const std::string cw = "config[" + std::to_string(k) + "].";
    ConfigEntry c;
    read(config[k], "name", c.name, cw, true);
    read(config[k], "value", c.value, cw);
    read(config[k], "source", c.source, cw);
    s.config.push_back(std::move(c));
  }
  for (const auto& [group, values] : object_at(j, "counters", w, true).items()) {
    if (!values.is_object()) bad("counters." + group, "should be an object");
    CounterGroup g{group, {}};
    for (const auto& [n, v] : values.items()) {
      if (!v.is_number_unsigned())
        bad("counters." + group + "." + n, "should be a non-negative integer");
      g.values.emplace_back(n, v.get<uint64_t>());
    }
    s.counters.push_back(std::move(g));
  }
  const Json& plans = array_at(j, "plans", w, true);
  for (size_t k = 0; k < plans.size(); ++k)
    s.plans.push_back(plan_from(plans[k], "plans[" + std::to_string(k) + "]."));
  const Json& dec = object_at(j, "decisions", w, false);
  read(dec, "dropped", s.decisions_dropped, "decisions.");
  const Json& entries = array_at(dec, "entries", "decisions.", false);
  for (size_t k = 0; k < entries.size(); ++k) {
    const std::string dw = "decisions.entries[" + std::to_string(k) + "].";
    Decision d;
    read(entries[k], "t_ms", d.t_ms, dw, true);
    read(entries[k], "component", d.component, dw);
    read(entries[k], "subject", d.subject, dw);
    read(entries[k], "what", d.what, dw);
    read(entries[k], "reason", d.reason, dw);
    s.decisions.push_back(std::move(d));
  }
  return s;
}

}  // namespace livefuse
