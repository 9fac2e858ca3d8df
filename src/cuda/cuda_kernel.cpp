#include "cuda/cuda_kernel.h"

#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <utility>

#include "mlx/backend/cuda/device.h"
#include "mlx/ops.h"

namespace mlx_metile {

namespace {

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* message = nullptr;
  cuGetErrorString(result, &message);
  throw std::runtime_error(std::string("mlx_metile: ") + what + ": " + (message ? message : "unknown CUDA error"));
}

// Modules by (device, binary): launches of the same binary (one plan per call shape) share one.
CUfunction load_function(int device, const std::string& binary, const std::string& name, int shared_memory) {
  static std::mutex mutex;
  static auto* modules = new std::map<std::pair<int, std::string>, CUmodule>();  // (never unloaded)
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(device, binary);
  auto it = modules->find(key);
  if (it == modules->end()) {
    CUmodule module;
    check(cuModuleLoadData(&module, binary.data()), "cuModuleLoadData");
    it = modules->emplace(std::move(key), module).first;
  }
  CUfunction function;
  check(cuModuleGetFunction(&function, it->second, name.c_str()), ("cuModuleGetFunction(" + name + ")").c_str());
  if (shared_memory > 48000) {
    check(cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_memory),
          "cuFuncSetAttribute");
  }
  return function;
}

// A pool buffer: MLX's CudaBuffer (what MLX's kernels and graph read through array::buffer())
// first, then what the pool needs to free it.
struct PoolBuffer {
  mx::cu::CudaBuffer cuda;
  int device;
  CUcontext context;
};

std::atomic<size_t> g_pool_limit{size_t{512} << 20};  // set_output_pool_limit

size_t pool_limit() { return g_pool_limit.load(std::memory_order_relaxed); }

void free_now(PoolBuffer* buffer) {
  // Called once the memory is no longer in use; errors (CUDA shut down at exit) are ignored.
  if (buffer->cuda.data != nullptr && cuCtxPushCurrent(buffer->context) == CUDA_SUCCESS) {
    auto ptr = reinterpret_cast<CUdeviceptr>(buffer->cuda.data);
    if (buffer->cuda.device >= 0) {
      cuMemFree(ptr);
    } else {
      // MLX moved the data to unified memory for a CPU read (Buffer::raw_ptr): its own
      // allocation, managed memory or, where the device has none, pinned host memory.
      unsigned int managed = 0;
      cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr);
      if (managed)
        cuMemFree(ptr);
      else
        cuMemFreeHost(buffer->cuda.data);
    }
    CUcontext popped;
    cuCtxPopCurrent(&popped);
  }
  delete buffer;
}

class OutputPool {
 public:
  mx::allocator::Data take(size_t nbytes, mx::cu::CommandEncoder& encoder) {
    const size_t size = (nbytes + 255) / 256 * 256;
    const int device = encoder.device().cuda_device();
    PoolBuffer* buffer = nullptr;
    std::vector<PoolBuffer*> retired;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      retired.swap(retired_);
      stats_.freed += retired.size();
      auto& kept = free_[{device, size}];
      if (!kept.empty()) {
        buffer = kept.back();
        kept.pop_back();
        stats_.cached_bytes -= size;
        ++stats_.reused;
      }
    }
    if (!retired.empty()) {
      // Their last writers were encoded before now: once the work encoded so far has run.
      encoder.add_completed_handler([retired = std::move(retired)] {
        for (auto* b : retired) free_now(b);
      });
    }
    if (!buffer) {
      CUdeviceptr ptr = 0;
      if (size) check(cuMemAllocAsync(&ptr, size, static_cast<cudaStream_t>(encoder.stream())), "cuMemAllocAsync");
      CUcontext context = nullptr;
      check(cuCtxGetCurrent(&context), "cuCtxGetCurrent");
      buffer = new PoolBuffer{{reinterpret_cast<void*>(ptr), size, device}, device, context};
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.allocated;
    }
    return mx::allocator::Data(mx::allocator::Buffer(&buffer->cuda),
                               [this, buffer](mx::allocator::Buffer) { release(buffer); });
  }

  OutputPoolStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  void release(PoolBuffer* buffer) {
    if (buffer->cuda.device < 0 || buffer->cuda.data == nullptr) {
      free_now(buffer);  // unified memory now (MLX's, and read by the CPU), or empty
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.cached_bytes + buffer->cuda.size > pool_limit()) {
      retired_.push_back(buffer);  // freed after the next take's encoder has run its work
    } else {
      free_[{buffer->device, buffer->cuda.size}].push_back(buffer);
      stats_.cached_bytes += buffer->cuda.size;
    }
  }

  std::mutex mutex_;
  std::map<std::pair<int, size_t>, std::vector<PoolBuffer*>> free_;
  std::vector<PoolBuffer*> retired_;
  OutputPoolStats stats_;
};

OutputPool& output_pool() {
  static auto* pool = new OutputPool();  // (never destroyed: buffers may be released at exit)
  return *pool;
}

CUdeviceptr device_pointer(const mx::array& a) {
  auto* buffer = static_cast<const mx::cu::CudaBuffer*>(a.buffer().ptr());
  return reinterpret_cast<CUdeviceptr>(static_cast<char*>(buffer->data) + a.offset());
}

}  // namespace

OutputPoolStats output_pool_stats() { return output_pool().stats(); }

void set_output_pool_limit(size_t bytes) { g_pool_limit.store(bytes, std::memory_order_relaxed); }

CudaKernelLaunch::CudaKernelLaunch(std::string name, std::string binary, std::vector<int> scalars,
                                   std::array<int, 3> blocks, std::array<int, 3> threads, int shared_memory)
    : name_(std::move(name)),
      binary_(std::move(binary)),
      scalars_(std::move(scalars)),
      blocks_(blocks),
      threads_(threads),
      shared_memory_(shared_memory) {
  if (binary_.empty()) throw std::invalid_argument("CudaKernelLaunch: binary: empty");
  for (int i = 0; i < 3; ++i)
    if (blocks_[i] < 1 || threads_[i] < 1)
      throw std::invalid_argument("CudaKernelLaunch: grid and threadgroup must be positive");
}

void* CudaKernelLaunch::function(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device >= static_cast<int>(functions_.size())) functions_.resize(device + 1, nullptr);
  if (!functions_[device]) functions_[device] = load_function(device, binary_, name_, shared_memory_);
  return functions_[device];
}

void CudaKernel::eval_cpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("mlx_metile: the CUDA kernel runs on the GPU only (stream=mx.gpu)");
}

void CudaKernel::eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& s = stream();
  auto& encoder = mx::cu::get_command_encoder(s);
  auto& pool = output_pool();

  // The kernel reads row-contiguous buffers: others are copied by MLX's own Contiguous
  // primitive, run here on the same encoder (as MLX's custom-kernel op copies them).
  std::vector<mx::array> copies;
  copies.reserve(inputs.size());
  std::vector<const mx::array*> args;
  args.reserve(inputs.size() + outputs.size());
  for (const auto& in : inputs) {
    if (in.flags().row_contiguous) {
      args.push_back(&in);
      continue;
    }
    copies.push_back(mx::contiguous(in, false, s));
    std::vector<mx::array> copied{copies.back()};
    copies.back().primitive().eval_gpu(copies.back().inputs(), copied);
    args.push_back(&copies.back());
  }
  bool empty = false;
  for (auto& out : outputs) {
    out.set_data(pool.take(out.nbytes(), encoder));
    empty = empty || out.size() == 0;
  }
  if (empty || inputs[0].size() == 0) return;  // no rows: nothing to launch

  std::vector<CUdeviceptr> pointers;
  pointers.reserve(args.size() + outputs.size());
  for (const auto* a : args) pointers.push_back(device_pointer(*a));
  for (const auto& out : outputs) pointers.push_back(device_pointer(out));
  const std::vector<int>& scalars = launch_->scalars();
  std::vector<void*> params;
  params.reserve(pointers.size() + scalars.size());
  for (auto& p : pointers) params.push_back(&p);
  for (const int& v : scalars) params.push_back(const_cast<int*>(&v));  // (read only: the node copies them)

  for (const auto* a : args) encoder.set_input_array(*a);
  for (const auto& out : outputs) encoder.set_output_array(out);
  for (const auto& c : copies) encoder.add_temporary(c);
  auto function = static_cast<CUfunction>(launch_->function(encoder.device().cuda_device()));
  const auto [bx, by, bz] = launch_->blocks();
  const auto [tx, ty, tz] = launch_->threads();
  encoder.add_kernel_node_raw(function, dim3(bx, by, bz), dim3(tx, ty, tz), dim3(), launch_->shared_memory(),
                              params.data());
}

bool CudaKernel::is_equivalent(const mx::Primitive& other) const {
  const auto* o = dynamic_cast<const CudaKernel*>(&other);
  return o && o->launch_ == launch_;
}

}  // namespace mlx_metile
