"""Validators of config values (Kafka's ConfigDef.Range, ValidString, ValidList, ...)
and `validate`, which parses a raw value for a key and checks it. Each validator's
`str` is the "Valid Values" text of Kafka's docs."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from mpbroker.config.types import ConfigError
from mpbroker.config.values import java_double, parse_value, to_string

if TYPE_CHECKING:
    from mpbroker.config.keys import ConfigKey


class Validator:
    def __call__(self, name: str, value: Any) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Range(Validator):
    lo: Optional[float] = None
    hi: Optional[float] = None

    def __call__(self, name, value):
        if value is None:
            raise ConfigError.invalid(name, None, "Value must be non-null")
        if self.lo is not None and value < self.lo:
            raise ConfigError.invalid(name, to_string(value), f"Value must be at least {_num(self.lo)}")
        if self.hi is not None and value > self.hi:
            raise ConfigError.invalid(name, to_string(value), f"Value must be no more than {_num(self.hi)}")

    def __str__(self):
        if self.hi is None:
            return f"[{_num(self.lo)},...]"
        if self.lo is None:
            return f"[...,{_num(self.hi)}]"
        return f"[{_num(self.lo)},...,{_num(self.hi)}]"


def at_least(n):
    return Range(n, None)


def between(lo, hi):
    return Range(lo, hi)


@dataclass(frozen=True)
class ValidString(Validator):
    values: tuple
    case_insensitive: bool = False

    def __call__(self, name, value):
        ok = (value.lower() in (v.lower() for v in self.values)) if self.case_insensitive and value is not None \
            else value in self.values
        if not ok:
            raise ConfigError.invalid(name, value, "String must be one of: " + ", ".join(self.values))

    def __str__(self):
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ValidList(Validator):
    values: tuple

    def __call__(self, name, value):
        for item in value or ():
            ValidString(self.values)(name, item)

    def __str__(self):
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class GzipLevel(Validator):
    # Kafka: -1 (Deflater.DEFAULT_COMPRESSION) or 1..9
    def __call__(self, name, value):
        if value != -1 and not (1 <= value <= 9):
            raise ConfigError.invalid(name, value, "Value must be between 1 and 9, or -1 for the default compression level")

    def __str__(self):
        return "[1,...,9] or -1"


HTTP_LISTENER_RE = re.compile(r"http://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]\s]*):(\d{1,5})/?")


def parse_http_listener(value: str) -> tuple:
    """'http://127.0.0.1:9644' -> ('127.0.0.1', 9644); an empty host is every interface.
    Raises ValueError with the reason."""
    m = HTTP_LISTENER_RE.fullmatch(value.strip())
    if m is None or int(m.group(2)) > 65535:
        raise ValueError("expected http://host:port (port 0..65535)")
    return m.group(1).strip("[]") or "0.0.0.0", int(m.group(2))


@dataclass(frozen=True)
class HttpListener(Validator):
    """metrics.listener: unset, or http://host:port."""
    def __call__(self, name, value):
        if value:
            try:
                parse_http_listener(value)
            except ValueError as e:
                raise ConfigError.invalid(name, value, str(e)) from None

    def __str__(self):
        return "http://host:port"


def _num(x) -> str:
    return java_double(x) if isinstance(x, float) else str(x)


def validate(key: "ConfigKey", raw: Any) -> Any:
    """The typed value of `raw` for `key`, checked by its validator (ConfigError)."""
    value = parse_value(key.name, key.type, raw)
    if key.validator is not None and (value is not None or isinstance(key.validator, Range)):
        key.validator(key.name, value)
    return value
