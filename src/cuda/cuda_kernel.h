// An MLX primitive of our own that launches one compiled CUDA kernel through MLX's
// command encoder (MLX's CUDA build only; METILE_CUDA_PRIMITIVE).
//
// Why not MLX's precompiled-kernel op: at every evaluation it hashes the whole binary
// (7-9 KB: about 1.6 us on this project's machine), formats a module name and looks the
// module and the kernel up in two maps, and each node it builds copies the binary. Here
// the module is loaded once per launch and device, and a node holds one shared pointer.
//
// Outputs come from a pool of our own (OutputPool): MLX's stream-ordered allocator
// (cu::malloc_async) is not exported by libmlx, and its exported allocator::malloc gives
// unified memory on CUDA. The pool follows the rules MLX's own buffer cache relies on:
// a released buffer is reused as is (the same CudaBuffer, so MLX's graph orders a new
// write after the last one), inputs stay alive until their graph has run (MLX keeps
// them), and device memory is freed only after the encoder's current work has completed.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"

namespace mlx_metile {

namespace mx = mlx::core;

// One kernel binary (cubin or fatbin) with its launch: block grid, block, dynamic shared
// memory, and the int32 scalars that follow the arrays in its parameter list.
class CudaKernelLaunch {
 public:
  CudaKernelLaunch(std::string name, std::string binary, std::vector<int> scalars, std::array<int, 3> blocks,
                   std::array<int, 3> threads, int shared_memory);

  // The kernel's function in the current context of `device`, its module loaded on first use.
  void* function(int device) const;

  const std::vector<int>& scalars() const { return scalars_; }
  std::array<int, 3> blocks() const { return blocks_; }
  std::array<int, 3> threads() const { return threads_; }
  int shared_memory() const { return shared_memory_; }

 private:
  std::string name_;
  std::string binary_;
  std::vector<int> scalars_;
  std::array<int, 3> blocks_;
  std::array<int, 3> threads_;
  int shared_memory_;
  mutable std::mutex mutex_;
  mutable std::vector<void*> functions_;  // by device index
};

class CudaKernel : public mx::Primitive {
 public:
  CudaKernel(mx::Stream stream, std::shared_ptr<const CudaKernelLaunch> launch)
      : mx::Primitive(stream), launch_(std::move(launch)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;

  const char* name() const override { return "MetileCudaKernel"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  std::shared_ptr<const CudaKernelLaunch> launch_;
};

// The pool's counters, for tests and diagnostics.
struct OutputPoolStats {
  size_t allocated = 0;     // buffers taken from the device allocator
  size_t reused = 0;        // buffers handed out again from the pool
  size_t cached_bytes = 0;  // released buffers held for reuse
  size_t freed = 0;         // buffers handed to a completion handler that frees them
};
OutputPoolStats output_pool_stats();

// Bytes of released buffers the pool keeps (MLX_METILE_CUDA_POOL_MB, passed from the settings).
void set_output_pool_limit(size_t bytes);

}  // namespace mlx_metile
