// A float32 GEMM for products of few rows by a long matrix, read in place (stax/kernels/narrow_gemm.py).
#include "stax_sweep.h"
// C = A B (+ C when add): A m x k, B k x n (a batch of them, one C each), row-major, contiguous.
typedef stax::vec<float> vf;
// a tile: stax::SWEEP_ROWS rows by VECTORS vectors of sums (stax_sweep.h)
constexpr int MR = stax::SWEEP_ROWS, VECTORS = 2;
constexpr int64_t PANEL = VECTORS * STAX_W;  // a tile's columns
constexpr int64_t KC = 256;            // rows of B a tile reads per block (its lines stay in L1)
constexpr int64_t AHEAD = 2 * PANEL;   // the first row tile of a panel prefetches this far along B's rows

// mr rows x V vectors of C (rows ldc apart) over kc rows of B (ldb apart) and columns of A (whose
// rows are lda apart), prefetching V vectors a row of `ahead` (rows ld_ahead apart) unless null
template <int V>
static void rows(int64_t mr, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                 int64_t kc, bool add, const float* ahead = nullptr, int64_t ld_ahead = 0) {
  stax::sweep_rows<V>(mr, [=](int64_t i) { return a + i * lda; }, [=](int64_t p) { return b + p * ldb; }, c, ldc, kc, add,
                      ahead, ld_ahead);
}

// kc x PANEL of B (rows ldb apart) into `panel`, rows PANEL apart
static void pack(const float* b, int64_t ldb, int64_t kc, float* panel) {
  for (int64_t p = 0; p < kc; ++p)
    for (int v = 0; v < VECTORS; ++v)
      stax::vstore(panel + p * PANEL + v * STAX_W, stax::vload(b + p * ldb + v * STAX_W));
}

// columns lo..hi of one product.  With more than one row tile, each kc x PANEL block of B is
// first copied into a contiguous panel that every row tile then reads: B's rows n floats apart
// share the cache's sets when n is a multiple of 1024 (4 KiB), and the block would not stay
// cached from one row tile to the next.  A panel's first row tile prefetches the block the
// next panel reads from B (two panels ahead when B is read in place).
static void columns(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int64_t lo, int64_t hi,
                    bool add) {
  const int64_t panels_end = lo + (hi - lo) / PANEL * PANEL;
  const int64_t vector_end = panels_end + (hi - panels_end) / STAX_W * STAX_W;
  alignas(64) static thread_local float panel[KC * PANEL];
  const bool packed = m > MR;
  for (int64_t k0 = 0; k0 < k; k0 += KC) {
    const int64_t kc = std::min(KC, k - k0);
    const bool accumulate = add || k0 > 0;
    for (int64_t j = lo; j < vector_end; j += j < panels_end ? PANEL : STAX_W) {
      const bool whole = j < panels_end;
      const float* block = b + k0 * n + j;
      int64_t ldb = n;
      if (whole && packed) {
        pack(block, n, kc, panel);
        block = panel;
        ldb = PANEL;
      }
      for (int64_t m0 = 0, mr; m0 < m; m0 += mr) {
        mr = stax::tile_rows(m, m0);
        const float* tile_a = a + m0 * k + k0;
        if (whole && m0 == 0)
          rows<VECTORS>(mr, tile_a, k, block, ldb, c + m0 * n + j, n, kc, accumulate,
                        b + k0 * n + j + (packed ? PANEL : AHEAD), n);
        else if (whole)
          rows<VECTORS>(mr, tile_a, k, block, ldb, c + m0 * n + j, n, kc, accumulate);
        else
          rows<1>(mr, tile_a, k, block, ldb, c + m0 * n + j, n, kc, accumulate);
      }
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = vector_end; j < hi; ++j) {
      float s = add ? c[i * n + j] : 0.0f;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
}

// dst (cols x rows) = src (rows x cols) transposed, plus dst when add, in 8 x 8 blocks
static void transpose(const float* src, float* dst, int64_t rows, int64_t cols, bool add) {
  for (int64_t i0 = 0; i0 < rows; i0 += 8)
    for (int64_t j0 = 0; j0 < cols; j0 += 8)
      for (int64_t j = j0; j < std::min(j0 + 8, cols); ++j)
        for (int64_t i = i0; i < std::min(i0 + 8, rows); ++i)
          dst[j * rows + i] = (add ? dst[j * rows + i] : 0.0f) + src[i * cols + j];
}

extern "C" void stax_narrow_gemm(const float* a, const float* b, float* c, int64_t batch, int64_t m, int64_t n,
                                 int64_t k, int threads, int add) {
  // each product split into parts when the batch has fewer than stax::TASKS_A_THREAD products a thread:
  // of whole panels, or of rows when the panels are fewer than two a part (a weight gradient's),
  // as even as the rows allow (parts of whole 8-row tiles are uneven when the tiles are few)
  const int64_t parts = threads > 1 ? std::max<int64_t>(1, (threads * stax::TASKS_A_THREAD + batch - 1) / batch) : 1;
  const int64_t panels = n / PANEL;
  const bool by_rows = panels < 2 * parts;
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < batch * parts; ++task) {
    const int64_t t = task / parts, part = task % parts, last = part + 1 == parts;
    const float* b_t = b + t * k * n;
    float* c_t = c + t * m * n;
    if (by_rows) {
      const int64_t lo = m * part / parts, hi = m * (part + 1) / parts;
      if (hi > lo) columns(a + lo * k, b_t, c_t + lo * n, hi - lo, n, k, 0, n, add);
    } else {
      const int64_t lo = panels * part / parts * PANEL, hi = last ? n : panels * (part + 1) / parts * PANEL;
      columns(a, b_t, c_t, m, n, k, lo, hi, add);
    }
  }
}

// C (m x n) = A (m x k) B^T (+ C when add), B stored as n x k: a weight gradient, few rows of
// both and k long.  With few rows of B (at most DOTS_MAX_ROWS), every sum runs along rows of A and
// B where they lie, RA rows of A by RB rows of B at a time, each with a vector of partial sums,
// over blocks of NB columns that stay cached while every tile reads them; the blocks are split
// among the threads, each summing into a part of its own, which the caller adds.  With more rows
// of B, C^T = B A^T by the row tiles above, reading B in place, with A^T and the product
// transposed around it (the transposes cost m k + n m against the product's m n k).
constexpr int64_t NB = 1024, RA = 4, RB = 4, DOTS_MAX_ROWS = 48;

static float lanes_sum(vf x) {
  alignas(64) float lane[STAX_W];
  stax::vstore(lane, x);
  float s = 0.0f;
  for (int i = 0; i < STAX_W; ++i) s += lane[i];
  return s;
}

// part[i][j] += sum over columns lo..hi of a[i] * b[j], i < ra, j < rb (rows lda, ldb apart)
template <int TA, int TB>
static void dots(const float* a, const float* b, int64_t ld, int64_t lo, int64_t hi, float* part, int64_t ldp) {
  vf acc[TA][TB] = {};
  const int64_t vector_end = lo + (hi - lo) / STAX_W * STAX_W;
  for (int64_t p = lo; p < vector_end; p += STAX_W) {
    vf av[TA], bv[TB];
    for (int i = 0; i < TA; ++i) av[i] = stax::vload(a + i * ld + p);
    for (int j = 0; j < TB; ++j) bv[j] = stax::vload(b + j * ld + p);
    for (int i = 0; i < TA; ++i)
      for (int j = 0; j < TB; ++j) acc[i][j] += av[i] * bv[j];
  }
  for (int i = 0; i < TA; ++i)
    for (int j = 0; j < TB; ++j) {
      float s = lanes_sum(acc[i][j]);
      for (int64_t p = vector_end; p < hi; ++p) s += a[i * ld + p] * b[j * ld + p];
      part[i * ldp + j] += s;
    }
}

template <int TA>
static void dots_rows(int64_t tb, const float* a, const float* b, int64_t ld, int64_t lo, int64_t hi, float* part,
                      int64_t ldp) {
  switch (tb) {
    case 4: dots<TA, 4>(a, b, ld, lo, hi, part, ldp); break;
    case 3: dots<TA, 3>(a, b, ld, lo, hi, part, ldp); break;
    case 2: dots<TA, 2>(a, b, ld, lo, hi, part, ldp); break;
    default: dots<TA, 1>(a, b, ld, lo, hi, part, ldp); break;
  }
}

static void dots_product(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int threads,
                         bool add) {
  const int64_t blocks = (k + NB - 1) / NB;
  const int64_t parts =
      threads > 1 ? std::max<int64_t>(1, std::min<int64_t>(threads * stax::TASKS_A_THREAD, blocks)) : 1;
  std::unique_ptr<float[]> sums = stax::heap_array<float>(parts * m * n, true);
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (parts > 1)
  for (int64_t part = 0; part < parts; ++part) {
    float* mine = sums.get() + part * m * n;
    for (int64_t block = blocks * part / parts; block < blocks * (part + 1) / parts; ++block) {
      const int64_t lo = block * NB, hi = std::min(k, lo + NB);
      for (int64_t i = 0; i < m; i += RA)
        for (int64_t j = 0; j < n; j += RB) {
          const int64_t ta = std::min(RA, m - i), tb = std::min(RB, n - j);
          const float *rows_a = a + i * k, *rows_b = b + j * k;
          float* out = mine + i * n + j;
          switch (ta) {
            case 4: dots_rows<4>(tb, rows_a, rows_b, k, lo, hi, out, n); break;
            case 3: dots_rows<3>(tb, rows_a, rows_b, k, lo, hi, out, n); break;
            case 2: dots_rows<2>(tb, rows_a, rows_b, k, lo, hi, out, n); break;
            default: dots_rows<1>(tb, rows_a, rows_b, k, lo, hi, out, n); break;
          }
        }
    }
  }
  for (int64_t x = 0; x < m * n; ++x) {
    float s = add ? c[x] : 0.0f;
    for (int64_t part = 0; part < parts; ++part) s += sums[part * m * n + x];
    c[x] = s;
  }
}

// (0, or minus the bytes of scratch it could not allocate: stax::scratch_result)
extern "C" int64_t stax_narrow_gemm_bt(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                                       int threads, int add) {
  return stax::scratch_result([&] {
    if (n <= DOTS_MAX_ROWS) return dots_product(a, b, c, m, n, k, threads, add);
    const std::unique_ptr<float[]> at = stax::heap_array<float>(k * m), product = stax::heap_array<float>(n * m);
    transpose(a, at.get(), m, k, false);
    stax_narrow_gemm(b, at.get(), product.get(), 1, n, m, k, threads, 0);
    transpose(product.get(), c, n, m, add);
  });
}
