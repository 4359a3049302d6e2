// gemm from every thread of an OpenMP team (stax/kernels/matmul.py): C = A B + beta C, row-major, contiguous.
#include <cstdint>
template <typename I, typename T>
using gemm_fn = void (*)(int, int, int, I, I, I, T, const T*, I, const T*, I, T, T*, I);

// A (m x k) is stored as k x m when ta, B (k x n) as n x k when tb (a transposed operand read in place).
// A batch shorter than the team splits each product into `threads` parts along its wider side: its
// rows when m >= n, else its columns (a weight of few rows times a convolution's long column matrix
// would otherwise be read once a part).
template <typename I, typename T>
static void team_gemm(void* fn, const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t n, int64_t k,
                      int64_t a_step, int64_t b_step, int ta, int tb, int threads, T beta) {
  auto gemm = reinterpret_cast<gemm_fn<I, T>>(fn);
  const int64_t parts = batch >= threads ? 1 : threads;
  const bool by_rows = m >= n;
  const int64_t side = by_rows ? m : n;
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t task = 0; task < batch * parts; ++task) {
    const int64_t p = task / parts, lo = side * (task % parts) / parts, hi = side * (task % parts + 1) / parts;
    if (hi <= lo) continue;
    // rows lo..hi of A (columns of its stored k x m when ta), or columns lo..hi of B (rows of its n x k when tb)
    const T* a_part = a + p * a_step + (by_rows ? (ta ? lo : lo * k) : 0);
    const T* b_part = b + p * b_step + (by_rows ? 0 : (tb ? lo * k : lo));
    T* c_part = c + p * m * n + (by_rows ? lo * n : lo);
    // CblasRowMajor; CblasNoTrans (111) or CblasTrans (112)
    gemm(101, ta ? 112 : 111, tb ? 112 : 111, I(by_rows ? hi - lo : m), I(by_rows ? n : hi - lo), I(k), T(1), a_part,
         I(ta ? m : k), b_part, I(tb ? k : n), beta, c_part, I(n));
  }
}
#define STAX_GEMM(name, I, T) \
  extern "C" void name(void* fn, const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t n, int64_t k, \
                       int64_t a_step, int64_t b_step, int ta, int tb, int threads, T beta) { \
    team_gemm<I, T>(fn, a, b, c, batch, m, n, k, a_step, b_step, ta, tb, threads, beta); }
STAX_GEMM(stax_gemm_f32_i32, int32_t, float)
STAX_GEMM(stax_gemm_f64_i32, int32_t, double)
STAX_GEMM(stax_gemm_f32_i64, int64_t, float)
STAX_GEMM(stax_gemm_f64_i64, int64_t, double)
