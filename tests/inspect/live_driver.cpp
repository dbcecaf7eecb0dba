// inspect_live_driver SECONDS: a small program for the CLI tests to watch while it runs.
//
// It calls start_background_services() itself (so the tests do not depend on where the
// executor calls it), runs a 3-op block in a loop on the CPU and installs one plan for that
// block, recorded from its own calls. The plan runs its window eagerly: it is not fused, but
// the real matcher defers, completes, samples it against eager and decides (active or
// rejected) on live traffic, which is what the report must show while the program runs.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "livefuse/inspect.hpp"
#include "livefuse/livefuse.hpp"
#include "runtime/executor.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"
#include "runtime/trace_sink.hpp"

namespace {

class EagerPlan : public lf::Plan {
 public:
  bool run(lf::Window& w, const std::vector<std::pair<int, int>>&) override {
    lf::trace::Scope s("plan", "replay");
    const lf::Stream st = lf::Stream::current(w.device);
    for (size_t j = 0; j < w.calls.size(); ++j)
      lf::Executor::run_eager_into(w.calls[j], w.outputs[j], st);
    return true;
  }
  bool writes(int, int) const override { return true; }
  void details(lf::PlanDetails& d) const override {
    d.shape_pattern = "[4,64] [64]";
    d.notes.emplace_back("kind", "test plan: runs its window eagerly");
  }
};

// Records the wiring of the calls `body` makes (op, attrs, dtypes, inputs) as PlanOps.
class Recorder : public lf::TraceSink {
 public:
  void on_call(const lf::OpCall& c, std::span<const lf::Tensor> outs, uint32_t) override {
    lf::PlanOp op;
    op.op = c.op;
    op.attrs_hash = c.attrs.hash();
    for (const lf::Tensor& t : c.inputs) {
      op.in_dtypes.push_back(t.dtype());
      op.in_ranks.push_back(static_cast<int8_t>(t.rank()));
      lf::PlanInput in;
      if (auto it = produced.find(t.id()); it != produced.end()) {
        in.op = it->second.first;
        in.out = it->second.second;
      } else {
        in.slot = slots.emplace(t.id(), static_cast<int>(slots.size())).first->second;
      }
      op.inputs.push_back(in);
    }
    for (size_t k = 0; k < outs.size(); ++k)
      produced[outs[k].id()] = {static_cast<int>(ops.size()), static_cast<int>(k)};
    ops.push_back(op);
  }
  void on_release(lf::ValueId) override {}
  void on_sync(uint32_t) override {}
  std::vector<lf::PlanOp> ops;
  std::map<lf::ValueId, std::pair<int, int>> produced;
  std::map<lf::ValueId, int> slots;
};

// Far from the planner's ids (which count from 1): the planner may plan this block too.
constexpr uint64_t kPlanId = 1000000;

lf::Tensor block(const lf::Tensor& x, const lf::Tensor& w) {
  return lf::add(lf::tanh(lf::mul(x, w)), x);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  lf::start_background_services();
  lf::trace::set_thread_name("driver-main");
  // Leaked: the final report (at exit, after main) still calls this provider.
  static auto* iterations = new std::atomic<uint64_t>(0);
  lf::register_counter_source("driver",
                              [](lf::CounterSink& s) { s.add("iterations", iterations->load()); });

  const lf::Tensor x = lf::rand_uniform({4, 64}, 1, -1, 1, lf::DType::f32, lf::Device::cpu());
  const lf::Tensor w = lf::rand_uniform({64}, 2, -1, 1, lf::DType::f32, lf::Device::cpu());
  // The first op starts the monitor, which installs its own trace sink: start it before
  // recording, so the recorder sees every call and the monitor gets its sink back.
  (void)lf::add(x, x).to_floats();
  Recorder rec;
  lf::TraceSink* prev = lf::trace_sink();
  lf::set_trace_sink(&rec);
  (void)block(x, w);
  lf::set_trace_sink(prev);
  auto plan = std::make_shared<EagerPlan>();
  plan->id = kPlanId;
  plan->name = "mul+tanh+add";
  plan->ops = rec.ops;
  plan->n_external = static_cast<int>(rec.slots.size());
  lf::PlanTable::get().publish(plan);
  lf::record_decision("driver", "plan " + std::to_string(kPlanId), "published",
                      "recorded from 3 calls");

  float checksum = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    lf::trace::Scope it("driver", "iteration");
    checksum += block(x, w).to_floats()[0];  // a sync point: the plan's window completes here
    iterations->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the machine is shared
  }
  std::printf("driver: %llu iterations, plan %s after %llu hits, checksum %g\n",
              static_cast<unsigned long long>(iterations->load()),
              std::string(lf::plan_state_name(plan->state.load())).c_str(),
              static_cast<unsigned long long>(plan->hits.load()), checksum);
  return 0;
}
