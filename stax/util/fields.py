"""Checked reading of a parsed file's fields (a JSON object or a TOML table).

One reader serves problem files, schedule files and sweep configs.  Every failure is one line
naming the file and the field path, what was expected and what was found, with a did-you-mean
hint for a misspelt name::

    sweep.toml: field 'families[1].sizes': expected a list of positive integers, found [0]
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from typing import Any, Callable, NoReturn

from stax.errors import StaxError
from stax.util.suggest import did_you_mean

REQUIRED = ...  # ``default`` of a field that must be present

#: a name that may reach generated code or a report: a C and Python identifier, at most 200 characters
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
IDENTIFIER_TEXT = "an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 200 characters)"
#: the largest element or byte count a file may give: products and sums of them stay in int64
MAX_COUNT = 2**62
#: the load limits (Resource limits on untrusted files): environment variable, default
LIMITS = {"nodes": ("STAX_MAX_NODES", 20_000), "buffers": ("STAX_MAX_BUFFERS", 50_000)}


def shortened(value: Any, limit: int = 160) -> str:
    """``repr(value)``, cut to ``limit`` characters (a file's value in a one-line message)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def is_identifier(value: Any) -> bool:
    return isinstance(value, str) and IDENTIFIER.fullmatch(value) is not None


def load_limit(kind: str) -> int:
    """The most ``kind`` (nodes or buffers) a loaded file may hold: ``STAX_MAX_NODES`` /
    ``STAX_MAX_BUFFERS``, else the default, so a huge file cannot take the machine by surprise."""
    variable, default = LIMITS[kind]
    text = os.environ.get(variable)
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) < 1:
        raise StaxError(f"{variable}={text!r} is not a limit; set it to a whole number of at least 1 or unset it "
                        f"(default {default})")
    return int(text)


def _simple_type(value: Any, hint: Any) -> bool:
    """Whether ``value`` (parsed JSON) is an instance of annotation ``hint`` (int, float, bool,
    str, dict, None and unions of them; a bool is no number, an int is a float)."""
    if hint is Any:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_simple_type(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) < MAX_COUNT
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    origin = typing.get_origin(hint) or hint
    return isinstance(value, origin) if isinstance(origin, type) else False


def _type_text(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_text(h) for h in typing.get_args(hint))
    names = {bool: "true or false", int: "a whole number", float: "a finite number", str: "a string",
             dict: "an object", type(None): "null"}
    return names.get(typing.get_origin(hint) or hint, getattr(hint, "__name__", str(hint)))


class Fields:
    """Typed access to the fields of ``table`` read from ``source``, at field path ``where``.

    ``known``: the keys the table may hold (an unknown key fails, naming the closest known one);
    None accepts any.  Failures raise ``error`` (a StaxError class).
    """

    def __init__(self, table: dict[str, Any], source: str, where: str = "", *,
                 known: tuple[str, ...] | None = None, error: type[StaxError] = StaxError):
        self.table, self.source, self.where, self.error = table, source, where, error
        unknown = sorted(set(table) - set(known)) if known is not None else []
        if unknown:
            hint = did_you_mean(unknown[0], known)
            raise error(f"{source}: field {self.path(unknown[0])!r} is not a known key (the known keys here: "
                        f"{', '.join(known)}); " + (hint.strip() if hint else "remove it or rename it"))

    def path(self, key: str) -> str:
        """The field path of ``key`` (``where.key``; ``where`` itself for an empty key)."""
        return ".".join(part for part in (self.where, key) if part)

    def fail(self, key: str, expected: str, found: Any, hint: str = "") -> NoReturn:
        raise self.error(f"{self.source}: field {self.path(key)!r}: expected {expected}, found {shortened(found)}"
                         + (f"; {hint.strip()}" if hint else ""))

    def sub(self, key: str, table: dict[str, Any], known: tuple[str, ...] | None = None) -> Fields:
        """The fields of ``table``, the value of field ``key`` of this one."""
        return Fields(table, self.source, self.path(key), known=known, error=self.error)

    def get(self, key: str, kind: type | tuple[type, ...], expected: str, default: Any = REQUIRED,
            check: Callable[[Any], bool] | None = None, choices: tuple[str, ...] = ()) -> Any:
        """The value of ``key``: an instance of ``kind`` (a bool is no int) passing ``check``, or
        ``default`` when absent.  A string (or a list's string) not among ``choices`` fails naming
        the closest."""
        if choices and kind is list:
            also = check
            check = lambda v: (also is None or also(v)) and all(x in choices for x in v)  # noqa: E731
        elif choices:
            check = lambda v: v in choices  # noqa: E731
        if key not in self.table:
            if default is REQUIRED:
                self.fail(key, expected, "nothing (the field is required)")
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wrong_type = not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        if wrong_type or (check is not None and not check(value)):
            wrong = next((x for x in value if x not in choices), None) if isinstance(value, list) else value
            self.fail(key, expected, value, did_you_mean(wrong, choices) if choices and isinstance(wrong, str) else "")
        return value

    def list_of(self, key: str, kind: type, default: Any = REQUIRED) -> list:
        """A list whose items are all instances of ``kind``."""
        return self.get(key, list, f"a list of {kind.__name__}", default,
                        check=lambda v: all(isinstance(x, kind) and not (isinstance(x, bool) and kind is int)
                                            for x in v))

    def positive(self, key: str, default: int | Any = REQUIRED) -> int:
        """A whole number above 0."""
        return self.get(key, int, "a positive integer", default, check=lambda v: v > 0)

    def check_format(self, fmt: str, version: int) -> None:
        """A versioned file: field ``format`` must be ``fmt`` and ``version`` this stax's ``version``."""
        for key, value, expected in (("format", fmt, f"the string {fmt!r}"),
                                     ("version", version, f"{version} (this stax reads version {version} files)")):
            if self.table.get(key) != value:
                self.fail(key, expected, self.table.get(key))

    def name(self, key: str, default: Any = REQUIRED) -> str:
        """A string that is an identifier (:data:`IDENTIFIER`): it may reach generated code."""
        return self.get(key, str, IDENTIFIER_TEXT, default, check=is_identifier)

    def names(self, key: str, default: Any = REQUIRED, limit: str | None = None) -> list[str]:
        """A list of identifiers, at most :func:`load_limit` ``(limit)`` long when ``limit`` is given."""
        self.at_most(key, limit)
        return self.get(key, list, f"a list of names, each {IDENTIFIER_TEXT}", default,
                        check=lambda v: all(is_identifier(x) for x in v))

    def at_most(self, key: str, limit: str | None) -> None:
        """Refuse a list at ``key`` longer than the load limit of ``limit`` (nodes or buffers)."""
        value = self.table.get(key)
        if limit is not None and isinstance(value, list) and len(value) > load_limit(limit):
            variable = LIMITS[limit][0]
            self.fail(key, f"at most {load_limit(limit)} {limit} (raise {variable} to load larger files)",
                      f"{len(value)} of them", )

    def count(self, key: str, default: Any = REQUIRED, minimum: int = 0) -> int:
        """A whole number from ``minimum`` up to (not including) 2^62."""
        return self.get(key, int, f"a whole number from {minimum} below 2^62", default,
                        check=lambda v: minimum <= v < MAX_COUNT)

    def flag(self, key: str, default: Any = REQUIRED) -> bool:
        """A JSON boolean (the string "false" is not one)."""
        return self.get(key, bool, "true or false", default)

    def typed(self, cls: type) -> dict[str, Any]:
        """The fields of dataclass ``cls`` whose annotations are simple (int, float, bool, str,
        dict, None and unions): each present unless it has a default, of its annotated type; no
        other key.  Other fields are returned as found, for the caller to check."""
        hints = typing.get_type_hints(cls)
        known = tuple(f.name for f in dataclasses.fields(cls))
        Fields(self.table, self.source, self.where, known=known, error=self.error)
        values = {}
        for f in dataclasses.fields(cls):
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if f.name not in self.table:
                if not has_default:
                    self.fail(f.name, _type_text(hints[f.name]), "nothing (the field is required)")
                continue
            value = self.table[f.name]
            if _checkable(hints[f.name]) and not _simple_type(value, hints[f.name]):
                self.fail(f.name, _type_text(hints[f.name]), value)
            values[f.name] = value
        return values

    def record(self, types: dict[str, type]) -> dict[str, Any]:
        """The fields ``types`` names, each required and of its type."""
        return {key: self.get(key, kind, kind.__name__) for key, kind in types.items()}

    def read(self, key: str, convert: Callable[[Any], Any], default: Any = REQUIRED) -> Any:
        """``convert(value of key)``; an error it raises is re-raised naming the file and field
        (one of this reader's ``error`` class is passed on as it is: it names them already)."""
        value = self.table.get(key) if default is REQUIRED else self.table.get(key, default)
        return self.check(key, lambda: convert(value))

    def check(self, key: str, validate: Callable[[], Any]) -> Any:
        """``validate()``'s value; its errors re-raised as in :meth:`read`."""
        try:
            return validate()
        except self.error:
            raise
        except (StaxError, LookupError, TypeError, ValueError, AttributeError, ArithmeticError, RecursionError) as exc:
            raise self.error(f"{self.source}: field {self.path(key)!r}: {exc}") from None


def _checkable(hint: Any) -> bool:
    """Whether :func:`_simple_type` judges ``hint`` (else the caller checks the field)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return all(_checkable(h) for h in typing.get_args(hint))
    return hint in (int, float, bool, str, dict, type(None), Any) or typing.get_origin(hint) is dict


def sub_fields(parent: Fields, key: str, value: Any, expected: str = "an object") -> Fields:
    """The fields of object ``value`` at ``key`` of ``parent``; a non-object fails naming ``key``."""
    if not isinstance(value, dict):
        parent.fail(key, expected, value)
    return parent.sub(key, value)
