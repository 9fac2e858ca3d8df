// Resolves <MetalPerformancePrimitives/MetalPerformancePrimitives.h> to the emulator shim:
// mpp::tensor_ops (matmul2d, reduce_rows, reduce_columns) over <metal_tensor>.
#pragma once
#include "../metile_metal.h"
#include "../metile_mpp.h"
#include "../metile_tensor.h"
