// The hand-written candidates for x + y.T of experiments/bench/transposed.py.
#include "stax_vec.h"
constexpr int64_t W = STAX_W;
extern "C" void stream_add(const float* x, const float* y, float* out, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n * n; i += W) stax::vstore(out + i, stax::vload(x + i) + stax::vload(y + i));
}
template <int64_t BR, int64_t BC> void blocks(const float* x, const float* y, float* out, int64_t n) {
    #pragma omp parallel for
    for (int64_t b0 = 0; b0 < n / BR; ++b0)
        for (int64_t b1 = 0; b1 < n / BC; ++b1)
            for (int64_t t0 = b0 * BR; t0 < b0 * BR + BR; t0 += W)
                for (int64_t t1 = b1 * BC; t1 < b1 * BC + BC; t1 += W) {
                    stax::vec<float> t[W];
                    for (int64_t lane = 0; lane < W; ++lane) t[lane] = stax::vload(y + t0 + n * (t1 + lane));
                    stax::transpose(t);
                    for (int64_t lane = 0; lane < W; ++lane)
                        stax::vstore(out + n * (t0 + lane) + t1, stax::vload(x + n * (t0 + lane) + t1) + t[lane]);
                }
}
template <int64_t H, bool NT, bool PHASE2 = true> void strips(const float* x, const float* y, float* out, int64_t n) {
    #pragma omp parallel
    {
        const int64_t stride = n + 64 / sizeof(float);
        int64_t short_bytes = 0;  // a benchmark's fixed sizes: the area is had or the run is void
        float* buffer = reinterpret_cast<float*>(stax::thread_scratch(H * stride * sizeof(float), &short_bytes));  // kept, as the generated kernel's
        #pragma omp for nowait
        for (int64_t s = 0; s < n / H; ++s) {
            const int64_t i0 = s * H;
            for (int64_t j = 0; j < n; j += W)
                for (int64_t h0 = 0; h0 < H; h0 += W) {
                    stax::vec<float> t[W];
                    for (int64_t lane = 0; lane < W; ++lane) t[lane] = stax::vload(y + n * (j + lane) + i0 + h0);
                    stax::transpose(t);
                    for (int64_t lane = 0; lane < W; ++lane) stax::vstore(buffer + stride * (h0 + lane) + j, t[lane]);
                }
            if (PHASE2)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t j = 0; j < n; j += W) {
                        const auto sum = stax::vload(x + n * (i0 + h) + j) + stax::vload(buffer + stride * h + j);
                        if (NT) stax::vstore_stream(out + n * (i0 + h) + j, sum); else stax::vstore(out + n * (i0 + h) + j, sum);
                    }
        }
        if (NT) stax::store_fence();
    }
}
template <int64_t H> void strip_reads(const float* y, float* out, int64_t n) {
    float total = 0;
    #pragma omp parallel reduction(+:total)
    {
        stax::vec<float> sum = stax::splat<float>(0.0f);
        #pragma omp for nowait
        for (int64_t s = 0; s < n / H; ++s)
            for (int64_t j = 0; j < n; j += W)
                for (int64_t h0 = 0; h0 < H; h0 += W)
                    for (int64_t lane = 0; lane < W; ++lane) sum = sum + stax::vload(y + n * (j + lane) + s * H + h0);
        total += stax::hreduce_sum<float>(sum);
    }
    out[0] = total;
}
extern "C" void blocks_64x64(const float* x, const float* y, float* out, int64_t n) { blocks<64, 64>(x, y, out, n); }
extern "C" void blocks_256x256(const float* x, const float* y, float* out, int64_t n) { blocks<256, 256>(x, y, out, n); }
extern "C" void blocks_32x1024(const float* x, const float* y, float* out, int64_t n) { blocks<32, 1024>(x, y, out, n); }
extern "C" void strips_32(const float* x, const float* y, float* out, int64_t n) { strips<32, false>(x, y, out, n); }
extern "C" void strips_64(const float* x, const float* y, float* out, int64_t n) { strips<64, false>(x, y, out, n); }
extern "C" void strips_256(const float* x, const float* y, float* out, int64_t n) { strips<256, false>(x, y, out, n); }
extern "C" void strips_256_nt(const float* x, const float* y, float* out, int64_t n) { strips<256, true>(x, y, out, n); }
extern "C" void strips_256_phase1(const float* x, const float* y, float* out, int64_t n) { strips<256, false, false>(x, y, out, n); }
extern "C" void strips_256_reads(const float*, const float* y, float* out, int64_t n) { strip_reads<256>(y, out, n); }
