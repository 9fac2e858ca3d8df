#include "metal/metal_device.h"

#include "mlx/backend/metal/device.h"

namespace mlx_metile {

MetalDeviceInfo metal_device_info() {
  auto pool = NS::TransferPtr(NS::AutoreleasePool::alloc()->init());
  auto& device = mlx::core::metal::device(mlx::core::Device::gpu);
  MetalDeviceInfo info;
  info.architecture = device.get_architecture();
  info.generation = device.get_architecture_gen();
  NS::ProcessInfo* process = NS::ProcessInfo::processInfo();
  NS::OperatingSystemVersion v = process->operatingSystemVersion();
  info.macos[0] = static_cast<int>(v.majorVersion);
  info.macos[1] = static_cast<int>(v.minorVersion);
  info.macos[2] = static_cast<int>(v.patchVersion);
  if (NS::String* text = process->operatingSystemVersionString()) info.os_version = text->utf8String();
  // MLX 0.32.4's is_nax_available() (mlx/backend/metal/device.cpp), which libmlx does not export:
  // the same test, on the same device object.
  bool os = false;
  if (__builtin_available(macOS 26.2, iOS 26.2, tvOS 26.2, visionOS 26.2, *)) os = true;
  char kind = info.architecture.empty() ? '\0' : info.architecture.back();
  info.nax = os && info.generation >= (kind == 'p' ? 18 : 17);
  return info;
}

}  // namespace mlx_metile
