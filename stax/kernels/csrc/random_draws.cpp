// Counter-based random draws: the bernoulli and uniform externs (stax/kernels/random_draws.py).
#include <algorithm>
#include <cstdint>

static inline uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x21f0aaadu; x ^= x >> 15; x *= 0x735a2d97u; x ^= x >> 15;
  return x;
}

// out[i] = value(the 24 high bits of element i's hash) of stream `stream` under `*seed`
template <typename T, typename Value>
static void draw(const int64_t* seed, T* out, int64_t n, int64_t stream, int threads, Value value) {
  const uint64_t s = static_cast<uint64_t>(*seed);
  const uint32_t key = mix(static_cast<uint32_t>(s) ^
                           mix(static_cast<uint32_t>(s >> 32) ^ mix(static_cast<uint32_t>(stream) + 0x9e3779b9u)));
  // a few tasks a thread, so that the caller takes over those of a thread whose core is busy
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(n / 16384, 4 * threads));
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < tasks; ++task)
    // in runs that keep hi(i): 32-bit lanes throughout
    for (int64_t i = n * task / tasks, end = n * (task + 1) / tasks, stop; i < end; i = stop) {
      stop = std::min<int64_t>({end, (i | int64_t(0xffffffff)) + 1, i + (int64_t(1) << 31)});
      const uint32_t low = static_cast<uint32_t>(i), high = static_cast<uint32_t>(i >> 32);
      const uint32_t count = static_cast<uint32_t>(stop - i);
      T* run = out + i;
      for (uint32_t k = 0; k < count; ++k) run[k] = value(mix(mix((low + k) ^ key) + high) >> 8);
    }
}

extern "C" void stax_bernoulli(const int64_t* seed, void* out, int64_t n, int64_t threshold, int64_t stream,
                               int threads) {
  const uint32_t below = static_cast<uint32_t>(threshold);
  draw(seed, static_cast<int8_t*>(out), n, stream, threads, [below](uint32_t u) { return int8_t(u < below); });
}

extern "C" void stax_uniform_float32(const int64_t* seed, void* out, int64_t n, int64_t, int64_t stream, int threads) {
  draw(seed, static_cast<float*>(out), n, stream, threads, [](uint32_t u) { return float(u) * 0x1p-24f; });
}

extern "C" void stax_uniform_float64(const int64_t* seed, void* out, int64_t n, int64_t, int64_t stream, int threads) {
  draw(seed, static_cast<double*>(out), n, stream, threads, [](uint32_t u) { return double(u) * 0x1p-24; });
}
