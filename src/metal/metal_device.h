// What the Metal device is (macOS builds only), for the Python dispatch: the GPU architecture and
// generation as MLX reads them, the macOS version, and whether MLX would run its NAX kernels here.
#pragma once

#include <string>

namespace mlx_metile {

struct MetalDeviceInfo {
  std::string architecture;  // e.g. "applegpu_g17s" (MTLDevice architecture name, or MLX's override)
  int generation = 0;        // MLX's reading of it: the two digits before the last letter
  int macos[3] = {0, 0, 0};  // major, minor, patch
  std::string os_version;    // NSProcessInfo's operatingSystemVersionString, with the OS build
  bool nax = false;          // MLX's is_nax_available(): macOS >= 26.2 and generation >= 17 (18 on phones)
};

MetalDeviceInfo metal_device_info();

}  // namespace mlx_metile
