"""Config values as Kafka's ConfigDef parses and prints them (`parse_value`,
`to_string`; Java's Double.toString for DOUBLE values). Pure."""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Optional

from mpbroker.config.types import (INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, SHORT_MAX, SHORT_MIN,
                                  ConfigError, ConfigType)


_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?))[fFdD]?\Z")


def parse_value(name: str, type_: int, value: Any) -> Any:
    """Kafka's ConfigDef.parseType: a string (or typed value) to the typed value."""
    if value is None:
        return None
    if isinstance(value, str):
        trimmed = value.strip()
        if type_ == ConfigType.BOOLEAN:
            if trimmed.lower() == "true":
                return True
            if trimmed.lower() == "false":
                return False
            raise ConfigError.invalid(name, value, "Expected value to be either true or false")
        if type_ in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            lo, hi = {ConfigType.INT: (INT_MIN, INT_MAX), ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
                      ConfigType.LONG: (LONG_MIN, LONG_MAX)}[type_]
            if not _INT_RE.match(trimmed) or not lo <= int(trimmed) <= hi:
                raise ConfigError.invalid(name, value, f"Not a number of type {ConfigType.NAMES[type_]}")
            return int(trimmed)
        if type_ == ConfigType.DOUBLE:
            if not _DOUBLE_RE.match(trimmed):
                raise ConfigError.invalid(name, value, "Not a number of type DOUBLE")
            return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))
        if type_ == ConfigType.LIST:
            return [] if not trimmed else [s for s in re.split(r"\s*,\s*", trimmed)]
        if type_ in (ConfigType.STRING, ConfigType.CLASS, ConfigType.PASSWORD):
            return trimmed
        raise ConfigError.invalid(name, value, "Unknown type")
    # already typed
    if type_ == ConfigType.BOOLEAN and isinstance(value, bool):
        return value
    if type_ in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG) and isinstance(value, int) \
            and not isinstance(value, bool):
        return parse_value(name, type_, str(value))
    if type_ == ConfigType.DOUBLE and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if type_ == ConfigType.LIST and isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    wanted = {ConfigType.BOOLEAN: "Boolean", ConfigType.INT: "Integer", ConfigType.SHORT: "Short",
              ConfigType.LONG: "Long", ConfigType.DOUBLE: "Double", ConfigType.LIST: "List",
              ConfigType.STRING: "String", ConfigType.CLASS: "Class", ConfigType.PASSWORD: "Password"}[type_]
    raise ConfigError.invalid(name, value, f"Expected value to be a {wanted}, but it was a {type(value).__name__}")


def java_double(v: float) -> str:
    """Java's Double.toString (what Kafka prints for DOUBLE values)."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if str(v).startswith("-") else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        s = repr(float(v))
        return s if ("." in s or "e" in s) else s + ".0"
    t = Decimal(repr(float(v))).normalize().as_tuple()
    digits = "".join(map(str, t.digits))
    exp10 = len(digits) - 1 + t.exponent
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{'-' if t.sign else ''}{mantissa}E{exp10}"


def to_string(value: Any, type_: Optional[int] = None) -> Optional[str]:
    """Kafka's ConfigDef.convertToString."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if type_ == ConfigType.PASSWORD:
        return "[hidden]"
    return str(value)
