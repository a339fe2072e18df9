"""Reading the files labkit is given, with limits: every scenario, grid, run folder's JSON
document, samples.yaml and lab notebook goes through here.

A file is untrusted input (``labkit serve`` reads what students hand it), so reading one
costs bounded time and memory, and a file that breaks a limit is refused with
:class:`InputError`, whose one line names the file, what is wrong and what to do:

* size: at most :data:`YAML_BYTES` of YAML (PyYAML's pure-Python reader, the one that
  lets nesting be checked, takes about 0.6 s for that much) or :data:`JSON_BYTES` of
  JSON; only that much is ever read;
* encoding: UTF-8 text (a UTF-8 byte-order mark is dropped); UTF-16/32, NUL bytes and
  undecodable bytes are named as such;
* nesting: at most :data:`MAX_DEPTH` levels, checked while composing YAML (before PyYAML's
  recursion could fail) and after decoding JSON;
* YAML aliases are allowed (a list of hosts written once and reused is plain data), but a
  document is refused when its aliases expand it past :data:`MAX_NODES` values or
  :data:`MAX_DEPTH` levels, or an alias refers to a node that holds it. The harm of an
  alias bomb is its expanded size, which every later walk (the duplicate-key check, the
  checker, a manifest's JSON) would pay; bounding it bounds all of them;
* a key written twice in one YAML mapping is refused (YAML lets the last one win).

Pure but for reading the file named.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NoReturn

import yaml

YAML_BYTES = 64 * 1024  # the largest shipped scenario is 5 KiB; PyYAML reads 100 KiB/s
JSON_BYTES = 64 * 1024 * 1024  # a run's documents, notebooks with their outputs
MAX_DEPTH = 64  # labkit's files nest 8 levels at most
MAX_NODES = 20_000  # values of a YAML document, its aliases expanded (shipped: < 1,000)
MAX_INT_DIGITS = 100  # a longer number is no value of labkit's (and Python refuses 4300)
BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
        (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
AS_UTF8 = "save it as UTF-8"
MAX_LINE = 1000  # characters of an error line; a longer one loses its middle


class InputError(ValueError):
    """A file cannot be read as labkit's input: ``file``, ``key`` (where in the document,
    "" for the whole file) and ``reason`` say where and why, in one line."""

    def __init__(self, file: str, reason: str, key: str = ""):
        self.file, self.key, self.reason = file, key, reason
        super().__init__(one_line(f"{file}: {key}: {reason}" if key else f"{file}: {reason}"))


def one_line(text: str) -> str:
    """``text`` as one readable line of an error: control characters escaped (a "\\n"
    in a key is written so), and past :data:`MAX_LINE` characters its middle left out
    (a value of 200,000 characters quoted in it), keeping the end's what-to-do."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(line) <= MAX_LINE:
        return line
    keep = MAX_LINE // 2
    return f"{line[:keep]}[... {len(line) - 2 * keep:,} characters ...]{line[-keep:]}"


def read_text(path: str | Path, max_bytes: int = YAML_BYTES) -> str:
    """The text of the file at ``path``, of at most ``max_bytes`` bytes of UTF-8."""
    file = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(file, f"cannot read the file: {exc.strerror}") from None
    if len(data) > max_bytes:
        what = f"is {_size(size)}," if size > max_bytes else "is"
        raise InputError(file, f"{what} larger than the {_size(max_bytes)} labkit reads of "
                               "such a file: is it the right file?")
    return decode(data, file)


def _size(n: int) -> str:
    return f"{n / 1024:,.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):,.0f} MiB"


def decode(data: bytes, file: str) -> str:
    """``data`` as UTF-8 text; InputError names a binary file, UTF-16/32 or a bad byte."""
    for bom, name in BOMS:
        if data.startswith(bom):
            raise InputError(file, f"is {name} text: {AS_UTF8}")
    if b"\0" in data:
        pairs = data[:64]
        if pairs and (pairs[1::2].count(0) > len(pairs) // 4 or pairs[::2].count(0) > len(
                pairs) // 4):
            raise InputError(file, f"looks like UTF-16 text (NUL bytes between the "
                                   f"characters): {AS_UTF8}")
        at = data.index(b"\0")
        raise InputError(file, f"holds a NUL byte at offset {at}: a binary file, not text; "
                               "give the YAML or JSON file itself")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(file, f"is not UTF-8 text: byte 0x{data[exc.start]:02x} at line "
                               f"{line} (offset {exc.start}) cannot be read: {AS_UTF8}") from None
    return text.removeprefix("\ufeff")


# --- YAML -------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing to compose nodes deeper than :data:`MAX_DEPTH`
    (its composer recurses once per level: 5,000 ``[`` would exhaust Python's stack)."""

    def __init__(self, stream: str, file: str):
        super().__init__(stream)
        self.file, self.depth = file, 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                _too_deep(self.file, self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _too_deep(file: str, line: int | None = None) -> NoReturn:
    where = f"line {line}: " if line else ""
    raise InputError(file, f"{where}nested deeper than {MAX_DEPTH} levels: labkit's files "
                           "are a few levels deep; is it the right file?")


def yaml_document(text: str, file: str) -> Any:
    """The document ``text`` holds, built as ``yaml.safe_load`` builds it, within the
    limits above; InputError names the file, the line and the problem."""
    try:
        return _build(text, file)
    except yaml.YAMLError as exc:
        raise InputError(file, f"not valid YAML: {_yaml_problem(exc)}") from None
    except (ValueError, OverflowError) as exc:  # a value PyYAML read but Python cannot hold
        if isinstance(exc, InputError):
            raise
        raise InputError(file, f"not valid YAML: a value cannot be read ({_first(exc)})") \
            from None


def _build(text: str, file: str) -> Any:
    loader = _Loader(text, file)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(node, file)
        _no_key_twice(node, file)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line: where (line, column) and what."""
    if isinstance(exc, yaml.reader.ReaderError):
        return (f"character #x{exc.character:04x} at offset {exc.position}: control "
                "characters are not allowed")
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return where + " ".join(str(getattr(exc, "problem", None) or exc).split())


def _first(exc: Exception) -> str:
    return str(exc).split(";")[0].split("\n")[0]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_expanded(root: yaml.Node, file: str) -> None:
    """Refuse a document that its aliases expand past :data:`MAX_NODES` values or
    :data:`MAX_DEPTH` levels, or whose alias refers to a node that holds it, and an
    integer too long to be a value; linear in the nodes as written (each counted once)."""
    done: dict[int, tuple[int, int]] = {}  # id -> (expanded values, depth)
    open_: set[int] = set()
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]
    while todo:
        node, children_done = todo.pop()
        line = node.start_mark.line + 1
        if children_done:
            kids = [done[id(k)] for k in _children(node)]
            size = 1 + sum(s for s, _ in kids)
            depth = 1 + max((d for _, d in kids), default=0)
            open_.discard(id(node))
            done[id(node)] = (size, depth)
            if size > MAX_NODES:
                _too_many(file, line, len(done) <= MAX_NODES)
            if depth > MAX_DEPTH:
                _too_deep(file, line)
            continue
        if id(node) in done:
            continue
        if id(node) in open_:
            raise InputError(file, f"line {line}: an alias refers to a node that holds it "
                                   "(a recursive structure): labkit's files are plain data")
        if node.tag == "tag:yaml.org,2002:int" and len(str(node.value)) > MAX_INT_DIGITS:
            raise InputError(file, f"line {line}: a number of {len(node.value):,} digits: "
                                   "no value here is that large")
        open_.add(id(node))
        todo.append((node, True))
        todo.extend((k, False) for k in _children(node))


def _too_many(file: str, line: int, aliased: bool) -> NoReturn:
    """Refuse a document of more than :data:`MAX_NODES` values (``aliased``: only once
    its aliases are expanded)."""
    if aliased:
        raise InputError(file, f"line {line}: its aliases expand the document past "
                               f"{MAX_NODES:,} values (a YAML alias bomb?): write the values "
                               "out, or alias less")
    raise InputError(file, f"line {line}: holds more than {MAX_NODES:,} values: labkit's "
                           "files hold hundreds; is it the right file?")


def _join(key: str, sub: str | int) -> str:
    if isinstance(sub, int):
        return f"{key}[{sub}]"
    return f"{key}.{sub}" if key else sub


def _no_key_twice(node: yaml.Node, file: str, path: str = "") -> None:
    """Refuse a mapping that names a key twice, at any depth (YAML itself lets the last
    one win: a second `policies:` or `traffic:` would silently replace the first)."""
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            where = _join(path, key)
            line = key_node.start_mark.line + 1
            if key in first and key != "<<":
                raise InputError(file, f"written twice, at line {first[key]} and line "
                                       f"{line}: keep one", where)
            first.setdefault(key, line)
            _no_key_twice(value_node, file, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _no_key_twice(item, file, _join(path, i))


def read_yaml(path: str | Path) -> tuple[str, Any]:
    """The text of a YAML file and its document, within the limits above."""
    text = read_text(path, YAML_BYTES)
    return text, yaml_document(text, str(path))


# --- JSON -------------------------------------------------------------------------------------


def json_document(text: str, file: str) -> Any:
    """The JSON document ``text`` holds, nested at most :data:`MAX_DEPTH` levels."""
    try:
        doc = json.loads(text)
    except RecursionError:  # thousands of levels: Python's stack ends first
        _too_deep(file)
    except ValueError as exc:
        raise InputError(file, f"not valid JSON ({_first(exc)})") from None
    todo: list[tuple[Any, int]] = [(doc, 1)] if isinstance(doc, dict | list) else []
    while todo:
        value, depth = todo.pop()
        if depth > MAX_DEPTH:
            _too_deep(file)
        children = value.values() if isinstance(value, dict) else value
        todo.extend((v, depth + 1) for v in children if isinstance(v, dict | list))
    return doc


def read_json(path: str | Path, max_bytes: int = JSON_BYTES) -> Any:
    """The JSON document of the file at ``path``, within the limits above."""
    return json_document(read_text(path, max_bytes), str(path))
