// The register tile of stax's hand-written products (stax/narrow_gemm.py, stax/direct_conv.py):
// C (R rows, ldc apart, by V vectors) = A (R rows) times kc rows of B, where A's row i is wherever
// `arow(i)` points and B's row p wherever `row(p)` points, its vectors vstep apart: a matrix's rows,
// or a convolution's input shifted under each tap.
#pragma once
#include <type_traits>
#include "stax_vec.h"

namespace stax {

// sums in registers (32 vector registers at 16 lanes; 16 at 8 lanes, where 8 rows spilled), with
// the vectors of B's row and A's broadcast; + C when add; prefetching V vectors a row of `ahead`
// (rows ld_ahead apart) when FETCH
template <int R, int V, bool FETCH, typename ARow, typename Row>
inline void sweep(ARow arow, Row row, float* c, int64_t ldc, int64_t kc, bool add, const float* ahead,
                  int64_t ld_ahead, int64_t vstep) {
  const float* a[R];
  for (int i = 0; i < R; ++i) a[i] = arow(i);
  vec<float> acc[R][V] = {};
  if (add)
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < V; ++v) acc[i][v] = vload(c + i * ldc + v * STAX_W);
  for (int64_t p = 0; p < kc; ++p) {
    const float* b = row(p);
    if constexpr (FETCH)
      for (int v = 0; v < V; ++v) __builtin_prefetch(ahead + p * ld_ahead + v * STAX_W);
    vec<float> bv[V];
    for (int v = 0; v < V; ++v) bv[v] = vload(b + v * vstep);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const vec<float> ai = splat(a[i][p]);
      for (int v = 0; v < V; ++v) acc[i][v] += ai * bv[v];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) vstore(c + i * ldc + v * STAX_W, acc[i][v]);
}

// tasks a thread of the team, at least, that a product splits into: a thread that shares its core
// with another process runs slower, and the caller takes over the tasks it has not claimed
// (stax_parallel.cpp), which two halves of the work would not let it do
constexpr int64_t TASKS_A_THREAD = 4;

// a tile's rows: the register file holds this many by two vectors
constexpr int SWEEP_ROWS = STAX_W >= 16 ? 8 : 6;

// `sweep` of mr rows (SWEEP_ROWS, 4, 2 or 1), prefetching unless `ahead` is null
template <int V, typename ARow, typename Row>
inline void sweep_rows(int64_t mr, ARow arow, Row row, float* c, int64_t ldc, int64_t kc, bool add,
                       const float* ahead = nullptr, int64_t ld_ahead = 0, int64_t vstep = STAX_W) {
  auto tile = [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    if (ahead != nullptr)
      sweep<R, V, true>(arow, row, c, ldc, kc, add, ahead, ld_ahead, vstep);
    else
      sweep<R, V, false>(arow, row, c, ldc, kc, add, ahead, ld_ahead, vstep);
  };
  switch (mr) {
    case SWEEP_ROWS: return tile(std::integral_constant<int, SWEEP_ROWS>());
    case 4: return tile(std::integral_constant<int, 4>());
    case 2: return tile(std::integral_constant<int, 2>());
    default: return tile(std::integral_constant<int, 1>());
  }
}

// the rows of the tile starting at row m0 of m: SWEEP_ROWS, or the largest of 4, 2, 1 that fits
inline int64_t tile_rows(int64_t m, int64_t m0) {
  const int64_t left = m - m0;
  return left >= SWEEP_ROWS ? SWEEP_ROWS : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

}  // namespace stax
