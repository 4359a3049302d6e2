"""Tensor's public face (methods, properties, operators and their parameters) is the one it had
before the split into mixins (issue 52): recorded from the single-class Tensor of commit 5175007."""
from __future__ import annotations

import inspect

import stax

#: attributes that every class has, not part of Tensor's face
_TYPE_ATTRIBUTES = {"__dict__", "__doc__", "__module__", "__weakref__", "__annotations__", "__qualname__"}

#: name -> "property", or its parameters ("*" var-positional, "**" var-keyword, "kw:" keyword-only, "=default")
RECORDED = {
    'T': 'property',
    '__abs__': 'self',
    '__add__': 'self other',
    '__and__': 'self other',  # was 'self *other' (a generated method), one operand as torch
    '__array_function__': 'self func types args kwargs',
    '__array_ufunc__': 'self ufunc method *inputs **kwargs',
    '__bool__': 'self *args',
    '__eq__': 'self other',
    '__float__': 'self *args',
    '__floordiv__': 'self other',
    '__ge__': 'self other',
    '__getattr__': 'self name',
    '__getitem__': 'self index',
    '__gt__': 'self other',
    '__hash__': 'self',
    '__iadd__': 'self *args **kwargs',
    '__iand__': 'self *args **kwargs',
    '__ifloordiv__': 'self *args **kwargs',
    '__imod__': 'self *args **kwargs',
    '__imul__': 'self *args **kwargs',
    '__index__': 'self *args',
    '__init__': 'self tracer name kw:input_name=None kw:base=None',
    '__int__': 'self *args',
    '__invert__': 'self',  # was 'self *other' (a generated method), no operand as torch
    '__ior__': 'self *args **kwargs',
    '__ipow__': 'self *args **kwargs',
    '__isub__': 'self *args **kwargs',
    '__iter__': 'self',
    '__itruediv__': 'self *args **kwargs',
    '__ixor__': 'self *args **kwargs',
    '__le__': 'self other',
    '__len__': 'self',
    '__lt__': 'self other',
    '__matmul__': 'self other',
    '__mod__': 'self other',
    '__mul__': 'self other',
    '__ne__': 'self other',
    '__neg__': 'self',
    '__or__': 'self other',  # was 'self *other' (a generated method), one operand as torch
    '__pow__': 'self exponent',
    '__radd__': 'self other',
    '__rand__': 'self other',  # was 'self *other' (a generated method), one operand as torch
    '__repr__': 'self',
    '__rfloordiv__': 'self other',
    '__rmatmul__': 'self other',
    '__rmod__': 'self other',
    '__rmul__': 'self other',
    '__ror__': 'self other',  # was 'self *other' (a generated method), one operand as torch
    '__rpow__': 'self base',
    '__rsub__': 'self other',
    '__rtruediv__': 'self other',
    '__rxor__': 'self other',  # was 'self *other' (a generated method), one operand as torch
    '__setitem__': 'self index value',
    '__sub__': 'self other',
    '__truediv__': 'self other',
    '__xor__': 'self other',  # was 'self *other' (a generated method), one operand as torch
    'abs': 'self',
    'abs_': 'self *args **kwargs',
    'add': 'self other kw:alpha=1',
    'add_': 'self *args **kwargs',
    'all': 'self dim=None keepdim=False',
    'amax': 'self dim=None keepdim=False kw:dtype=None',
    'amin': 'self dim=None keepdim=False kw:dtype=None',
    'any': 'self dim=None keepdim=False',
    'argmax': 'self dim=None keepdim=False',
    'argmin': 'self dim=None keepdim=False',
    'argsort': 'self dim=-1 descending=False stable=False',
    'bitwise_and': 'self other',  # was 'self *other' (a generated method), one operand as torch
    'bitwise_and_': 'self *args **kwargs',
    'bitwise_not': 'self',  # was 'self *other' (a generated method), no operand as torch
    'bitwise_not_': 'self *args **kwargs',
    'bitwise_or': 'self other',  # was 'self *other' (a generated method), one operand as torch
    'bitwise_or_': 'self *args **kwargs',
    'bitwise_xor': 'self other',  # was 'self *other' (a generated method), one operand as torch
    'bitwise_xor_': 'self *args **kwargs',
    'bmm': 'self other',
    'bool': 'self',
    'clamp': 'self min=None max=None',
    'clamp_': 'self *args **kwargs',
    'clamp_max': 'self max',
    'clamp_min': 'self min',
    'clip': 'self min=None max=None',
    'clone': 'self',
    'contiguous': 'self',
    'copy_': 'self src',
    'cos': 'self',
    'cos_': 'self *args **kwargs',
    'cumprod': 'self dim kw:dtype=None',
    'cumsum': 'self dim kw:dtype=None',
    'dim': 'self',
    'diagonal': 'self offset=0 dim1=0 dim2=1',  # added with the real-model zoo (issue 49)
    'diagonal_scatter': 'self src offset=0 dim1=0 dim2=1',  # added with the real-model zoo (issue 49)
    'div': 'self other kw:rounding_mode=None',
    'div_': 'self *args **kwargs',
    'divide': 'self other',
    'double': 'self',
    'dtype': 'property',
    'eq': 'self other',
    'erf': 'self',
    'erf_': 'self *args **kwargs',
    'exp': 'self',
    'exp_': 'self *args **kwargs',
    'expand': 'self *sizes',
    'expand_as': 'self other',
    'expm1': 'self',
    'expm1_': 'self *args **kwargs',
    'fill_': 'self value',
    'flatten': 'self start_dim=0 end_dim=-1',
    'flip': 'self *dims **keyword',
    'float': 'self',
    'floor_divide': 'self other',
    'floor_divide_': 'self *args **kwargs',
    'gather': 'self dim index',
    'ge': 'self other',
    'gt': 'self other',
    'index_select': 'self dim index',
    'int': 'self',
    'is_floating_point': 'self',
    'item': 'self *args',
    'le': 'self other',
    'log': 'self',
    'log1p': 'self',
    'log1p_': 'self *args **kwargs',
    'log_': 'self *args **kwargs',
    'log_softmax': 'self dim dtype=None',
    'logcumsumexp': 'self dim',
    'logical_and': 'self other',
    'logical_not': 'self',
    'logical_or': 'self other',
    'logical_xor': 'self other',
    'logsumexp': 'self dim keepdim=False',
    'long': 'self',
    'lt': 'self other',
    'm2': 'self dim=None keepdim=False kw:dtype=None',
    'masked_fill': 'self mask value',
    'masked_fill_': 'self *args **kwargs',
    'matmul': 'self other',
    'max': 'self dim=None keepdim=False',
    'maximum': 'self other',
    'maximum_': 'self *args **kwargs',
    'mean': 'self dim=None keepdim=False kw:dtype=None',
    'min': 'self dim=None keepdim=False',
    'minimum': 'self other',
    'minimum_': 'self *args **kwargs',
    'mm': 'self other',
    'mul': 'self other',
    'mul_': 'self *args **kwargs',
    'multiply': 'self other',
    'ndim': 'property',
    'ne': 'self other',
    'neg': 'self',
    'neg_': 'self *args **kwargs',
    'negative': 'self',
    'norm': "self p='fro' dim=None keepdim=False dtype=None",
    'numel': 'self',
    'numpy': 'self *args',
    'permute': 'self *dims',
    'pow': 'self exponent',
    'pow_': 'self *args **kwargs',
    'prod': 'self dim=None keepdim=False kw:dtype=None',
    'reciprocal': 'self',
    'reciprocal_': 'self *args **kwargs',
    'relu': 'self',
    'relu_': 'self *args **kwargs',
    'remainder': 'self other',
    'remainder_': 'self *args **kwargs',
    'reshape': 'self *shape',
    'reshape_as': 'self other',
    'rsqrt': 'self',
    'rsqrt_': 'self *args **kwargs',
    'scatter': 'self dim index src=None kw:value=None kw:reduce=None',
    'scatter_add': 'self dim index src',
    'scatter_reduce': 'self dim index src reduce kw:include_self=True',
    'shape': 'property',
    'sigmoid': 'self',
    'sigmoid_': 'self *args **kwargs',
    'sign': 'self',
    'sin': 'self',
    'sin_': 'self *args **kwargs',
    'size': 'self dim=None',
    'slice_scatter': 'self src dim=0 start=None end=None step=1',
    'softmax': 'self dim dtype=None',
    'sort': 'self dim=-1 descending=False stable=False',
    'sqrt': 'self',
    'sqrt_': 'self *args **kwargs',
    'square': 'self',
    'squeeze': 'self dim=None',
    'std': 'self dim=None unbiased=None keepdim=False kw:correction=None',
    'sub': 'self other kw:alpha=1',
    'sub_': 'self *args **kwargs',
    'subtract': 'self other',
    'sum': 'self dim=None keepdim=False kw:dtype=None',
    'swapaxes': 'self dim0 dim1',
    't': 'self',
    'tanh': 'self',
    'tanh_': 'self *args **kwargs',
    'to': 'self dtype kw:copy=False',
    'tolist': 'self *args',
    'topk': 'self k dim=-1 largest=True sorted=True',
    'transpose': 'self dim0 dim1',
    'true_divide': 'self other',
    'type_as': 'self other',
    'unfold': 'self dimension size step',
    'unsqueeze': 'self dim',
    'var': 'self dim=None unbiased=None keepdim=False kw:correction=None',
    'view': 'self *shape',
    'view_as': 'self other',
    'where': 'self condition other',
    'zero_': 'self',
}


def _parameters(name: str) -> str:
    if isinstance(inspect.getattr_static(stax.Tensor, name), property):
        return "property"
    kinds = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**",
             inspect.Parameter.KEYWORD_ONLY: "kw:"}
    return " ".join(kinds.get(p.kind, "") + p.name + ("" if p.default is p.empty else f"={p.default!r}")
                    for p in inspect.signature(getattr(stax.Tensor, name)).parameters.values())


def _face() -> set[str]:
    names = set().union(*(vars(cls) for cls in stax.Tensor.__mro__[:-1]))
    return {n for n in names if (not n.startswith("_") or (n.startswith("__") and n.endswith("__")))
            and n not in _TYPE_ATTRIBUTES}


def test_the_attributes_are_the_recorded_ones():
    face = _face()
    assert sorted(face - set(RECORDED)) == [], "new public attributes"
    assert sorted(set(RECORDED) - face) == [], "lost public attributes"


def test_the_parameters_are_the_recorded_ones():
    changed = {name: (_parameters(name), RECORDED[name]) for name in RECORDED if _parameters(name) != RECORDED[name]}
    assert changed == {}


def test_every_public_name_of_dir_is_recorded():
    assert {n for n in dir(stax.Tensor) if not n.startswith("_")} <= set(RECORDED)
