// One planned launch of a compiled CUDA kernel, with every argument but the arrays
// converted once (ops._CudaPlan keeps one per call shape). Building the graph node from
// C++ saves an eager call the Python-side conversion of ten keyword arguments.
//
// Where the extension is built against MLX's CUDA build with the CUDA toolkit's headers
// (METILE_CUDA_PRIMITIVE) and `primitive` is asked for, the node is this project's own
// primitive (cuda/cuda_kernel.h); otherwise MLX's precompiled-kernel op (mlx/fast.h, which
// every MLX build declares: on a build without the CUDA backend it raises, as MLX's own
// binding does).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlx/array.h"
#include "mlx/fast.h"
#include "mlx/utils.h"

namespace mlx_metile {

namespace mx = mlx::core;

class CudaLaunch {
 public:
  CudaLaunch(std::string name, std::string binary, std::vector<int> out_columns, mx::Dtype out_dtype,
             std::vector<int> scalars, std::array<int, 3> grid, std::array<int, 3> threadgroup, int shared_memory,
             std::optional<mx::Dtype> x_cast, std::optional<mx::Dtype> residual_cast, bool primitive);

  // The kernel's outputs for x [..., K], the weights' arrays and an optional residual
  // [..., N]: each output has x's leading dimensions. Inputs are made row-contiguous
  // by MLX at evaluation (ensure_row_contiguous), as the Python launch asks.
  std::vector<mx::array> operator()(const mx::array& x, const std::vector<mx::array>& weights,
                                    const std::optional<mx::array>& residual, mx::StreamOrDevice s) const;

  const std::string& name() const { return name_; }
  const std::string& binary() const { return binary_; }
  const std::vector<int>& out_columns() const { return out_columns_; }
  mx::Dtype out_dtype() const { return out_dtype_; }
  const std::vector<int>& scalars() const { return scalars_; }
  std::array<int, 3> grid() const { return grid_; }
  std::array<int, 3> threadgroup() const { return threadgroup_; }
  int shared_memory() const { return shared_memory_; }
  std::optional<mx::Dtype> x_cast() const { return x_cast_; }
  std::optional<mx::Dtype> residual_cast() const { return residual_cast_; }
  // Whether calls build this project's primitive (false: MLX's precompiled-kernel op).
  bool primitive() const { return static_cast<bool>(launch_); }

 private:
  std::string name_;
  std::string binary_;
  std::vector<int> out_columns_;
  mx::Dtype out_dtype_;
  std::vector<int> scalars_;
  std::vector<mx::fast::ScalarArg> scalar_args_;
  std::array<int, 3> grid_;
  std::array<int, 3> threadgroup_;
  int shared_memory_;
  std::optional<mx::Dtype> x_cast_;
  std::optional<mx::Dtype> residual_cast_;
  std::shared_ptr<const void> launch_;  // a CudaKernelLaunch where the primitive is used
};

// Whether this build has the primitive (METILE_CUDA_PRIMITIVE).
bool has_cuda_primitive();

}  // namespace mlx_metile
