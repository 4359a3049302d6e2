"""The Python entry points of a graph's translation unit (``stax_py.h``): one METH_FASTCALL
function per kernel, taking the kernel's arrays and returning whether the error flag was set.

When the wrapper (seed 8.5) only checks inputs, allocates from the caching allocator and calls
kernels, the unit also has ``graph_set_up``, which makes the graph's compiled call: the
wrapper's work, line for line, without the interpreter.  It takes
an input only if it is exactly a numpy array of the compiled dtype, shape and strides (writable
when the graph updates it), passed by position; any other call, whatever the reason (arrays
passed by name among them), goes to the Python wrapper, which explains or accepts it.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import nbytes
from ..indexing import contiguous_strides
from ..memory.plan import MemoryPlan
from ..runtime import MODULE_NAME
from .cpp import Kernel
from .wrapper import WrapperPlan

# the compiled call's state tuple: these, then each input's dtype, then one allocator site per kind
# (CachingAllocator.compiled_site)
STATE = ("fallback", "ndarray", "counts", "kernel_error")
Kind = tuple[tuple[int, ...], str]  # an allocation's shape and dtype


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


def compiled_call_kinds(plan: WrapperPlan, memory: MemoryPlan) -> list[Kind] | None:
    """The allocator kinds a compiled call of ``plan`` allocates, in the order of its state's
    sites; None when the wrapper does more than allocate and call kernels (extern calls, pooled
    or reused storage, an output that is neither allocated nor an input, or returned twice)."""
    inputs = {i.name for i in plan.inputs}
    if any(k.extern for k in plan.steps) or any(memory.storage[b].kind != "alloc" for b in plan.buffer_meta) \
            or not set(plan.outputs) <= inputs | set(plan.buffer_meta) or len(set(plan.outputs)) < len(plan.outputs):
        return None
    return list(dict.fromkeys(plan.buffer_meta.values()))


def _input_lines(plan: WrapperPlan) -> list[str]:
    """Every input taken if it has the compiled layout, else the call goes to the wrapper."""
    lines, tests = [], []
    for k, inp in enumerate(sorted(plan.inputs, key=lambda i: i.position)):
        byte_strides = [st * np.dtype(inp.dtype).itemsize for st in inp.strides]
        writable = "true" if inp.name in plan.mutated_inputs else "false"
        lines.append(f"    static const Py_ssize_t shape{k}[] = {{{', '.join(map(str, inp.shape)) or 0}}}, "
                     f"strides{k}[] = {{{', '.join(map(str, byte_strides)) or 0}}};")
        tests.append(f"!stax::take_input(args[{k}], s[1], s[{len(STATE) + k}], {len(inp.shape)}, shape{k}, "
                     f"strides{k}, {writable}, views, {k})")
    if tests:
        joined = " ||\n        ".join(tests)
        lines += [f"    if ({joined})", "        return stax::call_wrapper(s[0], args, nargs, NULL);"]
    return lines


def _return_lines(returned: list[str]) -> list[str]:
    if len(returned) == 1:
        return [f"    return {returned[0]};"]
    lines = [f"    PyObject* outputs = PyTuple_New({len(returned)});", "    if (outputs == NULL) return NULL;"]
    lines += [f"    PyTuple_SET_ITEM(outputs, {k}, {r});" for k, r in enumerate(returned)]
    return lines + ["    return outputs;"]


def compiled_call_source(plan: WrapperPlan, memory: MemoryPlan, kinds: list[Kind]) -> str:
    """``graph_set_up`` and the compiled call it makes: the steps of ``wrapper_source`` in C++
    (inputs, each buffer's allocation before its first kernel, releases after their last step,
    the peak of the bytes held recorded at the end)."""
    inputs = sorted(plan.inputs, key=lambda i: i.position)
    buffers = list(plan.buffer_meta)
    slot = {name: k for k, name in enumerate([i.name for i in inputs] + buffers)}  # in views
    owned = {name: k for k, name in enumerate(buffers)}
    first_site = len(STATE) + len(inputs)
    lines = [f"    if (nargs != {len(inputs)} || kwnames != NULL) return stax::call_wrapper(s[0], args, nargs, kwnames);",
             f"    stax::Owned<{len(buffers)}> owned;", f"    stax::Views<{len(slot)}> views;", *_input_lines(plan),
             f"    long long live = {memory.pool_size}, peak = live;  // bytes held"]
    created: set[str] = set()
    for kernel, (first, last) in zip(plan.steps, plan.spans):
        for p in kernel.params:
            if p in plan.buffer_meta and p not in created:
                shape, dtype = plan.buffer_meta[p]
                site = first_site + kinds.index((shape, dtype))
                strides = [st * np.dtype(dtype).itemsize for st in contiguous_strides(shape)]
                lines += [f"    static const Py_ssize_t {p}_shape[] = {{{', '.join(map(str, shape)) or 0}}}, "
                          f"{p}_strides[] = {{{', '.join(map(str, strides)) or 0}}};",
                          f"    if (!stax::take_output(s[{site}], s[1], {len(shape)}, {p}_shape, {p}_strides, owned, "
                          f"{owned[p]}, views, {slot[p]}))",
                          "        return NULL;",
                          f"    live += {nbytes(shape, dtype)}; peak = std::max(peak, live);"]
                created.add(p)
        args = ", ".join(f"({t})views.buf({slot[p]})" for p, t in zip(kernel.params, kernel.param_types))
        nodes = ", ".join(kernel.nodes)
        lines += [f"    // {nodes}", "    {", "        int64_t err = 0;", "        Py_BEGIN_ALLOW_THREADS",
                  f"        {kernel.name}({args}{', ' if args else ''}&err);", "        Py_END_ALLOW_THREADS",
                  f'        if (err) return stax::raise_kernel_error(s[3], "{kernel.name}", "{nodes}");', "    }"]
        for t in range(first, last + 1):
            lines += [f"    owned.drop({owned[p]}); live -= {nbytes(*plan.buffer_meta[p])};"
                      for p in memory.releases.get(t, [])]
    lines.append("    stax::record_peak(s[2], peak);")
    lines += _return_lines([f"owned.give({owned[p]})" if p in owned else f"Py_NewRef(args[{slot[p]}])"
                            for p in plan.outputs])
    size = len(STATE) + len(inputs) + len(kinds)
    body = "\n".join(lines)
    return f"""static PyObject* py_graph_call(PyObject* state, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {{
    PyObject* const* s = ((PyTupleObject*)state)->ob_item;  // {", ".join(STATE)}, dtypes, sites
{body}
}}

static PyMethodDef graph_call_def = {{"call", (PyCFunction)(void (*)(void))py_graph_call, METH_FASTCALL | METH_KEYWORDS,
                                     "the compiled graph: inputs checked, buffers allocated, kernels called"}};

static PyObject* py_graph_set_up(PyObject*, PyObject* state) {{
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != {size}) {{
        PyErr_SetString(PyExc_TypeError, "graph_set_up takes a tuple of {size} objects");
        return NULL;
    }}
    if (!stax::takes_counts(PyTuple_GET_ITEM(state, 2))) return NULL;
    return PyCFunction_New(&graph_call_def, state);
}}"""


def python_entry_points(kernels: list[Kernel], graph_call: str | None = None) -> str:
    """The module ``stax_kernels`` exposing every C++ kernel of the graph to the wrapper, and
    ``graph_set_up`` when ``graph_call`` (``compiled_call_source``'s text) is given."""
    compiled = [k for k in kernels if not k.extern]
    methods = "\n".join(f'    {{"{k.name}", (PyCFunction)(void (*)(void))py_{k.name}, METH_FASTCALL, "{", ".join(k.nodes)}"}},'
                        for k in compiled)
    if graph_call:
        methods += '\n    {"graph_set_up", (PyCFunction)py_graph_set_up, METH_O, "the compiled call of the graph"},'
    return "\n\n".join([*(_shim(k) for k in compiled), *([graph_call] if graph_call else []),
                        f"""static PyMethodDef stax_methods[] = {{
{methods}
    {{NULL, NULL, 0, NULL}}
}};

static struct PyModuleDef stax_module = {{PyModuleDef_HEAD_INIT, "{MODULE_NAME}", NULL, -1, stax_methods}};

PyMODINIT_FUNC PyInit_{MODULE_NAME}(void) {{ return PyModule_Create(&stax_module); }}"""])
