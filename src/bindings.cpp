// Python bindings: one low-level entry that the package's Python layer calls
// with a compiled artifact. Users call mlx_metile.linear & co., not this.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "cuda_launch.h"
#ifdef METILE_CUDA_PRIMITIVE
#include "cuda/cuda_kernel.h"
#endif
#include "emu_abi.h"
#include "tile_kernel.h"
#ifdef METILE_METAL
#include "metal/metal_archive.h"
#include "metal/metal_device.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;
namespace mt = mlx_metile;
namespace mx = mlx::core;

NB_MODULE(_ext, m) {
  m.doc() = "mlx-metile C++ core: the TileKernel MLX primitive and the planned CUDA launch";
  m.attr("EMU_ABI_VERSION") = METILE_EMU_ABI_VERSION;
#ifdef METILE_METAL
  m.attr("HAS_METAL") = true;
#else
  m.attr("HAS_METAL") = false;
#endif
#ifdef METILE_CUDA
  m.attr("HAS_CUDA") = true;
#else
  m.attr("HAS_CUDA") = false;
#endif

  m.def(
      "tile_kernel",
      [](const std::vector<mx::array>& inputs, const std::vector<std::vector<int>>& out_shapes,
         const std::vector<mx::Dtype>& out_dtypes, const std::string& target, const std::string& source,
         const std::string& entry, std::array<int64_t, 3> threadgroups, std::array<int64_t, 3> threads,
         const std::vector<std::tuple<int, int64_t>>& bindings, const std::string& key, const std::vector<int>& bits,
         const std::vector<int>& group_size, const std::vector<int>& mode, const std::vector<int>& has_bias,
         int epilogue, bool has_residual, const std::string& emulator_object, const std::string& route,
         const std::string& library_path, const std::string& archive_path, mx::StreamOrDevice s) {
        mt::Artifact a;
        a.target = target;
        a.route = route;
        a.source = source;
        a.library_path = library_path;
        a.archive_path = archive_path;
        a.entry = entry;
        a.threadgroups = threadgroups;
        a.threads_per_group = threads;
        a.key = key;
        for (const auto& [kind, value] : bindings) a.bindings.push_back({static_cast<mt::BindingKind>(kind), value});
        mt::ProjectionDesc d;
        d.bits = bits;
        d.group_size = group_size;
        d.mode = mode;
        d.has_bias = has_bias;
        d.epilogue = static_cast<mt::Epilogue>(epilogue);
        d.has_residual = has_residual;
        std::vector<mx::Shape> shapes;
        for (const auto& sh : out_shapes) shapes.emplace_back(sh.begin(), sh.end());
        return mt::tile_kernel(inputs, shapes, out_dtypes, std::move(a), std::move(d), emulator_object, s);
      },
      "inputs"_a, "out_shapes"_a, "out_dtypes"_a, "target"_a, "source"_a, "entry"_a, "threadgroups"_a, "threads"_a,
      "bindings"_a, "key"_a, "bits"_a, "group_size"_a, "mode"_a, "has_bias"_a, "epilogue"_a, "has_residual"_a,
      "emulator_object"_a, "route"_a = "msl", "library_path"_a = "", "archive_path"_a = "", nb::kw_only(),
      "stream"_a = nb::none(), "Build the array node of one compiled tile kernel (internal; see mlx_metile.ops).");

#ifdef METILE_METAL
  m.def(
      "metal_device_info",
      []() {
        mt::MetalDeviceInfo i = mt::metal_device_info();
        return nb::make_tuple(i.architecture, i.generation, nb::make_tuple(i.macos[0], i.macos[1], i.macos[2]),
                              i.os_version, i.nax);
      },
      "(architecture, generation, (macOS major, minor, patch), OS version text, whether MLX would run NAX) of the "
      "default GPU (internal; see mlx_metile.backends.metal_device).");
  m.def("metal_serialize_archive", &mt::serialize_archive, "library_path"_a, "entry"_a, "archive_path"_a, "key"_a,
        "Build the pipeline of `entry` of a metallib into a binary archive written to `archive_path` (internal; see "
        "mlx_metile.backends.metal_archive).");
#endif

  nb::class_<mt::CudaLaunch>(m, "CudaLaunch",
                             "One planned CUDA launch, through this project's primitive or MLX's "
                             "precompiled-kernel op (internal; see mlx_metile.ops._CudaPlan): every argument but "
                             "the arrays converted once.")
      .def(
          "__init__",
          [](mt::CudaLaunch* self, const std::string& name, nb::bytes binary, std::vector<int> out_columns,
             mx::Dtype out_dtype, std::vector<int> scalars, std::array<int, 3> grid, std::array<int, 3> threadgroup,
             int shared_memory, std::optional<mx::Dtype> x_cast, std::optional<mx::Dtype> residual_cast,
             bool primitive) {
            new (self)
                mt::CudaLaunch(name, std::string(binary.c_str(), binary.size()), std::move(out_columns), out_dtype,
                               std::move(scalars), grid, threadgroup, shared_memory, x_cast, residual_cast, primitive);
          },
          "name"_a, "binary"_a, "out_columns"_a, "out_dtype"_a, "scalars"_a, "grid"_a, "threadgroup"_a,
          "shared_memory"_a, "x_cast"_a.none(), "residual_cast"_a.none(), "primitive"_a = false)
      .def("__call__", &mt::CudaLaunch::operator(), "x"_a, "weights"_a, "residual"_a.none() = nb::none(),
           "stream"_a = nb::none(), "The kernel's outputs, each with x's leading dimensions.")
      .def_prop_ro("name", &mt::CudaLaunch::name)
      .def_prop_ro("binary", [](const mt::CudaLaunch& l) { return nb::bytes(l.binary().data(), l.binary().size()); })
      .def_prop_ro("out_columns", &mt::CudaLaunch::out_columns)
      .def_prop_ro("out_dtype", &mt::CudaLaunch::out_dtype)
      .def_prop_ro("scalars", &mt::CudaLaunch::scalars)
      .def_prop_ro("grid", &mt::CudaLaunch::grid)
      .def_prop_ro("threadgroup", &mt::CudaLaunch::threadgroup)
      .def_prop_ro("shared_memory", &mt::CudaLaunch::shared_memory)
      .def_prop_ro("x_cast", &mt::CudaLaunch::x_cast)
      .def_prop_ro("residual_cast", &mt::CudaLaunch::residual_cast)
      .def_prop_ro("primitive", &mt::CudaLaunch::primitive);

  m.attr("HAS_CUDA_PRIMITIVE") = mt::has_cuda_primitive();
#ifdef METILE_CUDA_PRIMITIVE
  m.def(
      "cuda_output_pool_stats",
      []() {
        auto s = mt::output_pool_stats();
        return nb::make_tuple(s.allocated, s.reused, s.cached_bytes, s.freed);
      },
      "(allocated, reused, cached_bytes, freed) of the CUDA primitive's output pool (internal; for tests).");
  m.def(
      "cuda_set_output_pool_limit", [](size_t mb) { mt::set_output_pool_limit(mb << 20); },
      "MB of released output buffers the CUDA primitive's pool keeps (the settings pass MLX_METILE_CUDA_POOL_MB).");
#endif
}
