// The Python entry points of a compiled graph: each kernel is exposed as a METH_FASTCALL
// function taking its buffers (numpy arrays, through the buffer protocol), so a call costs a
// few hundred nanoseconds instead of ctypes' marshalling (issue: lean call path).
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

}  // namespace stax
