"""The message model, parsed from mpbroker's own definitions (`definitions.txt`).

`load()` reads the definitions once and returns `{message name: Message}`. A Message
has its versions, its first flexible version and a tree of Fields; a Field knows in
which versions it is on the wire, in which it may be null, whether it is a tagged
field (tag number and tagged versions) and its default. The format of the text file
is described at its top. codec.py compiles encoders and decoders from this model;
nothing here runs per request.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field as dc_field
from functools import lru_cache

DEFINITIONS_PATH = os.path.join(os.path.dirname(__file__), "definitions.txt")

VERSION_INF = 0x7FFF        # the open end of "N+"


class SchemaError(Exception):
    """The definitions file is malformed (a bug in the project, not in a peer)."""


def snake(name: str) -> str:
    """Kafka field name to dict key: TopicId -> topic_id, ThrottleTimeMs -> throttle_time_ms."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; hi == VERSION_INF for an open range ("3+")."""
    lo: int
    hi: int

    def has(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    @property
    def text(self) -> str:
        """Kafka's notation: "3+", "0-2", "4" or "none"."""
        if self.lo > self.hi:
            return "none"
        if self.hi == VERSION_INF:
            return f"{self.lo}+"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


NO_VERSIONS = Versions(1, 0)


def parse_versions(text: str) -> Versions:
    """ "3+", "0-2", "4", "none" (an optional leading "v" is dropped)."""
    text = str(text).strip()
    if text.startswith("v"):
        text = text[1:]
    if text == "none":
        return NO_VERSIONS
    if text.endswith("+"):
        return Versions(int(text[:-1]), VERSION_INF)
    if "-" in text:
        lo, hi = text.split("-", 1)
        return Versions(int(lo), int(hi))
    return Versions(int(text), int(text))


FIXED_TYPES = {     # type -> (struct code, size)
    "bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2),
    "int32": ("i", 4), "uint32": ("I", 4), "int64": ("q", 8), "float64": ("d", 8),
    "uuid": ("16s", 16),
}
PRIMITIVE_TYPES = set(FIXED_TYPES) | {"string", "bytes", "records"}
INT_TYPES = {"int8", "int16", "uint16", "int32", "uint32", "int64"}

NO_DEFAULT = type("NoDefault", (), {"__repr__": lambda self: "NO_DEFAULT"})()


def parse_default(type_: str, raw) -> object:
    """A schema default (text, or a JSON bool/number) as the Python value."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip()
    if text == "null":
        return None
    if type_ in INT_TYPES:
        return int(text, 0)
    if type_ == "bool":
        if text not in ("true", "false"):
            raise SchemaError(f"bad bool default {text!r}")
        return text == "true"
    if type_ == "float64":
        return float(text)
    if type_ == "string":
        return text
    raise SchemaError(f"unsupported default {text!r} for type {type_}")


@dataclass(slots=True, eq=False)
class Field:
    name: str
    snake: str
    type: str                       # "int32", "string", "[]int32", "[]FetchTopic", "LeaderIdAndEpoch"
    versions: Versions
    nullable_versions: Versions = NO_VERSIONS
    tag: int | None = None
    tagged_versions: Versions = NO_VERSIONS
    default: object = NO_DEFAULT    # NO_DEFAULT when the schema gives none
    flexible_versions: Versions | None = None   # None: the message's (only RequestHeader.ClientId overrides)
    fields: list[Field] | None = None           # struct fields (also for arrays of structs)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.elem_type not in PRIMITIVE_TYPES

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and self.tagged_versions.has(version)


@dataclass(slots=True, eq=False)
class Message:
    name: str
    api_key: int | None             # None for headers and data schemas
    kind: str                       # "request", "response", "header", "data"
    valid_versions: tuple[int, int]
    flexible_from: int | None       # first flexible version, None when never flexible
    fields: list[Field]
    common_structs: dict[str, tuple[Versions, list[Field]]] = dc_field(default_factory=dict)
    deprecated: Versions = NO_VERSIONS
    unstable: bool = False          # the top version is not advertised by Kafka by default
    listeners: tuple[str, ...] = ()

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def has_version(self, version: int) -> bool:
        return self.valid_versions[0] <= version <= self.valid_versions[1]


# ---------------------------------------------------------------- the parser

_FIELD_RE = re.compile(r"^([A-Za-z0-9]+):\s+(\S+)\s+(v\S+)(.*)$")


def _parse_header(line: str, lineno: int) -> Message:
    toks = line.split()
    name, rest = toks[0], toks[1:]
    kind = None
    attrs: dict[str, str] = {}
    unstable = False
    i = 0
    while i < len(rest):
        t = rest[i]
        if t in ("header", "data"):
            kind = t
            i += 1
        elif t == "unstable":
            unstable = True
            i += 1
        elif t in ("key", "versions", "flexible", "deprecated", "listeners") and i + 1 < len(rest):
            attrs[t] = rest[i + 1]
            i += 2
        else:
            raise SchemaError(f"line {lineno}: unexpected {t!r}")
    if kind is None:
        kind = "request" if name.endswith("Request") else "response" if name.endswith("Response") else None
        if kind is None or "key" not in attrs:
            raise SchemaError(f"line {lineno}: cannot tell the kind of {name}")
    valid = parse_versions(attrs["versions"])
    flex = parse_versions(attrs.get("flexible", "none"))
    return Message(
        name=name,
        api_key=int(attrs["key"]) if "key" in attrs else None,
        kind=kind,
        valid_versions=(valid.lo, valid.hi),
        flexible_from=None if flex is NO_VERSIONS or flex.lo > flex.hi else flex.lo,
        fields=[],
        deprecated=parse_versions(attrs.get("deprecated", "none")),
        unstable=unstable,
        listeners=tuple(attrs["listeners"].split(",")) if "listeners" in attrs else (),
    )


def _parse_field(body: str, lineno: int) -> Field:
    m = _FIELD_RE.match(body)
    if not m:
        raise SchemaError(f"line {lineno}: bad field {body!r}")
    name, type_, versions, rest = m.groups()
    f = Field(name=name, snake=snake(name), type=type_, versions=parse_versions(versions))
    toks = rest.split()
    i = 0
    while i < len(toks):
        key = toks[i]
        if i + 1 >= len(toks):
            raise SchemaError(f"line {lineno}: {key} needs a value")
        val = toks[i + 1]
        if key == "nullable":
            f.nullable_versions = parse_versions(val)
        elif key == "tag":
            f.tag = int(val)
        elif key == "tagged":
            f.tagged_versions = parse_versions(val)
        elif key == "flexible":
            f.flexible_versions = parse_versions(val)
        elif key == "default":
            f.default = parse_default(f.elem_type if not f.is_array else "array",
                                      "" if val == '""' else val) if val != "null" else None
        else:
            raise SchemaError(f"line {lineno}: unknown attribute {key!r}")
        i += 2
    return f


def _resolve(msg: Message, fields: list[Field], lineno: int) -> None:
    for f in fields:
        if f.is_struct and not f.fields:
            common = msg.common_structs.get(f.elem_type)
            if common is None:
                raise SchemaError(f"{msg.name}.{f.name}: unknown struct {f.elem_type}")
            f.fields = common[1]
            _resolve(msg, f.fields, lineno)
        elif f.fields:
            _resolve(msg, f.fields, lineno)


def parse(text: str) -> dict[str, Message]:
    messages: dict[str, Message] = {}
    msg: Message | None = None
    stack: list[tuple[int, list[Field]]] = []    # (indent of the children, their list)
    last: Field | None = None
    last_indent = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0:
            if msg is not None:
                _resolve(msg, msg.fields, lineno)
            msg = _parse_header(body, lineno)
            if msg.name in messages:
                raise SchemaError(f"line {lineno}: {msg.name} defined twice")
            messages[msg.name] = msg
            stack = [(2, msg.fields)]
            last = None
            continue
        if msg is None:
            raise SchemaError(f"line {lineno}: field outside a message")
        if last is not None and indent == last_indent + 2:
            if last.fields is None:
                last.fields = []
            stack.append((indent, last.fields))
        while stack and stack[-1][0] > indent:
            stack.pop()
        if not stack or stack[-1][0] != indent:
            raise SchemaError(f"line {lineno}: bad indentation")
        if body.startswith("struct "):
            toks = body.split()
            if indent != 2 or len(toks) != 3:
                raise SchemaError(f"line {lineno}: bad struct declaration")
            holder = Field(name=toks[1], snake=snake(toks[1]), type=toks[1],
                           versions=parse_versions(toks[2]), fields=[])
            msg.common_structs[toks[1]] = (holder.versions, holder.fields)
            last, last_indent = holder, indent
            continue
        f = _parse_field(body, lineno)
        stack[-1][1].append(f)
        last, last_indent = f, indent
    if msg is not None:
        _resolve(msg, msg.fields, 0)
    return messages


@lru_cache(maxsize=None)
def load(path: str = DEFINITIONS_PATH) -> dict[str, Message]:
    with open(path, encoding="utf-8") as fh:
        return parse(fh.read())
