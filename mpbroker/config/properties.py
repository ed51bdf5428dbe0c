"""The parser of `server.properties` (Java's Properties.load syntax) and of
`--override key=value` arguments. Pure."""
from __future__ import annotations

import re
from typing import Dict, Iterable, Sequence

from mpbroker.config.types import ConfigError


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[str]:
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        yield line


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.match(r"[0-9a-fA-F]{4}", s[i + 2:i + 6]):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        if c == "\\":
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> Dict[str, str]:
    """Java ``Properties.load`` syntax: ``#``/``!`` comments, ``key=value``,
    ``key: value``, ``key value``, backslash line continuation, escapes
    (``\\t \\n \\r \\f \\uXXXX``, ``\\=``, ``\\:``, ``\\ ``). Later keys win."""
    props: Dict[str, str] = {}
    for line in _logical_lines(text):
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key = line[:i]
        j = i
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
            while j < n and line[j] in " \t\f":
                j += 1
        props[_unescape(key)] = _unescape(line[j:])
    return props


def parse_overrides(overrides: Sequence[str]) -> Dict[str, str]:
    """``--override key=value`` arguments (Kafka's kafka.Kafka --override)."""
    props: Dict[str, str] = {}
    for item in overrides or ():
        if "=" not in item:
            raise ConfigError(f"Invalid command line properties: {item} (expected key=value)")
        key, value = item.split("=", 1)
        if not key.strip():
            raise ConfigError(f"Invalid command line properties: {item} (empty key)")
        props[key.strip()] = value
    return props
