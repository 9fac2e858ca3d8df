// What the MLX-free probes share: their timing (launches back to back rotating through `pool`
// weight sets after two rounds of warm-up, CUDA events between them, the median of 40) and the
// plain read that is their roofline.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

// median microseconds of launch(i % pool)
template <class F>
double median_launch_us(int pool, F launch) {
  cudaEvent_t ev[41];
  for (auto& e : ev) cudaEventCreate(&e);
  for (int i = 0; i < 2 * pool; ++i) launch(i % pool);
  cudaEventRecord(ev[0]);
  for (int i = 0; i < 40; ++i) {
    launch(i % pool);
    cudaEventRecord(ev[i + 1]);
  }
  cudaEventSynchronize(ev[40]);
  std::vector<float> ms;
  for (int i = 0; i < 40; ++i) {
    float m;
    cudaEventElapsedTime(&m, ev[i], ev[i + 1]);
    ms.push_back(m);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[20] * 1e3;
}

// one JSON line: the pattern's median time and the rate of `bytes` per launch
template <class F>
void time_launches(const char* name, double bytes, int pool, F launch) {
  const double us = median_launch_us(pool, launch);
  printf("{\"pattern\": \"%s\", \"us\": %.2f, \"GBps\": %.0f, \"error\": \"%s\"}\n", name, us, bytes / (us * 1e3),
         cudaGetErrorString(cudaGetLastError()));
  fflush(stdout);
}

__device__ unsigned sink;  // written only if an XOR of what was read hits a constant: keeps the loads

// The plain read: every thread reads uint4s of one flat buffer, U per iteration
template <int U>
__global__ void flat(const uint4* p, size_t n) {
  unsigned acc = 0;
  size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = (i + u * stride < n) ? p[i + u * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) sink = acc;
}

// `pool` buffers of `bytes` (rounded down to 16) for the plain read, filled
inline std::vector<const uint4*> flat_pool(size_t bytes, int pool) {
  std::vector<const uint4*> bufs;
  for (int p = 0; p < pool; ++p) {
    void* f;
    cudaMalloc(&f, bytes / 16 * 16);
    cudaMemset(f, 3, bytes / 16 * 16);
    bufs.push_back(static_cast<const uint4*>(f));
  }
  return bufs;
}

// `pool` sets of a quantized weight's buffers (weights, scales, biases), each filled with bytes
// of its own, for the copy probes (ring_patterns.cu, int4_loads.cu)
struct RawSet {
  void *w, *s, *z;
};
inline std::vector<RawSet> weight_pool(size_t wbytes, size_t sbytes, int pool) {
  std::vector<RawSet> sets;
  for (int p = 0; p < pool; ++p) {
    RawSet r;
    cudaMalloc(&r.w, wbytes);
    cudaMalloc(&r.s, sbytes);
    cudaMalloc(&r.z, sbytes);
    cudaMemset(r.w, p + 1, wbytes);
    cudaMemset(r.s, 1, sbytes);
    cudaMemset(r.z, 2, sbytes);
    sets.push_back(r);
  }
  return sets;
}
