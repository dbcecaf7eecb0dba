#include "kernels/cuda/pdl.hpp"

#include "kernels/cuda/device_info.hpp"
#include "livefuse/config.hpp"

namespace livefuse::cuda {

bool pdl_enabled() { return config().pdl && current_device_info().cc_major >= 9; }

}  // namespace livefuse::cuda
