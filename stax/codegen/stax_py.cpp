#include "stax_py.h"
// The compiled calls' helpers that stax_py.h declares and documents: built once per cache and
// compiler (runtime.load_call_runtime) and loaded with global symbols before any kernel library.
// (The include comes first so that the build uses the precompiled header.)

namespace stax {

bool take_if_layout(PyObject* array, PyObject* ndarray, PyObject* dtype, int ndim, const Py_ssize_t* shape,
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

PyObject* take_pooled(PyObject* site, PyObject* ndarray, int ndim, const Py_ssize_t* shape,
                      const Py_ssize_t* strides, Py_buffer* view_buffer) {
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
      if (idle && take_if_layout(view, ndarray, s[6], ndim, shape, strides, PyBUF_STRIDES | PyBUF_WRITABLE,
                                 view_buffer)) {
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
      if (!counted) {
        PyBuffer_Release(view_buffer);
        Py_CLEAR(found);
      }
    }
    PyObject *error, *value, *traceback;  // a failed count, kept while the lock is released
    PyErr_Fetch(&error, &value, &traceback);
    PyObject* unlocked = PyObject_CallNoArgs(s[5]);
    if (unlocked == NULL) {
      Py_XDECREF(error); Py_XDECREF(value); Py_XDECREF(traceback);
      if (found != NULL) { PyBuffer_Release(view_buffer); Py_DECREF(found); }
      return NULL;
    }
    Py_DECREF(unlocked);
    if (error != NULL) { PyErr_Restore(error, value, traceback); return NULL; }
    if (found != NULL) return found;
  }
  PyObject* array = PyObject_CallNoArgs(s[0]);
  if (array != NULL && PyObject_GetBuffer(array, view_buffer, PyBUF_STRIDES | PyBUF_WRITABLE) < 0) Py_CLEAR(array);
  return array;
}

bool record_peak(PyObject* record, long long peak) {
  PyObject* bytes = PyLong_FromLongLong(peak);
  if (bytes == NULL) return false;
  PyObject* result = PyObject_CallOneArg(record, bytes);
  Py_DECREF(bytes);
  Py_XDECREF(result);
  return result != NULL;
}

void release_views(Py_buffer* views, bool* taken, int n) {
  for (int i = 0; i < n; ++i)
    if (taken[i]) {
      PyBuffer_Release(&views[i]);
      taken[i] = false;
    }
}

void drop_objects(PyObject** objects, int n) {
  for (int i = 0; i < n; ++i) Py_CLEAR(objects[i]);
}

PyObject* call_wrapper(PyObject* wrapper, PyObject* const* args, Py_ssize_t nargs) {
  return PyObject_Vectorcall(wrapper, args, nargs, NULL);
}

PyObject* raise_kernel_error(PyObject* raise, const char* kernel, const char* nodes) {
  PyObject* result = PyObject_CallFunction(raise, "s(s)", kernel, nodes);
  Py_XDECREF(result);
  return NULL;
}

}  // namespace stax
