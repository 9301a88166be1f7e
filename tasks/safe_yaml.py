"""The one YAML loader for every file the project reads (grid specs, registry manifests): data only, bounded.

Specs and manifests come from people other than the one running ``gdp`` (a shared registry folder, a spec attached
to a ticket), so reading one must not run code, exhaust memory or CPU, or silently mean something other than what
its author wrote. :func:`load_yaml_file`:

* reads at most ``max_bytes`` (default :data:`MAX_BYTES`) *before* parsing: a 50 MB file is refused in milliseconds;
* decodes strict UTF-8; a binary file is a :class:`YamlError` naming the file and the byte offset;
* parses with PyYAML's ``SafeLoader`` (no Python tags) and limits, while composing, the nesting depth
  (:data:`MAX_DEPTH`) and, before constructing anything, the size of the document *with aliases expanded*
  (:data:`MAX_NODES`): a 1 kB alias bomb ("billion laughs") is refused instead of expanding to 10^8 nodes
  downstream; recursive aliases are refused;
* rejects duplicate mapping keys (PyYAML keeps the last one silently); merge keys (``<<: *base``, YAML 1.1) are
  kept, and keys written next to them override the merged ones as usual;
* resolves plain scalars with the YAML 1.2 core schema: ``1e-5``, ``1E-5``, ``.5`` and ``1.0e-5`` are floats;
  ``yes``/``no``/``on``/``off`` are strings, not booleans; ``017`` is 17 (not octal), ``0o17`` is 15;
  ``1_000`` and ``190:20:30`` are strings; dates stay strings.

Errors are :class:`YamlError` (a ``ValueError``) whose message starts with the file name and gives the line and
column where the document says where.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_MESSAGE_CHARS",
    "MAX_NODES",
    "YamlError",
    "bounded_message",
    "load_yaml_file",
    "load_yaml_text",
    "shown",
    "shown_key",
]

MAX_BYTES = 2 * 1024 * 1024
"""Largest YAML file read (bytes). Specs are a few hundred bytes, manifests a few kB (long Opacus histories: ~100 kB)."""
MAX_DEPTH = 64
"""Deepest nesting of lists/mappings, aliases expanded (real documents: < 10)."""
MAX_NODES = 250_000
"""Most scalars + collections in one document, aliases expanded (a 120,000-value axis is ~120,000 nodes)."""


MAX_KEY_CHARS = 100
"""Longest mapping key shown as written in a field path of an error message (longer ones: :func:`shown_key`)."""
MAX_MESSAGE_CHARS = 1000
"""Longest error message a user sees (:func:`bounded_message`): the head, which names the file and the field."""


def shown(value: Any) -> str:
    """A value from an untrusted document in an error message: ``gdpcore._validation.bounded_repr`` (imported on the
    error path only: importing gdpcore takes seconds)."""
    from gdpcore._validation import bounded_repr

    return bounded_repr(value)


def shown_key(key: Any) -> str:
    """A mapping key in a field path (``grid.<key>``, ``models[0].<key>``): as written when it is a short printable
    string or a small integer, else bounded and quoted (a 2 MB key is not echoed)."""
    if isinstance(key, str) and len(key) <= MAX_KEY_CHARS and key.isprintable():
        return key
    if isinstance(key, int) and not isinstance(key, bool) and key.bit_length() <= 64:
        return str(key)
    from gdpcore._validation import bounded_repr

    return bounded_repr(key, limit=MAX_KEY_CHARS)


def bounded_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` on one line, cut to about ``limit`` characters: the last guard before a message reaches a user or a
    report row (each value in it should already be bounded where it is formatted)."""
    head = text[:limit].replace("\r", " ").replace("\n", " ")
    return head if len(text) <= limit else f"{head}… ({len(text):,} chars)"


class YamlError(ValueError):
    """A YAML file that cannot be read as data. ``detail`` is the message without the file name."""

    def __init__(self, source: str | Path, detail: str, line: int | None = None, column: int | None = None):
        source = str(source)
        self.source = source if len(source) <= 4096 else shown(source)  # PATH_MAX: longer is no file's name
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        self.detail = where + detail
        super().__init__(f"{self.source}: {self.detail}")


class _Limits(Exception):
    def __init__(self, message: str, mark: Any = None):
        super().__init__(message)
        self.mark = mark


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars, duplicate-key rejection and a depth limit while composing."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Limits(f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base' then overriding keys: not duplicates
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    raise ConstructorError(
                        "while constructing a mapping", node.start_mark, "found an unhashable key", key_node.start_mark
                    ) from None
                if first is not None:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {shown(key)} (first given on line {first.line + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:  # YAML 1.2 core: decimal, 0o octal, 0x hex
        text = str(self.construct_scalar(node))
        sign = -1 if text.startswith("-") else 1
        body = text.lstrip("+-")
        if body.startswith("0o"):
            return sign * int(body[2:], 8)
        if body.startswith("0x"):
            return sign * int(body[2:], 16)
        if len(body) > 4300:  # Python's int-from-string limit; such a number is never meaningful here
            raise ConstructorError(None, None, "integer with more than 4300 digits", node.start_mark)
        return sign * int(body, 10)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), in PyYAML's per-first-character form.
# Merge keys ('<<: *base') are YAML 1.1, but registries use them to share a model's fields between versions.
_Loader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])
_Loader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*|[0-9]+(?=[eE]))(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _check_expanded_size(root: Node, source: str | Path) -> None:
    """Count the nodes of ``root`` with every alias expanded, in time linear in the *unexpanded* graph."""
    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, expanded height)
    active: set[int] = set()

    def walk(node: Node, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise _Limits(f"nested more than {MAX_DEPTH} levels deep once aliases are expanded", node.start_mark)
        key = id(node)
        if key in memo:
            size, height = memo[key]
            if depth + height > MAX_DEPTH:
                raise _Limits(f"nested more than {MAX_DEPTH} levels deep once aliases are expanded", node.start_mark)
            return size, height
        if key in active:
            raise _Limits("a recursive alias (a node that contains itself)", node.start_mark)
        if isinstance(node, SequenceNode):
            children: list[Node] = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        active.add(key)
        size, height = 1, 0
        for child in children:
            s, h = walk(child, depth + 1)
            size += s
            height = max(height, h + 1)
            if size > MAX_NODES:
                raise _Limits(
                    f"more than {MAX_NODES:,} values once aliases are expanded (an alias bomb?)", node.start_mark
                )
        active.discard(key)
        memo[key] = (size, height)
        return size, height

    walk(root, 0)


def load_yaml_text(text: str, source: str | Path) -> Any:
    """Parse one YAML document from ``text`` (already size-checked and decoded); ``source`` names it in errors."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node, source)
        return loader.construct_document(node)
    except _Limits as exc:
        mark = exc.mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise YamlError(source, f"refused YAML: {exc}", line, col) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = bounded_message(getattr(exc, "problem", None) or str(exc), 300)  # may quote an alias or a tag
        if mark is not None:
            raise YamlError(source, f"malformed YAML: {problem}", mark.line + 1, mark.column + 1) from None
        raise YamlError(source, f"malformed YAML: {problem}") from None
    except RecursionError:  # defence in depth: the depth limit above should stop it first
        raise YamlError(source, "malformed YAML: nested too deeply") from None
    finally:
        loader.dispose()


def load_yaml_file(path: str | Path, *, max_bytes: int = MAX_BYTES) -> Any:
    """Read ``path`` (at most ``max_bytes``, strict UTF-8) and parse it with the limits above; raises YamlError."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)  # never more, even for a FIFO or /dev/zero
    except OSError as exc:
        raise YamlError(path, f"cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > max_bytes:
        raise YamlError(path, f"refused: larger than {max_bytes:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlError(
            path, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): is it a binary file?"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return load_yaml_text(text, path)
