#include "test_plan_util.hpp"

#include <map>
#include <string>

#include "livefuse/inspect.hpp"
#include "monitor/detector.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/trace_sink.hpp"

namespace lftest {

namespace {
// Captures the wiring of the calls `body` makes through a temporary trace sink.
class Recorder : public livefuse::TraceSink {
 public:
  void on_call(const livefuse::OpCall& c, std::span<const livefuse::Tensor> outs,
               uint32_t) override {
    livefuse::PlanOp op;
    op.op = c.op;
    op.attrs_hash = livefuse::monitor::structural_attrs_hash(c.op, c.attrs);
    for (const livefuse::Tensor& t : c.inputs) {
      op.in_dtypes.push_back(t.dtype());
      op.in_ranks.push_back(static_cast<int8_t>(t.rank()));
      livefuse::PlanInput in;
      auto it = produced.find(t.id());
      if (it != produced.end()) {
        in.op = it->second.first;
        in.out = it->second.second;
      } else {
        auto [e, fresh] = slots.emplace(t.id(), static_cast<int>(slots.size()));
        in.slot = e->second;
      }
      op.inputs.push_back(in);
    }
    for (size_t k = 0; k < outs.size(); ++k)
      produced[outs[k].id()] = {static_cast<int>(ops.size()), static_cast<int>(k)};
    ops.push_back(op);
  }
  void on_release(livefuse::ValueId) override {}
  void on_sync(uint32_t) override {}
  std::vector<livefuse::PlanOp> ops;
  std::map<livefuse::ValueId, std::pair<int, int>> produced;
  std::map<livefuse::ValueId, int> slots;
};
}  // namespace

void reset_pipeline(const livefuse::Config* next) {
  livefuse::synchronize(livefuse::Device::cpu());
  const livefuse::Config saved = livefuse::config();
  livefuse::Config on = next ? *next : unsettled(saved);
  on.mode = livefuse::Mode::on;  // the monitor drains only while it runs
  livefuse::set_config_for_testing(on);
  livefuse::monitor::Monitor::instance().reset();
  livefuse::planner::wait_service_idle();
  livefuse::planner::reset_service_for_testing();
  livefuse::PlanTable::get().clear_for_testing();
  livefuse::set_config_for_testing(saved);
}

livefuse::Config unsettled(livefuse::Config c) {
  c.settle = false;
  return c;
}

livefuse::Config fresh_unsampled(livefuse::Mode m) {
  livefuse::Config c = unsettled(livefuse::config());
  c.mode = m;
  c.sample = 0;
  reset_pipeline(&c);
  return c;
}

HandMadePlans::HandMadePlans() {
  // reset_pipeline waits for the planner service: a round still compiling an earlier test's
  // candidate would otherwise publish its plan into this test's table (seen with
  // LIVEFUSE_JIT=lto, whose first round also builds the op library).
  reset_pipeline();
  livefuse::Config c = livefuse::config();
  c.mode = livefuse::Mode::on;
  livefuse::set_config_for_testing(c);
  livefuse::monitor::Monitor::instance().pause_for_testing(true);
}

HandMadePlans::~HandMadePlans() {
  livefuse::PlanTable::get().clear_for_testing();
  livefuse::monitor::Monitor::instance().pause_for_testing(false);
  livefuse::monitor::Monitor::instance().reset();
}

std::vector<double> eager_values(const std::function<livefuse::Tensor()>& f) {
  const livefuse::Config saved = livefuse::config();
  livefuse::Config off = saved;
  off.mode = livefuse::Mode::off;
  livefuse::set_config_for_testing(off);
  std::vector<double> r = f().to_doubles();
  livefuse::set_config_for_testing(saved);
  return r;
}

uint64_t matcher_counter(const char* name) {
  return livefuse::inspect().counter("matcher", name).value_or(0);
}

int64_t held_bytes(livefuse::Device d) {
  const livefuse::Snapshot s = livefuse::inspect();
  const std::string g = "memory." + d.str();
  return static_cast<int64_t>(s.counter(g, "bytes_in_use").value_or(0) + s.counter(g, "bytes_cached").value_or(0));
}

std::shared_ptr<RecordingPlan> record_plan(const std::function<void()>& body) {
  // The monitor installs itself as the sink on the first traced call: start it before
  // borrowing the sink slot.
  livefuse::monitor::ensure_started();
  Recorder rec;
  livefuse::TraceSink* prev = livefuse::trace_sink();
  livefuse::set_trace_sink(&rec);
  body();
  livefuse::set_trace_sink(prev);
  auto p = std::make_shared<RecordingPlan>();
  static uint64_t next_id = 1000;
  p->id = next_id++;
  p->name = "recorded";
  p->ops = rec.ops;
  p->n_external = static_cast<int>(rec.slots.size());
  return p;
}

}  // namespace lftest
