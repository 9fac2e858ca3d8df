// What one memory-bound kernel launch costs beyond its bytes, on the GPU machine, timed the
// way tools/cuda_probe/generated_harness.py times the generated kernels (launches back to
// back on one stream, each between two CUDA events, a pool of buffers larger than L2):
//   nvcc -O3 -arch=sm_90 -o fixed_cost tools/cuda_probe/fixed_cost.cu && ./fixed_cost
// A plain read kernel (16-byte loads, grid-stride, one word written per block) reads S bytes
// for S from 1 to 256 MB; a least-squares line t = a + S / B over the sizes gives the fixed
// cost a of a launch and the streaming rate B. The floor of any one-kernel product of S
// bytes under this timing is then about a + S / B.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

__global__ void read_all(const uint4* __restrict__ p, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;  // keeps the loads; practically never stored
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t pool_bytes = (size_t)768 << 20;
  unsigned* out;
  cudaMalloc(&out, 1 << 20);
  printf("{\"probe\": \"fixed_cost\", \"sms\": %d}\n", sms);
  for (size_t mb : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    const size_t bytes = mb << 20, n = bytes / 16;
    const int count = (int)std::max<size_t>(3, pool_bytes / bytes);
    std::vector<uint4*> pool(count);
    for (auto& p : pool) {
      cudaMalloc(&p, bytes);
      cudaMemset(p, 1, bytes);
    }
    for (int blocks_per_sm : {4, 8, 16}) {
      const int grid = sms * blocks_per_sm;
      const double us = median_launch_us(count, [&](int i) { read_all<<<grid, 256>>>(pool[i], n, out); });
      printf("{\"MB\": %zu, \"blocks_per_sm\": %d, \"us\": %.2f, \"GBps\": %.0f, \"error\": \"%s\"}\n", mb,
             blocks_per_sm, us, bytes / (us * 1e3), cudaGetErrorString(cudaGetLastError()));
      fflush(stdout);
    }
    for (auto p : pool) cudaFree(p);
  }
  return 0;
}
