#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace livefuse {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::cuda, i}; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

Device parse_device(std::string_view s);  // "cpu", "cuda", "cuda:1"; throws Error otherwise
bool cuda_available();                    // a usable GPU is present (false in CPU-only builds)
Device default_device();                  // LIVEFUSE_DEVICE, else cuda:0 when available, else cpu

}  // namespace livefuse
