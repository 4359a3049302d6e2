"""Rows of a table by an index, and their gradient: the graph's ``take_rows`` and ``add_rows``
externs (spec 8.5's library calls), for an embedding's lookup and its backward, ``x[i]`` and
``index_select`` along the first dim of a large table (``stax.frontend.ops.gather`` decides).

``stax.frontend.ops.gather`` otherwise compares an index with every position it may name, which keeps every
load affine but reads the whole table per looked-up row: a vocabulary of 32,000 rows costs
32,000 times the row.  Here a row is copied (or added) by its address::

    take_rows:  out[i, :] = table[index[i], :]
    add_rows:   out[r, :] = sum over i with index[i] == r of values[i, :]   (zeros elsewhere)

An index outside ``[0, rows)`` reads and writes nothing (its output row is zeros); the graph
computes the index the externs read by dividing it by its in-range flag
(``stax.frontend.ops.gather._in_range``), so that a bad index raises first, as torch raises.  ``add_rows`` splits the
output's rows among the tasks; a task scans every index and adds, in the index's order, the rows
that fall in its range, so every row's sum has one order whatever the threads.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from stax.environment import isa_from_env
from stax.errors import ShapeError
from stax.kernels.libraries import library
from stax.target import Isa


#: the dtypes ``add_rows`` sums
ADD_DTYPES = ("float32", "float64")


@functools.cache
def _entry(isa: Isa, name: str) -> ctypes._CFuncPtr:
    entry = getattr(library("row_index", isa), name)
    entry.restype = None
    entry.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    return entry


@dataclass(frozen=True)
class RowIndex:
    """A ``take_rows`` or ``add_rows`` extern as a compiled call makes it (codegen/entry.py): the
    entry point built for ``isa`` and the sizes: the table's rows ``v``, the index's length
    ``t`` and a row's width ``d`` in elements of ``dtype``."""

    op: str
    v: int
    t: int
    d: int
    dtype: str
    threads: int
    isa: Isa

    @property
    def entry_name(self) -> str:
        return "stax_take_rows" if self.op == "take_rows" else f"stax_add_rows_{self.dtype}"

    def addresses(self) -> tuple[int, ...]:
        return (ctypes.cast(_entry(self.isa, self.entry_name), ctypes.c_void_p).value,)

    def arguments(self) -> tuple[int, ...]:
        """What the entry point takes after its three arrays: the sizes (a row in bytes for
        ``take_rows``), the threads."""
        width = self.d * np.dtype(self.dtype).itemsize if self.op == "take_rows" else self.d
        return self.v, self.t, width, self.threads

    def call_line(self, operands: list[str], out: str) -> str:
        """The compiled call's C++ call of the entry (``entry``) on the addresses ``operands``
        (the table or values, the index) and ``out``."""
        source, index = operands
        return f"stax::row_index(entry, {source}, (const int64_t*){index}, {out}, {', '.join(map(str, self.arguments()))})"


def plan_take_rows(table_shape: tuple[int, ...], index_shape: tuple[int, ...], dtype: str, threads: int,
                   isa: Isa) -> RowIndex:
    if len(table_shape) != 2 or len(index_shape) != 1:
        raise ShapeError(f"take_rows: expected a 2-D table and a 1-D index, got shapes {tuple(table_shape)} and "
                         f"{tuple(index_shape)}")
    return RowIndex("take_rows", table_shape[0], index_shape[0], table_shape[1], dtype, threads, isa)


def plan_add_rows(values_shape: tuple[int, ...], index_shape: tuple[int, ...], rows: int, dtype: str,
                  threads: int, isa: Isa) -> RowIndex:
    if len(values_shape) != 2 or index_shape != values_shape[:1] or dtype not in ADD_DTYPES:
        raise ShapeError(f"add_rows: expected 2-D {' or '.join(ADD_DTYPES)} values and a 1-D index of their length, "
                         f"got {dtype} {tuple(values_shape)} and {tuple(index_shape)}")
    return RowIndex("add_rows", rows, values_shape[0], values_shape[1], dtype, threads, isa)


def _call(plan: RowIndex, source: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
    if index.dtype != np.int64 or not all(a.flags.c_contiguous for a in (source, index, out)):
        raise ShapeError(f"{plan.op}: expected C-contiguous arrays and an int64 index, got {index.dtype}")
    if out.dtype != source.dtype:
        raise ShapeError(f"{plan.op}: the output is {out.dtype}, the operand {source.dtype}")
    _entry(plan.isa, plan.entry_name)(source.ctypes.data, index.ctypes.data, out.ctypes.data, *plan.arguments())


def take_rows(table: np.ndarray, index: np.ndarray, *, out: np.ndarray, threads: int, isa: Isa | None = None) -> None:
    """``out`` (T, D) = the rows ``index`` (T,) of ``table`` (V, D) (the graph's ``take_rows``), by
    the kernel built for ``isa`` (None: ``STAX_ISA``, else this CPU's widest level)."""
    plan = plan_take_rows(table.shape, index.shape, str(table.dtype), threads, isa or isa_from_env())
    if out.shape != (plan.t, plan.d):
        raise ShapeError(f"take_rows: the output has shape {out.shape}, expected {(plan.t, plan.d)}")
    _call(plan, table, index, out)


def add_rows(values: np.ndarray, index: np.ndarray, *, rows: int, out: np.ndarray, threads: int,
             isa: Isa | None = None) -> None:
    """``out`` (rows, D) = the sums of the rows of ``values`` (T, D) by their ``index`` (T,) (the
    graph's ``add_rows``), by the kernel built for ``isa`` (as ``take_rows``)."""
    plan = plan_add_rows(values.shape, index.shape, rows, str(values.dtype), threads, isa or isa_from_env())
    if out.shape != (rows, plan.d):
        raise ShapeError(f"add_rows: the output has shape {out.shape}, expected {(rows, plan.d)}")
    _call(plan, values, index, out)
