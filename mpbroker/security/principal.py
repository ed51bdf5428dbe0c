"""Principals (Kafka's KafkaPrincipal, as "User:<name>" strings) and KIP-371
`ssl.principal.mapping.rules`, which turn a client certificate's distinguished name
(RFC 2253 form, as Java's X500Principal.getName(): "CN=alice,OU=eng,O=acme") into
the user name.

Rules: a comma-separated list of `RULE:<pattern>/<replacement>/[L|U]` and `DEFAULT`,
tried in order; the first whose pattern matches the whole DN gives
`pattern.sub(replacement)` (Java's `$1` group references), lower- or upper-cased with
the L/U flag; DEFAULT gives the DN itself. No rule matching is an error (Kafka fails
the TLS authentication). A connection without a certificate (or on a PLAINTEXT/SASL
listener before SASL completes) is ANONYMOUS.
"""
from __future__ import annotations

import re
from typing import List, NamedTuple, Optional

from cryptography import x509

ANONYMOUS = "User:ANONYMOUS"
USER_TYPE = "User"


def user(name: str) -> str:
    return f"{USER_TYPE}:{name}"


class MappingError(ValueError):
    pass


class Rule(NamedTuple):
    pattern: Optional[re.Pattern]     # None: DEFAULT
    replacement: str
    case: str                         # "", "L", "U"


def _until_slash(text: str, pos: int) -> tuple[str, int]:
    out = []
    while pos < len(text):
        c = text[pos]
        if c == "\\" and pos + 1 < len(text) and text[pos + 1] == "/":
            out.append("/")
            pos += 2
            continue
        if c == "/":
            return "".join(out), pos + 1
        out.append(c)
        pos += 1
    raise MappingError(f"Invalid rule: {text}")


def _java_replacement(rep: str) -> str:
    return re.sub(r"\$(\d+)", r"\\g<\1>", rep)


def parse_rules(text) -> List[Rule]:
    """`ssl.principal.mapping.rules` (a string or a list of rules); raises MappingError."""
    if isinstance(text, (list, tuple)):
        text = ",".join(text)
    text = (text or "DEFAULT").strip()
    rules: List[Rule] = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos] in " ,\t\n":
            pos += 1
        if pos >= len(text):
            break
        if text.startswith("DEFAULT", pos):
            rules.append(Rule(None, "", ""))
            pos += len("DEFAULT")
        elif text.startswith("RULE:", pos):
            pattern, pos = _until_slash(text, pos + len("RULE:"))
            replacement, pos = _until_slash(text, pos)
            case = ""
            if pos < len(text) and text[pos] in "LU":
                case = text[pos]
                pos += 1
            try:
                rules.append(Rule(re.compile(pattern), _java_replacement(replacement), case))
            except re.error as e:
                raise MappingError(f"Invalid rule pattern {pattern!r}: {e}") from None
        else:
            raise MappingError(f"Invalid rule: {text[pos:]}")
        while pos < len(text) and text[pos] in " \t\n":
            pos += 1
        if pos < len(text) and text[pos] != ",":
            raise MappingError(f"Invalid rule: {text[pos:]}")
    return rules


def map_dn(rules: List[Rule], dn: str) -> str:
    """The user name for `dn`; raises MappingError when no rule matches."""
    for rule in rules:
        if rule.pattern is None:
            return dn
        if rule.pattern.fullmatch(dn):
            name = rule.pattern.sub(rule.replacement, dn)
            return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
    raise MappingError(f"No rules apply to {dn}, rules {[r.pattern.pattern if r.pattern else 'DEFAULT' for r in rules]}")


def dn_of_der(der: bytes) -> str:
    """The RFC 2253 subject DN of a DER certificate."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
