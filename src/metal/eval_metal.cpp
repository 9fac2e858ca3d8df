#include "metal/eval_metal.h"

#include <stdexcept>

#include "mlx/allocator.h"
#include "mlx/backend/metal/device.h"

namespace mlx_metile {

void eval_metal(const TileKernel& kernel, mx::Stream stream, const std::vector<mx::array>& inputs,
                std::vector<mx::array>& outputs) {
  const Artifact& a = kernel.artifact();
  if (a.target != "msl") throw std::runtime_error("mlx_metile: the Metal path runs MSL artifacts, got " + a.target);
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));

  auto& device = mx::metal::device(stream.device);
  // One library per artifact; MLX caches it by name.
  MTL::Library* library = device.get_library("mlx_metile_" + a.key, [source = a.source]() { return source; });
  MTL::ComputePipelineState* pipeline = device.get_kernel(a.entry, library);

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
