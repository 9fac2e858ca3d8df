#include "tile_kernel.h"

#include <stdexcept>

#include "cpu/projection.h"
#include "emu/emulated_dispatch.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"

#ifdef METILE_METAL
#include "metal/eval_metal.h"
#endif

namespace mlx_metile {

void TileKernel::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
  for (const auto& in : inputs)
    if (!in.flags().row_contiguous) throw std::invalid_argument("mlx_metile: TileKernel inputs must be row-contiguous");
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& in : inputs) encoder.set_input_array(in);
  for (auto& o : outputs) encoder.set_output_array(o);
  encoder.dispatch([inputs, outputs, desc = desc_, artifact = artifact_, object = emulator_object_]() mutable {
    if (!object.empty())
      emulated_dispatch(object, artifact, inputs, outputs);
    else
      cpu_projection(desc, inputs, outputs);
  });
}

void TileKernel::eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
#ifdef METILE_METAL
  eval_metal(*this, stream(), inputs, outputs);
#else
  throw std::runtime_error("mlx_metile: this build has no GPU path for target '" + artifact_.target +
                           "' (Metal is built on macOS only; the CUDA path needs MLX's CUDA build)");
#endif
}

std::vector<mx::array> TileKernel::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                       const std::vector<int>& argnums) {
  std::vector<mx::array> out;
  for (const auto& shape : output_shapes(primals)) out.push_back(mx::zeros(shape, primals[0].dtype(), stream()));
  return out;
}

std::pair<std::vector<mx::array>, std::vector<int>> TileKernel::vmap(const std::vector<mx::array>& inputs,
                                                                     const std::vector<int>& axes) {
  int batch = 1;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (axes[i] >= 0) batch = inputs[i].shape(axes[i]);
  std::vector<mx::array> unbatched = inputs;
  if (axes[0] >= 0) {  // the shapes of one call: x without its mapped axis
    mx::Shape x = inputs[0].shape();
    x.erase(x.begin() + axes[0]);
    unbatched[0] = mx::zeros(x, inputs[0].dtype(), stream());
  }
  std::vector<mx::array> out;
  for (auto shape : output_shapes(unbatched)) {
    shape.insert(shape.begin(), batch);
    out.push_back(mx::zeros(shape, inputs[0].dtype(), stream()));
  }
  return {out, std::vector<int>(out.size(), 0)};
}

std::vector<mx::Shape> TileKernel::output_shapes(const std::vector<mx::array>& inputs) {
  mx::Shape lead(inputs[0].shape().begin(), inputs[0].shape().end() - 1);
  std::vector<mx::Shape> shapes;
  size_t idx = 1;
  for (int i = 0; i < desc_.num_weights(); ++i) {
    mx::Shape s = lead;
    s.push_back(inputs[idx].shape(0));
    shapes.push_back(s);
    idx += desc_.weight_arrays(i) + (desc_.has_bias[i] ? 1 : 0);
  }
  if (desc_.epilogue == Epilogue::SwiGLU || desc_.has_residual) shapes.resize(1);
  return shapes;
}

bool TileKernel::is_equivalent(const mx::Primitive& other) const {
  const auto* o = dynamic_cast<const TileKernel*>(&other);
  if (!o) return false;
  const Artifact& a = artifact_;
  const Artifact& b = o->artifact_;
  if (a.key != b.key || a.route != b.route || a.threadgroups != b.threadgroups ||
      a.threads_per_group != b.threads_per_group || a.bindings.size() != b.bindings.size() || !(desc_ == o->desc_) ||
      emulator_object_ != o->emulator_object_)
    return false;
  for (size_t i = 0; i < a.bindings.size(); ++i)
    if (a.bindings[i].kind != b.bindings[i].kind || a.bindings[i].value != b.bindings[i].value) return false;
  return true;
}

std::vector<mx::array> tile_kernel(const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& out_shapes,
                                   const std::vector<mx::Dtype>& out_dtypes, Artifact artifact, ProjectionDesc desc,
                                   std::string emulator_object, mx::StreamOrDevice s) {
  if (out_shapes.size() != out_dtypes.size()) throw std::invalid_argument("mlx_metile: out_shapes/out_dtypes differ");
  auto stream = mx::to_stream(s);
  std::vector<mx::array> contiguous;
  for (const auto& in : inputs) contiguous.push_back(mx::contiguous(in, false, stream));
  return mx::array::make_arrays(
      out_shapes, out_dtypes,
      std::make_shared<TileKernel>(stream, std::move(artifact), std::move(desc), std::move(emulator_object)),
      contiguous);
}

}  // namespace mlx_metile
