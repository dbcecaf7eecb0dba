#pragma once
// The planning service: the monitor's CandidateConsumer. Hot candidates are planned off the
// hot path (a worker thread; NVRTC compiles go to the compiler's TBB arena), wrapped as
// FusedPlans and published to the PlanTable, where the matcher starts using them.
#include <chrono>
#include <cstdint>

namespace livefuse::planner {

struct ServiceCounters {
  uint64_t candidates = 0, planned = 0, published = 0, skipped = 0, failed = 0, retired = 0;
  uint64_t revived = 0;  // plans retired cold, active again when their sequence came back
  uint64_t rounds = 0;  // planning rounds: the candidates queued at a round's start go together
};

// Installs the service as the monitor's consumer (idempotent). Not in LIVEFUSE=off or trace:
// returns false then, and a later call in another mode (tools switch it at run time) starts it.
bool ensure_service_started();
// Waits until every candidate handed over so far has been planned (tests, benchmarks).
bool wait_service_idle(std::chrono::milliseconds timeout = std::chrono::seconds(60));
ServiceCounters service_counters();
// While paused, candidates are counted and dropped (benchmarks of the unplanned hot path).
void set_service_paused(bool paused);
// While held, candidates queue and are not planned; releasing plans them all in one round
// (tests of batched planning).
void hold_service_for_testing(bool held);
// Forgets which candidates were planned (tests that reset the monitor and the PlanTable).
void reset_service_for_testing();

}  // namespace livefuse::planner
