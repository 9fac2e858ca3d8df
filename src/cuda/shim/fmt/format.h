// MLX's CUDA headers (mlx/backend/cuda/lru_cache.h, through device.h) include <fmt/format.h>,
// which MLX's wheel does not ship; only a template this project never instantiates calls it.
// A declaration is all the header needs here (its use would fail to link, not run wrongly).
#pragma once

#include <string>

namespace fmt {
template <typename... Args>
std::string format(const char* pattern, Args&&... args);
}  // namespace fmt
