#pragma once
// Test-only fault switch: makes a pipeline step fail as if the real step had, so tests can
// prove that every failure leaves eager execution serving and the decision visible.
#include <cstdint>

namespace livefuse::faults {

// step: a plan's step finds its kernel still compiling for these shapes (planner/plan.hpp,
// KernelNotReady), reached before each step of a run but its first: the run stops part-way.
enum class Point : uint8_t { plan, compile, load, instantiate, run, step, kCount };

// The next `count` times `p` is reached, it fails -- after `skip` more reaches that do not.
void inject(Point p, int count = 1, int skip = 0);
// Drops what is still injected at `p` (failures and skips).
void clear(Point p);
// Consumes one pending failure of `p`: true when the step must fail now. One relaxed load
// when nothing is injected.
bool fire(Point p);
const char* point_name(Point p);

}  // namespace livefuse::faults
