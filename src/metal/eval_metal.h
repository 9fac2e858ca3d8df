// The Metal evaluation path (macOS builds only): the artifact's MSL source is
// built into a library through MLX's Metal device, and dispatched with the
// artifact's bindings and grid on the stream's command encoder - MLX's own
// extension pattern. Not compiled or run on Linux.
#pragma once

#include <vector>

#include "tile_kernel.h"

namespace mlx_metile {

void eval_metal(const TileKernel& kernel, mx::Stream stream, const std::vector<mx::array>& inputs,
                std::vector<mx::array>& outputs);

}  // namespace mlx_metile
