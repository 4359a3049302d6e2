"""C++ text of loop-body expressions, identical in vector loops and scalar ones (spec 8.1).

``BodyPrinter`` emits one ``auto tmpN = ...;`` line per distinct subexpression (CSE within a loop
body).  The header ``stax_vec.h`` overloads every operation for scalars and ``vec<T>``, so only
loads, constants and casts differ between the two modes.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from stax.dtypes import CPP_TYPE, is_floating
from stax.errors import UnsupportedError
from stax.ir.loops import Const, Expr, Load, Op, reduction_identity

_UNARY = {"exp": "stax::v_exp", "log": "stax::v_log", "tanh": "stax::v_tanh", "erf": "stax::v_erf",
          "log1p": "stax::v_log1p", "expm1": "stax::v_expm1", "sin": "stax::v_sin", "cos": "stax::v_cos",
          "sqrt": "stax::v_sqrt", "rsqrt": "stax::v_rsqrt", "abs": "stax::v_abs", "sigmoid": "stax::v_sigmoid",
          "logical_not": "stax::logical_not"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_CALL2 = {"maximum": "stax::v_max", "minimum": "stax::v_min", "pow": "stax::v_pow",
          "logical_and": "stax::logical_and", "logical_or": "stax::logical_or", "logical_xor": "stax::logical_xor",
          "lt": "stax::cmp_lt", "le": "stax::cmp_le", "gt": "stax::cmp_gt", "ge": "stax::cmp_ge",
          "eq": "stax::cmp_eq", "ne": "stax::cmp_ne"}


def lane_type(dtype: str) -> str:
    """The C++ element type of a vector lane (bool lanes are int8_t 0/1)."""
    return "int8_t" if dtype == "bool" else CPP_TYPE[dtype]


def scalar_literal(value, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if is_floating(dtype):
        value = float(value)
        limits = f"std::numeric_limits<{CPP_TYPE[dtype]}>"
        if math.isnan(value):
            return f"{limits}::quiet_NaN()"
        if math.isinf(value):
            return f"{limits}::infinity()" if value > 0 else f"-{limits}::infinity()"
        text = repr(value)
        return f"{text}f" if dtype == "float32" else text
    if int(value) == np.iinfo(dtype).min:  # its negation does not fit a C++ integer literal
        return f"std::numeric_limits<{CPP_TYPE[dtype]}>::lowest()"
    return f"{CPP_TYPE[dtype]}({int(value)})"


def literal(value, dtype: str, vector: bool) -> str:
    text = scalar_literal(value, dtype)
    if not vector:
        return text
    return f"stax::splat<{lane_type(dtype)}>({'(int8_t)' + text if dtype == 'bool' else text})"


@dataclass
class PrintState:
    """Shared by the printers of one kernel: temporary numbering and whether the error flag is used."""

    counter: int = 0
    uses_error_flag: bool = False

    def fresh(self, prefix: str = "tmp") -> str:
        self.counter += 1
        return f"{prefix}{self.counter - 1}"


@dataclass
class Hoist:
    """The lines run once before a vector loop along ``var``: its invariant values."""

    var: str
    lines: list[str] = field(default_factory=list)

    def takes(self, line: str, error_flag: str) -> bool:
        """Whether a value invariant along the vector (``_is_invariant``) may run before the loop:
        it does not read the loop's variable (a splat of ``x[y0 / 16]`` is one value a vector, a
        new one each step) nor set the error flag (the loop may not run)."""
        return re.search(rf"\b{self.var}\b", line) is None and f", {error_flag})" not in line


class BodyPrinter:
    """Prints expressions of one loop body.  One printer may print several lanes at once: the
    copies of an unrolled vector loop's body, each shifted a vector further along the row (one
    ``load`` per lane renders a Load in that lane).  Their statements interleave node by node, and
    four float32 exps of a node become one ``stax::v_exp4`` (one range test for four vectors).
    Given a ``hoist``, a vector value the same at every point of its loop (a splat, an op of
    splats) is printed into its lines, to run once before the loop: gcc recomputes some of them at
    every step (an int64 vector of 16 lanes, cast or compared, goes lane by lane through memory)."""

    def __init__(self, vector: bool, load: Callable[[Load], str] | Sequence[Callable[[Load], str]],
                 lines: list[str], indent: str, state: PrintState, error_flag: str = "err",
                 hoist: Hoist | None = None):
        self.vector = vector
        self.loads = [load] if callable(load) else list(load)
        self.lines, self.indent, self.state = lines, indent, state
        self.hoist = hoist
        self.error_flag = error_flag
        # by identity: an expression object prints once; the entry holds the objects too, so that
        # their ids are not reused by a later temporary (a member's body shifted to another lane)
        self.cache: dict[tuple[int, ...], tuple[Sequence[Expr], list[str]]] = {}
        self.emitted: dict[str, str] = {}
        self.invariant: set[str] = set()  # names of values the same at every point of the loop
        self.looped: set[str] = set()  # names of values computed in the loop (not hoisted)

    def emit(self, line: str, invariant: bool = False, operands: Sequence[str] = ()) -> str:
        """A temporary holding ``line``: before the loop when it is ``invariant``, hoisting, and
        none of its ``operands`` is computed in the loop (an op that sets the error flag stays in
        the loop, which may not run, and so do the values computed from it)."""
        name = self.state.fresh()
        if invariant and self.hoist is not None and self.hoist.takes(line, self.error_flag) and \
                not any(operand in self.looped for operand in operands):
            self.hoist.lines.append(f"auto {name} = {line};")
        else:
            self.lines.append(f"{self.indent}auto {name} = {line};")
            self.looped.add(name)
        return name

    def __call__(self, expr: Expr) -> str:
        return self.lanes([expr])[0]

    def lanes(self, exprs: Sequence[Expr]) -> list[str]:
        """The names of ``exprs``, one per lane: the same expression at each lane's point."""
        if len(exprs) != len(self.loads):
            raise ValueError(f"{len(exprs)} expressions for a printer of {len(self.loads)} lanes")
        key = tuple(map(id, exprs))
        if key not in self.cache:
            self.cache[key] = (exprs, self._print(exprs))
        return self.cache[key][1]

    def _print(self, exprs: Sequence[Expr]) -> list[str]:
        first = exprs[0]
        if isinstance(first, Const):  # literals are printed in place
            return [literal(e.value, e.dtype, self.vector) for e in exprs]
        args: list[list[str]] = []
        if isinstance(first, Load):
            texts = [load(e) for load, e in zip(self.loads, exprs)]
            invariant = [self._is_invariant(t) for t in texts]
        else:
            args = [self.lanes([e.args[i] for e in exprs]) for i in range(len(first.args))]
            texts = [self._op(e, [a[lane] for a in args]) for lane, e in enumerate(exprs)]
            if self._exp4(first, texts):
                return self._emit_exp4(texts, args[0])
            invariant = [all(self._is_invariant(a[lane]) for a in args) for lane in range(len(exprs))]
        # structural CSE: equal text means an equal value (operands are already shared names), so
        # members of one loop body that inline the same producer compute it once (example 7.2),
        # and lanes share what does not depend on their point
        for lane, (text, same) in enumerate(zip(texts, invariant)):
            if text not in self.emitted:
                self.emitted[text] = self.emit(text, same, [a[lane] for a in args])
                if same:
                    self.invariant.add(self.emitted[text])
        return [self.emitted[text] for text in texts]

    def _is_invariant(self, value: str) -> bool:
        """Whether a printed value is the same at every point of a vector loop: a splat (of a
        literal, of a load that does not move with the loop, of a scalar computed before it) or
        an op of such values."""
        return self.vector and (value in self.invariant or value.startswith("stax::splat<"))

    def _exp4(self, expr: Op, texts: list[str]) -> bool:
        return (self.vector and len(texts) == 4 and expr.name == "exp" and expr.dtype == "float32"
                and len(set(texts)) == 4 and not any(t in self.emitted for t in texts))

    def _emit_exp4(self, texts: list[str], operands: list[str]) -> list[str]:
        names = [self.state.fresh() for _ in texts]
        self.lines.append(f"{self.indent}const auto [{', '.join(names)}] = stax::v_exp4({', '.join(operands)});")
        self.emitted.update(zip(texts, names))
        return names

    def _op(self, expr: Op, a: list[str]) -> str:
        name, dtype = expr.name, expr.dtype
        v = "v_" if self.vector else ""
        if name in _UNARY:
            return f"{_UNARY[name]}({a[0]})"
        if name in _INFIX:
            if dtype == "bool":  # torch's bool + and * are or and and; 0/1 lanes must stay 0/1
                return f"stax::logical_{'or' if name == 'add' else 'and'}({a[0]}, {a[1]})"
            return f"{a[0]} {_INFIX[name]} {a[1]}"
        if name in _CALL2:
            return f"{_CALL2[name]}({a[0]}, {a[1]})"
        if name == "bitwise_not":
            return f"~({a[0]})"
        if name == "neg":
            return f"-({a[0]})"  # a literal operand may carry its own sign: never print --1.5
        if name == "reciprocal":
            return f"{literal(1, dtype, self.vector)} / {a[0]}"
        if name == "relu":
            return f"stax::v_max({a[0]}, {literal(0, dtype, self.vector)})"
        if name == "div":
            if dtype == "float32" and self._is_invariant(a[1]):
                return f"stax::div_invariant({a[0]}, {a[1]})"
            return f"{a[0]} / {a[1]}"
        if name in ("floordiv", "truncdiv", "mod"):
            if is_floating(dtype):
                return f"stax::{v}float_{name}({a[0]}, {a[1]})"
            divisor = expr.args[1]
            if isinstance(divisor, Const) and divisor.value > 0:  # nothing to flag
                return f"stax::{v}int_{name}_by<{CPP_TYPE[dtype]}({divisor.value})>({a[0]})"
            self.state.uses_error_flag = True
            return f"stax::{v}int_{name}({a[0]}, {a[1]}, {self.error_flag})"
        if name == "where":  # both branches one value (an index clamped where it is in bounds): no select
            return a[1] if a[1] == a[2] else f"stax::select({a[0]}, {a[1]}, {a[2]})"
        if name == "cast":
            if dtype == "bool":
                return f"stax::{'v' if self.vector else ''}cast_bool({a[0]})"
            return f"stax::{'v' if self.vector else ''}cast<{lane_type(dtype) if self.vector else CPP_TYPE[dtype]}>({a[0]})"
        raise UnsupportedError(f"the C++ generator has no rule for op {name!r}; this is a stax bug "
                               "(the lowering accepted an op the code generator does not know)")
