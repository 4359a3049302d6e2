// A blocked direct 2-D convolution and its weight gradient (stax/kernels/direct_conv.py).
#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include "stax_sweep.h"
constexpr int64_t PANEL = 2 * STAX_W;  // outputs a tile computes along the padded width

// where tap (ci, kh, kw) reads a padded image: ci * hp * wp + kh * wp + kw
static std::unique_ptr<int64_t[]> tap_offsets(int64_t c, int64_t kh, int64_t kw, int64_t hp, int64_t wp) {
  std::unique_ptr<int64_t[]> shift = stax::heap_array<int64_t>(c * kh * kw);
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) shift[(ci * kh + a) * kw + b] = ci * hp * wp + a * wp + b;
  return shift;
}

// what the tile store applies to output channel m: times scale[m], plus shift[m] (each when given),
// then max(0, .) when relu (stax.passes.conv_epilogues)
struct Epilogue {
  const float* scale;
  const float* shift;
  bool relu;

  bool any() const { return scale != nullptr || shift != nullptr || relu; }

  // on the tile rows of channels m0 ... m0 + mr - 1, `vectors` vectors each, ldc apart
  void apply(float* c, int64_t ldc, int64_t m0, int64_t mr, int vectors) const {
    for (int64_t i = 0; i < mr; ++i) {
      const stax::vec<float> s = stax::splat(scale ? scale[m0 + i] : 1.0f), t = stax::splat(shift ? shift[m0 + i] : 0.0f);
      for (int v = 0; v < vectors; ++v) {
        stax::vec<float> x = stax::vload(c + i * ldc + v * STAX_W) * s + t;
        stax::vstore(c + i * ldc + v * STAX_W, relu ? stax::v_max(x, stax::splat(0.0f)) : x);
      }
    }
  }
};

// ow a multiple of STAX_W: a tile is two output vectors (along a row, or the end of one row and the
// start of the next), stored in place; nothing past ow is computed, nor read past the image
static void conv_whole_vectors(const float* xp, const float* w, float* out, int64_t n, int64_t image, int64_t wp,
                               int64_t co, int64_t taps, int64_t oh, int64_t ow, const int64_t* offsets,
                               const Epilogue& epilogue, int threads) {
  const int64_t row_vectors = ow / STAX_W, vectors = oh * row_vectors, pairs = (vectors + 1) / 2, plane = oh * ow;
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < n * pairs; ++task) {
    const int64_t img = task / pairs, k = task % pairs * 2, r = k / row_vectors, u = k % row_vectors;
    const float* x = xp + img * image + r * wp + u * STAX_W;
    const int64_t vstep = u + 1 < row_vectors ? STAX_W : wp - u * STAX_W;  // to the second vector's input
    float* c = out + img * co * plane + k * STAX_W;
    for (int64_t m0 = 0, mr; m0 < co; m0 += mr) {
      mr = stax::tile_rows(co, m0);
      auto arow = [=](int64_t i) { return w + (m0 + i) * taps; };
      auto brow = [=](int64_t p) { return x + offsets[p]; };
      const int vectors_here = k + 1 < vectors ? 2 : 1;
      if (vectors_here == 2)
        stax::sweep_rows<2>(mr, arow, brow, c + m0 * plane, plane, taps, false, nullptr, 0, vstep);
      else
        stax::sweep_rows<1>(mr, arow, brow, c + m0 * plane, plane, taps, false);
      if (epilogue.any()) epilogue.apply(c + m0 * plane, plane, m0, mr, vectors_here);
    }
  }
}

// any ow: a tile is PANEL outputs along the padded width, the WP - OW past each row dropped
static void conv_padded_width(const float* xp, const float* w, float* out, int64_t n, int64_t image, int64_t hp,
                              int64_t wp, int64_t co, int64_t kh, int64_t kw, int64_t taps, const int64_t* offsets,
                              const Epilogue& epilogue, int threads) {
  const int64_t oh = hp - kh + 1, ow = wp - kw + 1, plane = hp * wp;
  const int64_t columns = oh * wp, panels = (columns + PANEL - 1) / PANEL;
  // panel t reads the image up to t * PANEL + PANEL + kw - 2 + (c - 1) * plane + (kh - 1) * wp: the
  // last image's panels that would read past it read a copy of it with zeros after it instead
  const int64_t slack = PANEL + kw, room = plane - (kh - 1) * wp - PANEL - kw + 2;
  const int64_t tail = panels - std::min(panels, room > 0 ? (room + PANEL - 1) / PANEL : 0);
  std::unique_ptr<float[]> last;
  if (tail > 0) {
    last = stax::heap_array<float>(image + slack, true);
    std::memcpy(last.get(), xp + (n - 1) * image, image * sizeof(float));
  }
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < n * panels; ++task) {
    const int64_t img = task / panels, j = task % panels * PANEL;
    const float* x = img == n - 1 && task % panels >= panels - tail ? last.get() : xp + img * image;
    // the panel's outputs as runs along output rows: (offset in the tile, offset in a channel, length)
    int64_t runs[PANEL + 2][3], count = 0;
    for (int64_t col = j, end = std::min(j + PANEL, columns); col < end;) {
      const int64_t r = col / wp, q = col - r * wp;
      if (q < ow) {
        const int64_t length = std::min(ow - q, end - col);
        runs[count][0] = col - j, runs[count][1] = r * ow + q, runs[count++][2] = length;
      }
      col += wp - q;
    }
    alignas(64) float tile[stax::SWEEP_ROWS * PANEL];
    for (int64_t m0 = 0, mr; m0 < co; m0 += mr) {
      mr = stax::tile_rows(co, m0);
      stax::sweep_rows<2>(mr, [=](int64_t i) { return w + (m0 + i) * taps; },
                          [=](int64_t p) { return x + j + offsets[p]; }, tile, PANEL, taps, false);
      if (epilogue.any()) epilogue.apply(tile, PANEL, m0, mr, 2);
      for (int64_t i = 0; i < mr; ++i) {
        float* channel = out + (img * co + m0 + i) * oh * ow;
        for (int64_t k = 0; k < count; ++k)
          std::memcpy(channel + runs[k][1], tile + i * PANEL + runs[k][0], runs[k][2] * sizeof(float));
      }
    }
  }
}

// xp (n, c, hp, wp) padded, w (co, c, kh, kw), out (n, co, hp - kh + 1, wp - kw + 1), each output
// channel's tiles stored through the epilogue of scale and shift (co each, or null) and relu
// (0, or minus the bytes of scratch it could not allocate: stax::scratch_result)
extern "C" int64_t stax_direct_conv(const float* xp, const float* w, float* out, const float* scale,
                                    const float* shift, int64_t n, int64_t c, int64_t hp, int64_t wp, int64_t co,
                                    int64_t kh, int64_t kw, int relu, int threads) {
  if (n <= 0 || co <= 0) return 0;  // no output (the last image's copy needs an image)
  return stax::scratch_result([&] {
    const int64_t oh = hp - kh + 1, ow = wp - kw + 1, image = c * hp * wp, taps = c * kh * kw;
    const std::unique_ptr<int64_t[]> offsets = tap_offsets(c, kh, kw, hp, wp);
    const Epilogue epilogue{scale, shift, relu != 0};
    if (ow % STAX_W == 0)
      conv_whole_vectors(xp, w, out, n, image, wp, co, taps, oh, ow, offsets.get(), epilogue, threads);
    else
      conv_padded_width(xp, w, out, n, image, hp, wp, co, kh, kw, taps, offsets.get(), epilogue, threads);
  });
}

// the output gradient g (n, co, oh, ow) as gt (n, (oh - 1) * wp + ow, cop): laid over the padded
// width, channels last, zeros past ow and co
static void transpose_gradient(const float* g, float* gt, int64_t n, int64_t co, int64_t cop, int64_t oh, int64_t ow,
                               int64_t wp, int threads) {
  const int64_t len = (oh - 1) * wp + ow;
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t row = 0; row < n * oh; ++row) {
    const int64_t img = row / oh, r = row % oh;
    float* dst = gt + (img * len + r * wp) * cop;
    const float* src = g + (img * co * oh + r) * ow;  // channel o's row at src + o * oh * ow
    // blocks of STAX_W channels by STAX_W columns transposed in registers (zeros past co), the
    // columns past the last full block a channel at a time
    const int64_t full = ow / STAX_W * STAX_W;
    for (int64_t o0 = 0; o0 < cop; o0 += STAX_W) {
      for (int64_t q0 = 0; q0 < full; q0 += STAX_W) {
        stax::vec<float> block[STAX_W];
        for (int64_t i = 0; i < STAX_W; ++i)
          block[i] = o0 + i < co ? stax::vload(src + (o0 + i) * oh * ow + q0) : stax::vec<float>{};
        stax::transpose(block);
        for (int64_t l = 0; l < STAX_W; ++l) stax::vstore(dst + (q0 + l) * cop + o0, block[l]);
      }
      for (int64_t o = o0; o < o0 + STAX_W; ++o)
        for (int64_t q = full; q < ow; ++q) dst[q * cop + o] = o < co ? src[o * oh * ow + q] : 0.0f;
    }
    if (r + 1 < oh) std::memset(dst + ow * cop, 0, (wp - ow) * cop * sizeof(float));
  }
}

// dw (co, c, kh, kw) = the sum over images and outputs of g (n, co, oh, ow) times the padded input
// xp (n, c, hp, wp) under each tap: the transposed weight gradient, taps by channels, is the
// shifted input rows (A) times the gradient laid over the padded width, channels last (B)
// (0, or minus the bytes of scratch it could not allocate)
extern "C" int64_t stax_direct_conv_weight_grad(const float* xp, const float* g, float* dw, int64_t n, int64_t c,
                                                int64_t hp, int64_t wp, int64_t co, int64_t kh, int64_t kw,
                                                int threads) {
  const int64_t taps = c * kh * kw;
  if (co <= 0 || taps <= 0) return 0;
  if (n <= 0) return (void)std::memset(dw, 0, co * taps * sizeof(float)), 0;
  const int64_t oh = hp - kh + 1, ow = wp - kw + 1, image = c * hp * wp, len = (oh - 1) * wp + ow;
  auto run = [&](auto vectors) {
    constexpr int V = decltype(vectors)::value;
    constexpr int64_t COLUMNS = V * STAX_W, GROUP = 8;  // a task's channels; its row tiles, at most
    const int64_t cop = (co + COLUMNS - 1) / COLUMNS * COLUMNS, blocks = cop / COLUMNS;
    std::unique_ptr<float[]> gt = stax::heap_array<float>(n * len * cop);
    transpose_gradient(g, gt.get(), n, co, cop, oh, ow, wp, threads);
    const std::unique_ptr<int64_t[]> shift = tap_offsets(c, kh, kw, hp, wp);
    const int64_t tiles = (taps + stax::SWEEP_ROWS - 1) / stax::SWEEP_ROWS;
    const int64_t per_task = std::clamp<int64_t>(tiles * blocks / (stax::TASKS_A_THREAD * threads), 1, GROUP);
    const int64_t span = per_task * stax::SWEEP_ROWS, groups = (taps + span - 1) / span;
    const float* b = gt.get();
    const int64_t* offsets = shift.get();
    #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int64_t task = 0; task < groups * blocks; ++task) {
      const int64_t o0 = task % blocks * COLUMNS, first = task / blocks * span, last = std::min(taps, first + span);
      alignas(64) float sums[GROUP * stax::SWEEP_ROWS * COLUMNS];  // rows: the taps first..last
      for (int64_t img = 0; img < n; ++img) {
        const float* x = xp + img * image;
        const float* rows = b + img * len * cop + o0;
        for (int64_t t0 = first, mr; t0 < last; t0 += mr) {
          mr = stax::tile_rows(last, t0);
          stax::sweep_rows<V>(mr, [=](int64_t i) { return x + offsets[t0 + i]; },
                              [=](int64_t p) { return rows + p * cop; }, sums + (t0 - first) * COLUMNS, COLUMNS, len,
                              img > 0);
        }
      }
      for (int64_t o = o0; o < std::min(co, o0 + COLUMNS); ++o)
        for (int64_t t = first; t < last; ++t) dw[o * taps + t] = sums[(t - first) * COLUMNS + o - o0];
    }
  };
  return stax::scratch_result([&] {
    if (co <= STAX_W)
      run(std::integral_constant<int, 1>());
    else
      run(std::integral_constant<int, 2>());
  });
}
