#include "cuda_launch.h"

#include <stdexcept>
#include <tuple>

#include "mlx/ops.h"

#ifdef METILE_CUDA_PRIMITIVE
#include "cuda/cuda_kernel.h"
#endif

namespace mlx_metile {

CudaLaunch::CudaLaunch(std::string name, std::string binary, std::vector<int> out_columns, mx::Dtype out_dtype,
                       std::vector<int> scalars, std::array<int, 3> grid, std::array<int, 3> threadgroup,
                       int shared_memory, std::optional<mx::Dtype> x_cast, std::optional<mx::Dtype> residual_cast,
                       bool primitive)
    : name_(std::move(name)),
      binary_(std::move(binary)),
      out_columns_(std::move(out_columns)),
      out_dtype_(out_dtype),
      scalars_(std::move(scalars)),
      grid_(grid),
      threadgroup_(threadgroup),
      shared_memory_(shared_memory),
      x_cast_(x_cast),
      residual_cast_(residual_cast) {
  if (out_columns_.empty()) throw std::invalid_argument("CudaLaunch: out_columns: expected at least one output");
  for (int v : scalars_) scalar_args_.emplace_back(v);
  if (!primitive) return;
#ifdef METILE_CUDA_PRIMITIVE
  // MLX's op takes the grid in threads; the primitive takes blocks
  std::array<int, 3> blocks;
  for (int i = 0; i < 3; ++i) {
    if (threadgroup_[i] < 1) throw std::invalid_argument("CudaLaunch: threadgroup: expected positive sizes");
    blocks[i] = (grid_[i] + threadgroup_[i] - 1) / threadgroup_[i];
  }
  launch_ = std::make_shared<CudaKernelLaunch>(name_, binary_, scalars_, blocks, threadgroup_, shared_memory_);
#else
  throw std::invalid_argument("CudaLaunch: primitive: this build has no CUDA primitive (has_cuda_primitive())");
#endif
}

bool has_cuda_primitive() {
#ifdef METILE_CUDA_PRIMITIVE
  return true;
#else
  return false;
#endif
}

std::vector<mx::array> CudaLaunch::operator()(const mx::array& x, const std::vector<mx::array>& weights,
                                              const std::optional<mx::array>& residual, mx::StreamOrDevice s) const {
  if (x.ndim() < 1) throw std::invalid_argument("CudaLaunch: x: expected at least one dimension");
  std::vector<mx::array> inputs;
  inputs.reserve(weights.size() + 2);
  inputs.push_back(x_cast_ ? mx::astype(x, *x_cast_, s) : x);
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  if (residual) inputs.push_back(residual_cast_ ? mx::astype(*residual, *residual_cast_, s) : *residual);

  std::vector<mx::Shape> shapes;
  shapes.reserve(out_columns_.size());
  for (int n : out_columns_) {
    mx::Shape shape(x.shape().begin(), x.shape().end() - 1);
    shape.push_back(n);
    shapes.push_back(std::move(shape));
  }
  std::vector<mx::Dtype> dtypes(out_columns_.size(), out_dtype_);
#ifdef METILE_CUDA_PRIMITIVE
  if (launch_) {
    auto launch = std::static_pointer_cast<const CudaKernelLaunch>(launch_);
    return mx::array::make_arrays(std::move(shapes), dtypes,
                                  std::make_shared<CudaKernel>(mx::to_stream(s), std::move(launch)), inputs);
  }
#endif
  return mx::fast::precompiled_cuda_kernel(name_, binary_, inputs, shapes, dtypes, scalar_args_,
                                           std::make_tuple(grid_[0], grid_[1], grid_[2]),
                                           std::make_tuple(threadgroup_[0], threadgroup_[1], threadgroup_[2]),
                                           shared_memory_, std::nullopt, /*ensure_row_contiguous=*/true, s);
}

}  // namespace mlx_metile
