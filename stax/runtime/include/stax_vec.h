// Runtime support for stax's generated C++ kernels (seed section 8.1).
//
// Every operation is overloaded for a scalar T and for vec<T>, a GCC vector of STAX_W lanes,
// so the generated loop body reads the same in the vector loop and in its scalar tail.
// Bool values are 0/1 bytes (int8_t lanes in vectors).  float32 exp and erf are inline (below);
// the other transcendental functions in vector loops call glibc's libmvec (AVX-512:
// _ZGVeN16v_*, AVX2: _ZGVdN8v_*), never a scalar libm call per lane.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#ifndef STAX_W
#define STAX_W 1
#endif

#if defined(__AVX512F__) && STAX_W == 16
// A library of 512-bit kernels tells the kernels' runtime (stax_parallel.cpp) once it is loaded,
// so that its spinning pool threads keep their cores' 512-bit units busy; weak, as programs that
// include this header without the runtime (tests of the header alone) have none.
extern "C" __attribute__((weak)) void stax_parallel_vector_bits(int bits);
namespace stax {
[[maybe_unused]] inline const bool announced_512 = (stax_parallel_vector_bits && (stax_parallel_vector_bits(512), true));
}
#endif

namespace stax {

template <typename T> struct vec_type { typedef T type __attribute__((vector_size(STAX_W * sizeof(T)))); };
// bool is not a valid lane type: a bool vector is a vector of 0/1 bytes.
template <> struct vec_type<bool> { typedef vec_type<int8_t>::type type; };
template <typename T> using vec = typename vec_type<T>::type;

// --- vectors wider than a register (W 8-byte lanes: int64 indices, float64) ----------------------
// GCC expands a comparison, a select or a max of such vectors lane by lane; as two halves of
// register width each is an instruction or two.
#if defined(__AVX512F__)
constexpr size_t register_bytes = 64;
#elif defined(__AVX2__)
constexpr size_t register_bytes = 32;
#else
constexpr size_t register_bytes = 16;
#endif
template <typename V> constexpr bool wider_than_register = STAX_W >= 2 && sizeof(V) > register_bytes;
// a vector of half V's lanes (of its lane type)
template <typename V> struct half_vector {
  typedef std::remove_reference_t<decltype(std::declval<V>()[0])> lane;
  typedef lane type __attribute__((vector_size(sizeof(V) / 2)));
};
template <typename V> using half_of = typename half_vector<V>::type;
template <typename V, typename H> inline void split_halves(V v, H& low, H& high) {
  std::memcpy(&low, &v, sizeof low);
  std::memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof low, sizeof high);
}
template <typename V, typename H> inline V join_halves(H low, H high) {
  V v;
  std::memcpy(&v, &low, sizeof low);
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof low, &high, sizeof high);
  return v;
}
// f applied to the two halves of a and b
template <typename V, typename F> inline V by_halves(V a, V b, F f) {
  typedef half_of<V> H;
  H al, ah, bl, bh;
  split_halves(a, al, ah);
  split_halves(b, bl, bh);
  return join_halves<V>(H(f(al, bl)), H(f(ah, bh)));
}

// --- memory ---------------------------------------------------------------------------------
template <typename T> inline vec<T> vload(const T* p) { vec<T> v; std::memcpy(&v, p, sizeof v); return v; }
inline vec<int8_t> vload(const bool* p) { vec<int8_t> v; std::memcpy(&v, p, sizeof v); return v; }
template <typename T> inline void vstore(T* p, vec<T> v) { std::memcpy(p, &v, sizeof v); }
inline void vstore(bool* p, vec<int8_t> v) { std::memcpy(p, &v, sizeof v); }
// s in every lane (s - 0 is s for every float, -0.0 included; 0 + s would turn -0.0 into 0.0)
template <typename T> inline vec<T> splat(T s) { const vec<T> zero = {}; return s - zero; }
// Every S-th element from p (a strided read: a stride-2 convolution's input).  Stride 2 is two
// vector loads, the second ending at the last element read, and a shuffle of the even elements
// (a register-wide half at a time for vectors wider than one); wider strides are gathered lane by
// lane.
template <typename M, size_t N, size_t... J> constexpr M even_elements(std::index_sequence<J...>) {
  return M{(J < N / 2 ? 2 * J : 2 * J + 1)...};
}
template <typename V, typename T> inline V even_of(V low, V high) {  // high starts N - 1 past low
  constexpr size_t N = sizeof(V) / sizeof(T);
  typedef decltype(low < low) mask;
  return __builtin_shuffle(low, high, even_elements<mask, N>(std::make_index_sequence<N>()));
}
template <typename V, typename T> inline V load_even(const T* p) {
  constexpr size_t N = sizeof(V) / sizeof(T);
  V low, high;
  std::memcpy(&low, p, sizeof low);
  std::memcpy(&high, p + N - 1, sizeof high);
  return even_of<V, T>(low, high);
}
template <int S, typename T> inline vec<T> vload_strided(const T* p) {
  if constexpr (S == 2 && wider_than_register<vec<T>>) {
    typedef half_of<vec<T>> H;
    return join_halves<vec<T>>(load_even<H>(p), load_even<H>(p + STAX_W));
  } else if constexpr (S == 2 && STAX_W >= 2) {
    return load_even<vec<T>>(p);
  } else {
    vec<T> r;
    for (int i = 0; i < STAX_W; ++i) r[i] = p[i * S];
    return r;
  }
}
// A small zeroed kernel-local array (a scratch row) on the stack of the thread that runs the
// kernel, with unique_ptr's get() and indexing, so that kernels address it like a heap one.
template <typename T, size_t N> struct stack_array {
  alignas(64) T data[N] = {};
  T* get() { return data; }
  T& operator[](int64_t i) { return data[i]; }
};
// Elements before the first cache-line boundary at or after p (a loop peels them, so that its
// vectors of every row read whole lines).
template <typename T> inline int64_t line_head(const T* p) {
  return int64_t((-reinterpret_cast<uintptr_t>(p)) % 64 / sizeof(T));
}
// Non-temporal store of a large output: no read of the line before its write, no cache pollution.
// It needs an address aligned to the store's width; elsewhere it is a plain store.
#if defined(__AVX512F__) && STAX_W == 16
typedef __m512i stream_piece;
inline void stream_store(stream_piece* p, stream_piece v) { _mm512_stream_si512(p, v); }
#elif defined(__AVX2__) && STAX_W == 8
typedef __m256i stream_piece;
inline void stream_store(stream_piece* p, stream_piece v) { _mm256_stream_si256(p, v); }
#endif
template <typename T> inline void vstore_stream(T* p, vec<T> v) {
#if (defined(__AVX512F__) && STAX_W == 16) || (defined(__AVX2__) && STAX_W == 8)
  constexpr size_t pieces = sizeof v / sizeof(stream_piece);
  if (pieces > 0 && sizeof v % sizeof(stream_piece) == 0 && reinterpret_cast<uintptr_t>(p) % sizeof(stream_piece) == 0) {
    stream_piece part[pieces > 0 ? pieces : 1];
    std::memcpy(part, &v, sizeof v);
    for (size_t i = 0; i < pieces; ++i) stream_store(reinterpret_cast<stream_piece*>(p) + i, part[i]);
    return;
  }
#endif
  vstore(p, v);
}
inline void vstore_stream(bool* p, vec<int8_t> v) { vstore(p, v); }
// The S vectors v interleaved into S * W consecutive elements, p[i * S + r] = v[r][i] (the
// interleaved form's store of S phases).  Two vectors are two shuffles; more, lane by lane.
template <typename M, int Half, size_t... J> constexpr M interleave_mask(std::index_sequence<J...>) {
  return M{(J / 2 + Half * STAX_W / 2 + (J % 2) * STAX_W)...};
}
template <int Half, typename V> inline V interleaved_half(V a, V b) {  // lanes Half * W / 2 on, alternating
  typedef decltype(a < a) mask;
  return __builtin_shuffle(a, b, interleave_mask<mask, Half>(std::make_index_sequence<STAX_W>()));
}
template <typename T, typename V, typename... Rest> inline void vstore_interleaved(T* p, V first, Rest... rest) {
  const V v[] = {first, rest...};
  constexpr int S = 1 + sizeof...(Rest);
  if constexpr (S == 2 && STAX_W >= 2) {
    vstore(p, interleaved_half<0>(v[0], v[1]));
    vstore(p + STAX_W, interleaved_half<1>(v[0], v[1]));
  } else {
    for (int i = 0; i < STAX_W; ++i)
      for (int r = 0; r < S; ++r) p[i * S + r] = v[r][i];
  }
}
// Orders this thread's non-temporal stores before the stores and barriers that follow.
inline void store_fence() {
#if defined(__AVX2__) || defined(__AVX512F__)
  _mm_sfence();
#endif
}

// In-place transpose of W vectors of W lanes (the tiled-vector form, 8.2): log2(W) stages, each
// exchanging one bit of the row number with the same bit of the lane number.  The shuffle masks
// are constants, so each stage compiles to unpack/permute instructions (masks computed in a loop
// were built lane by lane at run time, 140 instructions for 8 x 8).
template <typename M, int B, bool High, size_t... J> constexpr M exchange_mask(std::index_sequence<J...>) {
  return M{(High ? ((J & B) ? STAX_W + J : J + B) : ((J & B) ? STAX_W + J - B : J))...};
}
template <int B, typename V> inline void transpose_stage(V* rows) {
  typedef decltype(rows[0] < rows[0]) mask;
  constexpr mask low = exchange_mask<mask, B, false>(std::make_index_sequence<STAX_W>());
  constexpr mask high = exchange_mask<mask, B, true>(std::make_index_sequence<STAX_W>());
#pragma GCC unroll 16
  for (int i = 0; i < STAX_W; ++i)
    if (!(i & B)) {
      V a = rows[i], c = rows[i + B];
      rows[i] = __builtin_shuffle(a, c, low);
      rows[i + B] = __builtin_shuffle(a, c, high);
    }
}
template <typename V> inline void transpose(V* rows) {
  if constexpr (STAX_W >= 2) transpose_stage<1>(rows);
  if constexpr (STAX_W >= 4) transpose_stage<2>(rows);
  if constexpr (STAX_W >= 8) transpose_stage<4>(rows);
  if constexpr (STAX_W >= 16) transpose_stage<8>(rows);
}

// --- lane-wise fallback ------------------------------------------------------------------------
template <typename V, typename F> inline V lanes(V x, F f) { V r; for (int i = 0; i < STAX_W; ++i) r[i] = f(x[i]); return r; }
template <typename V, typename F> inline V lanes2(V x, V y, F f) { V r; for (int i = 0; i < STAX_W; ++i) r[i] = f(x[i], y[i]); return r; }

// --- transcendental functions: inline float32 exp and erf, else libm and libmvec -------------
#define STAX_SCALAR_FN_DOUBLE(name, fn) inline double name(double x) { return fn(x); }
#define STAX_SCALAR_FN(name, fn) inline float name(float x) { return fn(x); } STAX_SCALAR_FN_DOUBLE(name, fn)

#if defined(__AVX512F__) && STAX_W == 16
#define STAX_VECTOR_FN_FLOAT(name, fn) \
  extern "C" __m512 _ZGVeN16v_##fn##f(__m512); \
  inline vec<float> name(vec<float> x) { return (vec<float>)_ZGVeN16v_##fn##f((__m512)x); }
#define STAX_VECTOR_FN_DOUBLE(name, fn) \
  extern "C" __m512d _ZGVeN8v_##fn(__m512d); \
  inline vec<double> name(vec<double> x) { \
    __m512d h[2]; std::memcpy(h, &x, sizeof x); h[0] = _ZGVeN8v_##fn(h[0]); h[1] = _ZGVeN8v_##fn(h[1]); \
    std::memcpy(&x, h, sizeof x); return x; }
#define STAX_VECTOR_FN2(name, fn) \
  extern "C" __m512 _ZGVeN16vv_##fn##f(__m512, __m512); \
  extern "C" __m512d _ZGVeN8vv_##fn(__m512d, __m512d); \
  inline vec<float> name(vec<float> x, vec<float> y) { return (vec<float>)_ZGVeN16vv_##fn##f((__m512)x, (__m512)y); } \
  inline vec<double> name(vec<double> x, vec<double> y) { \
    __m512d a[2], b[2]; std::memcpy(a, &x, sizeof x); std::memcpy(b, &y, sizeof y); \
    a[0] = _ZGVeN8vv_##fn(a[0], b[0]); a[1] = _ZGVeN8vv_##fn(a[1], b[1]); std::memcpy(&x, a, sizeof x); return x; }
#elif defined(__AVX2__) && STAX_W == 8
#define STAX_VECTOR_FN_FLOAT(name, fn) \
  extern "C" __m256 _ZGVdN8v_##fn##f(__m256); \
  inline vec<float> name(vec<float> x) { return (vec<float>)_ZGVdN8v_##fn##f((__m256)x); }
#define STAX_VECTOR_FN_DOUBLE(name, fn) \
  extern "C" __m256d _ZGVdN4v_##fn(__m256d); \
  inline vec<double> name(vec<double> x) { \
    __m256d h[2]; std::memcpy(h, &x, sizeof x); h[0] = _ZGVdN4v_##fn(h[0]); h[1] = _ZGVdN4v_##fn(h[1]); \
    std::memcpy(&x, h, sizeof x); return x; }
#define STAX_VECTOR_FN2(name, fn) \
  extern "C" __m256 _ZGVdN8vv_##fn##f(__m256, __m256); \
  extern "C" __m256d _ZGVdN4vv_##fn(__m256d, __m256d); \
  inline vec<float> name(vec<float> x, vec<float> y) { return (vec<float>)_ZGVdN8vv_##fn##f((__m256)x, (__m256)y); } \
  inline vec<double> name(vec<double> x, vec<double> y) { \
    __m256d a[2], b[2]; std::memcpy(a, &x, sizeof x); std::memcpy(b, &y, sizeof y); \
    a[0] = _ZGVdN4vv_##fn(a[0], b[0]); a[1] = _ZGVdN4vv_##fn(a[1], b[1]); std::memcpy(&x, a, sizeof x); return x; }
#else
#define STAX_VECTOR_FN_FLOAT(name, fn)
#define STAX_VECTOR_FN_DOUBLE(name, fn)
#define STAX_VECTOR_FN2(name, fn)
#endif

#define STAX_MATH(name, fn) STAX_SCALAR_FN(name, std::fn) STAX_VECTOR_FN_FLOAT(name, fn) STAX_VECTOR_FN_DOUBLE(name, fn)
// Lane helpers of the inline float32 functions below: the lanes' bits as int32, and back.
template <typename T> using int_lanes = std::conditional_t<std::is_same_v<T, float>, int32_t, vec<int32_t>>;
template <typename T> inline T bits_to_float(int_lanes<T> bits) { T v; std::memcpy(&v, &bits, sizeof v); return v; }
template <typename T> inline int_lanes<T> float_bits(T v) { int_lanes<T> b; std::memcpy(&b, &v, sizeof b); return b; }
// x limited to [lo, hi], NaN passing through: one max and one min instruction (x86's max and
// min return their second operand when either is NaN).
inline float clamp_keep_nan(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }
inline vec<float> clamp_keep_nan(vec<float> x, float lo, float hi) {
#if defined(__AVX512F__) && STAX_W == 16
  return (vec<float>)_mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), (__m512)x));
#elif defined(__AVX2__) && STAX_W == 8
  return (vec<float>)_mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), (__m256)x));
#else
  const vec<float> c = x < lo ? lo : x;
  return c > hi ? hi : c;
#endif
}
// Whether every lane of a float comparison's mask is true.
inline bool all_lanes(bool b) { return b; }
inline bool all_lanes(vec<int32_t> mask) {
#if defined(__AVX512F__) && STAX_W == 16
  return _mm512_movepi32_mask((__m512i)mask) == 0xFFFF;
#elif defined(__AVX2__) && STAX_W == 8
  return _mm256_movemask_ps((__m256)mask) == 0xFF;
#else
  for (int i = 0; i < STAX_W; ++i) if (!mask[i]) return false;
  return true;
#endif
}
// Heap scratch that fails soft: on a failed allocation the bytes asked go to `*short_bytes`
// (the kernel's scratch_short), its blocks stop (scratch_ok) and the call raises MemoryError
// naming the size, where std::bad_alloc would end the process (it escapes a parallel region).
inline void scratch_failed(int64_t* short_bytes, int64_t bytes) {
  __atomic_store_n(short_bytes, bytes, __ATOMIC_RELAXED);
}
inline bool scratch_ok(const int64_t* short_bytes) { return __atomic_load_n(short_bytes, __ATOMIC_RELAXED) == 0; }
// n zeroed T, or null when they cannot be had.
template <typename T> inline std::unique_ptr<T[]> scratch_array(int64_t n, int64_t* short_bytes) {
  T* data = new (std::nothrow) T[n]();
  if (data == nullptr) scratch_failed(short_bytes, n * int64_t(sizeof(T)));
  return std::unique_ptr<T[]>(data);
}
// The extern kernels' heap arrays (stax.direct_conv, stax.narrow_gemm), allocated outside
// parallel regions: n T (zeroed when asked), or the bytes asked thrown as a scratch_shortage,
// which the entry point returns as minus its bytes (scratch_result) for the caller to raise.
struct scratch_shortage {
  int64_t bytes;
};
template <typename T> inline std::unique_ptr<T[]> heap_array(int64_t n, bool zeroed = false) {
  T* data = zeroed ? new (std::nothrow) T[n]() : new (std::nothrow) T[n];
  if (data == nullptr) throw scratch_shortage{n * int64_t(sizeof(T))};
  return std::unique_ptr<T[]>(data);
}
// 0 once `body` has run, or minus the bytes one of its heap arrays could not get.
template <typename F> inline int64_t scratch_result(F&& body) {
  try {
    body();
    return 0;
  } catch (const scratch_shortage& shortage) {
    return -shortage.bytes;
  }
}
// A per-thread scratch area of at least `bytes`, aligned to a cache line, kept for the thread's
// life: the tiled-vector form's strip buffers, reused from call to call without fresh pages; null
// when it cannot be had.
inline char* thread_scratch(size_t bytes, int64_t* short_bytes) {
  struct Area {
    char* data = nullptr;
    size_t size = 0;
    ~Area() { std::free(data); }
  };
  static thread_local Area area;
  if (area.size < bytes) {
    std::free(area.data);
    area.data = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    area.size = area.data == nullptr ? 0 : bytes;
    if (area.data == nullptr) scratch_failed(short_bytes, int64_t(bytes));
  }
  return area.data;
}
// x / d for a divisor the same at every point of a vector loop (a row's sum, a constant), rounded
// exactly as the division: q = x * (1 / d), then one correction q + (x - q d) / d by two fused
// multiply-adds (Markstein: with 1 / d correctly rounded and q within an ulp of x / d, the
// corrected quotient is x / d correctly rounded).  gcc computes 1 / d once a loop (the test too:
// it unswitches the loop on it; a constant folds).  Where |d| is outside [2^-20, 2^20] or the
// quotient outside [2^-80, 2^80] (infinite, NaN, tiny, huge), it divides, so a value
// computed in a vector loop equals the same value computed by a scalar division elsewhere (a
// sort's ranks compare them).  A vector division occupies the divider for several cycles; two
// multiply-adds do not.
inline vec<float> div_invariant(vec<float> x, vec<float> d) {
#if (defined(__AVX512F__) && STAX_W == 16) || (defined(__AVX2__) && STAX_W == 8)
  const vec<int32_t> magnitude = float_bits(d) & 0x7FFFFFFF;  // 2^-20 <= |d| < 2^20
  if (all_lanes((magnitude >= 0x35800000) & (magnitude < 0x49800000))) {
    const vec<float> r = 1.0f / d, q = x * r;
    // 2^-80 <= |q| < 2^80 (so |x| > 2^-100: the remainder x - q d, about an ulp of x, is normal),
    // or x = 0, whose quotient is q, the signed zero
    const vec<int32_t> size = float_bits(q) & 0x7FFFFFFF;
#if defined(__AVX512F__) && STAX_W == 16
    const __mmask16 inside = _mm512_cmplt_epu32_mask(_mm512_sub_epi32((__m512i)size, _mm512_set1_epi32(0x17800000)),
                                                      _mm512_set1_epi32(0x67800000 - 0x17800000));
    const __mmask16 zero = _mm512_cmp_ps_mask((__m512)x, _mm512_setzero_ps(), _CMP_EQ_OQ);
    if (__mmask16(inside | zero) == 0xFFFF) {
      const __m512 e = _mm512_fnmadd_ps((__m512)q, (__m512)d, (__m512)x);
      return (vec<float>)_mm512_mask_blend_ps(zero, _mm512_fmadd_ps(e, (__m512)r, (__m512)q), (__m512)q);
    }
#else
    if (all_lanes(((size >= 0x17800000) & (size < 0x67800000)) | (x == 0.0f))) {
      const __m256 e = _mm256_fnmadd_ps((__m256)q, (__m256)d, (__m256)x);
      return x == 0.0f ? q : (vec<float>)_mm256_fmadd_ps(e, (__m256)r, (__m256)q);
    }
#endif
  }
#endif
  return x / d;
}
// float32 exp, in vector bodies and scalar tails alike: exp(x) = 2^n exp(r) with |r| <= ln(2)/2,
// r by a two-part ln(2) (Cody and Waite), exp(r) by a degree-5 polynomial fitted for least
// relative error (experiments/fit_math.py; five fused multiply-adds where Cephes' expf takes
// eight).  Within 1.64e-7 relative of exp on every normal result (1.85e-7 without fused
// multiply-adds), the same relative error on subnormal ones (at most 1.41 units of 2^-149), by
// experiments/check_math.py.
// When every lane has |x| <= 86.9 (softmax's x - max, almost always), each result is normal and
// 2^n is added to the polynomial's exponent bits; otherwise x is clamped to [-104, 89] (beyond,
// the result is 0 or infinity; NaN passes through) and 2^n is applied in two halves, so that
// subnormal results round once.
template <typename T> struct exp_parts { T p, t; };  // exp(r), and t, whose low bits hold n
template <typename T> inline exp_parts<T> exp_reduce(T c) {
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  const T t = c * 1.44269504088896341f + shifter;
  const T n = t - shifter;
  T r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  T p = r * 0.008290315046906471f + 0.04189793020486832f;
  p = p * r + 0.1666763573884964f;
  p = p * r + 0.4999915063381195f;
  p = p * r + 0.9999997019767761f;
  p = p * r + 1.0f;
  return {p, t};
}
const int32_t EXP_NORMAL_MAX_BITS = 0x42ADCCCD;  // 86.9f: |x| at most this has a normal exp
template <typename T> inline T exp_normal(T x) {  // t's low bits hold n, so t's bits << 23 are n << 23
  const exp_parts<T> e = exp_reduce(x);
  return bits_to_float<T>(float_bits(e.p) + (float_bits(e.t) << 23));
}
template <typename T> inline T exp_float(T x) {
  if (all_lanes((float_bits(x) & 0x7FFFFFFF) <= EXP_NORMAL_MAX_BITS)) return exp_normal(x);
  const exp_parts<T> e = exp_reduce(clamp_keep_nan(x, -104.0f, 89.0f));
  const int_lanes<T> k = float_bits(e.t) - 0x4B400000, half = k >> 1;
  return e.p * bits_to_float<T>((half + 127) << 23) * bits_to_float<T>((k - half + 127) << 23);
}
inline float v_exp(float x) { return exp_float(x); }
inline vec<float> v_exp(vec<float> x) { return exp_float(x); }
// exp of the four vectors of an unrolled loop step with one range test for all of them (the
// integer maximum of their magnitudes' bits; NaN's bits exceed every finite magnitude's): the
// test and its branch cost a quarter as much, and the results are exp_float's, bit for bit.
struct vec_float4 { vec<float> a, b, c, d; };
inline vec_float4 v_exp4(vec<float> a, vec<float> b, vec<float> c, vec<float> d) {
  const vec<int32_t> ma = float_bits(a) & 0x7FFFFFFF, mb = float_bits(b) & 0x7FFFFFFF;
  const vec<int32_t> mc = float_bits(c) & 0x7FFFFFFF, md = float_bits(d) & 0x7FFFFFFF;
  const vec<int32_t> mab = ma > mb ? ma : mb, mcd = mc > md ? mc : md;
  if (__builtin_expect(all_lanes((mab > mcd ? mab : mcd) <= EXP_NORMAL_MAX_BITS), 1))
    return {exp_normal(a), exp_normal(b), exp_normal(c), exp_normal(d)};
  return {exp_float(a), exp_float(b), exp_float(c), exp_float(d)};
}
STAX_SCALAR_FN_DOUBLE(v_exp, std::exp)
STAX_VECTOR_FN_DOUBLE(v_exp, exp)
STAX_MATH(v_log, log)
STAX_MATH(v_tanh, tanh)
// float32 erf, in vector bodies and scalar tails alike: x P(x^2) / Q(x^2) on [-4, 4], a rational
// fit with relative error 2.5e-8 (experiments/fit_math.py), and +-1 beyond, where erf rounds to 1.
// Rounded in float32 it is within 4.5e-7 relative of erf on every input (7.5 ulps at most, near
// |x| = 3.7; experiments/check_math.py); it runs at 2.5x the throughput of libmvec's erff, which
// bounded bias + GELU.
template <typename T> inline T erf_float(T x) {
  const T c = clamp_keep_nan(x, -4.0f, 4.0f);
  const T z = c * c;
  T p = z * 1.9867591163347242e-06f + 0.00028456529253162444f;
  p = p * z + 0.0038833755534142256f;
  p = p * z + 0.05310184136033058f;
  p = p * z + 0.19354599714279175f;
  p = p * z + 1.1283791065216064f;
  T q = z * 3.741990076377988e-05f + 0.0011855761986225843f;
  q = q * z + 0.015207315795123577f;
  q = q * z + 0.11535035818815231f;
  q = q * z + 0.5048581957817078f;
  q = q * z + 1.0f;
  return c * p / q;
}
inline float v_erf(float x) { return erf_float(x); }
inline vec<float> v_erf(vec<float> x) { return erf_float(x); }
STAX_SCALAR_FN_DOUBLE(v_erf, std::erf)
STAX_VECTOR_FN_DOUBLE(v_erf, erf)
STAX_MATH(v_log1p, log1p)
STAX_MATH(v_expm1, expm1)
STAX_MATH(v_sin, sin)
STAX_MATH(v_cos, cos)
inline float v_pow(float x, float y) { return std::pow(x, y); }
inline double v_pow(double x, double y) { return std::pow(x, y); }
STAX_VECTOR_FN2(v_pow, pow)
// Integer powers: square and multiply in unsigned arithmetic, so overflow wraps around as in
// torch instead of being undefined; a negative exponent gives 0 except for bases 1 and -1
// (torch's powi).
template <typename T> inline std::enable_if_t<std::is_integral_v<T>, T> v_pow(T x, T n) {
  if (n < 0) return x == 1 ? T(1) : x == -1 ? T((n & 1) ? -1 : 1) : T(0);
  using U = std::make_unsigned_t<T>;
  U r = 1, b = U(x);
  for (; n > 0; n >>= 1, b *= b) if (n & 1) r *= b;
  return T(r);
}
template <typename V, typename T = std::remove_reference_t<decltype(std::declval<V>()[0])>>
inline std::enable_if_t<std::is_integral_v<T>, V> v_pow(V x, V n) { return lanes2(x, n, [](T a, T b) { return v_pow(a, b); }); }

// sqrt and abs are single instructions: the compiler vectorizes these lane loops.
inline float v_sqrt(float x) { return std::sqrt(x); }
inline double v_sqrt(double x) { return std::sqrt(x); }
template <typename V> inline V v_sqrt(V x) { return lanes(x, [](auto a) { return std::sqrt(a); }); }
template <typename T> inline T v_abs(T x) { return x < 0 ? -x : x; }
template <typename T> inline T v_rsqrt(T x) { return 1 / v_sqrt(x); }
template <typename T> inline T v_sigmoid(T x) { return 1 / (1 + v_exp(-x)); }

// --- some lanes of a vector: padding, and the last vector of a loop -----------------------------
// Lanes [lo, hi) read (or written) and the others not: a masked load or store of a vector V of at
// most a register's width (AVX-512 takes a bit mask, AVX2 a mask register for 4- and 8-byte
// lanes), elsewhere a copy of those elements.  Masked-off lanes never touch memory.
inline unsigned lane_bits(int64_t lo, int64_t hi, int64_t lanes) {
  const auto below = [lanes](int64_t k) { return k <= 0 ? 0u : k >= lanes ? (1u << lanes) - 1 : (1u << k) - 1; };
  return below(hi) & ~below(lo);
}
#if defined(__AVX2__) && !defined(__AVX512F__)
template <size_t B> inline __m256i lanes_below(int64_t k) {  // all bits set in the lanes before the k-th
  if constexpr (B == 4) return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(k, -1, 8))),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  else return _mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_setr_epi64x(0, 1, 2, 3));
}
template <size_t B> inline __m256i lanes_between(int64_t lo, int64_t hi) {
  return _mm256_andnot_si256(lanes_below<B>(lo), lanes_below<B>(hi));
}
#endif
// p[lo .. hi) in lanes [lo, hi) (any lo and hi), ``other`` in the other lanes
template <typename V, typename T> inline V load_lanes(const T* p, int64_t lo, int64_t hi, T other) {
  constexpr int64_t N = sizeof(V) / sizeof(T);
  V r = other - V{};
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64 && sizeof(T) == 4) return (V)_mm512_mask_loadu_epi32((__m512i)r, __mmask16(lane_bits(lo, hi, N)), p);
  if constexpr (sizeof(V) == 64 && sizeof(T) == 8) return (V)_mm512_mask_loadu_epi64((__m512i)r, __mmask8(lane_bits(lo, hi, N)), p);
#elif defined(__AVX2__)
  if constexpr (sizeof(V) == 32 && sizeof(T) == 4) {
    const __m256i on = lanes_between<4>(lo, hi);
    return (V)_mm256_blendv_epi8((__m256i)r, _mm256_maskload_epi32(reinterpret_cast<const int*>(p), on), on);
  }
  if constexpr (sizeof(V) == 32 && sizeof(T) == 8) {
    const __m256i on = lanes_between<8>(lo, hi);
    return (V)_mm256_blendv_epi8((__m256i)r, _mm256_maskload_epi64(reinterpret_cast<const long long*>(p), on), on);
  }
#endif
  lo = std::max<int64_t>(lo, 0), hi = std::min(hi, N);
  if (hi > lo) std::memcpy(reinterpret_cast<T*>(&r) + lo, p + lo, size_t(hi - lo) * sizeof(T));
  return r;
}
template <typename V, typename T> inline void store_first(T* p, V v, int64_t k) {  // lanes [0, k)
  constexpr int64_t N = sizeof(V) / sizeof(T);
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64 && sizeof(T) == 4) return _mm512_mask_storeu_epi32(p, __mmask16(lane_bits(0, k, N)), (__m512i)v);
  if constexpr (sizeof(V) == 64 && sizeof(T) == 8) return _mm512_mask_storeu_epi64(p, __mmask8(lane_bits(0, k, N)), (__m512i)v);
#elif defined(__AVX2__)
  if constexpr (sizeof(V) == 32 && sizeof(T) == 4) return _mm256_maskstore_epi32(reinterpret_cast<int*>(p), lanes_below<4>(k), (__m256i)v);
  if constexpr (sizeof(V) == 32 && sizeof(T) == 8) return _mm256_maskstore_epi64(reinterpret_cast<long long*>(p), lanes_below<8>(k), (__m256i)v);
#endif
  if (k > 0) std::memcpy(p, &v, size_t(std::min(k, N)) * sizeof(T));
}
// Elements 2i for i in [lo, hi) from p in lane i (load_even's), ``other`` in the other lanes: the
// two loads read only the elements from 2 lo to 2 hi - 2 (those between are inside the same rows).
template <typename V, typename T> inline V load_even_lanes(const T* p, int64_t lo, int64_t hi, T other) {
  constexpr int64_t N = sizeof(V) / sizeof(T);
  return even_of<V, T>(load_lanes<V>(p, 2 * lo, std::min(2 * hi - 1, N), other),
                       load_lanes<V>(p + N - 1, 2 * lo - (N - 1), 2 * hi - 1 - (N - 1), other));
}
// Every S-th element from p in lanes [lo, hi), ``other`` in the others.
template <int S, typename T> inline vec<T> vload_lanes(const T* p, int64_t lo, int64_t hi, T other) {
  if constexpr (S <= 2 && wider_than_register<vec<T>>) {
    typedef half_of<vec<T>> H;
    constexpr int64_t half = STAX_W / 2;
    if constexpr (S == 1)
      return join_halves<vec<T>>(load_lanes<H>(p, lo, hi, other), load_lanes<H>(p + half, lo - half, hi - half, other));
    else
      return join_halves<vec<T>>(load_even_lanes<H>(p, lo, hi, other), load_even_lanes<H>(p + STAX_W, lo - half, hi - half, other));
  } else if constexpr (S == 1) {
    return load_lanes<vec<T>>(p, lo, hi, other);
  } else if constexpr (S == 2 && STAX_W >= 2) {
    return load_even_lanes<vec<T>>(p, lo, hi, other);
  } else {
    vec<T> r = splat<T>(other);
    for (int64_t i = std::max<int64_t>(lo, 0); i < std::min<int64_t>(hi, STAX_W); ++i) r[i] = p[i * S];
    return r;
  }
}
// v in its first k lanes (0 < k <= W), x in the others: a reduction's identity past a row's end.
template <typename M, size_t... J> constexpr M lane_numbers(std::index_sequence<J...>) { return M{J...}; }
template <typename V, typename T> inline V first_lanes_or(V v, int64_t k, T x) {
  if constexpr (wider_than_register<V>) {
    typedef half_of<V> H;
    H low, high;
    split_halves(v, low, high);
    return join_halves<V>(first_lanes_or(low, k, x), first_lanes_or(high, k - int64_t(sizeof(H) / sizeof(low[0])), x));
  } else {
    typedef decltype(v < v) M;
    typedef std::remove_reference_t<decltype(M{}[0])> I;
    constexpr size_t N = sizeof(V) / sizeof(v[0]);
    return lane_numbers<M>(std::make_index_sequence<N>()) < I(k) ? v : x - V{};
  }
}
// The first k elements (every S-th) from p (0 < k <= W), ``other`` in the lanes after them.
template <typename T> inline vec<T> vload_first(const T* p, int64_t k, T other) { return vload_lanes<1>(p, 0, k, other); }
template <int S, typename T> inline vec<T> vload_first_strided(const T* p, int64_t k, T other) {
  return vload_lanes<S>(p, 0, k, other);
}
// A guarded load of every S-th element (padding): lane i reads p[i * S] where every guard holds
// for it (0 <= e + c * i < n), else ``other``.  Each guard holds on an interval of lanes, so their
// intersection is one: a vector load when it is every lane, else a masked one.
struct LaneGuard { int64_t e, c, n; };
inline int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }  // b > 0
template <int S = 1, typename T> inline vec<T> vload_guarded(const T* p, T other, std::initializer_list<LaneGuard> guards) {
  int64_t lo = 0, hi = STAX_W;
  for (const LaneGuard& g : guards) {
    if (g.c > 0) {  // -e / c <= i <= (n - 1 - e) / c
      lo = std::max(lo, -floor_div(g.e, g.c));
      hi = std::min(hi, floor_div(g.n - 1 - g.e, g.c) + 1);
    } else if (g.c < 0) {  // (e - n) / d < i <= e / d, d = -c
      lo = std::max(lo, floor_div(g.e - g.n, -g.c) + 1);
      hi = std::min(hi, floor_div(g.e, -g.c) + 1);
    } else if (g.e < 0 || g.e >= g.n) {
      hi = 0;
    }
  }
  if (lo == 0 && hi == STAX_W) {
    if constexpr (S == 1) return vload(p); else return vload_strided<S>(p);
  }
  return vload_lanes<S>(p, lo, hi, other);
}
// The first k lanes of v stored at p, 0 < k <= W.
template <typename T> inline void vstore_first(T* p, vec<T> v, int64_t k) {
  if constexpr (wider_than_register<vec<T>>) {
    typedef half_of<vec<T>> H;
    H low, high;
    split_halves(v, low, high);
    store_first(p, low, k);
    store_first(p + STAX_W / 2, high, k - STAX_W / 2);
  } else {
    store_first(p, v, k);
  }
}

// The first k points' S phases (0 < k <= W): p[i * S + r] = v[r][i] for i < k.
template <typename T, typename V, typename... Rest> inline void vstore_interleaved_first(T* p, int64_t k, V first, Rest... rest) {
  const V v[] = {first, rest...};
  constexpr int S = 1 + sizeof...(Rest);
  if constexpr (S == 2 && STAX_W >= 2 && !wider_than_register<V>) {
    vstore_first(p, interleaved_half<0>(v[0], v[1]), std::min<int64_t>(2 * k, STAX_W));
    if (2 * k > STAX_W) vstore_first(p + STAX_W, interleaved_half<1>(v[0], v[1]), 2 * k - STAX_W);
  } else {
    for (int64_t i = 0; i < k; ++i)
      for (int r = 0; r < S; ++r) p[i * S + r] = v[r][i];
  }
}

// --- NaN-propagating max/min (torch.maximum, amax) ---------------------------------------------------
template <typename T> inline T v_max(T a, T b) {
  if constexpr (wider_than_register<T>) return by_halves(a, b, [](auto x, auto y) { return v_max(x, y); });
  else return (a > b) | (a != a) ? a : b;
}
template <typename T> inline T v_min(T a, T b) {
  if constexpr (wider_than_register<T>) return by_halves(a, b, [](auto x, auto y) { return v_min(x, y); });
  else return (a < b) | (a != a) ? a : b;
}
// float vectors: x86's max and min are a > b ? a : b and a < b ? a : b, b when either is NaN, so
// only a NaN a needs a blend; the same results, bit for bit, in three instructions instead of four
#if defined(__AVX512F__) && STAX_W == 16
inline vec<float> v_max(vec<float> a, vec<float> b) {
  return (vec<float>)_mm512_mask_blend_ps(_mm512_cmp_ps_mask((__m512)a, (__m512)a, _CMP_UNORD_Q),
                                          _mm512_max_ps((__m512)a, (__m512)b), (__m512)a);
}
inline vec<float> v_min(vec<float> a, vec<float> b) {
  return (vec<float>)_mm512_mask_blend_ps(_mm512_cmp_ps_mask((__m512)a, (__m512)a, _CMP_UNORD_Q),
                                          _mm512_min_ps((__m512)a, (__m512)b), (__m512)a);
}
#elif defined(__AVX2__) && STAX_W == 8
inline vec<float> v_max(vec<float> a, vec<float> b) {
  return (vec<float>)_mm256_blendv_ps(_mm256_max_ps((__m256)a, (__m256)b), (__m256)a,
                                      _mm256_cmp_ps((__m256)a, (__m256)a, _CMP_UNORD_Q));
}
inline vec<float> v_min(vec<float> a, vec<float> b) {
  return (vec<float>)_mm256_blendv_ps(_mm256_min_ps((__m256)a, (__m256)b), (__m256)a,
                                      _mm256_cmp_ps((__m256)a, (__m256)a, _CMP_UNORD_Q));
}
#endif

// --- comparisons and selection: bool lanes are 0/1 int8_t ----------------------------------------
typedef int8_t half_bools __attribute__((vector_size(STAX_W / 2 > 0 ? STAX_W / 2 : 1)));
// two halves of bool lanes as one vector, in registers (through memory, the load of the whole
// would wait for both stores to retire)
inline vec<int8_t> join_bools(half_bools low, half_bools high) {
#if defined(__SSE2__) && STAX_W == 16
  int64_t l, h;
  std::memcpy(&l, &low, sizeof l);
  std::memcpy(&h, &high, sizeof h);
  return (vec<int8_t>)_mm_set_epi64x(h, l);
#elif STAX_W == 8
  uint32_t l, h;
  std::memcpy(&l, &low, sizeof l);
  std::memcpy(&h, &high, sizeof h);
  const uint64_t both = uint64_t(l) | uint64_t(h) << 32;
  vec<int8_t> r;
  std::memcpy(&r, &both, sizeof r);
  return r;
#else
  return join_halves<vec<int8_t>>(low, high);
#endif
}
inline bool as_bool(bool m) { return m; }
template <typename M> inline vec<int8_t> as_bool(M m) { return __builtin_convertvector(m, vec<int8_t>) & 1; }
// the 0/1 lanes of cmp(a, b)
template <typename T, typename F> inline auto compare(T a, T b, F cmp) {
  if constexpr (wider_than_register<T>) {
    typedef half_of<T> H;
    H al, ah, bl, bh;
    split_halves(a, al, ah);
    split_halves(b, bl, bh);
    return join_bools(__builtin_convertvector(cmp(al, bl), half_bools), __builtin_convertvector(cmp(ah, bh), half_bools)) & 1;
  } else {
    return as_bool(cmp(a, b));
  }
}
template <typename T> inline auto cmp_lt(T a, T b) { return compare(a, b, [](auto x, auto y) { return x < y; }); }
template <typename T> inline auto cmp_le(T a, T b) { return compare(a, b, [](auto x, auto y) { return x <= y; }); }
template <typename T> inline auto cmp_gt(T a, T b) { return compare(a, b, [](auto x, auto y) { return x > y; }); }
template <typename T> inline auto cmp_ge(T a, T b) { return compare(a, b, [](auto x, auto y) { return x >= y; }); }
template <typename T> inline auto cmp_eq(T a, T b) { return compare(a, b, [](auto x, auto y) { return x == y; }); }
template <typename T> inline auto cmp_ne(T a, T b) { return compare(a, b, [](auto x, auto y) { return x != y; }); }
// A scalar float select by masks, without a branch: a data-dependent condition (a ReLU's mask)
// is as often true as false, and a branch on it mispredicts at every other element.
template <typename T> inline T select(bool c, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    typedef std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t> bits;
    bits x, y, mask = -bits(c);
    std::memcpy(&x, &a, sizeof x);
    std::memcpy(&y, &b, sizeof y);
    const bits r = (x & mask) | (y & ~mask);
    T out;
    std::memcpy(&out, &r, sizeof out);
    return out;
  } else {
    return c ? a : b;
  }
}
template <typename V> inline V select(vec<int8_t> c, V a, V b) {
  if constexpr (wider_than_register<V>) {  // the mask widened to int32 lanes in one instruction, then split
    typedef half_of<V> H;
    typedef int32_t HC __attribute__((vector_size(STAX_W >= 2 ? STAX_W * 2 : 4)));
    H al, ah, bl, bh;
    HC cl, ch;
    split_halves(a, al, ah);
    split_halves(b, bl, bh);
    split_halves(__builtin_convertvector(c, vec<int32_t>), cl, ch);
    typedef decltype(al < bl) mask;
    return join_halves<V>(H(__builtin_convertvector(cl, mask) != 0 ? al : bl),
                          H(__builtin_convertvector(ch, mask) != 0 ? ah : bh));
  } else {
    typedef decltype(a < b) mask;
    return __builtin_convertvector(c, mask) != 0 ? a : b;
  }
}
inline bool logical_not(bool a) { return !a; }
inline vec<int8_t> logical_not(vec<int8_t> a) { return a ^ 1; }
template <typename T> inline T logical_and(T a, T b) { return a & b; }
template <typename T> inline T logical_or(T a, T b) { return a | b; }
template <typename T> inline T logical_xor(T a, T b) { return a ^ b; }

// --- casts -----------------------------------------------------------------------------------------
// A float cast to an integer type it does not fit (NaN, +-inf, out of range) is undefined in C++,
// and the compiler may fold float(int(x)) into trunc(x), which keeps NaN; such lanes get the
// type's minimum, x86's conversion result that numpy's astype gives too.  A scalar cast to int32 or
// int64 is the SSE conversion itself, which gives that minimum and which gcc does not fold with a
// cast back into trunc(x): float(int(-0.3)) would be -0.0, where an integer has no sign of zero.
template <typename To, typename From>
inline constexpr bool float_to_int = std::is_floating_point_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool>;
template <typename To, typename From> inline To cast(From x) {
#ifdef __SSE2__
  if constexpr (float_to_int<To, From> && sizeof(To) == 8) {
    if constexpr (std::is_same_v<From, float>) return _mm_cvttss_si64(_mm_set_ss(x));
    else return _mm_cvttsd_si64(_mm_set_sd(double(x)));
  } else if constexpr (float_to_int<To, From> && sizeof(To) == 4) {
    if constexpr (std::is_same_v<From, float>) return _mm_cvttss_si32(_mm_set_ss(x));
    else return _mm_cvttsd_si32(_mm_set_sd(double(x)));
  } else
#endif
  if constexpr (float_to_int<To, From>) {
    constexpr From low = From(std::numeric_limits<To>::min());  // -2^(bits - 1), exact
    return x >= low && x < -low ? static_cast<To>(x) : std::numeric_limits<To>::min();
  } else {
    return static_cast<To>(x);
  }
}
// x converted lane by lane to the vector type R of as many lanes
template <typename R, typename V> inline R cast_lanes(V x) {
  typedef std::remove_reference_t<decltype(x[0])> From;
  typedef std::remove_reference_t<decltype(R{}[0])> To;
  if constexpr (float_to_int<To, From>) {
    constexpr From low = From(std::numeric_limits<To>::min());
    const auto fits = x >= low & x < -low;
    const R converted = __builtin_convertvector(fits ? x : V{}, R);
    return __builtin_convertvector(fits, R) ? converted : std::numeric_limits<To>::min() - R{};
  } else {
    return __builtin_convertvector(x, R);
  }
}
// Vectors wider than a register convert a half at a time; bytes (bools) widen to 8-byte lanes
// through int32, in one instruction each step.
template <typename To, typename V> inline vec<To> vcast(V x) {
  typedef std::remove_reference_t<decltype(x[0])> From;
  if constexpr (sizeof(From) < 4 && sizeof(To) == 8 && wider_than_register<vec<To>>) {
    return vcast<To>(__builtin_convertvector(x, vec<int32_t>));
  } else if constexpr (wider_than_register<V> || wider_than_register<vec<To>>) {
    typedef half_of<V> HF;
    typedef half_of<vec<To>> HT;
    HF low, high;
    split_halves(x, low, high);
    return join_halves<vec<To>>(cast_lanes<HT>(low), cast_lanes<HT>(high));
  } else {
    return cast_lanes<vec<To>>(x);
  }
}
template <typename T> inline bool cast_bool(T x) { return x != 0; }
template <typename V> inline vec<int8_t> vcast_bool(V x) { return cmp_ne(x, V{}); }

// --- division (seed 8.3: integer division by zero sets the error flag instead of trapping) ----------
template <typename T> inline T int_floordiv(T a, T b, int64_t* err) {
  if (b == 0) { *err = 1; return 0; }
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> inline T int_mod(T a, T b, int64_t* err) {
  if (b == 0) { *err = 1; return 0; }
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// torch's div(rounding_mode="trunc"): C's division; the one quotient that overflows (lowest / -1)
// wraps around in unsigned arithmetic instead of trapping.
template <typename T> inline T int_truncdiv(T a, T b, int64_t* err) {
  if (b == 0) { *err = 1; return 0; }
  return b == -1 ? T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a)) : a / b;
}
// The same three by a literal divisor C > 0 (an index's // 2 and % 2): no zero to flag nor
// quotient to overflow, so the compiler's multiply-and-shift for C (a power of two: a shift and
// a mask) runs lane-parallel instead of a division a lane.
template <auto C, typename T> inline T int_floordiv_by(T a) {
  static_assert(C > 0, "a literal divisor is positive");
  return a / C - (a % C < 0);
}
template <auto C, typename T> inline T int_mod_by(T a) {
  static_assert(C > 0, "a literal divisor is positive");
  T r = a % C;
  return r < 0 ? r + C : r;
}
template <auto C, typename T> inline T int_truncdiv_by(T a) { static_assert(C > 0); return a / C; }
// Vectors: a power of two is a shift and a mask (floor division and modulo of two's complement
// integers), which GCC keeps lane-parallel at any width; r >> (bits - 1) is -1 where r < 0, no
// comparison mask (GCC expands those lane by lane for vectors wider than a register).
template <auto C> constexpr int power_of_two = (C & (C - 1)) == 0 ? __builtin_ctzll(C) : -1;
template <auto C, typename V> inline V v_int_floordiv_by(V a) {
  constexpr int sign = sizeof(C) * 8 - 1;
  if constexpr (power_of_two<C> >= 0) return a >> power_of_two<C>;
  else return a / C + ((a % C) >> sign);
}
template <auto C, typename V> inline V v_int_mod_by(V a) {
  constexpr int sign = sizeof(C) * 8 - 1;
  if constexpr (power_of_two<C> >= 0) return a & (C - 1);
  V r = a % C;
  return r + ((r >> sign) & C);
}
template <auto C, typename V> inline V v_int_truncdiv_by(V a) {
  constexpr int sign = sizeof(C) * 8 - 1;
  if constexpr (power_of_two<C> >= 0) return (a + ((a >> sign) & (C - 1))) >> power_of_two<C>;
  else return a / C;
}
template <typename T> inline T float_truncdiv(T a, T b) { return std::trunc(a / b); }
// Python's and torch's floor division of floats: from the exact remainder, not floor(a / b),
// whose rounded quotient can land on the next integer (4 // 0.8f is 4, while 4 / 0.8f rounds to 5).
template <typename T> inline T float_floordiv(T a, T b) {
  if (b == 0) return a / b;
  T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return std::copysign(T(0), a / b);
  T floored = std::floor(div);
  return div - floored > T(0.5) ? floored + 1 : floored;
}
template <typename T> inline T float_mod(T a, T b) {
  T r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename V> inline V v_int_floordiv(V a, V b, int64_t* err) {
  V r; for (int i = 0; i < STAX_W; ++i) r[i] = int_floordiv(a[i], b[i], err); return r; }
template <typename V> inline V v_int_mod(V a, V b, int64_t* err) {
  V r; for (int i = 0; i < STAX_W; ++i) r[i] = int_mod(a[i], b[i], err); return r; }
template <typename V> inline V v_int_truncdiv(V a, V b, int64_t* err) {
  V r; for (int i = 0; i < STAX_W; ++i) r[i] = int_truncdiv(a[i], b[i], err); return r; }
template <typename V> inline V v_float_truncdiv(V a, V b) { return lanes2(a, b, [](auto x, auto y) { return float_truncdiv(x, y); }); }
template <typename V> inline V v_float_floordiv(V a, V b) { return lanes2(a, b, [](auto x, auto y) { return float_floordiv(x, y); }); }
template <typename V> inline V v_float_mod(V a, V b) { return lanes2(a, b, [](auto x, auto y) { return float_mod(x, y); }); }

// --- reductions (Proposition 8.1 (2): W accumulators, combined at the end) -------------------------
template <typename T> inline T r_sum(T a, T b) { return a + b; }
template <typename T> inline T r_prod(T a, T b) { return a * b; }
// logcumsumexp's step (a scan's, so scalar), torch's: the larger plus log1p(e^(smaller - larger));
// equal infinities give themselves, and a NaN on either side gives NaN.
template <typename T> inline T r_logaddexp(T a, T b) {
  const T lo = std::isnan(b) ? b : std::min(a, b), hi = std::isnan(b) ? b : std::max(a, b);
  return lo != hi || std::isfinite(lo) ? hi + std::log1p(std::exp(lo - hi)) : a;
}
template <typename T> inline T r_amax(T a, T b) { return v_max(a, b); }
template <typename T> inline T r_amin(T a, T b) { return v_min(a, b); }
// A vector's lanes combined by a tree: log2(W) steps, each combining every lane with the lane H
// places on (H = W/2, ..., 1; lane 0 ends with the whole), where a lane-by-lane chain takes W - 1
// dependent steps (at W = 16 a row's sum waited on 15 scalar additions and its max on 15
// compare-and-branch steps, most of a 64 x 128 softmax's time).  Bool lanes, 0/1 bytes whose
// sum is not the bool sum, are combined one by one.
template <typename M, int H, size_t... J> constexpr M lanes_on_mask(std::index_sequence<J...>) {
  return M{((J + H) % STAX_W)...};
}
template <int H, typename V> inline V lanes_on(V v) {
  typedef decltype(v < v) mask;
  return __builtin_shuffle(v, lanes_on_mask<mask, H>(std::make_index_sequence<STAX_W>()));
}
template <int H = STAX_W / 2, typename V, typename F> inline V fold_lanes(V v, F combine) {
  if constexpr (H >= 1) return fold_lanes<H / 2>(combine(v, lanes_on<H>(v)), combine);
  else return v;
}
#define STAX_HREDUCE(op) \
  template <typename T> inline T hreduce_##op(vec<T> v) { \
    if constexpr (std::is_same_v<T, bool>) { \
      T r = T(v[0]); for (int i = 1; i < STAX_W; ++i) r = r_##op(r, T(v[i])); return r; \
    } else { \
      return fold_lanes(v, [](vec<T> a, vec<T> b) { return r_##op(a, b); })[0]; \
    } \
  }
STAX_HREDUCE(sum)
STAX_HREDUCE(prod)
STAX_HREDUCE(amax)
STAX_HREDUCE(amin)

// m2, the sum of squared deviations from the mean (var's numerator), in one pass: Welford's
// update adds an element, Chan, Golub and LeVeque's formula merges two partial results.  A vector
// accumulator's lanes have seen the same number of elements, n.
template <typename V, typename S> struct welford { V mean{}, m2{}; S n = 0; };
template <typename T> using welford_of = welford<T, T>;
template <typename T> using welford_vec = welford<vec<T>, T>;
template <typename V, typename S> inline welford<V, S> r_m2(welford<V, S> a, V x, S inverse_n) {
  a.n += 1;  // inverse_n is 1 / a.n, computed once for the accumulators of a step that share n
  const V d = x - a.mean;
  a.mean += d * inverse_n;
  a.m2 += d * (x - a.mean);
  return a;
}
template <typename V, typename S> inline welford<V, S> r_m2(welford<V, S> a, V x) { return r_m2(a, x, S(1) / (a.n + 1)); }
template <typename V, typename S> inline welford<V, S> r_m2(welford<V, S> a, welford<V, S> b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const S n = a.n + b.n, wb = b.n / n;
  const V d = b.mean - a.mean;
  return {a.mean + d * wb, a.m2 + b.m2 + d * d * (a.n * wb), n};
}
// The lanes' states merged by fold_lanes's tree: every lane has seen v.n elements, so each step
// merges two states of equal counts (weights 1/2) with r_m2.
template <int H, typename T> inline welford_vec<T> lanes_on(welford_vec<T> v) {
  return {lanes_on<H>(v.mean), lanes_on<H>(v.m2), v.n};
}
template <typename T> inline welford_of<T> hreduce_m2(welford_vec<T> v) {
  const welford_vec<T> r = fold_lanes(v, [](welford_vec<T> a, welford_vec<T> b) { return r_m2(a, b); });
  return {T(r.mean[0]), T(r.m2[0]), r.n};
}
// A reduction's value from its accumulator: the m2 of a Welford state, any other as it is.
template <typename V, typename S> inline V result(welford<V, S> a) { return a.m2; }
template <typename T> inline T result(T a) { return a; }
// Welford's update of partial results kept in memory (a split reduction's columns) by K elements
// of each (x, one vector or scalar per row), loaded and stored once; inverse_n[k] is 1 / n after
// the k-th of them.
template <typename T, typename V, int K>
inline void welford_steps(T* mean, T* m2, const V (&x)[K], const T (&inverse_n)[K]) {
  constexpr bool scalar = std::is_same_v<T, V>;
  V m, s;
  if constexpr (scalar) m = *mean, s = *m2;
  else m = vload(mean), s = vload(m2);
  for (int k = 0; k < K; ++k) {
    const V d = x[k] - m;
    m += d * inverse_n[k];
    s += d * (x[k] - m);
  }
  if constexpr (scalar) *mean = m, *m2 = s;
  else vstore(mean, m), vstore(m2, s);
}

}  // namespace stax
