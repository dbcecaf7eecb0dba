#pragma once
// Test-only fault switch: makes a pipeline step fail as if the real step had, so tests can
// prove that every failure leaves eager execution serving and the decision visible.
#include <cstdint>

namespace livefuse::faults {

enum class Point : uint8_t { plan, compile, load, instantiate, run, kCount };

// The next `count` times `p` is reached, it fails.
void inject(Point p, int count = 1);
// Consumes one pending failure of `p`: true when the step must fail now. One relaxed load
// when nothing is injected.
bool fire(Point p);
const char* point_name(Point p);

}  // namespace livefuse::faults
