// The MLX primitive that evaluates one compiled tile-kernel artifact.
//
// The Python compiler produces the artifact (target, source, entry point,
// launch grid, argument bindings); this class only holds it and dispatches
// it. It never compiles tile programs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"

namespace mlx_metile {

namespace mx = mlx::core;

// How a kernel buffer slot is filled.
enum class BindingKind : int { Input = 0, Output = 1, Scalar = 2 };

struct Binding {
  BindingKind kind;
  int64_t value;  // input / output index, or the int32 scalar value
};

struct Artifact {
  std::string target;  // "msl", "air", "cuda"
  // How the Metal path loads it: "msl" (source compiled by Metal), "metallib" (library_path: an AIR
  // metallib), "archive" (archive_path: a binary archive holding the pipeline of library_path's entry).
  std::string route = "msl";
  std::string source;
  std::string library_path;  // a .metallib in the cache (routes metallib and archive)
  std::string archive_path;  // a binary archive in the cache (route archive)
  std::string entry;
  std::array<int64_t, 3> threadgroups{1, 1, 1};
  std::array<int64_t, 3> threads_per_group{1, 1, 1};
  std::vector<Binding> bindings;
  std::string key;  // identifies (spec, schedule): equal keys, equal code
};

// Epilogues applied in f32 before the single rounding to the output dtype.
enum class Epilogue : int { None = 0, SwiGLU = 1, Gelu = 2, GeluApprox = 3, Silu = 4 };

// What the kernel computes, for the CPU path and for gradients:
//   inputs  = x[M,K], then per weight: w (dense [N,K] or packed [N,K*bits/32]),
//             [scales, biases] when affine, [scales] (uint8) when microscaled,
//             [bias[N]] when has_bias;
//             then residual[M,N] when has_residual.
//   outputs = one per weight (Epilogue None / Gelu / Silu without residual),
//             or a single output (SwiGLU, or a residual add).
// A quantized weight's mode (dense weights have bits 0 and mode Affine).
enum class QuantMode : int { Affine = 0, MxFp4 = 1, MxFp8 = 2, NvFp4 = 3 };

struct ProjectionDesc {
  std::vector<int> bits;        // 0 = dense
  std::vector<int> group_size;  // quantized only
  std::vector<int> mode;        // QuantMode, per weight
  std::vector<int> has_bias;
  Epilogue epilogue = Epilogue::None;
  bool has_residual = false;

  bool operator==(const ProjectionDesc& o) const {
    return bits == o.bits && group_size == o.group_size && mode == o.mode && has_bias == o.has_bias &&
           epilogue == o.epilogue && has_residual == o.has_residual;
  }
  int num_weights() const { return static_cast<int>(bits.size()); }
  // The arrays of weight i among the inputs: w, then scales (and biases) when quantized.
  int weight_arrays(int i) const {
    if (!bits[i]) return 1;
    return static_cast<QuantMode>(mode[i]) == QuantMode::Affine ? 3 : 2;
  }
};

class TileKernel : public mx::Primitive {
 public:
  TileKernel(mx::Stream stream, Artifact artifact, ProjectionDesc desc, std::string emulator_object)
      : mx::Primitive(stream),
        artifact_(std::move(artifact)),
        desc_(std::move(desc)),
        emulator_object_(std::move(emulator_object)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;

  // The Python side wraps the node in an mx.custom_function whose transforms follow the stock MLX
  // composition (mlx_metile/gradients.py), the one reference of the numerics, so there is no vjp
  // here. MLX 0.32.4's jvp of a custom function visits its forward graph too, though: jvp gives
  // that visit zeros, never used (the call's tangents are the custom function's); vmap likewise.
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override;

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "TileKernel"; }
  bool is_equivalent(const mx::Primitive& other) const override;

  const Artifact& artifact() const { return artifact_; }
  const ProjectionDesc& desc() const { return desc_; }

 private:
  Artifact artifact_;
  ProjectionDesc desc_;
  std::string emulator_object_;  // non-empty: run the MSL through the CPU emulator
};

// Builds the array node. Inputs are made row-contiguous here.
std::vector<mx::array> tile_kernel(const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& out_shapes,
                                   const std::vector<mx::Dtype>& out_dtypes, Artifact artifact, ProjectionDesc desc,
                                   std::string emulator_object, mx::StreamOrDevice s = {});

}  // namespace mlx_metile
