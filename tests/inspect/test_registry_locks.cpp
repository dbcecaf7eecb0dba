// The registry calls providers outside its own lock: a component's provider takes the
// component's lock, and components register while holding it (the planner's Service::start),
// so calling providers under the registry's lock ordered the two locks both ways.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "livefuse/inspect.hpp"
#include "runtime/inspect_registry.hpp"

namespace lf = livefuse;
using namespace std::chrono_literals;

namespace {

// A one-shot signal between two threads.
class Signal {
 public:
  void set() {
    std::lock_guard<std::mutex> g(mu_);
    on_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return on_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool on_ = false;
};

}  // namespace

// Under ThreadSanitizer the old order is a lock-order-inversion report (component lock ->
// registry lock here, registry lock -> component lock in inspect()); no second thread needed.
TEST_CASE("inspect registry: a component registers under the lock its provider takes") {
  std::mutex component;
  {
    std::lock_guard<std::mutex> g(component);
    lf::register_counter_source("lock_order_component", [&component](lf::CounterSink& s) {
      std::lock_guard<std::mutex> g2(component);
      s.add("calls", 1);
    });
  }
  CHECK(lf::inspect().counter("lock_order_component", "calls") == 1u);
  lf::unregister_counter_source("lock_order_component");
}

// The deadlock itself, made to happen every time: the report thread is inside the provider
// when the component, holding its lock, registers a second provider. Before the fix the
// registration waited for the registry lock the report thread held, and the provider waited
// for the component's lock: the provider's bounded wait is what keeps this test from hanging
// (polled with try_lock: ThreadSanitizer does not intercept timed_mutex's timed lock).
TEST_CASE("inspect registry: registering while a provider runs does not wait for it") {
  std::mutex component;
  std::atomic<bool> armed{false}, got_lock{false};
  Signal entered, component_locked, probed;
  lf::register_counter_source("lock_order_probe", [&](lf::CounterSink&) {
    if (!armed.exchange(false)) return;
    entered.set();
    component_locked.wait();
    std::this_thread::sleep_for(50ms);  // the component is now inside register_*
    for (auto until = std::chrono::steady_clock::now() + 3s;
         !got_lock && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(1ms))
      if (component.try_lock()) {
        got_lock = true;
        component.unlock();
      }
    probed.set();
  });
  armed = true;
  std::thread report([] { (void)lf::inspect(); });
  entered.wait();
  {
    std::lock_guard<std::mutex> g(component);
    component_locked.set();
    lf::register_counter_source("lock_order_second", [](lf::CounterSink&) {});
  }
  probed.wait();  // a report thread of another test may have made the armed call
  report.join();
  CHECK(got_lock);
  lf::unregister_counter_source("lock_order_second");
  lf::unregister_counter_source("lock_order_probe");
}

// What holding the lock used to give for free: unregister returns only once a running call of
// the provider has returned (its captures may be destroyed right after).
TEST_CASE("inspect registry: unregister waits for a running call of the provider") {
  Signal entered, release;
  std::atomic<bool> finished{false}, unregistered{false}, finished_first{false};
  lf::register_plan_source("unregister_probe", [&](std::vector<lf::PlanInfo>&) {
    entered.set();
    release.wait();
    finished = true;
  });
  std::thread report([] { (void)lf::inspect(); });
  entered.wait();
  std::thread owner([&] {
    lf::unregister_plan_source("unregister_probe");
    finished_first = finished.load();
    unregistered = true;
  });
  std::this_thread::sleep_for(100ms);
  CHECK(!unregistered);
  release.set();
  owner.join();
  report.join();
  CHECK(unregistered);
  CHECK(finished_first);
  // Gone: a later snapshot does not call it (it would wait on `release` again otherwise).
  (void)lf::inspect();
}
