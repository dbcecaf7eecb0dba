#pragma once
// A pipeline for tests of plans that serve a loop (test_served_windows.cpp,
// test_prefix_plans.cpp): LIVEFUSE=on, plans kept unsampled, sequences handed to the planner as
// soon as they are hot, and a monitor whose counts halve every 256 ops, so that a structure the
// program stopped running goes cold within a few hundred iterations.
#include <memory>

#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

namespace lftest {

struct ServedLoop {
  ServedLoop() : saved(livefuse::config()) {
    livefuse::set_config_for_testing(fresh_unsampled(livefuse::Mode::on));
    livefuse::monitor::MonitorOptions o = livefuse::monitor::MonitorOptions::from_config();
    o.half_life_log2 = 8;
    livefuse::monitor::Monitor::instance().reset(o);
  }
  ~ServedLoop() {
    reset_pipeline();
    livefuse::monitor::Monitor::instance().reset();
    livefuse::set_config_for_testing(saved);
  }
  ServedLoop(const ServedLoop&) = delete;
  ServedLoop& operator=(const ServedLoop&) = delete;

  // Lets the monitor and the planner catch up with the program.
  static void catch_up() {
    REQUIRE(livefuse::monitor::Monitor::instance().drain());
    REQUIRE(livefuse::planner::wait_service_idle());
  }
  // The newest active plan of `ops` ops, or null.
  static std::shared_ptr<livefuse::Plan> serving(size_t ops) {
    std::shared_ptr<livefuse::Plan> best;
    for (const auto& p : livefuse::PlanTable::get().plans())
      if (p->ops.size() == ops && p->state == livefuse::PlanState::active && (!best || p->id > best->id))
        best = p;
    return best;
  }
  // Runs `body` (its result held over the sync, as a program that uses it) until one plan serves
  // all its `ops` calls in one iteration; returns that plan (null after `tries`: the caller says
  // what that means).
  template <class Body>
  static std::shared_ptr<livefuse::Plan> until_served(Body body, size_t ops, int tries = 400) {
    const livefuse::Device cpu = livefuse::Device::cpu();
    for (int it = 0; it < tries; ++it) {
      const uint64_t s0 = livefuse::matcher_counters().served;
      livefuse::Tensor y = body();
      livefuse::synchronize(cpu);
      if (livefuse::matcher_counters().served - s0 == ops) return serving(ops);
      if (it % 8 == 7) catch_up();
    }
    return nullptr;
  }
  // Runs `body` as until_served does until `done()`, looked at every 8 iterations once the
  // monitor and the planner caught up; whether it came within `tries`.
  template <class Body, class Done>
  static bool run_until(Body body, Done done, int tries = 400) {
    for (int it = 0; it < tries; ++it) {
      livefuse::Tensor y = body();
      livefuse::synchronize(livefuse::Device::cpu());
      if (it % 8 == 7) {
        catch_up();
        if (done()) return true;
      }
    }
    return false;
  }
  // A phase change: other ops (none of them a served chain's first, so nothing is deferred and
  // the chain's count decays on the stream's clock) until `done()`, looked at once the monitor
  // and the planner caught up; whether it came.
  template <class Done>
  static bool other_ops_until(const livefuse::Tensor& x, Done done) {
    for (int it = 0; it < 3000; ++it) {
      livefuse::Tensor y = livefuse::sigmoid(livefuse::neg(livefuse::exp(x)));
      livefuse::synchronize(livefuse::Device::cpu());
      if (it % 100 == 99) {
        catch_up();
        if (done()) return true;
      }
    }
    return false;
  }
  livefuse::Config saved;
};

}  // namespace lftest
