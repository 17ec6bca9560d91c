"""Generate the Kafka message codecs in ``services/kraftlog/protocol/generated/`` from our specs.

Owns the generated modules: for every ``services/kraftlog/protocol/specs/<api>.spec`` it
writes ``generated/<api>.py``, one dataclass per message and nested struct with
``write(writer, version)`` / ``read(reader, version)`` methods that follow the field
version ranges, flexible versions (compact strings, arrays and bytes; a tagged-field
section after every struct, KIP-482), nullable versions and tagged fields of the spec.

The spec notation is ours (the facts in it are Kafka's message specifications:
field names, types, version ranges, tags, defaults)::

    request ProduceRequest key=0 versions=3-11 flexible=9+
      transactional_id: string 3+ nullable=3+ default=null
      acks: int16 0+
      topic_data: []TopicProduceData 0+
        name: string 0+
        partition_data: []PartitionProduceData 0+
          index: int32 0+
          records: records 0+ nullable=0+

A field line is ``name: type versions [nullable=RANGE] [tag=N] [default=VALUE]``; a
``[]Name`` or capitalised ``Name`` type opens a struct whose fields are indented below it.
Ranges are ``N+``, ``N-M``, ``N`` or ``none``. A tagged field is tagged in all its versions.

Called by developers after editing a spec::

    .venv/bin/python scripts/gen_kafka_messages.py           # regenerate in place
    .venv/bin/python scripts/gen_kafka_messages.py --check   # exit 1, naming stale files

and by ``tests/protocol/test_generated_messages.py`` (``--check``). Output is a pure
function of the specs; files are replaced only when their bytes change; a file in the
output directory that no spec generates is reported (``--check``) or removed.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTOCOL_DIR = ROOT / "services" / "kraftlog" / "protocol"
DEFAULT_SPEC_DIR = PROTOCOL_DIR / "specs"
DEFAULT_OUT_DIR = PROTOCOL_DIR / "generated"
MAX_VERSION = 32767
INT_TYPES = ("int8", "int16", "uint16", "int32", "int64")
PRIMITIVES = (*INT_TYPES, "bool", "float64", "string", "bytes", "records", "uuid")


class SpecError(Exception):
    """A spec file does not parse; the message names the file and line."""


@dataclasses.dataclass(frozen=True, slots=True)
class Range:
    low: int
    high: int  # inclusive; low > high means never

    @classmethod
    def parse(cls, text: str) -> Range:
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    @property
    def empty(self) -> bool:
        return self.low > self.high

    def test(self, var: str = "version") -> str:
        """A Python condition for ``var`` in this range, as short as it can be."""
        if self.empty:
            return "False"
        if self.high >= MAX_VERSION:
            return "True" if self.low == 0 else f"{var} >= {self.low}"
        if self.low == self.high:
            return f"{var} == {self.low}"
        if self.low == 0:
            return f"{var} <= {self.high}"
        return f"{self.low} <= {var} <= {self.high}"

    def literal(self) -> str:
        return f"({self.low}, {self.high})"


@dataclasses.dataclass(slots=True)
class Field:
    name: str
    type: str  # primitive, "[]prim", "[]Struct" or "Struct"
    versions: Range
    nullable: Range
    tag: int | None
    default: str | None
    struct: Struct | None = None

    @property
    def element(self) -> str:
        return self.type[2:] if self.type.startswith("[]") else self.type

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")


@dataclasses.dataclass(slots=True)
class Struct:
    name: str
    fields: list[Field]


@dataclasses.dataclass(slots=True)
class Message:
    kind: str  # request | response
    name: str
    api_key: int
    versions: Range
    flexible: Range
    struct: Struct


_HEAD = re.compile(r"^(request|response) (\w+) key=(\d+) versions=(\S+) flexible=(\S+)$")
_FIELD = re.compile(r"^(\w+): (\[\])?(\w+) (\S+)((?: \w+=\S+)*)$")


def parse(path: pathlib.Path) -> list[Message]:
    messages: list[Message] = []
    # (indent, struct) of the structs open at this point of the file
    stack: list[tuple[int, Struct]] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        where = f"{path.name}:{number}"
        head = _HEAD.match(line)
        if head:
            kind, name, key, versions, flexible = head.groups()
            struct = Struct(name, [])
            messages.append(Message(kind, name, int(key), Range.parse(versions),
                                    Range.parse(flexible), struct))
            stack = [(0, struct)]
            continue
        if not stack:
            raise SpecError(f"{where}: a field before any request/response line")
        indent = len(line) - len(line.lstrip(" "))
        match = _FIELD.match(line.strip())
        if match is None:
            raise SpecError(f"{where}: not 'name: type versions [key=value...]': {line.strip()!r}")
        while stack and indent <= stack[-1][0]:
            stack.pop()
        if not stack:
            raise SpecError(f"{where}: field indented at or left of its message line")
        name, array, type_name, versions, attrs = match.groups()
        options = dict(item.split("=", 1) for item in attrs.split())
        unknown = set(options) - {"nullable", "tag", "default"}
        if unknown:
            raise SpecError(f"{where}: unknown attribute(s) {sorted(unknown)}")
        if type_name not in PRIMITIVES and not type_name[0].isupper():
            raise SpecError(f"{where}: unknown type {type_name!r}")
        field = Field(name=name, type=(array or "") + type_name, versions=Range.parse(versions),
                      nullable=Range.parse(options.get("nullable", "none")),
                      tag=int(options["tag"]) if "tag" in options else None,
                      default=options.get("default"))
        stack[-1][1].fields.append(field)
        if type_name not in PRIMITIVES:
            field.struct = Struct(type_name, [])
            stack.append((indent, field.struct))
    for message in messages:
        _check(message.struct, path)
    return messages


def _check(struct: Struct, path: pathlib.Path) -> None:
    names = [f.name for f in struct.fields]
    if len(set(names)) != len(names):
        raise SpecError(f"{path.name}: {struct.name} names a field twice")
    tags = [f.tag for f in struct.fields if f.tag is not None]
    if len(set(tags)) != len(tags):
        raise SpecError(f"{path.name}: {struct.name} uses a tag twice")
    for field in struct.fields:
        if field.struct is not None:
            if not field.struct.fields:
                raise SpecError(f"{path.name}: struct {field.struct.name} has no fields")
            _check(field.struct, path)


# -- code generation ---------------------------------------------------------------------------

def _always(nullable: Range, field: Field) -> bool:
    """The field is nullable in every version it exists in."""
    return nullable.low <= field.versions.low and field.versions.high <= nullable.high


def _nullable_anywhere(field: Field) -> bool:
    return not field.nullable.empty


def _py_type(field: Field) -> str:
    element = field.element
    if element in INT_TYPES:
        base = "int"
    elif element in ("string",):
        base = "str"
    elif element in ("bytes", "records"):
        base = "bytes"
    elif element == "uuid":
        base = "Uuid"
    elif element == "bool":
        base = "bool"
    elif element == "float64":
        base = "float"
    else:
        base = element
    if field.is_array:
        base = f"list[{base}]"
    if _nullable_anywhere(field) and (field.default == "null" or (
            not field.is_array and field.struct is None)):
        return f"{base} | None"
    return base


def _default(field: Field) -> str:
    if field.default == "null":
        return "None"
    if field.is_array:
        return "dataclasses.field(default_factory=list)"
    if field.struct is not None:
        return f"dataclasses.field(default_factory={field.struct.name})"
    element = field.element
    if element in INT_TYPES:
        return str(int(field.default, 0)) if field.default is not None else "0"
    if element == "bool":
        return "True" if field.default == "true" else "False"
    if element == "float64":
        return repr(float(field.default)) if field.default is not None else "0.0"
    if element == "string":
        return repr(field.default or "")
    if element in ("bytes", "records"):
        return "None" if _nullable_anywhere(field) else 'b""'
    if element == "uuid":
        return "ZERO_UUID"
    raise AssertionError(element)


_READERS = {"int8": "int8()", "int16": "int16()", "uint16": "uint16()", "int32": "int32()",
            "int64": "int64()", "bool": "boolean()", "float64": "float64()", "uuid": "uuid()"}


def _read_element(element: str, r: str) -> str:
    if element in _READERS:
        return f"{r}.{_READERS[element]}"
    if element == "string":
        return f"{r}.string(flexible)"
    if element in ("bytes", "records"):
        return f"{r}.blob(flexible)"
    return f"{element}.read({r}, version)"


def _read_expr(field: Field, r: str) -> list[str]:
    """Lines that assign the field's value read from ``r`` to ``self.<name>``."""
    target = f"self.{field.name}"
    nullable = field.nullable
    if field.is_array:
        element = field.element
        if element in _READERS or element in ("string", "bytes", "records"):
            fn = f"{r}.{_READERS[element].rstrip('()')}" if element in _READERS else (
                f"functools.partial({r}.{'string' if element == 'string' else 'blob'}, flexible)")
        else:
            fn = f"functools.partial({element}.read, {r}, version)"
        if nullable.empty:
            return [f"{target} = {r}.array(flexible, {fn})"]
        if field.default == "null":
            return [f"{target} = {r}.nullable_array(flexible, {fn}) "
                    f"if {nullable.test()} else {r}.array(flexible, {fn})"]
        return [f"{target} = ({r}.nullable_array(flexible, {fn}) or []) "
                f"if {nullable.test()} else {r}.array(flexible, {fn})"]
    element = field.element
    if element == "string" and not nullable.empty:
        if _always(nullable, field):
            return [f"{target} = {r}.nullable_string(flexible)"]
        return [f"{target} = {r}.nullable_string(flexible) if {nullable.test()} "
                f"else {r}.string(flexible)"]
    if element in ("bytes", "records") and not nullable.empty:
        if _always(nullable, field):
            return [f"{target} = {r}.nullable_blob(flexible)"]
        return [f"{target} = {r}.nullable_blob(flexible) if {nullable.test()} "
                f"else {r}.blob(flexible)"]
    return [f"{target} = {_read_element(element, r)}"]


_WRITERS = {"int8": "int8", "int16": "int16", "uint16": "uint16", "int32": "int32",
            "int64": "int64", "bool": "boolean", "float64": "float64", "uuid": "uuid"}


def _write_element(element: str, value: str, w: str) -> str:
    if element in _WRITERS:
        return f"{w}.{_WRITERS[element]}({value})"
    if element == "string":
        return f"{w}.string({value}, flexible)"
    if element in ("bytes", "records"):
        return f"{w}.blob({value}, flexible)"
    return f"{value}.write({w}, version)"


def _write_lines(field: Field, w: str) -> list[str]:
    value = f"self.{field.name}"
    nullable = field.nullable
    may_be_none = _py_type(field).endswith("| None")
    lines: list[str] = []
    if field.is_array:
        if may_be_none:
            lines += [f"if {value} is None:",
                      f"    if not ({nullable.test()}):",
                      f"        raise ValueError(f'{field.name} is null in version {{version}}')",
                      f"    {w}.array_length(-1, flexible)",
                      "else:",
                      f"    {w}.array_length(len({value}), flexible)",
                      f"    for {field.name}_item in {value}:",
                      f"        {_write_element(field.element, field.name + '_item', w)}"]
        else:
            lines += [f"{w}.array_length(len({value}), flexible)",
                      f"for {field.name}_item in {value}:",
                      f"    {_write_element(field.element, field.name + '_item', w)}"]
        return lines
    element = field.element
    if may_be_none:
        kind = "string" if element == "string" else "blob"
        if not _always(nullable, field):
            lines += [f"if {value} is None and not ({nullable.test()}):",
                      f"    raise ValueError(f'{field.name} is null in version {{version}}')"]
        lines.append(f"{w}.nullable_{kind}({value}, flexible)")
        return lines
    return [_write_element(element, value, w)]


def _struct_code(struct: Struct, message: Message, out: list[str], seen: set[str]) -> None:
    for field in struct.fields:
        if field.struct is not None and field.struct.name not in seen:
            seen.add(field.struct.name)
            _struct_code(field.struct, message, out, seen)
    top = struct is message.struct
    out.append("")
    out.append("")
    out.append("@dataclasses.dataclass(slots=True, kw_only=True)")
    out.append(f"class {struct.name}:")
    if top:
        out.append(f'    """{message.name} (API key {message.api_key}), versions '
                   f'{message.versions.low}-{message.versions.high}."""')
        out.append("")
        out.append(f"    API_KEY: ClassVar[int] = {message.api_key}")
        out.append(f"    MIN_VERSION: ClassVar[int] = {message.versions.low}")
        out.append(f"    MAX_VERSION: ClassVar[int] = {message.versions.high}")
        out.append(f"    FLEXIBLE_VERSIONS: ClassVar[tuple[int, int]] = {message.flexible.literal()}")
    else:
        out.append(f'    """A {struct.name} of {message.name}."""')
        out.append("")
    out.append("    FIELDS: ClassVar[tuple[schema.FieldSpec, ...]] = (")
    for field in struct.fields:
        struct_ref = field.struct.name if field.struct is not None else "None"
        out.append(f"        schema.FieldSpec(name={field.name!r}, type_name={field.type!r}, "
                   f"versions={field.versions.literal()}, nullable={field.nullable.literal()}, "
                   f"tag={field.tag!r}, default_null={field.default == 'null'}, "
                   f"struct={struct_ref}),")
    out.append("    )")
    out.append("")
    for field in struct.fields:
        out.append(f"    {field.name}: {_py_type(field)} = {_default(field)}")
    flexible = message.flexible.test()
    regular = [f for f in struct.fields if f.tag is None]
    tagged = [f for f in struct.fields if f.tag is not None]
    # write
    out.append("")
    out.append("    def write(self, w: wire.Writer, version: int) -> None:")
    out.append(f"        flexible = {flexible}")
    for field in regular:
        cond = field.versions.test()
        body = _write_lines(field, "w")
        if cond == "True":
            out += [f"        {line}" for line in body]
        else:
            out.append(f"        if {cond}:")
            out += [f"            {line}" for line in body]
    out.append("        if flexible:")
    if tagged:
        out.append("            tagged: list[tuple[int, wire.Writer]] = []")
        for field in sorted(tagged, key=lambda f: f.tag or 0):
            default = _default(field)
            if default.startswith("dataclasses.field(default_factory="):
                default = default[len("dataclasses.field(default_factory="):-1] + "()"
            if default == "None":
                differs = f"self.{field.name} is not None"
            elif default in ("False", "True"):
                differs = f"{'not ' if default == 'True' else ''}self.{field.name}"
            else:
                differs = f"self.{field.name} != {default}"
            out.append(f"            if ({field.versions.test()}) and {differs}:")
            out.append("                t = wire.Writer()")
            out += [f"                {line}" for line in _write_lines(field, "t")]
            out.append(f"                tagged.append(({field.tag}, t))")
        out.append("            w.tagged_fields(tagged)")
    else:
        out.append("            w.uvarint(0)")
    # read
    out.append("")
    out.append("    @classmethod")
    out.append(f"    def read(cls, r: wire.Reader, version: int) -> {struct.name}:")
    out.append("        self = cls()")
    out.append(f"        flexible = {flexible}")
    for field in regular:
        cond = field.versions.test()
        body = _read_expr(field, "r")
        if cond == "True":
            out += [f"        {line}" for line in body]
        else:
            out.append(f"        if {cond}:")
            out += [f"            {line}" for line in body]
    out.append("        if flexible:")
    if tagged:
        out.append("            for tag, t in r.tagged_fields():")
        for index, field in enumerate(sorted(tagged, key=lambda f: f.tag or 0)):
            keyword = "if" if index == 0 else "elif"
            out.append(f"                {keyword} tag == {field.tag} and ({field.versions.test()}):")
            out += [f"                    {line}" for line in _read_expr(field, "t")]
            out.append(f"                    t.expect_end({field.name!r})")
    else:
        out.append("            r.tagged_fields()  # none known at these versions: skipped")
    out.append("        return self")
    if top:
        out.append("")
        out.append("    def encode(self, version: int) -> wire.Writer:")
        out.append("        w = wire.Writer()")
        out.append("        self.write(w, version)")
        out.append("        return w")
        out.append("")
        out.append("    @classmethod")
        out.append(f"    def decode(cls, data: bytes | memoryview, version: int) -> {struct.name}:")
        out.append('        """The whole of ``data`` is the message; anything left over is malformed."""')
        out.append("        r = wire.Reader(data)")
        out.append("        message = cls.read(r, version)")
        out.append(f"        r.expect_end({message.name!r})")
        out.append("        return message")


def render(spec: pathlib.Path, messages: list[Message]) -> str:
    out = [f'"""Generated by scripts/gen_kafka_messages.py from protocol/specs/{spec.name}:',
           "do not edit; change the spec and regenerate."
           '"""',
           "",
                      "from __future__ import annotations",
           "",
           "import dataclasses",
           "import functools",
           "from typing import ClassVar",
           "",
           "from kraftlog.ids import ZERO_UUID, Uuid",
           "from kraftlog.protocol import schema, wire"]
    seen: set[str] = set()
    names: list[str] = []
    for message in messages:
        if message.struct.name in seen:
            raise SpecError(f"{spec.name}: {message.struct.name} defined twice")
        seen.add(message.struct.name)
        names.append(message.struct.name)
        _struct_code(message.struct, message, out, seen)
    uses_uuid = any("Uuid" in line or "ZERO_UUID" in line for line in out[12:])
    if not uses_uuid:
        out.remove("from kraftlog.ids import ZERO_UUID, Uuid")
    if not any("functools." in line for line in out[12:]):
        out.remove("import functools")
    return "\n".join(out) + "\n"


def generate(spec_dir: pathlib.Path) -> dict[str, str]:
    """File name -> content of every generated module."""
    files: dict[str, str] = {}
    for spec in sorted(spec_dir.glob("*.spec")):
        files[f"{spec.stem}.py"] = render(spec, parse(spec))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 naming stale files instead of writing")
    parser.add_argument("--spec-dir", type=pathlib.Path, default=DEFAULT_SPEC_DIR)
    parser.add_argument("--out-dir", type=pathlib.Path, default=DEFAULT_OUT_DIR)
    args = parser.parse_args(argv)
    try:
        files = generate(args.spec_dir)
    except SpecError as exc:
        print(f"gen_kafka_messages: {exc}", file=sys.stderr)
        return 2
    existing = {p.name for p in args.out_dir.glob("*.py") if p.name != "__init__.py"}
    stale: list[tuple[str, str]] = []
    for name, content in sorted(files.items()):
        path = args.out_dir / name
        if not path.exists():
            stale.append(("missing", name))
        elif path.read_text(encoding="utf-8") != content:
            stale.append(("differs", name))
    stale += [("extra", name) for name in sorted(existing - set(files))]
    if args.check:
        if stale:
            print("stale generated Kafka message codecs (run scripts/gen_kafka_messages.py):")
            for reason, name in stale:
                print(f"  {reason}: {args.out_dir / name}")
            return 1
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for reason, name in stale:
        path = args.out_dir / name
        if reason == "extra":
            path.unlink()
        else:
            path.write_text(files[name], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
