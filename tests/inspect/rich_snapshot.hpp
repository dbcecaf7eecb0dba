#pragma once
// A recorded report with a plan in every state and every field set (not from a live run: the
// fields later components fill -- kernels, groups, graphs -- are written out by hand). It is
// the source of tests/inspect/golden/report_states.json; the schema test checks the file
// still reads back to exactly this, so a v1 report stays readable.
#include "livefuse/inspect.hpp"

namespace lftest {
livefuse::Snapshot rich_snapshot();
}
