"""Checked reading of a parsed file's fields (a JSON object or a TOML table).

One reader serves problem files, schedule files and sweep configs.  Every failure is one line
naming the file and the field path, what was expected and what was found, with a did-you-mean
hint for a misspelt name::

    sweep.toml: field 'families[1].sizes': expected a list of positive integers, found [0]
"""
from __future__ import annotations

from typing import Any, Callable, NoReturn

from .errors import StaxError
from .suggest import did_you_mean

REQUIRED = ...  # ``default`` of a field that must be present


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
        raise self.error(f"{self.source}: field {self.path(key)!r}: expected {expected}, found {found!r}"
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
        except (StaxError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self.error(f"{self.source}: field {self.path(key)!r}: {exc}") from None
