// Rows of a table by an index (take_rows), and their gradient (add_rows) (stax/kernels/row_index.py).
#include <algorithm>
#include <cstdint>
#include <cstring>

// the tasks a call splits into: a few a thread, so that the caller takes over those of a thread
// that shares its core with another process (stax_parallel.cpp)
static int64_t task_count(int64_t work, int threads) { return std::max<int64_t>(1, std::min<int64_t>(work, 4 * threads)); }

// out (t, row_bytes) = the rows index[i] of table (v, row_bytes); zeros for an index outside [0, v)
extern "C" void stax_take_rows(const char* table, const int64_t* index, char* out, int64_t v, int64_t t,
                               int64_t row_bytes, int threads) {
  const int64_t tasks = task_count(t, threads);
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < tasks; ++task)
    for (int64_t i = t * task / tasks, end = t * (task + 1) / tasks; i < end; ++i) {
      const int64_t r = index[i];
      if (r >= 0 && r < v)
        std::memcpy(out + i * row_bytes, table + r * row_bytes, row_bytes);
      else
        std::memset(out + i * row_bytes, 0, row_bytes);
    }
}

// out (v, d) = the sum of the rows of values (t, d) whose index is each row's; a task owns a range
// of out's rows and adds, in index order, the rows that fall in it
template <typename T>
static void add_rows(const T* values, const int64_t* index, T* out, int64_t v, int64_t t, int64_t d, int threads) {
  const int64_t tasks = task_count(v, threads);
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t first = v * task / tasks, last = v * (task + 1) / tasks;
    std::memset(out + first * d, 0, (last - first) * d * sizeof(T));
    for (int64_t i = 0; i < t; ++i) {
      const int64_t r = index[i];
      if (r < first || r >= last) continue;
      T* dst = out + r * d;
      const T* src = values + i * d;
      for (int64_t k = 0; k < d; ++k) dst[k] += src[k];
    }
  }
}

extern "C" void stax_add_rows_float32(const float* values, const int64_t* index, float* out, int64_t v, int64_t t,
                                      int64_t d, int threads) {
  add_rows(values, index, out, v, t, d, threads);
}

extern "C" void stax_add_rows_float64(const double* values, const int64_t* index, double* out, int64_t v, int64_t t,
                                      int64_t d, int threads) {
  add_rows(values, index, out, v, t, d, threads);
}
