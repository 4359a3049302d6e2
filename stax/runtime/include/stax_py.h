// The Python entry points of a compiled graph: each kernel is exposed as a METH_FASTCALL
// function taking its buffers (numpy arrays, through the buffer protocol), so a call costs a
// few hundred nanoseconds instead of ctypes' marshalling; a graph whose
// wrapper only allocates and calls kernels also gets a compiled call doing the wrapper's work.
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "stax_vec.h"

namespace stax {

// Acquire the buffers of args[0..n), writable where ``writable[i]``.  On failure, releases what
// it took and returns false with a Python exception set.
inline bool get_buffers(PyObject* const* args, Py_ssize_t nargs, int n, const bool* writable, Py_buffer* views) {
  if (nargs != n) {
    PyErr_Format(PyExc_TypeError, "kernel takes %d arrays, got %zd", n, nargs);
    return false;
  }
  for (int i = 0; i < n; ++i) {
    // strides, no format: the wrapper has checked the dtypes, and numpy builds no format string
    if (PyObject_GetBuffer(args[i], &views[i], writable[i] ? PyBUF_STRIDES | PyBUF_WRITABLE : PyBUF_STRIDES) < 0) {
      for (int j = 0; j < i; ++j) PyBuffer_Release(&views[j]);
      return false;
    }
  }
  return true;
}

inline void release_buffers(int n, Py_buffer* views) {
  for (int i = 0; i < n; ++i) PyBuffer_Release(&views[i]);
}

// --- a graph's compiled call (entry.py's graph entry point) ------------------------------------
// The functions declared without a body here are defined in stax_py.cpp, built once and loaded
// for the whole process before any kernel library (runtime.load_runtime): a graph's call
// keeps only calls to them, and compiling it adds little to the graph's build.
void drop_objects(PyObject** objects, int n);
// The data of the arrays a call has taken: its inputs, which the caller holds for the call, and
// its buffers, which ``Owned`` holds (read from the array objects, not exported through the
// buffer protocol, whose export and release cost more than the call's own work).
template <int N> struct Views {
  void* data[N > 0 ? N : 1] = {};
  void* buf(int i) const { return data[i]; }
};
// The arrays a call has allocated, dropped when it returns unless handed to the caller.
template <int N> struct Owned {
  PyObject* obj[N > 0 ? N : 1] = {};
  ~Owned() { drop_objects(obj, N); }
  void drop(int i) { Py_CLEAR(obj[i]); }
  PyObject* give(int i) { PyObject* o = obj[i]; obj[i] = nullptr; return o; }
};

// Whether ``array`` is exactly a numpy array of ``dtype`` (the dtype object itself), ``shape``
// and byte ``strides``, writable when asked; if so its data pointer goes to ``data``.  Otherwise
// false, with no exception set.
bool take_if_layout(PyObject* array, PyObject* ndarray, PyObject* dtype, int ndim, const Py_ssize_t* shape,
                    const Py_ssize_t* strides, bool writable, void** data);

// An input of the compiled layout, its data in ``views``'s slot ``i``; anything else is the
// Python wrapper's to check and explain (false).
template <int N> inline bool take_input(PyObject* arg, PyObject* ndarray, PyObject* dtype, int ndim,
                                        const Py_ssize_t* shape, const Py_ssize_t* strides, bool writable,
                                        Views<N>& views, int i) {
  return take_if_layout(arg, ndarray, dtype, ndim, shape, strides, writable, &views.data[i]);
}

// The caching allocator's hit (memory/allocator.py: CachingAllocator.site and _Storage.take)
// for one kind, ``site`` being CachingAllocator.compiled_site's tuple: under the allocator's
// lock, the kept view of the first storage that nothing else refers to (the storage and the
// view's base hold its memory, the storage holds the view), when that view still has the kind's
// layout; the hit is counted.  Anything else (the allocator off, no free storage, a view its user
// changed) is the site's own call, which also counts misses.  The array's data pointer goes to
// ``data``; NULL with the exception set on failure.
PyObject* take_pooled(PyObject* site, PyObject* ndarray, int ndim, const Py_ssize_t* shape,
                      const Py_ssize_t* strides, void** data);

// An array from the allocator (``take_pooled``), its data in ``views``'s slot ``i``; false with
// the exception set when the allocation fails.
template <int N, int M> inline bool take_output(PyObject* site, PyObject* ndarray, int ndim, const Py_ssize_t* shape,
                                                const Py_ssize_t* strides, Owned<M>& owned, int j, Views<N>& views,
                                                int i) {
  owned.obj[j] = take_pooled(site, ndarray, ndim, shape, strides, &views.data[i]);
  return owned.obj[j] != NULL;
}

// The wrapper's last line, ``record(peak)`` (MemoryTracker.record), written into the tracker's
// ``counts`` (an int64 numpy pair: the last call's peak, the number of calls) ...
void record_peak(PyObject* counts, long long peak);
// ... which graph_set_up checks once (false with the exception set).
bool takes_counts(PyObject* counts);

// The Python wrapper's answer to a call the compiled call does not take (arguments by name
// among them: ``kwnames`` and their values after the positional ones, as vectorcall passes them).
PyObject* call_wrapper(PyObject* wrapper, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);

// ``raise_kernel_error(kernel, (nodes,))`` (wrapper.py), which raises KernelError: NULL.
PyObject* raise_kernel_error(PyObject* raise, const char* kernel, const char* nodes);
// MemoryError for a kernel whose heap scratch could not be had (``err`` is minus its bytes,
// stax_vec.h's scratch_array): NULL.
PyObject* raise_scratch_error(int64_t err);

// ``array.reshape(shape)``, taking the caller's reference to ``array``: an output that holds the
// storage of a buffer of another shape (memory/plan.py's reuse).  NULL with the exception set.
PyObject* reshaped(PyObject* array, int ndim, const Py_ssize_t* shape);

// The products of a compiled call (stax/matmul.py's Product, one function a Route), each by the
// entry point a Python int of the call's state holds, and the hand-written kernels' entry points:
// each returns 0, or minus the bytes of heap scratch its kernel could not allocate (stax_vec.h's
// scratch_result; the call then raises MemoryError).  narrow_gemm.py's kernels ...
inline int64_t narrow_product(void* entry, const float* a, const float* b, float* c, int64_t batch, int64_t m,
                              int64_t n, int64_t k, int threads, int add) {
  reinterpret_cast<void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t, int, int)>(entry)(
      a, b, c, batch, m, n, k, threads, add);
  return 0;
}
inline int64_t narrow_gradient_product(void* entry, const float* a, const float* b, float* c, int64_t m, int64_t n,
                                       int64_t k, int threads, int add) {
  return reinterpret_cast<int64_t (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int, int)>(
      entry)(a, b, c, m, n, k, threads, add);
}
// stax.direct_conv's entry points: out = the stride-1 convolution of the padded x with w, each
// output channel times scale, plus shift (when not null), then max(0, .) when relu ...
inline int64_t direct_conv(void* entry, const float* x, const float* w, float* out, const float* scale,
                           const float* shift, int64_t n, int64_t c, int64_t hp, int64_t wp, int64_t co, int64_t kh,
                           int64_t kw, int relu, int threads) {
  return reinterpret_cast<int64_t (*)(const float*, const float*, float*, const float*, const float*, int64_t,
                                      int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int)>(entry)(
      x, w, out, scale, shift, n, c, hp, wp, co, kh, kw, relu, threads);
}
// ... and dw = the weight gradient of such a convolution of x whose output's gradient is g
inline int64_t direct_conv_weight_grad(void* entry, const float* x, const float* g, float* dw, int64_t n, int64_t c,
                                       int64_t hp, int64_t wp, int64_t co, int64_t kh, int64_t kw, int threads) {
  return reinterpret_cast<int64_t (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                                      int64_t, int64_t, int64_t, int)>(entry)(x, g, dw, n, c, hp, wp, co, kh, kw,
                                                                              threads);
}
// one of stax.row_index's entry points: out = the rows of source by index, or their sums by row
inline int64_t row_index(void* entry, const void* source, const int64_t* index, void* out, int64_t v, int64_t t,
                         int64_t width, int threads) {
  reinterpret_cast<void (*)(const void*, const int64_t*, void*, int64_t, int64_t, int64_t, int)>(entry)(
      source, index, out, v, t, width, threads);
  return 0;
}
// one of stax.random_draws's entry points: out = the random mask or uniform draws of a stream under *seed
inline int64_t random_draw(void* entry, const int64_t* seed, void* out, int64_t n, int64_t threshold, int64_t stream,
                           int threads) {
  reinterpret_cast<void (*)(const int64_t*, void*, int64_t, int64_t, int64_t, int)>(entry)(seed, out, n, threshold,
                                                                                         stream, threads);
  return 0;
}
template <typename T>
inline int64_t team_product(void* entry, void* gemm, const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t n,
                            int64_t k, int64_t a_step, int64_t b_step, int ta, int tb, int threads, T beta) {
  reinterpret_cast<void (*)(void*, const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                            int, int, T)>(entry)(gemm, a, b, c, batch, m, n, k, a_step, b_step, ta, tb, threads, beta);
  return 0;
}

}  // namespace stax
