#include "cpu/projection.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

#include "mlx/types/half_types.h"

namespace mlx_metile {

float silu(float v) { return v / (1.0f + std::exp(-v)); }
float gelu(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
float gelu_approx(float v) { return 0.5f * v * (1.0f + std::tanh(0.79788456080286536f * (v + 0.044715f * v * v * v))); }

namespace {

float load_float(const mx::array& a, size_t i) {
  switch (a.dtype()) {
    case mx::float32: return a.data<float>()[i];
    case mx::float16: return static_cast<float>(a.data<mx::float16_t>()[i]);
    case mx::bfloat16: return static_cast<float>(a.data<mx::bfloat16_t>()[i]);
    default: throw std::invalid_argument("mlx_metile: unsupported floating dtype");
  }
}

void store_float(mx::array& a, size_t i, float v) {
  switch (a.dtype()) {
    case mx::float32: a.data<float>()[i] = v; break;
    case mx::float16: a.data<mx::float16_t>()[i] = static_cast<mx::float16_t>(v); break;
    case mx::bfloat16: a.data<mx::bfloat16_t>()[i] = static_cast<mx::bfloat16_t>(v); break;
    default: throw std::invalid_argument("mlx_metile: unsupported output dtype");
  }
}

struct WeightView {
  const mx::array* w;
  const mx::array* scales = nullptr;
  const mx::array* biases = nullptr;
  const mx::array* bias = nullptr;
  int bits = 0;
  int group = 0;
  QuantMode mode = QuantMode::Affine;
  int64_t n = 0;
};

// The microscaling codes, as MLX's fp4.h / fp8.h decode them: e2m1 values, e4m3 (OCP e4m3fn:
// bias 7, subnormals, 0x7F / 0xFF NaN) and e8m0 scales 2^(byte - 127) (255: inf).
constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float e4m3(uint32_t code) {
  uint32_t e = (code >> 3) & 15u, m = code & 7u;
  float magnitude = (code & 0x7Fu) == 0x7Fu ? std::numeric_limits<float>::quiet_NaN()
                    : e == 0                ? std::ldexp(static_cast<float>(m), -9)
                                            : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, static_cast<int>(e) - 7);
  return (code & 0x80u) ? -magnitude : magnitude;
}

float e8m0(uint32_t byte) {
  return byte == 255 ? std::numeric_limits<float>::infinity() : std::ldexp(1.0f, static_cast<int>(byte) - 127);
}

// Row n of the weight as f32: dense converted, or affine dequantised
// (w = scale * q + bias; a row's words are one bit stream, least-significant bits first,
// so 3, 5 and 6-bit values may straddle two words).
template <class T>
void convert_row(const T* src, int64_t K, float* out) {
  for (int64_t k = 0; k < K; ++k) out[k] = static_cast<float>(src[k]);
}

void weight_row(const WeightView& v, int64_t n, int64_t K, float* out) {
  if (v.bits == 0) {
    switch (v.w->dtype()) {
      case mx::float32: return convert_row(v.w->data<float>() + n * K, K, out);
      case mx::float16: return convert_row(v.w->data<mx::float16_t>() + n * K, K, out);
      default: return convert_row(v.w->data<mx::bfloat16_t>() + n * K, K, out);
    }
  }
  const uint32_t* packed = v.w->data<uint32_t>();
  int64_t words_per_row = K * v.bits / 32;
  int64_t groups = K / v.group;
  const uint32_t* row = packed + n * words_per_row;
  uint32_t mask = (1u << v.bits) - 1u;
  // per group: its scale (and bias) read once, then its values
  if (v.mode != QuantMode::Affine) {  // 4 or 8-bit codes: whole values per word
    const uint8_t* scales = v.scales->data<uint8_t>() + n * groups;
    for (int64_t g = 0; g < groups; ++g) {
      float scale = v.mode == QuantMode::NvFp4 ? e4m3(scales[g]) : e8m0(scales[g]);
      for (int64_t k = g * v.group; k < (g + 1) * v.group; ++k) {
        uint32_t code = (row[k * v.bits >> 5] >> ((k * v.bits) & 31)) & mask;
        out[k] = (v.bits == 4 ? kE2M1[code] : e4m3(code)) * scale;
      }
    }
    return;
  }
  for (int64_t g = 0; g < groups; ++g) {
    float scale = load_float(*v.scales, n * groups + g), bias = load_float(*v.biases, n * groups + g);
    for (int64_t k = g * v.group; k < (g + 1) * v.group; ++k) {
      int64_t bit = k * v.bits;
      int shift = static_cast<int>(bit & 31);
      uint32_t value = row[bit >> 5] >> shift;
      if (shift + v.bits > 32) value |= row[(bit >> 5) + 1] << (32 - shift);
      out[k] = scale * static_cast<float>(value & mask) + bias;
    }
  }
}

// Eight interleaved partial sums, combined pairwise: a fixed order (so a row's
// result never depends on the other rows) that compilers vectorise.
float dot(const float* a, const float* b, int64_t K) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int j = 0; j < 8; ++j) part[j] += a[k + j] * b[k + j];
  for (int j = 0; k < K; ++k, ++j) part[j] += a[k] * b[k];
  return ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
}

}  // namespace

void cpu_projection(const ProjectionDesc& d, const std::vector<mx::array>& in, std::vector<mx::array>& out) {
  const mx::array& x = in[0];
  const int64_t K = x.shape(-1);
  const int64_t M = x.size() / K;
  std::vector<WeightView> ws;
  size_t idx = 1;
  for (int i = 0; i < d.num_weights(); ++i) {
    WeightView v;
    v.w = &in[idx++];
    v.bits = d.bits[i];
    v.group = d.group_size[i];
    v.mode = static_cast<QuantMode>(d.mode[i]);
    if (v.bits) v.scales = &in[idx++];
    if (d.weight_arrays(i) == 3) v.biases = &in[idx++];
    if (d.has_bias[i]) v.bias = &in[idx++];
    v.n = v.w->shape(0);
    ws.push_back(v);
  }
  const mx::array* residual = d.has_residual ? &in[idx++] : nullptr;

  std::vector<float> xf(M * K);
  for (int64_t i = 0; i < M * K; ++i) xf[i] = load_float(x, i);

  // acc[i][m * N + n]: f32 sums in k order, independent of M (row invariance)
  std::vector<std::vector<float>> acc(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightView& v = ws[i];
    acc[i].assign(M * v.n, 0.0f);
    unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 8u));
    if (v.n * K < (1 << 16)) workers = 1;
    auto work = [&](int64_t n0, int64_t n1) {
      std::vector<float> wrow(K);
      for (int64_t n = n0; n < n1; ++n) {
        weight_row(v, n, K, wrow.data());
        float b = v.bias ? load_float(*v.bias, n) : 0.0f;
        for (int64_t m = 0; m < M; ++m) acc[i][m * v.n + n] = dot(xf.data() + m * K, wrow.data(), K) + b;
      }
    };
    std::vector<std::thread> pool;
    int64_t chunk = (v.n + workers - 1) / workers;
    for (unsigned t = 0; t < workers; ++t) {
      int64_t n0 = t * chunk, n1 = std::min<int64_t>(v.n, n0 + chunk);
      if (n0 < n1) pool.emplace_back(work, n0, n1);
    }
    for (auto& th : pool) th.join();
  }

  auto finish = [&](float v) {
    switch (d.epilogue) {
      case Epilogue::Gelu: return gelu(v);
      case Epilogue::GeluApprox: return gelu_approx(v);
      case Epilogue::Silu: return silu(v);
      default: return v;
    }
  };
  if (d.epilogue == Epilogue::SwiGLU) {
    int64_t N = ws[0].n;
    for (int64_t e = 0; e < M * N; ++e) {
      float v = silu(acc[0][e]) * acc[1][e];
      if (residual) v += load_float(*residual, e);
      store_float(out[0], e, v);
    }
    return;
  }
  for (size_t i = 0; i < ws.size(); ++i) {
    for (int64_t e = 0; e < M * ws[i].n; ++e) {
      float v = finish(acc[i][e]);
      if (residual) v += load_float(*residual, e);
      store_float(out[i], e, v);
    }
  }
}

}  // namespace mlx_metile
