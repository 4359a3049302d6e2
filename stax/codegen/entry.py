"""The Python entry points of a graph's translation unit (``stax_py.h``): one METH_FASTCALL
function per kernel, taking the kernel's arrays and returning whether the error flag was set.

When the wrapper (spec 8.5) only checks inputs, allocates from the caching allocator or reuses
storage, calls kernels and makes products on a gemm (``CallPlan``), the unit also has
``graph_set_up``, which makes the graph's compiled call: the wrapper's work, line for line,
without the interpreter.  A product's route (stax.kernels.matmul's ``plan_product``) is decided when
the call is generated, from the shapes, dtypes and layouts it is compiled for.  It takes
an input only if it is exactly a numpy array of the compiled dtype, shape and strides (writable
when the graph updates it), passed by position; any other call, whatever the reason (arrays
passed by name among them), goes to the Python wrapper, which explains or accepts it.
"""
from __future__ import annotations

import numpy as np

from stax.dtypes import CPP_TYPE, nbytes
from stax.ir.indexing import contiguous_strides
from stax.kernels.registry import EXTERN_CALLS, KERNEL_PLANS
from stax.codegen.names import check_kernel_names, comment_label, comment_labels
from stax.kernels.matmul import GEMM_DTYPES, Product, Route, plan_product, product_terms
from stax.memory.plan import MemoryPlan
from stax.runtime.build import MODULE_NAME
from stax.target import ISA_LEVELS
from stax.codegen.kernel import Kernel
from stax.codegen.plans import STATE, CallPlan, Term, WrapperPlan, check_plan_names



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
    if (err < 0) return stax::raise_scratch_error(err);
    return PyBool_FromLong(err != 0);
}}"""


def _extern_terms(plan: WrapperPlan, kernel: Kernel) -> list[Term] | None:
    """The products (or the hand-written kernel: stax.kernels.registry.KERNEL_PLANS) of an extern step as the
    compiled call makes them, or None when one of them needs numpy (stax.kernels.matmul's Route.NUMPY) or
    the step is a numpy call."""
    ext = kernel.extern
    if ext["op"] not in EXTERN_CALLS:
        return None
    layouts = {i.name: (i.shape, i.dtype, tuple(i.strides) == contiguous_strides(i.shape)) for i in plan.inputs}
    layouts.update({name: (shape, dtype, True) for name, (shape, dtype) in plan.buffer_meta.items()})
    names = ext["inputs"]
    views = ext.get("views") or [None] * len(names)
    out_shape, out_dtype, _ = layouts[ext["output"]]
    isa = ISA_LEVELS[ext["isa"]]
    if ext["op"] in KERNEL_PLANS:
        shapes = [tuple(view or layouts[name][0]) for name, view in zip(names, views)]
        plan = KERNEL_PLANS[ext["op"]](shapes, out_shape, out_dtype, ext["threads"], isa, **ext.get("attrs", {}))
        return [Term(plan, tuple(names), ext["output"])]
    terms = []
    for i, j, flags, accumulate in product_terms(ext["op"], len(names), ext.get("attrs", {}).get("transposed", ())):
        (a_shape, a_dtype, a_plain), (b_shape, b_dtype, b_plain) = (layouts[names[i]], layouts[names[j]])
        dtype = out_dtype if a_dtype == b_dtype == out_dtype and out_dtype in GEMM_DTYPES else None
        product = plan_product(tuple(views[i] or a_shape), tuple(views[j] or b_shape), out_shape, dtype,
                               a_plain and b_plain, ext["threads"], isa, flags, accumulate)
        if product.route is Route.NUMPY:
            return None
        terms.append(Term(product, (names[i], names[j]), ext["output"]))
    return terms


def compiled_call_plan(plan: WrapperPlan, memory: MemoryPlan) -> CallPlan | None:
    """What a compiled call of ``plan`` allocates and multiplies; None when the wrapper does more
    than allocate or reuse storage, call kernels and make products on a gemm (numpy's externs, a
    pooled storage, an output that is neither a buffer nor an input)."""
    inputs = {i.name for i in plan.inputs}
    if any(memory.storage[b].kind == "pool" for b in plan.buffer_meta) or \
            not set(plan.outputs) <= inputs | set(plan.buffer_meta):
        return None
    terms = {}
    for step, kernel in enumerate(plan.steps):
        if kernel.extern:
            found = _extern_terms(plan, kernel)
            if found is None:
                return None
            terms[step] = found
    kinds = list(dict.fromkeys(meta for name, meta in plan.buffer_meta.items() if memory.storage[name].kind == "alloc"))
    return CallPlan(kinds, terms)


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


def _product_lines(term: Term, state: int, slot: dict[str, int]) -> list[str]:
    """The call of one product (stax.kernels.matmul's ``run_product`` in C++) or hand-written kernel (a
    blocked convolution or weight gradient, a row lookup or its gradient, a random draw: the plan's own call
    line), its entry points at ``s[state]`` and after."""
    p = term.product
    if not isinstance(p, Product):  # a hand-written kernel's extern (stax.kernels.registry.KERNEL_PLANS)
        call = p.call_line([f"views.buf({slot[n]})" for n in term.operands], f"views.buf({slot[term.out]})")
        return _extern_call_lines([f"        void* entry = PyLong_AsVoidPtr(s[{state}]);"], call)
    t = CPP_TYPE[p.dtype] if p.dtype else "float"
    a, b, c = (f"({'' if x == term.out else 'const '}{t}*)views.buf({slot[x]})" for x in (*term.operands, term.out))
    add = int(p.accumulate)
    if p.route is Route.EMPTY:
        return [] if p.accumulate else [f"    std::memset(views.buf({slot[term.out]}), 0, {p.batch * p.m * p.n} * sizeof({t}));"]
    if p.route is Route.NARROW:
        call = f"stax::narrow_product(entry, {a}, {b}, {c}, {p.batch}, {p.m}, {p.n}, {p.k}, {p.threads}, {add})"
    elif p.route is Route.NARROW_GRADIENT:
        call = f"stax::narrow_gradient_product(entry, {a}, {b}, {c}, {p.m}, {p.n}, {p.k}, {p.threads}, {add})"
    else:
        ta, tb = (int(x) for x in p.transposed)
        call = (f"stax::team_product<{t}>(entry, gemm, {a}, {b}, {c}, {p.batch}, {p.m}, {p.n}, {p.k}, {p.a_step}, "
                f"{p.b_step}, {ta}, {tb}, {p.threads}, {t}({add}))")
    gemm = [f"        void* gemm = PyLong_AsVoidPtr(s[{state + 1}]);"] if p.route is Route.TEAM else []
    return _extern_call_lines([f"        void* entry = PyLong_AsVoidPtr(s[{state}]);", *gemm], call)


def _extern_call_lines(entry_points: list[str], call: str) -> list[str]:
    """An extern's ``call`` without the GIL, after the lines that take its entry points; its status
    (stax_py.h: minus the bytes of scratch it could not allocate) raises MemoryError."""
    return ["    {", *entry_points, "        int64_t status;", "        Py_BEGIN_ALLOW_THREADS",
            f"        status = {call};", "        Py_END_ALLOW_THREADS",
            "        if (status < 0) return stax::raise_scratch_error(status);", "    }"]


def _holder(name: str, memory: MemoryPlan) -> str:
    """The allocated buffer (or input) whose array holds ``name``'s storage."""
    while name in memory.storage and memory.storage[name].kind in ("reuse", "inplace"):
        name = memory.storage[name].source
    return name


def compiled_call_source(plan: WrapperPlan, memory: MemoryPlan, call: CallPlan) -> str:
    """``graph_set_up`` and the compiled call it makes: the steps of ``wrapper_source`` in C++
    (inputs, each buffer's allocation or reused storage before its first step, kernels and
    products, releases after their last step, the peak of the bytes held recorded at the end)."""
    check_plan_names(plan)
    inputs = sorted(plan.inputs, key=lambda i: i.position)
    buffers = list(plan.buffer_meta)
    slot = {name: k for k, name in enumerate([i.name for i in inputs] + buffers)}  # in views
    owned = {name: k for k, name in enumerate(buffers)}
    first_site = len(STATE) + len(inputs)
    next_address = first_site + len(call.kinds)
    lines = [f"    if (nargs != {len(inputs)} || kwnames != NULL) return stax::call_wrapper(s[0], args, nargs, kwnames);",
             f"    stax::Owned<{len(buffers)}> owned;", f"    stax::Views<{len(slot)}> views;", *_input_lines(plan),
             f"    long long live = {memory.pool_size}, peak = live;  // bytes held"]
    created: set[str] = set()
    for step, (kernel, (first, last)) in enumerate(zip(plan.steps, plan.spans)):
        for p in kernel.params:
            if p in plan.buffer_meta and p not in created:
                lines += _storage_lines(p, plan, memory, call, slot, owned, first_site)
                created.add(p)
        nodes = comment_labels(kernel.nodes)  # also in a C string: a label holds no quote or backslash
        lines.append(f"    // {nodes}")
        if kernel.extern:
            for term in call.terms[step]:
                lines += _product_lines(term, next_address, slot)
                next_address += len(term.product.addresses())
        else:
            args = ", ".join(f"({t})views.buf({slot[p]})" for p, t in zip(kernel.params, kernel.param_types))
            lines += ["    {", "        int64_t err = 0;", "        Py_BEGIN_ALLOW_THREADS",
                      f"        {kernel.name}({args}{', ' if args else ''}&err);", "        Py_END_ALLOW_THREADS",
                      "        if (err < 0) return stax::raise_scratch_error(err);",
                      f'        if (err) return stax::raise_kernel_error(s[3], "{kernel.name}", "{nodes}");', "    }"]
        for t in range(first, last + 1):
            lines += [f"    owned.drop({owned[p]}); live -= {nbytes(*plan.buffer_meta[p])};"
                      for p in memory.releases.get(t, [])]
    lines.append("    stax::record_peak(s[2], peak);")
    first = {p: plan.outputs.index(p) for p in plan.outputs}  # an output returned twice is one object
    returned = {p: _returned(p, plan, memory, slot, owned) for p in first}
    lines += [shape_line for _, shape_line in returned.values() if shape_line]
    lines += _return_lines([returned[p][0] if first[p] == k else f"Py_NewRef(PyTuple_GET_ITEM(outputs, {first[p]}))"
                            for k, p in enumerate(plan.outputs)])
    size = next_address
    body = "\n".join(lines)
    return f"""static PyObject* py_graph_call(PyObject* state, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {{
    PyObject* const* s = ((PyTupleObject*)state)->ob_item;  // {", ".join(STATE)}, dtypes, sites, entry points
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


def _storage_lines(name: str, plan: WrapperPlan, memory: MemoryPlan, call: CallPlan, slot: dict[str, int],
                   owned: dict[str, int], first_site: int) -> list[str]:
    """``name``'s array from the allocator, or the storage of the buffer it reuses (whose array
    it then holds: the source is dead or read for the last time by the step that writes it)."""
    where = memory.storage[name]
    if where.kind == "alloc":
        shape, dtype = plan.buffer_meta[name]
        site = first_site + call.kinds.index((shape, dtype))
        strides = [st * np.dtype(dtype).itemsize for st in contiguous_strides(shape)]
        return [f"    static const Py_ssize_t {name}_shape[] = {{{', '.join(map(str, shape)) or 0}}}, "
                f"{name}_strides[] = {{{', '.join(map(str, strides)) or 0}}};",
                f"    if (!stax::take_output(s[{site}], s[1], {len(shape)}, {name}_shape, {name}_strides, owned, "
                f"{owned[name]}, views, {slot[name]}))",
                "        return NULL;",
                f"    live += {nbytes(shape, dtype)}; peak = std::max(peak, live);"]
    source = where.source
    holder = f"owned.give({owned[source]})" if source in owned else f"Py_NewRef(args[{slot[source]}])"
    return [f"    views.data[{slot[name]}] = views.data[{slot[source]}];  // {where.kind} of {comment_label(source)}",
            f"    owned.obj[{owned[name]}] = {holder};"]


def _returned(name: str, plan: WrapperPlan, memory: MemoryPlan, slot: dict[str, int],
              owned: dict[str, int]) -> tuple[str, str | None]:
    """The expression handing output ``name`` to the caller: its array, or when it holds the
    storage of a buffer of another shape, a reshaped view (with the lines making it)."""
    if name not in owned:
        return f"Py_NewRef(args[{slot[name]}])", None
    shape = plan.buffer_meta[name][0]
    holder = _holder(name, memory)
    held_shape = plan.buffer_meta[holder][0] if holder in plan.buffer_meta else \
        next(i.shape for i in plan.inputs if i.name == holder)
    if tuple(held_shape) == tuple(shape):
        return f"owned.give({owned[name]})", None
    return (f"{name}_returned",
            f"    static const Py_ssize_t {name}_returned_shape[] = {{{', '.join(map(str, shape)) or 0}}};\n"
            f"    PyObject* {name}_returned = stax::reshaped(owned.give({owned[name]}), {len(shape)}, "
            f"{name}_returned_shape);\n"
            f"    if ({name}_returned == NULL) return NULL;")


def python_entry_points(kernels: list[Kernel], graph_call: str | None = None) -> str:
    """The module ``stax_kernels`` exposing every C++ kernel of the graph to the wrapper, and
    ``graph_set_up`` when ``graph_call`` (``compiled_call_source``'s text) is given."""
    check_kernel_names(kernels)
    compiled = [k for k in kernels if not k.extern]
    methods = "\n".join(f'    {{"{k.name}", (PyCFunction)(void (*)(void))py_{k.name}, METH_FASTCALL, "{comment_labels(k.nodes)}"}},'
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
