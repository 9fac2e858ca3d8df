// The Metal evaluation path (macOS builds only): the artifact's pipeline - its MSL source built
// into a library through MLX's Metal device, an AIR metallib loaded from a path, or a pipeline
// taken from a binary archive - dispatched with the artifact's bindings and grid on the stream's
// command encoder: MLX's own extension pattern. Never compiled or run on Linux (tests/metal_host
// checks its syntax against metal-cpp's headers only).
#pragma once

#include <vector>

#include "tile_kernel.h"

namespace mlx_metile {

void eval_metal(const TileKernel& kernel, mx::Stream stream, const std::vector<mx::array>& inputs,
                std::vector<mx::array>& outputs);

}  // namespace mlx_metile
