"""Encoders and decoders for every message, compiled from the definitions.

For each (message, version) the first use generates the Python source of one decoder
and one encoder specialised to that version (every version test, nullability check,
struct format and dict key is resolved at generation time), `exec`s it once and
caches the function. Consecutive fixed-width fields are read and written with one
precompiled `struct.Struct`; nested structs and arrays are inlined as loops.

Decoders: `fn(buf: memoryview, pos) -> (dict, pos)`. Like kbin, a decoder does not
check for short input per field: a read past the end raises inside `struct` or an
index, and the wrapper turns it into one ProtocolError at the end. Lengths and
counts are checked against the bytes left *before* anything is allocated, so
arbitrary input allocates at most about its own size. Strings are decoded as UTF-8
with replacement (as Java does); `records` become memoryviews over the input.

Encoders: `fn(body: dict) -> list of chunks` (bytearrays, plus `records` chunks passed
through: bytes-like values of 512 bytes or more and every `storage.slices.FileSlice`,
uncopied; the caller keeps them alive until sent). A key missing from a dict means
the field's default; tagged fields are written only when they differ from it. Fields
are read by subscript and a missing one falls back to the defaults of its run (a
KeyError caught): a full body, what the handlers answer, costs least, and bodies are
plain dicts (a mapping whose `__missing__` answers would give that answer instead).

The message-dict contract is in docs/INTERFACES.md ("Message dicts").
"""
from __future__ import annotations

import struct

from storage.slices import FileSlice

from . import schema
from .errors import EncodeError, ProtocolError, UnsupportedVersion
from .primitives import ZERO_UUID, read_uvarint, uvarint_bytes
from .schema import FIXED_TYPES, NO_DEFAULT, Field, Message

__all__ = [
    "REQUESTS", "RESPONSES", "HEADERS", "DATA", "ProtocolError", "UnsupportedVersion",
    "EncodeError", "decode_request", "encode_request", "decode_response",
    "encode_response", "decode_data", "encode_data", "decode", "encode",
    "default_value",
]

MESSAGES: dict[str, Message] = schema.load()
REQUESTS: dict[int, Message] = {m.api_key: m for m in MESSAGES.values() if m.kind == "request"}
RESPONSES: dict[int, Message] = {m.api_key: m for m in MESSAGES.values() if m.kind == "response"}
HEADERS: dict[str, Message] = {m.name: m for m in MESSAGES.values() if m.kind == "header"}
DATA: dict[str, Message] = {m.name: m for m in MESSAGES.values() if m.kind == "data"}

RECORDS_INLINE_MAX = 512      # records chunks below this size are copied, not passed through

_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError, TypeError)
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError, KeyError)


def default_value(f: Field, version: int):
    """The value a missing key stands for (and a tagged field's absent value)."""
    nullable = f.nullable_versions.has(version)
    if f.default is not NO_DEFAULT and (f.default is not None or nullable):
        return f.default
    if nullable:
        return None
    if f.is_array:
        return []
    if f.is_struct:
        return {c.snake: default_value(c, version) for c in f.fields if c.versions.has(version)}
    return _ZERO[f.type]


_ZERO = {"bool": False, "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0,
         "int64": 0, "float64": 0.0, "uuid": ZERO_UUID, "string": "", "bytes": b"",
         "records": b""}


# ------------------------------------------------------------ run-time helpers

def _write_records(out: list, b: bytearray, x, compact: bool) -> bytearray:
    """Write a records value (None, bytes-like or a list of chunks); returns the new tail."""
    if x is None:
        b += b"\x00" if compact else b"\xff\xff\xff\xff"
        return b
    chunks = x if isinstance(x, list) else (x,)
    total = 0
    for c in chunks:
        total += c.length if isinstance(c, FileSlice) else len(c)
    if compact:
        b += uvarint_bytes(total + 1)
    else:
        b += _P_i(total)
    for c in chunks:
        if isinstance(c, FileSlice) or len(c) >= RECORDS_INLINE_MAX:
            if b:
                out.append(b)
                b = bytearray()
            out.append(c)
        else:
            b += c
    return b


_P_i = struct.Struct(">i").pack
_BASE_NS = {
    "_str": str, "_bytes": bytes, "_list": list, "_range": range, "_len": len,
    "_ruv": read_uvarint, "_uvb": uvarint_bytes, "_PE": ProtocolError,
    "_unpack": struct.unpack_from, "_pack": struct.pack, "_wrec": _write_records,
    "_bytearray": bytearray,
}


# ------------------------------------------------------------ code generation

class _Gen:
    """Generates the source of one decoder or encoder for one message version."""

    def __init__(self, msg: Message, version: int):
        self.msg = msg
        self.version = version
        self.flexible = msg.is_flexible(version)
        self.lines: list[str] = []
        self.ns: dict[str, object] = {}
        self.counter = 0

    def var(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def struct_fn(self, fmt: str, kind: str) -> str:
        name = f"_{kind}_{fmt.replace('16s', 'U').replace('?', 'B')}"
        if name not in self.ns:
            s = struct.Struct(">" + fmt)
            self.ns[name] = s.unpack_from if kind == "u" else s.pack
        return name

    def field_flexible(self, f: Field) -> bool:
        return self.flexible and (f.flexible_versions is None or f.flexible_versions.has(self.version))

    def split(self, fields: list[Field]) -> tuple[list[Field], list[Field], list[Field]]:
        v = self.version
        present = [f for f in fields if f.versions.has(v)]
        tagged = [f for f in present if f.tagged_in(v)] if self.flexible else []
        regular = [f for f in present if not f.tagged_in(v)]
        return present, regular, sorted(tagged, key=lambda f: f.tag)

    def compile(self, fn_name: str):
        src = "\n".join(self.lines) + "\n"
        ns = dict(_BASE_NS)
        ns.update(self.ns)
        exec(compile(src, f"<mpbroker.codec {self.msg.name} v{self.version}>", "exec"), ns)
        fn = ns[fn_name]
        fn.source = src
        return fn


class _DecoderGen(_Gen):

    def build(self):
        self.emit(0, "def decode(buf, pos):")
        self.emit(1, "end = _len(buf)")
        expr = self.struct_body(self.msg.fields, 1)
        self.emit(1, f"return {expr}, pos")
        return self.compile("decode")

    def uvarint(self, ind: int, var: str) -> None:
        self.emit(ind, f"{var} = buf[pos]")
        self.emit(ind, f"if {var} < 128: pos += 1")
        self.emit(ind, f"else: {var}, pos = _ruv(buf, pos)")

    def length(self, ind: int, var: str, flexible: bool, classic_fmt: str) -> None:
        """Read a length/count into var; -1 means null in both encodings."""
        if flexible:
            self.uvarint(ind, var)
            self.emit(ind, f"{var} -= 1")
        else:
            size = struct.calcsize(">" + classic_fmt)
            self.emit(ind, f"{var} = {self.struct_fn(classic_fmt, 'u')}(buf, pos)[0]; pos += {size}")

    def null_or_check(self, ind: int, f: Field, n: str, var: str, what: str) -> None:
        self.emit(ind, f"if {n} < 0:")
        if f.nullable_versions.has(self.version):
            self.emit(ind + 1, f"{var} = None")
        else:
            self.emit(ind + 1, f"raise _PE('{self.msg.name}.{f.name}: null in a non-nullable field')")
        self.emit(ind, f"elif {n} > end - pos:")
        self.emit(ind + 1, f"raise _PE('{self.msg.name}.{f.name}: {what} longer than the bytes left')")

    def fixed_run(self, ind: int, run: list[tuple[Field, str]]) -> None:
        if not run:
            return
        fmt = "".join(FIXED_TYPES[f.type][0] for f, _ in run)
        size = sum(FIXED_TYPES[f.type][1] for f, _ in run)
        fn = self.struct_fn(fmt, "u")
        if len(run) == 1:
            self.emit(ind, f"{run[0][1]} = {fn}(buf, pos)[0]; pos += {size}")
        else:
            names = ", ".join(var for _, var in run)
            self.emit(ind, f"{names} = {fn}(buf, pos); pos += {size}")
        run.clear()

    def struct_body(self, fields: list[Field], ind: int) -> str:
        """Emit code decoding a struct's fields; return the dict expression."""
        present, regular, tagged = self.split(fields)
        names: dict[int, str] = {}
        run: list[tuple[Field, str]] = []
        for f in regular:
            var = names[id(f)] = self.var("v")
            if f.type in FIXED_TYPES:
                run.append((f, var))
                continue
            self.fixed_run(ind, run)
            self.value(f, var, ind, self.field_flexible(f))
        self.fixed_run(ind, run)
        if self.flexible:
            for f in tagged:
                var = names[id(f)] = self.var("t")
                self.emit(ind, f"{var} = {default_value(f, self.version)!r}")
            self.tagged_section(tagged, names, ind)
        items = ", ".join(f"{f.snake!r}: {names[id(f)]}" for f in present)
        return "{" + items + "}"

    def tagged_section(self, tagged: list[Field], names: dict[int, str], ind: int) -> None:
        nt = self.var("nt")
        self.emit(ind, f"{nt} = buf[pos]")
        self.emit(ind, f"if {nt} == 0: pos += 1")
        self.emit(ind, "else:")
        ind += 1
        self.emit(ind, f"{nt}, pos = _ruv(buf, pos)")
        self.emit(ind, f"if {nt} > end - pos: raise _PE('{self.msg.name}: too many tagged fields')")
        self.emit(ind, f"for _ in _range({nt}):")
        ind += 1
        tag, size, tend = self.var("tag"), self.var("sz"), self.var("te")
        self.emit(ind, f"{tag}, pos = _ruv(buf, pos)")
        self.emit(ind, f"{size}, pos = _ruv(buf, pos)")
        self.emit(ind, f"if {size} > end - pos: raise _PE('{self.msg.name}: tagged field past the end')")
        self.emit(ind, f"{tend} = pos + {size}")
        for i, f in enumerate(tagged):
            self.emit(ind, f"{'if' if i == 0 else 'elif'} {tag} == {f.tag}:")
            if f.type in FIXED_TYPES:
                self.fixed_run(ind + 1, [(f, names[id(f)])])
            else:
                self.value(f, names[id(f)], ind + 1, True)
            self.emit(ind + 1, f"if pos != {tend}: raise _PE('{self.msg.name}.{f.name}: tagged size mismatch')")
        self.emit(ind, f"pos = {tend}")

    def value(self, f: Field, var: str, ind: int, flexible: bool) -> None:
        """Emit code decoding one non-fixed field (or a fixed one inside arrays) into var."""
        t = f.type
        if t in ("string", "bytes", "records"):
            n = self.var("n")
            self.length(ind, n, flexible, "h" if t == "string" else "i")
            self.null_or_check(ind, f, n, var, t)
            self.emit(ind, "else:")
            if t == "string":
                self.emit(ind + 1, f"{var} = _str(buf[pos:pos + {n}], 'utf-8', 'replace'); pos += {n}")
            elif t == "bytes":
                self.emit(ind + 1, f"{var} = _bytes(buf[pos:pos + {n}]); pos += {n}")
            else:
                self.emit(ind + 1, f"{var} = buf[pos:pos + {n}]; pos += {n}")
        elif f.is_array:
            n = self.var("n")
            self.length(ind, n, flexible, "i")
            self.null_or_check(ind, f, n, var, "array")
            self.emit(ind, "else:")
            self.array_elems(f, var, n, ind + 1, flexible)
        elif f.is_struct:
            if f.nullable_versions.has(self.version):
                m = self.var("m")
                self.emit(ind, f"{m} = {self.struct_fn('b', 'u')}(buf, pos)[0]; pos += 1")
                self.emit(ind, f"if {m} < 0: {var} = None")
                self.emit(ind, "else:")
                ind += 1
            expr = self.struct_body(f.fields, ind)
            self.emit(ind, f"{var} = {expr}")
        else:
            self.fixed_run(ind, [(f, var)])

    def array_elems(self, f: Field, var: str, n: str, ind: int, flexible: bool) -> None:
        et = f.elem_type
        if et == "uuid":
            self.emit(ind, f"if {n} * 16 > end - pos: raise _PE('{self.msg.name}.{f.name}: array past the end')")
            self.emit(ind, f"{var} = [_bytes(buf[p:p + 16]) for p in _range(pos, pos + 16 * {n}, 16)]; pos += 16 * {n}")
        elif et in FIXED_TYPES:
            code, size = FIXED_TYPES[et]
            self.emit(ind, f"if {n} * {size} > end - pos: raise _PE('{self.msg.name}.{f.name}: array past the end')")
            self.emit(ind, f"{var} = _list(_unpack('>%d{code}' % {n}, buf, pos)); pos += {size} * {n}")
        else:
            self.emit(ind, f"{var} = []")
            self.emit(ind, f"for _ in _range({n}):")
            if f.is_struct:
                expr = self.struct_body(f.fields, ind + 1)
                self.emit(ind + 1, f"{var}.append({expr})")
            else:
                elem = Field(name=f.name, snake=f.snake, type=et, versions=f.versions)
                e = self.var("e")
                self.value(elem, e, ind + 1, flexible)
                self.emit(ind + 1, f"{var}.append({e})")


class _EncoderGen(_Gen):

    def build(self):
        self.emit(0, "def encode(d):")
        self.emit(1, "out = []")
        self.emit(1, "b = _bytearray()")
        self.struct_body(self.msg.fields, "d", 1)
        self.emit(1, "out.append(b)")
        self.emit(1, "return out")
        return self.compile("encode")

    def length(self, ind: int, expr: str, flexible: bool, classic_fmt: str) -> None:
        if flexible:
            n = self.var("n")
            self.emit(ind, f"{n} = {expr} + 1")
            self.emit(ind, f"if {n} < 128: b.append({n})")
            self.emit(ind, f"else: b += _uvb({n})")
        else:
            self.emit(ind, f"b += {self.struct_fn(classic_fmt, 'p')}({expr})")

    def null(self, ind: int, flexible: bool, classic: bytes) -> None:
        if flexible:
            self.emit(ind, "b.append(0)")
        else:
            self.emit(ind, f"b += {classic!r}")

    def fixed_run(self, ind: int, run: list, types: list[str]) -> None:
        """Pack a run of fixed-size fields at once. `run`: [(fast, slow)] expressions
        of their values; the fast ones (subscripts) are tried first, the slow ones
        (`get` with the default) only when a field is missing (KeyError)."""
        if not run:
            return
        fn = self.struct_fn("".join(FIXED_TYPES[t][0] for t in types), "p")
        fast = ", ".join(f for f, _ in run)
        slow = ", ".join(s for _, s in run)
        if fast == slow:
            self.emit(ind, f"b += {fn}({fast})")
        else:
            self.emit(ind, f"try: b += {fn}({fast})")
            self.emit(ind, f"except KeyError: b += {fn}({slow})")
        run.clear()
        types.clear()

    def getter(self, f: Field, src: str) -> tuple[str, str]:
        """(subscript, `get` with the field's default) of field `f` of dict `src`: an
        answer usually has every field, and a subscript costs less than a call."""
        dv = default_value(f, self.version)
        fast = f"{src}[{f.snake!r}]"
        if f.is_struct and not f.is_array:
            return fast, f"{src}.get({f.snake!r})"
        if isinstance(dv, list):
            return fast, f"{src}.get({f.snake!r}, ())"
        return fast, f"{src}.get({f.snake!r}, {dv!r})"

    def get_into(self, ind: int, x: str, f: Field, src: str) -> None:
        fast, slow = self.getter(f, src)
        self.emit(ind, f"try: {x} = {fast}")
        self.emit(ind, f"except KeyError: {x} = {slow}")

    def struct_body(self, fields: list[Field], src: str, ind: int) -> None:
        present, regular, tagged = self.split(fields)
        run: list[str] = []
        types: list[str] = []
        for f in regular:
            if f.type in FIXED_TYPES:
                run.append(self.getter(f, src))
                types.append(f.type)
                continue
            self.fixed_run(ind, run, types)
            x = self.var("x")
            self.get_into(ind, x, f, src)
            self.value(f, x, ind, self.field_flexible(f))
        self.fixed_run(ind, run, types)
        if self.flexible:
            self.tagged_section(tagged, src, ind)

    def tagged_section(self, tagged: list[Field], src: str, ind: int) -> None:
        if not tagged:
            self.emit(ind, "b.append(0)")
            return
        tg, saved = self.var("tg"), self.var("sb")
        self.emit(ind, f"{tg} = None")     # a list only once a field is present
        for f in tagged:
            # a tagged field that is absent is not written, as one equal to its
            # default: the common case costs a membership test
            x = self.var("x")
            dv = default_value(f, self.version)
            if f.is_struct and not f.is_array:
                cond = f"{x} is not None and {x} != {dv!r}" if dv is not None else f"{x} is not None"
            elif dv is None:
                cond = f"{x} is not None"
            elif isinstance(dv, list):
                cond = x
            else:
                cond = f"{x} != {dv!r}"
            self.emit(ind, f"if {f.snake!r} in {src}:")
            self.emit(ind + 1, f"{x} = {src}[{f.snake!r}]")
            self.emit(ind + 1, f"if {cond}:")
            self.emit(ind + 2, f"{saved} = b; b = _bytearray()")
            if f.type in FIXED_TYPES:
                self.fixed_run(ind + 2, [(x, x)], [f.type])
            else:
                self.value(f, x, ind + 2, True)
            self.emit(ind + 2, f"if {tg} is None: {tg} = []")
            self.emit(ind + 2, f"{tg}.append(({f.tag}, b)); b = {saved}")
        self.emit(ind, f"if {tg} is None: b.append(0)")
        self.emit(ind, "else:")
        self.emit(ind + 1, f"b += _uvb(_len({tg}))")
        self.emit(ind + 1, f"for tag, data in {tg}:")
        self.emit(ind + 2, "b += _uvb(tag); b += _uvb(_len(data)); b += data")

    def value(self, f: Field, x: str, ind: int, flexible: bool) -> None:
        t = f.type
        nullable = f.nullable_versions.has(self.version)
        if t == "records":
            # no records (a caught-up Fetch partition answers an empty list): the
            # zero length inline, without the call
            self.emit(ind, f"if {x}.__class__ is _list and not {x}: "
                           + ("b.append(1)" if flexible else "b += b'\\x00\\x00\\x00\\x00'"))
            self.emit(ind, f"else: b = _wrec(out, b, {x}, {flexible})")
        elif t in ("string", "bytes"):
            classic_fmt, null = ("h", b"\xff\xff") if t == "string" else ("i", b"\xff\xff\xff\xff")
            if nullable:
                self.emit(ind, f"if {x} is None:")
                self.null(ind + 1, flexible, null)
                self.emit(ind, "else:")
                ind += 1
            if t == "string":
                s = self.var("s")
                self.emit(ind, f"{s} = {x}.encode('utf-8')")
                x = s
            self.length(ind, f"_len({x})", flexible, classic_fmt)
            self.emit(ind, f"b += {x}")
        elif f.is_array:
            if nullable:
                self.emit(ind, f"if {x} is None:")
                self.null(ind + 1, flexible, b"\xff\xff\xff\xff")
                self.emit(ind, "else:")
                ind += 1
            self.length(ind, f"_len({x})", flexible, "i")
            et = f.elem_type
            if et == "uuid":
                self.emit(ind, f"for e in {x}:")
                self.emit(ind + 1, "if _len(e) != 16: raise ValueError('uuid must be 16 bytes')")
                self.emit(ind + 1, "b += e")
            elif et in FIXED_TYPES:
                self.emit(ind, f"b += _pack('>%d{FIXED_TYPES[et][0]}' % _len({x}), *{x})")
            else:
                e = self.var("e")
                self.emit(ind, f"for {e} in {x}:")
                if f.is_struct:
                    self.struct_body(f.fields, e, ind + 1)
                else:
                    elem = Field(name=f.name, snake=f.snake, type=et, versions=f.versions)
                    self.value(elem, e, ind + 1, flexible)
        elif f.is_struct:
            if nullable:
                self.emit(ind, f"if {x} is None: b.append(255)")
                self.emit(ind, "else:")
                ind += 1
                self.emit(ind, "b.append(1)")
            else:
                self.emit(ind, f"if {x} is None: {x} = {{}}")
            self.struct_body(f.fields, x, ind)
        else:
            self.fixed_run(ind, [(x, x)], [t])


# ------------------------------------------------------------ caches and API

_decoders: dict[tuple[str, int], object] = {}
_encoders: dict[tuple[str, int], object] = {}


def decoder(msg: Message, version: int):
    """The compiled decoder of msg at version: fn(buf, pos) -> (dict, pos)."""
    return _decoders.get((msg.name, version)) or _compile(_decoders, _DecoderGen, msg, version)


def encoder(msg: Message, version: int):
    """The compiled encoder of msg at version: fn(body) -> list of chunks."""
    return _encoders.get((msg.name, version)) or _compile(_encoders, _EncoderGen, msg, version)


def _compile(cache: dict, gen, msg: Message, version: int):
    if not msg.has_version(version):
        raise UnsupportedVersion(msg.api_key if msg.api_key is not None else -1, version)
    fn = cache[(msg.name, version)] = gen(msg, version).build()
    return fn


def decode(msg: Message, version: int, buf, pos: int = 0) -> tuple[dict, int]:
    """Decode msg at version from buf[pos:]; returns (dict, position after it)."""
    fn = decoder(msg, version)
    if type(buf) is not memoryview:
        buf = memoryview(buf)
    try:
        return fn(buf, pos)
    except _DECODE_ERRORS as e:
        raise ProtocolError(f"malformed {msg.name} v{version}: {type(e).__name__}") from None


def encode(msg: Message, version: int, body: dict) -> list:
    fn = encoder(msg, version)
    try:
        return fn(body)
    except _ENCODE_ERRORS as e:
        raise EncodeError(f"cannot encode {msg.name} v{version}: {e!r}") from e


def _lookup(table: dict[int, Message], api_key: int, version: int) -> Message:
    msg = table.get(api_key)
    if msg is None or not msg.has_version(version):
        raise UnsupportedVersion(api_key, version)
    return msg


def decode_request(api_key: int, version: int, buf, pos: int = 0) -> dict:
    fn = _decoders.get((_REQ_NAMES.get(api_key), version))
    if fn is None:
        fn = decoder(_lookup(REQUESTS, api_key, version), version)
    if type(buf) is not memoryview:
        buf = memoryview(buf)
    try:
        return fn(buf, pos)[0]
    except _DECODE_ERRORS as e:
        raise ProtocolError(f"malformed {_REQ_NAMES[api_key]} v{version}: {type(e).__name__}") from None


def decode_response(api_key: int, version: int, buf, pos: int = 0) -> dict:
    return decode(_lookup(RESPONSES, api_key, version), version, buf, pos)[0]


def encode_request(api_key: int, version: int, body: dict) -> bytes:
    chunks = encode(_lookup(REQUESTS, api_key, version), version, body)
    if any(isinstance(c, FileSlice) for c in chunks):
        raise EncodeError("a request cannot carry FileSlice records")
    return b"".join(chunks)


def encode_response(api_key: int, version: int, body: dict) -> list:
    """The response body (no size, no header) as chunks: bytes-like or FileSlice."""
    fn = _encoders.get((_RESP_NAMES.get(api_key), version))
    if fn is None:
        fn = encoder(_lookup(RESPONSES, api_key, version), version)
    try:
        return fn(body)
    except _ENCODE_ERRORS as e:
        raise EncodeError(f"cannot encode {_RESP_NAMES[api_key]} v{version}: {e!r}") from e


def decode_data(name: str, version: int, buf, pos: int = 0) -> dict:
    """Decode an embedded data schema (ConsumerProtocolSubscription/Assignment)."""
    return decode(DATA[name], version, buf, pos)[0]


def encode_data(name: str, version: int, body: dict) -> bytes:
    return b"".join(encode(DATA[name], version, body))


_REQ_NAMES = {k: m.name for k, m in REQUESTS.items()}
_RESP_NAMES = {k: m.name for k, m in RESPONSES.items()}
