"""JAAS configuration lines as Kafka reads them from `sasl.jaas.config` and
`listener.name.<listener>.<mechanism>.sasl.jaas.config`:

    <LoginModuleClass> <flag> [<key>=<value> ...];  [<LoginModuleClass> ...;]

e.g. `org.apache.kafka.common.security.plain.PlainLoginModule required
user_admin="admin-secret" user_alice="alice-secret";` or
`org.apache.kafka.common.security.scram.ScramLoginModule required;`. The flag is one of
required, requisite, sufficient, optional; a value is a double-quoted string (with \\"
and \\\\ escapes) or a bare token. Kafka's JaasConfig accepts exactly one entry per key
in a broker config; `parse` returns every entry and `login_module` checks the one.
Values are secrets (passwords): nothing here logs them, and errors name only keys.
"""
from __future__ import annotations

import re
from typing import Dict, List, NamedTuple

FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    pass


class JaasEntry(NamedTuple):
    login_module: str
    flag: str
    options: Dict[str, str]


_TOKEN = re.compile(r'\s*("(?:[^"\\]|\\.)*"|[^\s=;"]+|=|;)', re.S)


def _tokens(text: str) -> List[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise JaasError(f"JAAS config: unexpected character at position {pos}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _unquote(tok: str) -> str:
    if tok.startswith('"'):
        return re.sub(r"\\(.)", r"\1", tok[1:-1], flags=re.S)
    return tok


def parse(text: str) -> List[JaasEntry]:
    """Every login module entry of a JAAS config value; raises JaasError."""
    toks = _tokens(text or "")
    entries: List[JaasEntry] = []
    i = 0
    while i < len(toks):
        module = toks[i]
        if module in ("=", ";") or module.startswith('"'):
            raise JaasError("JAAS config: expected a login module class name")
        if i + 1 >= len(toks) or toks[i + 1].lower() not in FLAGS:
            raise JaasError(f"JAAS config: login module {module}: expected a control flag "
                            f"({', '.join(FLAGS)})")
        flag = toks[i + 1].lower()
        i += 2
        options: Dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasError(f"JAAS config: login module {module}: missing ';'")
            if toks[i] == ";":
                i += 1
                break
            key = toks[i]
            if key == "=" or key.startswith('"'):
                raise JaasError(f"JAAS config: login module {module}: bad option")
            if i + 2 >= len(toks) or toks[i + 1] != "=" or toks[i + 2] in ("=", ";"):
                raise JaasError(f"JAAS config: login module {module}: option {key} has no value")
            options[key] = _unquote(toks[i + 2])
            i += 3
        entries.append(JaasEntry(module, flag, options))
    return entries


def login_module(text: str, expected_suffix: str) -> JaasEntry:
    """The one entry of `text`, whose class name ends with `expected_suffix`
    (e.g. "PlainLoginModule"); raises JaasError otherwise."""
    entries = parse(text)
    if len(entries) != 1:
        raise JaasError(f"JAAS config property contains {len(entries)} login modules, "
                        "should be 1 module")
    if not entries[0].login_module.endswith(expected_suffix):
        raise JaasError(f"JAAS config: login module {entries[0].login_module} is not a "
                        f"{expected_suffix}")
    return entries[0]
