"""Typed access to a parsed document, every error naming the file and the dotted field."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from nest_cp.model.documents import LongInteger
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.limits import MAX_INT, MAX_INT_DIGITS, MAX_PROVENANCE_ENTRIES

# ------------------------------------------------------------------ field readers


class FieldReader:
    """Typed access to a parsed document that reports errors with file and field path."""

    def __init__(self, file: str | None, error: type[InstanceFormatError]):
        self.file = file
        self.error = error

    def fail(self, field: str, expected: str, got: Any) -> None:
        raise self.error(f"expected {expected}, got {_show(got)}", file=self.file, field=field)

    def mapping(self, value: Any, field: str, allowed: set[str] | None = None,
                required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.fail(field, "a mapping", value)
        for key in required:
            if key not in value:
                self.fail(join_field(field, key), "this field to be present", "nothing")
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    self.fail(join_field(field, str(key)),
                              "one of the fields " + ", ".join(sorted(allowed)), "unknown field")
        return value

    def seq(self, value: Any, field: str, nonempty: bool = True) -> list:
        if not isinstance(value, list) or (nonempty and not value):
            self.fail(field, "a non-empty list" if nonempty else "a list", value)
        return value

    def integers(self, value: Any, field: str, minimum: int = 0) -> tuple[int, ...]:
        """A non-empty list of integers >= ``minimum``; an element's error names it
        (``field[i]``)."""
        return tuple(self.integer(item, f"{field}[{index}]", minimum)
                     for index, item in enumerate(self.seq(value, field)))

    def choices(self, value: Any, field: str, enum: type) -> tuple:
        """A non-empty list of ``enum`` values; an element's error names it (``field[i]``)."""
        return tuple(self.choice(item, f"{field}[{index}]", enum)
                     for index, item in enumerate(self.seq(value, field)))

    def integer(self, value: Any, field: str, minimum: int = 0) -> int:
        if isinstance(value, LongInteger):
            self.fail(field, f"an integer >= {minimum} of at most {MAX_INT_DIGITS} digits", value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(field, f"an integer >= {minimum}", value)
        if value > MAX_INT:
            self.fail(field, f"an integer >= {minimum} and below 2**63 (at most "
                             f"{MAX_INT_DIGITS} digits)", value)
        return value

    def number(self, value: Any, field: str, positive: bool = False) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and \
            abs(value) <= MAX_INT and math.isfinite(value) and (value > 0 if positive else
                                                               value >= 0)
        if not ok:
            self.fail(field, ("a finite number > 0" if positive else "a finite number >= 0")
                      + " below 2**63", value)
        return value

    def positive(self, value: Any, field: str) -> float:
        return self.number(value, field, positive=True)

    def boolean(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            self.fail(field, "true or false", value)
        return value

    def provenance(self, value: Any, field: str) -> None:
        """Where the numbers come from: a text, or a mapping of names to texts, numbers or
        lists of texts (nothing deeper, so it stays small whatever the file holds)."""
        expected = (f"a string or a mapping of at most {MAX_PROVENANCE_ENTRIES} names to "
                    f"strings, numbers or lists of strings")
        if isinstance(value, str):
            return
        if not isinstance(value, dict) or len(value) > MAX_PROVENANCE_ENTRIES:
            self.fail(field, expected, value)
        for key, entry in value.items():
            texts = entry if isinstance(entry, list) else [entry]
            if not isinstance(key, str) or len(texts) > MAX_PROVENANCE_ENTRIES or not all(
                    isinstance(text, str | int | float | bool) or text is None
                    for text in texts) or (isinstance(entry, list) and not all(
                        isinstance(text, str) for text in texts)):
                self.fail(join_field(field, str(key)), expected, entry)

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(field, "a non-empty string", value)
        return value

    def choice(self, value: Any, field: str, enum: type) -> Any:
        try:
            return enum(value)
        except ValueError:
            self.fail(field, "one of " + ", ".join(repr(e.value) for e in enum), value)

    def build(self, field: str, factory: Callable[..., Any], **kwargs: Any) -> Any:
        """Construct a model object, prefixing its own validation errors with ``field``."""
        try:
            return factory(**kwargs)
        except InstanceFormatError as exc:
            raise self.error(exc.detail, file=self.file,
                             field=join_field(field, exc.field or "")) from None


def join_field(prefix: str, name: str) -> str:
    if not prefix:
        return name
    if not name:
        return prefix
    return f"{prefix}{name}" if name.startswith("[") else f"{prefix}.{name}"


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_INT:
        return f"a {len(str(value))}-digit integer"
    text = repr(value) if not isinstance(value, dict | list) else _summary(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _summary(value: dict | list) -> str:
    """A short description of a container: never walks it (it may be an expanded alias web)."""
    count = len(value)
    if isinstance(value, dict):
        return f"a mapping of {count} {'entry' if count == 1 else 'entries'}"
    return f"a list of {count} {'item' if count == 1 else 'items'}"
