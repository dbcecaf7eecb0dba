#pragma once
// Umbrella header. `namespace lf = livefuse;` is provided for brevity.
#include "livefuse/config.hpp"
#include "livefuse/custom.hpp"
#include "livefuse/dlpack.hpp"
#include "livefuse/device.hpp"
#include "livefuse/dtype.hpp"
#include "livefuse/error.hpp"
#include "livefuse/memory.hpp"
#include "livefuse/ops.hpp"
#include "livefuse/shape.hpp"
#include "livefuse/stream.hpp"
#include "livefuse/tensor.hpp"

namespace lf = livefuse;
