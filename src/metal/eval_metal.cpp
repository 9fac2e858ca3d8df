#include "metal/eval_metal.h"

#include <stdexcept>

#include "metal/metal_archive.h"
#include "mlx/allocator.h"
#include "mlx/backend/metal/device.h"

namespace mlx_metile {

namespace {

// The artifact's pipeline, by its route: MSL source compiled by Metal, an AIR metallib loaded from
// the cache by path (MLX's extension example: get_library(name, path)), or a pipeline that must come
// from a binary archive. MLX keeps libraries by name and pipelines by library and entry.
MTL::ComputePipelineState* pipeline_of(const Artifact& a, mx::metal::Device& device) {
  const std::string name = "mlx_metile_" + a.key;
  if (a.route == "msl") {
    if (a.target != "msl") throw std::runtime_error("mlx_metile: route msl needs an MSL artifact, got " + a.target);
    MTL::Library* library = device.get_library(name, [source = a.source]() { return source; });
    return device.get_kernel(a.entry, library);
  }
  if (a.route != "metallib" && a.route != "archive")
    throw std::runtime_error("mlx_metile: the Metal path has no route '" + a.route + "' (msl, metallib, archive)");
  if (a.library_path.empty())
    throw std::runtime_error("mlx_metile: route " + a.route + " of kernel '" + a.entry + "' has no metallib path");
  MTL::Library* library = device.get_library(name, a.library_path);
  if (a.route == "metallib") return device.get_kernel(a.entry, library);
  return archive_pipeline(device, library, a.entry, a.archive_path, a.key);
}

}  // namespace

void eval_metal(const TileKernel& kernel, mx::Stream stream, const std::vector<mx::array>& inputs,
                std::vector<mx::array>& outputs) {
  const Artifact& a = kernel.artifact();
  auto& device = mx::metal::device(stream.device);
  MTL::ComputePipelineState* pipeline = pipeline_of(a, device);
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));

  auto& encoder = mx::metal::get_command_encoder(stream);
  encoder.set_compute_pipeline_state(pipeline);
  for (size_t i = 0; i < a.bindings.size(); ++i) {
    const Binding& b = a.bindings[i];
    int slot = static_cast<int>(i);
    switch (b.kind) {
      case BindingKind::Input: encoder.set_input_array(inputs.at(b.value), slot); break;
      case BindingKind::Output: encoder.set_output_array(outputs.at(b.value), slot); break;
      case BindingKind::Scalar: {
        int32_t value = static_cast<int32_t>(b.value);
        encoder.set_bytes(value, slot);
        break;
      }
    }
  }
  MTL::Size grid(a.threadgroups[0], a.threadgroups[1], a.threadgroups[2]);
  MTL::Size group(a.threads_per_group[0], a.threads_per_group[1], a.threads_per_group[2]);
  encoder.dispatch_threadgroups(grid, group);
}

}  // namespace mlx_metile
