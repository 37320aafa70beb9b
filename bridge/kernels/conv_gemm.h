// YoloConvBnLeaky's convolution road without oneDNN (float16, a build without
// it, BRIDGE_CONV_IMPL=eigen), for every host: im2col of 256-pixel tiles, one
// Eigen GEMM per tile on the filter as given, then the BatchNorm scale and shift
// (bridge/kernels/batchnorm_fold.h) and LeakyReLU on the tile while it is in
// cache. Tiles spread over the host's threads; Eigen itself runs single-threaded
// in each. 1x1 stride-1 unpadded float convolutions multiply the NHWC input
// directly; layers with few pixels and many channels (13x13x1024) are split
// along Cout too.
#ifndef BRIDGE_KERNELS_CONV_GEMM_H_
#define BRIDGE_KERNELS_CONV_GEMM_H_

#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE  // the host's threads split the work, not Eigen's OpenMP
#endif

#include <algorithm>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/abi.h"

namespace bridge {
namespace conv_gemm {

// One NHWC x HWIO convolution, pads resolved.
struct Geometry {
  int64_t n, h, w, cin, kh, kw, cout, oh, ow;
  int64_t sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right;
};

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::OuterStride<>;

// Output pixels per tile: enough rows that Eigen's packing of the filter panel
// is paid back, few enough that a tile's im2col buffer stays near L2.
constexpr int64_t kTileRows = 256;

// Rows [row0, row0 + rows) of the im2col matrix (row = output pixel in N,OH,OW
// order, column = (ky, kx, ci) as the HWIO filter's rows), widened to float.
template <typename T>
void Im2col(const T* x, const Geometry& g, int64_t row0, int64_t rows, float* out) {
  const int64_t k = g.kh * g.kw * g.cin;
  int64_t n = row0 / (g.oh * g.ow), rem = row0 % (g.oh * g.ow);
  int64_t oy = rem / g.ow, ox = rem % g.ow;
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = out + r * k;
    const T* image = x + n * g.h * g.w * g.cin;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.sh - g.pad_top + ky * g.dh;
      if (iy < 0 || iy >= g.h) {
        std::fill(dst, dst + g.kw * g.cin, 0.0f);
        dst += g.kw * g.cin;
        continue;
      }
      for (int64_t kx = 0; kx < g.kw; ++kx, dst += g.cin) {
        const int64_t ix = ox * g.sw - g.pad_left + kx * g.dw;
        if (ix < 0 || ix >= g.w)
          std::fill(dst, dst + g.cin, 0.0f);
        else
          abi::ToFloats(image + (iy * g.w + ix) * g.cin, dst, g.cin);
      }
    }
    if (++ox == g.ow) {
      ox = 0;
      if (++oy == g.oh) oy = 0, ++n;
    }
  }
}

// y = leaky(z * s + b) for a [rows, cols] block, row strides ld_z and ld_y.
template <typename T>
void ScaleShiftLeaky(const float* z, int64_t ld_z, const float* s, const float* b, float alpha, int64_t rows,
                     int64_t cols, T* y, int64_t ld_y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * ld_z;
    T* yr = y + r * ld_y;
    if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float v = zr[c] * s[c] + b[c];
        yr[c] = v > 0.0f ? v : v * alpha;
      }
    } else {
      float tmp[256];
      for (int64_t c0 = 0; c0 < cols; c0 += 256) {
        const int64_t m = std::min<int64_t>(256, cols - c0);
#pragma omp simd
        for (int64_t c = 0; c < m; ++c) {
          const float v = zr[c0 + c] * s[c0 + c] + b[c0 + c];
          tmp[c] = v > 0.0f ? v : v * alpha;
        }
        abi::FromFloats(tmp, yr + c0, m);
      }
    }
  }
}

// y = leaky(conv(x, filter) * s + b); filter is float [K, Cout] (HWIO), x and y
// float or float16 bits.
template <typename T>
void Conv(const Geometry& g, const T* x, const float* filter, const float* s, const float* b, float alpha, T* y,
          const abi::ParallelFor& parallel_for) {
  const int64_t m = g.n * g.oh * g.ow, k = g.kh * g.kw * g.cin, cout = g.cout;
  const bool direct = std::is_same_v<T, float> && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 &&
                      g.pad_top == 0 && g.pad_left == 0 && g.pad_bottom == 0 && g.pad_right == 0;
  // Work items are (row tile, column block) pairs: a layer with few pixels and
  // many channels is split along Cout so that every core has work.
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
  const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  int64_t col_blocks = 1;
  while (row_tiles * col_blocks < 2 * threads && cout / (col_blocks * 2) >= 64) col_blocks *= 2;
  const int64_t cols_per_block = (cout + col_blocks - 1) / col_blocks;
  const int64_t cost = 2 * std::min(kTileRows, m) * k * cols_per_block;
  // Split along Cout, the few row tiles are unfolded once and shared by the blocks.
  std::vector<float> shared;
  if (!direct && col_blocks > 1) {
    shared.resize(m * k);
    float* p = shared.data();
    parallel_for(m, 4 * k, [&](int64_t begin, int64_t end) { Im2col(x, g, begin, end - begin, p + begin * k); });
  }
  const float* shared_p = shared.empty() ? nullptr : shared.data();
  parallel_for(row_tiles * col_blocks, cost, [&](int64_t begin, int64_t end) {
    std::vector<float, Eigen::aligned_allocator<float>> patches, acc;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row0 = (item / col_blocks) * kTileRows, rows = std::min(kTileRows, m - row0);
      const int64_t col0 = (item % col_blocks) * cols_per_block, cols = std::min(cols_per_block, cout - col0);
      if (cols <= 0) continue;
      const float* a;
      if (direct) {
        a = reinterpret_cast<const float*>(x) + row0 * k;
      } else if (shared_p) {
        a = shared_p + row0 * k;
      } else {
        patches.resize(rows * k);
        Im2col(x, g, row0, rows, patches.data());
        a = patches.data();
      }
      // float output: the GEMM writes straight into y and the epilogue runs in place
      float* z;
      int64_t ld_z;
      if constexpr (std::is_same_v<T, float>) {
        z = y + row0 * cout + col0;
        ld_z = cout;
      } else {
        acc.resize(rows * cols);
        z = acc.data();
        ld_z = cols;
      }
      Eigen::Map<const RowMatrix> lhs(a, rows, k);
      Eigen::Map<const RowMatrix, 0, Strided> rhs(filter + col0, k, cols, Strided(cout));
      Eigen::Map<RowMatrix, 0, Strided> out(z, rows, cols, Strided(ld_z));
      out.noalias() = lhs * rhs;
      ScaleShiftLeaky(z, ld_z, s + col0, b + col0, alpha, rows, cols, y + row0 * cout + col0, cout);
    }
  });
}

}  // namespace conv_gemm
}  // namespace bridge

#endif  // BRIDGE_KERNELS_CONV_GEMM_H_
