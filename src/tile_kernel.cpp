#include "tile_kernel.h"

#include <functional>
#include <stdexcept>

#include "cpu/projection.h"
#include "emu/emulated_dispatch.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/transforms.h"

#ifdef METILE_METAL
#include "metal/eval_metal.h"
#endif

namespace mlx_metile {

namespace {

// The same computation in stock MLX ops, in f32; used for gradients only.
std::vector<mx::array> reference(const ProjectionDesc& d, const std::vector<mx::array>& in,
                                 const std::vector<mx::Dtype>& out_dtypes, mx::Stream s) {
  mx::array x = mx::astype(in[0], mx::float32, s);
  size_t idx = 1;
  std::vector<mx::array> z;
  for (int i = 0; i < d.num_weights(); ++i) {
    const mx::array& w = in[idx++];
    mx::array y = x;
    if (d.bits[i]) {
      const mx::array& scales = in[idx++];
      const mx::array& biases = in[idx++];
      y = mx::quantized_matmul(x, w, mx::astype(scales, mx::float32, s), mx::astype(biases, mx::float32, s), true,
                               d.group_size[i], d.bits[i], "affine", s);
    } else {
      y = mx::matmul(x, mx::transpose(mx::astype(w, mx::float32, s), s), s);
    }
    if (d.has_bias[i]) y = mx::add(y, mx::astype(in[idx++], mx::float32, s), s);
    z.push_back(y);
  }
  auto silu = [&](const mx::array& v) { return mx::multiply(v, mx::sigmoid(v, s), s); };
  std::vector<mx::array> outs;
  if (d.epilogue == Epilogue::SwiGLU) {
    outs.push_back(mx::multiply(silu(z[0]), z[1], s));
  } else {
    for (auto& v : z) {
      switch (d.epilogue) {
        case Epilogue::Silu: outs.push_back(silu(v)); break;
        case Epilogue::Gelu:
          outs.push_back(
              mx::multiply(mx::multiply(v, mx::array(0.5f), s),
                           mx::add(mx::array(1.0f), mx::erf(mx::multiply(v, mx::array(0.70710678f), s), s), s), s));
          break;
        case Epilogue::GeluApprox: {
          mx::array inner =
              mx::multiply(mx::array(0.79788456f),
                           mx::add(v, mx::multiply(mx::array(0.044715f), mx::power(v, mx::array(3.0f), s), s), s), s);
          outs.push_back(
              mx::multiply(mx::multiply(v, mx::array(0.5f), s), mx::add(mx::array(1.0f), mx::tanh(inner, s), s), s));
          break;
        }
        default: outs.push_back(v);
      }
    }
  }
  if (d.has_residual) outs[0] = mx::add(outs[0], mx::astype(in[idx++], mx::float32, s), s);
  for (size_t i = 0; i < outs.size(); ++i) outs[i] = mx::astype(outs[i], out_dtypes[i], s);
  return outs;
}

}  // namespace

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

namespace {

// The reference computation as a function of the differentiated inputs only
// (the others held at their primal values), and those inputs' primals.
using Fn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;
std::pair<Fn, std::vector<mx::array>> restricted(const ProjectionDesc& desc, const std::vector<mx::array>& primals,
                                                 const std::vector<int>& argnums, std::vector<mx::Dtype> dtypes,
                                                 mx::Stream s) {
  Fn fn = [desc, primals, argnums, dtypes = std::move(dtypes), s](const std::vector<mx::array>& sub) {
    std::vector<mx::array> all = primals;
    for (size_t i = 0; i < argnums.size(); ++i) all[argnums[i]] = sub[i];
    return reference(desc, all, dtypes, s);
  };
  std::vector<mx::array> sub;
  for (int a : argnums) sub.push_back(primals[a]);
  return {fn, sub};
}

}  // namespace

std::vector<mx::array> TileKernel::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                       const std::vector<int>& argnums, const std::vector<mx::array>& outputs) {
  std::vector<mx::Dtype> dtypes;
  for (const auto& o : outputs) dtypes.push_back(o.dtype());
  auto [fn, sub] = restricted(desc_, primals, argnums, std::move(dtypes), stream());
  return mx::vjp(fn, sub, cotangents).second;
}

std::vector<mx::array> TileKernel::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                       const std::vector<int>& argnums) {
  // outputs have x's dtype (the op casts x to the promoted dtype first)
  std::vector<mx::Dtype> dtypes(output_shapes(primals).size(), primals[0].dtype());
  auto [fn, sub] = restricted(desc_, primals, argnums, std::move(dtypes), stream());
  return mx::jvp(fn, sub, tangents).second;
}

std::vector<mx::Shape> TileKernel::output_shapes(const std::vector<mx::array>& inputs) {
  mx::Shape lead(inputs[0].shape().begin(), inputs[0].shape().end() - 1);
  std::vector<mx::Shape> shapes;
  size_t idx = 1;
  for (int i = 0; i < desc_.num_weights(); ++i) {
    mx::Shape s = lead;
    s.push_back(inputs[idx].shape(0));
    shapes.push_back(s);
    idx += 1 + (desc_.bits[i] ? 2 : 0) + (desc_.has_bias[i] ? 1 : 0);
  }
  if (desc_.epilogue == Epilogue::SwiGLU || desc_.has_residual) shapes.resize(1);
  return shapes;
}

bool TileKernel::is_equivalent(const mx::Primitive& other) const {
  const auto* o = dynamic_cast<const TileKernel*>(&other);
  if (!o) return false;
  const Artifact& a = artifact_;
  const Artifact& b = o->artifact_;
  if (a.key != b.key || a.threadgroups != b.threadgroups || a.threads_per_group != b.threads_per_group ||
      a.bindings.size() != b.bindings.size() || !(desc_ == o->desc_) || emulator_object_ != o->emulator_object_)
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
