// The Python entry points of a compiled graph: each kernel is exposed as a METH_FASTCALL
// function taking its buffers (numpy arrays, through the buffer protocol), so a call costs a
// few hundred nanoseconds instead of ctypes' marshalling (issue: lean call path); a graph whose
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
// The buffers a call has taken, released when it returns (or earlier, after their last use).
template <int N> struct Views {
  Py_buffer view[N > 0 ? N : 1];
  bool taken[N > 0 ? N : 1] = {};
  ~Views() { for (int i = 0; i < N; ++i) release(i); }
  void release(int i) { if (taken[i]) { PyBuffer_Release(&view[i]); taken[i] = false; } }
  void* buf(int i) const { return view[i].buf; }
};
// The arrays a call has allocated, dropped when it returns unless handed to the caller.
template <int N> struct Owned {
  PyObject* obj[N > 0 ? N : 1] = {};
  ~Owned() { for (int i = 0; i < N; ++i) Py_XDECREF(obj[i]); }
  void drop(int i) { Py_CLEAR(obj[i]); }
  PyObject* give(int i) { PyObject* o = obj[i]; obj[i] = nullptr; return o; }
};

// Whether ``array`` is exactly a numpy array of ``dtype`` (the dtype object itself), ``shape``
// and byte ``strides``, writable when ``flags`` asks; if so its buffer is taken into ``view``.
// Otherwise false, with no exception set and no buffer held.
inline bool take_if_layout(PyObject* array, PyObject* ndarray, PyObject* dtype, int ndim, const Py_ssize_t* shape,
                           const Py_ssize_t* strides, int flags, Py_buffer* view) {
  static PyObject* const dtype_name = PyUnicode_InternFromString("dtype");
  if ((PyObject*)Py_TYPE(array) != ndarray) return false;
  PyObject* d = PyObject_GetAttr(array, dtype_name);
  if (d == NULL) { PyErr_Clear(); return false; }
  Py_DECREF(d);  // the array holds it
  if (d != dtype || PyObject_GetBuffer(array, view, flags) < 0) {
    PyErr_Clear();
    return false;
  }
  bool same = view->ndim == ndim;
  for (int k = 0; same && k < ndim; ++k) same = view->shape[k] == shape[k] && view->strides[k] == strides[k];
  if (!same) PyBuffer_Release(view);
  return same;
}

// An input of the compiled layout, its buffer taken into ``views``'s slot ``i``; anything else
// is the Python wrapper's to check and explain (false).
template <int N> inline bool take_input(PyObject* arg, PyObject* ndarray, PyObject* dtype, int ndim,
                                        const Py_ssize_t* shape, const Py_ssize_t* strides, bool writable,
                                        Views<N>& views, int i) {
  const int flags = writable ? PyBUF_STRIDES | PyBUF_WRITABLE : PyBUF_STRIDES;
  return views.taken[i] = take_if_layout(arg, ndarray, dtype, ndim, shape, strides, flags, &views.view[i]);
}

// The caching allocator's hit (memory/allocator.py: CachingAllocator.site and _Storage.take)
// for one kind, ``site`` being CachingAllocator.compiled_site's tuple: under the allocator's
// lock, the kept view of the first storage that nothing else refers to (the storage and the
// view's base hold its memory, the storage holds the view), when that view still has the kind's
// layout; the hit is counted.  Anything else (the allocator off, no free storage, a view its user
// changed) is the site's own call, which also counts misses.  NULL with the exception set on
// failure.
inline PyObject* take_pooled(PyObject* site, PyObject* ndarray, int ndim, const Py_ssize_t* shape,
                             const Py_ssize_t* strides) {
  static PyObject* const enabled_name = PyUnicode_InternFromString("enabled");
  static PyObject* const memory_name = PyUnicode_InternFromString("memory");
  static PyObject* const view_name = PyUnicode_InternFromString("view");
  static PyObject* const hits_name = PyUnicode_InternFromString("hits");
  static PyObject* const one = PyLong_FromLong(1);
  PyObject* const* s = ((PyTupleObject*)site)->ob_item;  // take, pool, allocator, stats, acquire, release, dtype
  PyObject* enabled = PyObject_GetAttr(s[2], enabled_name);
  const int on = enabled == NULL ? -1 : PyObject_IsTrue(enabled);
  Py_XDECREF(enabled);
  if (on < 0) return NULL;
  PyObject* found = NULL;
  if (on) {
    PyObject* locked = PyObject_CallNoArgs(s[4]);
    if (locked == NULL) return NULL;
    Py_DECREF(locked);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(s[1]); ++i) {
      PyObject* memory = PyObject_GetAttr(PyList_GET_ITEM(s[1], i), memory_name);
      PyObject* view = memory == NULL ? NULL : PyObject_GetAttr(PyList_GET_ITEM(s[1], i), view_name);
      const bool idle = view != NULL && Py_REFCNT(memory) == 3 && Py_REFCNT(view) == 2;  // with ours
      Py_buffer layout;
      if (idle && take_if_layout(view, ndarray, s[6], ndim, shape, strides, PyBUF_STRIDES | PyBUF_WRITABLE, &layout)) {
        PyBuffer_Release(&layout);
        found = view;
      } else {
        Py_XDECREF(view);
      }
      Py_XDECREF(memory);
      if (idle || memory == NULL || view == NULL) break;  // a changed view: the site makes it anew
    }
    PyErr_Clear();  // a storage without its attributes: the site's call will say what is wrong
    if (found != NULL) {
      PyObject* hits = PyObject_GetAttr(s[3], hits_name);
      PyObject* more = hits == NULL ? NULL : PyNumber_Add(hits, one);
      const bool counted = more != NULL && PyObject_SetAttr(s[3], hits_name, more) == 0;
      Py_XDECREF(hits);
      Py_XDECREF(more);
      if (!counted) Py_CLEAR(found);
    }
    PyObject *error, *value, *traceback;  // a failed count, kept while the lock is released
    PyErr_Fetch(&error, &value, &traceback);
    PyObject* unlocked = PyObject_CallNoArgs(s[5]);
    if (unlocked == NULL) {
      Py_XDECREF(error); Py_XDECREF(value); Py_XDECREF(traceback); Py_XDECREF(found);
      return NULL;
    }
    Py_DECREF(unlocked);
    if (error != NULL) { PyErr_Restore(error, value, traceback); return NULL; }
    if (found != NULL) return found;
  }
  return PyObject_CallNoArgs(s[0]);
}

// An array from the allocator (``take_pooled``), its buffer taken into ``views``'s slot ``i``;
// false with the exception set when the allocation fails.
template <int N, int M> inline bool take_output(PyObject* site, PyObject* ndarray, int ndim, const Py_ssize_t* shape,
                                                const Py_ssize_t* strides, Owned<M>& owned, int j, Views<N>& views,
                                                int i) {
  owned.obj[j] = take_pooled(site, ndarray, ndim, shape, strides);
  if (owned.obj[j] == NULL || PyObject_GetBuffer(owned.obj[j], &views.view[i], PyBUF_STRIDES | PyBUF_WRITABLE) < 0)
    return false;
  views.taken[i] = true;
  return true;
}

// The wrapper's last line: ``record(peak)`` (MemoryTracker.record); false with the exception set.
inline bool record_peak(PyObject* record, long long peak) {
  PyObject* bytes = PyLong_FromLongLong(peak);
  if (bytes == NULL) return false;
  PyObject* result = PyObject_CallOneArg(record, bytes);
  Py_DECREF(bytes);
  Py_XDECREF(result);
  return result != NULL;
}

}  // namespace stax
