// Runs an MSL artifact through the Metal-on-CPU emulator (mlx_metile/emu):
// the kernel object the Python driver built is loaded with dlopen and
// dispatched with the same bindings and grid the Metal path would use.
#pragma once

#include <string>
#include <vector>

#include "tile_kernel.h"

namespace mlx_metile {

void emulated_dispatch(const std::string& object_path, const Artifact& artifact, const std::vector<mx::array>& inputs,
                       std::vector<mx::array>& outputs);

}  // namespace mlx_metile
