#include "emu/emulated_dispatch.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "emu_abi.h"

namespace mlx_metile {

namespace {

using DispatchFn = int (*)(const metile_kernel_info*, const metile_launch*, metile_result*);

struct Loaded {
  const metile_kernel_info* info;
  DispatchFn dispatch;
};

Loaded load(const std::string& path) {
  static std::mutex mu;
  static std::unordered_map<std::string, Loaded> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  // Kernel objects are never unloaded: fibers may still reference their code.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("mlx_metile emulator: cannot load ") + dlerror());
  auto* info = static_cast<const metile_kernel_info*>(dlsym(handle, "metile_kernel"));
  auto fn = reinterpret_cast<DispatchFn>(dlsym(handle, "metile_emu_dispatch"));
  if (!info || !fn) throw std::runtime_error("mlx_metile emulator: " + path + " is not an emulated kernel");
  Loaded l{info, fn};
  cache.emplace(path, l);
  return l;
}

}  // namespace

void emulated_dispatch(const std::string& object_path, const Artifact& a, const std::vector<mx::array>& inputs,
                       std::vector<mx::array>& outputs) {
  Loaded k = load(object_path);
  metile_launch launch;
  std::memset(&launch, 0, sizeof launch);
  for (int i = 0; i < 3; ++i) {
    launch.threadgroups[i] = static_cast<uint32_t>(a.threadgroups[i]);
    launch.threads_per_group[i] = static_cast<uint32_t>(a.threads_per_group[i]);
  }
  if (a.bindings.size() > METILE_EMU_MAX_BUFFERS) throw std::invalid_argument("mlx_metile: too many buffers");
  std::vector<int32_t> scalars(a.bindings.size());
  launch.num_buffers = static_cast<uint32_t>(a.bindings.size());
  for (size_t i = 0; i < a.bindings.size(); ++i) {
    const Binding& b = a.bindings[i];
    switch (b.kind) {
      case BindingKind::Input: {
        const mx::array& arr = inputs.at(b.value);
        launch.buffers[i] = const_cast<void*>(static_cast<const void*>(arr.data<char>()));
        launch.buffer_sizes[i] = arr.nbytes();
        break;
      }
      case BindingKind::Output: {
        mx::array& arr = outputs.at(b.value);
        launch.buffers[i] = arr.data<char>();
        launch.buffer_sizes[i] = arr.nbytes();
        break;
      }
      case BindingKind::Scalar:
        scalars[i] = static_cast<int32_t>(b.value);
        launch.buffers[i] = &scalars[i];
        launch.buffer_sizes[i] = sizeof(int32_t);
        break;
    }
  }
  metile_result result;
  if (k.dispatch(k.info, &launch, &result) != METILE_OK) {
    std::string where =
        result.fault_line > 0 ? std::string(result.fault_file) + ":" + std::to_string(result.fault_line) + ": " : "";
    char pc[64] = "";
    if (result.fault_line <= 0 && result.fault_pc_offset)
      std::snprintf(pc, sizeof pc, " (code offset 0x%llx in %s)",
                    static_cast<unsigned long long>(result.fault_pc_offset - 1), object_path.c_str());
    throw std::runtime_error("mlx_metile emulated kernel " + a.entry + ": " + where + result.message + pc);
  }
}

}  // namespace mlx_metile
