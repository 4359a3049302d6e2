"""The Python entry points of a graph's translation unit (``stax_py.h``): one METH_FASTCALL
function per kernel, taking the kernel's arrays and returning whether the error flag was set."""
from __future__ import annotations

from ..runtime import MODULE_NAME
from .cpp import Kernel


def _shim(kernel: Kernel) -> str:
    n = len(kernel.params)
    writable = ", ".join("true" if not t.startswith("const") else "false" for t in kernel.param_types) or "false"
    args = ", ".join(f"({t})views[{i}].buf" for i, t in enumerate(kernel.param_types))
    return f"""static PyObject* py_{kernel.name}(PyObject*, PyObject* const* args, Py_ssize_t nargs) {{
    static const bool writable[] = {{{writable}}};
    Py_buffer views[{max(n, 1)}];
    if (!stax::get_buffers(args, nargs, {n}, writable, views)) return NULL;
    int64_t err = 0;
    Py_BEGIN_ALLOW_THREADS
    {kernel.name}({args}{', ' if n else ''}&err);
    Py_END_ALLOW_THREADS
    stax::release_buffers({n}, views);
    return PyBool_FromLong(err != 0);
}}"""


def python_entry_points(kernels: list[Kernel]) -> str:
    """The module ``stax_kernels`` exposing every C++ kernel of the graph to the wrapper."""
    compiled = [k for k in kernels if not k.extern]
    methods = "\n".join(f'    {{"{k.name}", (PyCFunction)(void (*)(void))py_{k.name}, METH_FASTCALL, "{", ".join(k.nodes)}"}},'
                        for k in compiled)
    return "\n\n".join([*(_shim(k) for k in compiled), f"""static PyMethodDef stax_methods[] = {{
{methods}
    {{NULL, NULL, 0, NULL}}
}};

static struct PyModuleDef stax_module = {{PyModuleDef_HEAD_INIT, "{MODULE_NAME}", NULL, -1, stax_methods}};

PyMODINIT_FUNC PyInit_{MODULE_NAME}(void) {{ return PyModule_Create(&stax_module); }}"""])
