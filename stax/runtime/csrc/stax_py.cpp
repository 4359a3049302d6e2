#include "stax_py.h"
// The compiled calls' helpers that stax_py.h declares and documents: built once per cache and
// compiler (runtime.load_runtime) and loaded with global symbols before any kernel library.
// (The include comes first so that the build uses the precompiled header.)

namespace stax {

// numpy's array object as numpy/ndarraytypes.h declares it (PyArrayObject_fields, public and
// unchanged since numpy 1.7): the compiled calls read an array's data, shape, strides, dtype and
// flags from it.  The first array a process checks is compared with its dtype and its
// buffer-protocol export; should a numpy ever differ, every compiled call declines and the Python
// wrapper runs.
struct ndarray_fields {
  PyObject_HEAD
  char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};
const int NDARRAY_WRITEABLE = 0x0400;  // NPY_ARRAY_WRITEABLE

static bool fields_are_numpys(PyObject* array) {
  static const bool same = [array] {
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_STRIDES) < 0) {
      PyErr_Clear();
      return false;
    }
    const ndarray_fields* a = (const ndarray_fields*)array;
    PyObject* dtype = PyObject_GetAttrString(array, "dtype");
    bool ok = dtype == a->descr && view.buf == a->data && view.ndim == a->nd &&
              !view.readonly == bool(a->flags & NDARRAY_WRITEABLE);
    for (int k = 0; ok && k < a->nd; ++k) ok = view.shape[k] == a->dimensions[k] && view.strides[k] == a->strides[k];
    Py_XDECREF(dtype);
    PyErr_Clear();
    PyBuffer_Release(&view);
    return ok;
  }();
  return same;
}

bool take_if_layout(PyObject* array, PyObject* ndarray, PyObject* dtype, int ndim, const Py_ssize_t* shape,
                    const Py_ssize_t* strides, bool writable, void** data) {
  if ((PyObject*)Py_TYPE(array) != ndarray || !fields_are_numpys(array)) return false;
  const ndarray_fields* a = (const ndarray_fields*)array;
  bool same = a->descr == dtype && a->nd == ndim && (!writable || a->flags & NDARRAY_WRITEABLE);
  for (int k = 0; same && k < ndim; ++k) same = a->dimensions[k] == shape[k] && a->strides[k] == strides[k];
  if (same) *data = a->data;
  return same;
}

PyObject* take_pooled(PyObject* site, PyObject* ndarray, int ndim, const Py_ssize_t* shape,
                      const Py_ssize_t* strides, void** data) {
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
      if (idle && take_if_layout(view, ndarray, s[6], ndim, shape, strides, true, data)) {
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
      Py_XDECREF(error); Py_XDECREF(value); Py_XDECREF(traceback);
      Py_XDECREF(found);
      return NULL;
    }
    Py_DECREF(unlocked);
    if (error != NULL) { PyErr_Restore(error, value, traceback); return NULL; }
    if (found != NULL) return found;
  }
  PyObject* array = PyObject_CallNoArgs(s[0]);  // of the kind's layout (numpy gives empty ones zero strides)
  if (array != NULL && ((PyObject*)Py_TYPE(array) != ndarray || !fields_are_numpys(array))) {
    PyErr_Format(PyExc_RuntimeError, "the caching allocator returned %R, which the compiled call cannot read as "
                 "a numpy array (stax_py.cpp's ndarray_fields)", array);
    Py_CLEAR(array);
  }
  if (array != NULL) *data = ((const ndarray_fields*)array)->data;
  return array;
}

void record_peak(PyObject* counts, long long peak) {
  long long* pair = (long long*)((const ndarray_fields*)counts)->data;
  pair[0] = peak;
  pair[1] += 1;
}

bool takes_counts(PyObject* counts) {
  Py_buffer view;
  if (PyObject_GetBuffer(counts, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return false;
  const bool pair = view.ndim == 1 && view.shape[0] == 2 && view.itemsize == sizeof(long long) &&
                    (view.format[0] == 'q' || view.format[0] == 'l') && view.format[1] == 0 &&
                    fields_are_numpys(counts) && ((const ndarray_fields*)counts)->data == view.buf;
  PyBuffer_Release(&view);
  if (!pair) PyErr_Format(PyExc_TypeError, "a compiled call records into an int64 numpy array of 2, not %R", counts);
  return pair;
}

void drop_objects(PyObject** objects, int n) {
  for (int i = 0; i < n; ++i) Py_CLEAR(objects[i]);
}

PyObject* call_wrapper(PyObject* wrapper, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return PyObject_Vectorcall(wrapper, args, nargs, kwnames);
}

PyObject* reshaped(PyObject* array, int ndim, const Py_ssize_t* shape) {
  static PyObject* const reshape_name = PyUnicode_InternFromString("reshape");
  PyObject* dims = PyTuple_New(ndim);
  for (int k = 0; dims != NULL && k < ndim; ++k) {
    PyObject* size = PyLong_FromSsize_t(shape[k]);
    if (size == NULL) Py_CLEAR(dims); else PyTuple_SET_ITEM(dims, k, size);
  }
  PyObject* view = dims == NULL ? NULL : PyObject_CallMethodOneArg(array, reshape_name, dims);
  Py_XDECREF(dims);
  Py_DECREF(array);
  return view;
}

PyObject* raise_kernel_error(PyObject* raise, const char* kernel, const char* nodes) {
  PyObject* result = PyObject_CallFunction(raise, "s(s)", kernel, nodes);
  Py_XDECREF(result);
  return NULL;
}

PyObject* raise_scratch_error(int64_t err) {
  const long long bytes = -(long long)err;
  PyErr_Format(PyExc_MemoryError, "a kernel could not allocate %lld bytes (%lld MiB) of scratch memory; free memory, "
               "raise the process's memory limit (ulimit -v), or use fewer threads (STAX_THREADS) or smaller inputs",
               bytes, (bytes + (1 << 20) - 1) >> 20);
  return NULL;
}

}  // namespace stax
