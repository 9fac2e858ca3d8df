// The CPU implementation of ProjectionDesc: the semantics every target's
// kernel is held to (f32 accumulation in an order that does not depend on the
// number of rows, one rounding at the end).
#pragma once

#include <vector>

#include "tile_kernel.h"

namespace mlx_metile {

void cpu_projection(const ProjectionDesc& desc, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs);

// f32 epilogue functions shared by the CPU path.
float silu(float v);
float gelu(float v);
float gelu_approx(float v);

}  // namespace mlx_metile
