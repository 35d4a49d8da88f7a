"""Constrained JSON decoding: `response_format` json_object (any object) and json_schema (a grammar from a schema).

A schema compiles to nodes (`compile_schema`); a `Matcher` reads output bytes against a node as a pushdown automaton
whose states are immutable tuples, so a state is shared freely and costs nothing to keep. A state is the tuple of
its branches, each a stack of frames and the length of the current whitespace run: a value that may be one of
several (`anyOf`, a list of types) starts a branch per alternative whose first byte fits, and a branch that meets a
byte it refuses ends; the output is valid while any branch lives. `TokenTrie` holds the vocabulary's token bytes
as a trie, built once: the tokens a state allows are found by walking the trie from the state, each edge one
automaton step, so a subtree whose first bytes are refused is never visited. Inside a free string (any text)
nearly every token is allowed, so there the walk covers only the tokens holding a quote or a backslash, and the
others come from a precomputed numpy mask.

Supported schema keywords: `type` (object, array, string, number, integer, boolean, null, or a list of them),
`properties`, `required`, `additionalProperties` (false, or absent with properties given: only the properties
listed; an object without properties takes any keys), `items`, `minItems`, `maxItems`, `enum`, `const`, `anyOf`
(with no other keyword beside it but ignored ones), `oneOf` (alone too, and only of options no value can match
twice: told apart by type, literal values or a required member, see `disjoint`; such a oneOf is an anyOf, while
one whose options may overlap would need exclusivity, which a byte-by-byte automaton cannot enforce: refused),
`allOf` (beside other keywords too: merged into one schema, see `merge_all_of`, a choice inside distributed over
it) and `$ref` to a local definition (`#/$defs/...`,
`#/definitions/...`, any JSON pointer into the schema; a recursive one is refused); `title`, `description`,
`$schema`, `default`, `examples`, `strict` and the `$defs`/`definitions` that hold what `$ref` names are ignored.
Anything else is refused (a 400 that names it) rather than silently not enforced.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import numpy as np

WHITESPACE = b" \t\n\r"
MAX_WHITESPACE_RUN = 24  # a run of indentation longer than this is refused (a random model could pad forever)
HEX = b"0123456789abcdefABCDEF"
ESCAPES = b'"\\/bfnrt'
DIGITS = b"0123456789"
NUMBER_END_STATES = ("zero", "int", "frac", "exp_digits")
IGNORED_KEYWORDS = {"title", "description", "$schema", "default", "examples", "strict", "$id", "$comment"}
KNOWN_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
                  "const", "anyOf", "oneOf", "allOf", "$ref"}  # fmt: skip
# what allOf merges (see merge_all_of), and of those what only an object or array has
MERGED_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
                   "const"}  # fmt: skip
STRUCTURE_KEYWORDS = {"properties", "required", "additionalProperties", "items", "minItems", "maxItems"}
MAX_SCHEMA_NODES = 2000
MAX_BRANCHES = 64  # alternatives followed at once; past this the later ones are dropped (what is left stays valid)
DEFINITIONS = {"$defs", "definitions"}


class SchemaError(ValueError):
    """A schema this server cannot enforce, or not a schema at all."""


# ----------------------------------------------------------------------------------------------- schema nodes


@dataclass(frozen=True)
class AnyValue:
    pass


@dataclass(frozen=True)
class Obj:
    properties: tuple[tuple[str, Node], ...]  # empty and `free`: any keys, any values
    required: frozenset[str]
    free: bool = False

    def value_of(self, key: str | None) -> Node:
        return dict(self.properties).get(key, ANY) if key is not None else ANY


@dataclass(frozen=True)
class Arr:
    items: Node
    min_items: int = 0
    max_items: int | None = None


@dataclass(frozen=True)
class Str:
    pass


@dataclass(frozen=True)
class Num:
    integer: bool = False


@dataclass(frozen=True)
class Lit:
    """One of a few JSON texts, byte for byte (enum, const, boolean, null)."""

    options: tuple[bytes, ...]


@dataclass(frozen=True)
class Alt:
    """A value of any one of `options` (anyOf, a list of types): at least two, none of them an Alt or AnyValue."""

    options: tuple[Node, ...]


Node = AnyValue | Obj | Arr | Str | Num | Lit | Alt
ANY = AnyValue()
ANY_OBJECT = Obj((), frozenset(), free=True)


def compile_schema(schema: Any) -> Node:
    """The node of a JSON schema (SchemaError if it uses what this module cannot enforce); the top level must be an
    object (or a choice of objects), as OpenAI requires."""
    node = SchemaCompiler(schema).compile(schema)
    options = node.options if isinstance(node, Alt) else (node,)
    if not all(isinstance(option, Obj) for option in options):
        raise SchemaError("the schema's top level must be {'type': 'object', ...}")
    return node


def _literal(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def one_of(options: list[Node]) -> Node:
    """The node of a value matching any of `options`: nested choices flattened, duplicates dropped."""
    flat: list[Node] = []
    for option in options:
        flat += option.options if isinstance(option, Alt) else [option]
    unique = tuple(dict.fromkeys(flat))
    if ANY in unique:
        return ANY
    return unique[0] if len(unique) == 1 else Alt(unique)


class SchemaCompiler:
    """Compiles a schema's parts to nodes; `$ref`s are resolved in the whole schema (`root`) and inlined."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.parts = 0
        self.expanding: list[str] = []  # the $refs being inlined, outermost first: one seen again is recursive

    def compile(self, schema: Any) -> Node:
        self.parts += 1
        if self.parts > MAX_SCHEMA_NODES:
            raise SchemaError(f"the schema has more than {MAX_SCHEMA_NODES} parts")
        if schema is True or schema == {}:
            return ANY
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object, got {type(schema).__name__}")
        unknown = sorted(set(schema) - KNOWN_KEYWORDS - IGNORED_KEYWORDS - DEFINITIONS)
        if unknown:
            raise SchemaError(f"the schema keyword {unknown[0]!r} is not supported")
        for keyword in ("$ref", "anyOf", "oneOf"):
            beside = sorted(set(schema) - {keyword} - IGNORED_KEYWORDS - DEFINITIONS)
            if keyword in schema and beside:
                raise SchemaError(f"{keyword!r} beside {beside[0]!r} is not supported (only alone)")
        if "$ref" in schema:
            return self.reference(schema["$ref"])
        if "allOf" in schema:
            return self.compile(self.all_of(schema))
        if "anyOf" in schema:
            return one_of([self.compile(option) for option in _schema_list(schema, "anyOf")])
        if "oneOf" in schema:
            return self.exactly_one_of(_schema_list(schema, "oneOf"))
        if "const" in schema:
            return Lit((_literal(schema["const"]),))
        if "enum" in schema:
            if not isinstance(schema["enum"], list) or not schema["enum"]:
                raise SchemaError("'enum' must be a non-empty list")
            return Lit(tuple(dict.fromkeys(_literal(value) for value in schema["enum"])))
        kind = schema.get("type")
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else None
        if kind is None:
            return ANY
        if isinstance(kind, list):
            if not kind or not all(isinstance(name, str) for name in kind):
                raise SchemaError("'type' must be a type name or a non-empty list of them")
            return one_of([self.typed(schema, name) for name in dict.fromkeys(kind)])
        if not isinstance(kind, str):
            raise SchemaError("'type' must be a type name or a non-empty list of them")
        return self.typed(schema, kind)

    def typed(self, schema: dict[str, Any], kind: str) -> Node:
        """The node of `schema` with the one type `kind` (its other keywords apply where they mean something)."""
        simple: dict[str, Node] = {
            "string": Str(),
            "number": Num(),
            "integer": Num(integer=True),
            "boolean": Lit((b"true", b"false")),
            "null": Lit((b"null",)),
        }
        if kind in simple:
            return simple[kind]
        if kind == "object":
            return _compile_object(schema, self)
        if kind == "array":
            return _compile_array(schema, self)
        raise SchemaError(f"unknown type {kind!r}")

    def reference(self, ref: Any) -> Node:
        """The node of the part of the schema `ref` points at (a JSON pointer in this schema: "#/$defs/name")."""
        target = self.target(ref)
        self.expanding.append(ref)
        try:
            return self.compile(target)
        finally:
            self.expanding.pop()

    def target(self, ref: Any) -> Any:
        """The part of the schema `ref` points at (SchemaError if it points outside, at nothing, or back into a
        `$ref` being expanded)."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"'$ref' must point into this schema ('#/$defs/...'), not {ref!r}")
        if ref in self.expanding:
            chain = " -> ".join([*self.expanding[self.expanding.index(ref) :], ref])
            raise SchemaError(f"recursive '$ref' is not supported ({chain})")
        target: Any = self.root
        pointer = urllib.parse.unquote(ref[1:])
        for token in pointer.split("/")[1:] if pointer else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                raise SchemaError(f"'$ref' {ref!r} points at nothing in the schema")
        return target

    def all_of(self, schema: dict[str, Any]) -> Any:
        """One schema equivalent to `schema`'s allOf branches and its other keywords together (see `merge_all_of`);
        a branch that is a choice (anyOf, oneOf) is distributed: a choice of allOfs, one per option."""
        beside = {key: value for key, value in schema.items() if key != "allOf"}
        branches = [self.resolved(branch) for branch in _schema_list(schema, "allOf")] + [beside]
        for index, branch in enumerate(branches):
            choice = next((keyword for keyword in ("anyOf", "oneOf") if isinstance(branch, dict) and keyword in branch),
                          None)  # fmt: skip
            if choice is not None:
                others = branches[:index] + branches[index + 1 :]
                return {choice: [{"allOf": [option, *others]} for option in _schema_list(branch, choice)]}
        return merge_all_of(branches)

    def resolved(self, branch: Any) -> Any:
        """`branch`, or what its `$ref` points at (followed until it is not a `$ref`); its own allOf merged."""
        if isinstance(branch, dict) and "$ref" in branch:
            beside = sorted(set(branch) - {"$ref"} - IGNORED_KEYWORDS - DEFINITIONS)
            if beside:
                raise SchemaError(f"'$ref' beside {beside[0]!r} is not supported (only alone)")
            target = self.target(branch["$ref"])
            self.expanding.append(branch["$ref"])
            try:
                return self.resolved(target)
            finally:
                self.expanding.pop()
        if isinstance(branch, dict) and "allOf" in branch:
            return self.all_of(branch)
        return branch

    def exactly_one_of(self, options: list[Any]) -> Node:
        """oneOf, enforced as anyOf where no value can match two options (told apart by type, by literal values,
        or by a required member whose values cannot meet: see `disjoint`); otherwise refused, as a choice that a
        value must match exactly once cannot be enforced byte by byte."""
        nodes = [self.compile(option) for option in options]
        for first in range(len(nodes)):
            for second in range(first + 1, len(nodes)):
                if not disjoint(nodes[first], nodes[second]):
                    raise SchemaError(
                        f"'oneOf' options {first} and {second} may match the same value; only options that cannot "
                        "(other types, other literal values, a required member with other values) are supported"
                    )
        return one_of(nodes)


def _schema_list(schema: dict[str, Any], keyword: str) -> list[Any]:
    options = schema[keyword]
    if not isinstance(options, list) or not options:
        raise SchemaError(f"{keyword!r} must be a non-empty list of schemas")
    return options


# ----------------------------------------------------------------------------------------------- allOf, oneOf


def merge_all_of(branches: list[Any]) -> Any:
    """One schema that a value matches exactly when it matches every branch, for branches of the supported
    keywords (their `$ref`s resolved, no choices at their top): types intersect, properties of several branches
    become an allOf of their schemas, required lists join, an object closed by one branch
    (additionalProperties false) keeps only that branch's properties, item schemas combine, the item bounds
    tighten and literal values (enum, const) intersect. SchemaError for what no value can match or what cannot
    be merged so (literal values beside an object or array's keywords)."""
    schemas = [branch for branch in branches if branch is not True and branch != {}]
    if any(branch is False for branch in schemas):
        raise SchemaError("'allOf' with a false branch matches nothing")
    if not all(isinstance(branch, dict) for branch in schemas):
        raise SchemaError("'allOf' must be a list of schemas")
    merged: dict[str, Any] = {}
    types = _merged_types(schemas)
    if types is not None:
        merged["type"] = types[0] if len(types) == 1 else types
    literals = _merged_literals(schemas, types)
    structure = sorted({key for branch in schemas for key in branch} & STRUCTURE_KEYWORDS)
    if literals is not None:
        if structure:
            raise SchemaError(f"'allOf' of literal values (enum, const) and {structure[0]!r} is not supported")
        return {"enum": literals}
    if {"properties", "required", "additionalProperties"} & set(structure):
        merged.update(_merged_object(schemas))
    item_schemas = [branch["items"] for branch in schemas if "items" in branch]
    if item_schemas:
        merged["items"] = item_schemas[0] if len(item_schemas) == 1 else {"allOf": item_schemas}
    least = [branch["minItems"] for branch in schemas if "minItems" in branch]
    most = [branch["maxItems"] for branch in schemas if "maxItems" in branch]
    if least:
        merged["minItems"] = max(least)
    if most:
        merged["maxItems"] = min(most)
    rest = sorted({key for branch in schemas for key in branch} - MERGED_KEYWORDS - IGNORED_KEYWORDS - DEFINITIONS)
    if rest:
        raise SchemaError(f"the schema keyword {rest[0]!r} is not supported (in 'allOf')")
    return merged


def _merged_types(schemas: list[dict[str, Any]]) -> list[str] | None:
    """The type names every branch allows (integer within number); None when no branch names a type."""
    named = [branch["type"] for branch in schemas if "type" in branch]
    if not named:
        return None
    allowed: set[str] | None = None
    for kind in named:
        names = [kind] if isinstance(kind, str) else kind
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise SchemaError("'type' must be a type name or a non-empty list of them")
        widened = set(names) | ({"integer"} if "number" in names else set())
        allowed = widened if allowed is None else allowed & widened
    assert allowed is not None
    if {"number", "integer"} <= allowed:
        allowed.discard("integer")
    if not allowed:
        raise SchemaError(f"'allOf' of types that have no value in common ({named})")
    return sorted(allowed)


def _merged_literals(schemas: list[dict[str, Any]], types: list[str] | None) -> list[Any] | None:
    """The values every branch's enum or const allows, and of the merged types (None when no branch lists any)."""
    lists = [[branch["const"]] if "const" in branch else branch["enum"] for branch in schemas
             if "const" in branch or "enum" in branch]  # fmt: skip
    if not lists:
        return None
    if not all(isinstance(values, list) and values for values in lists):
        raise SchemaError("'enum' must be a non-empty list")
    common = [value for value in lists[0] if all(any(_same_json(value, other) for other in values) for values in lists)]
    if types is not None:
        common = [value for value in common if _json_kind(value) in types or (
            _json_kind(value) == "integer" and "number" in types)]  # fmt: skip
    if not common:
        raise SchemaError("'allOf' of literal values (enum, const) that have no value in common")
    return common


def _merged_object(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    """properties, required and additionalProperties of branches that are objects (see `merge_all_of`)."""
    properties: dict[str, list[Any]] = {}
    for branch in schemas:
        listed = branch.get("properties", {})
        if not isinstance(listed, dict):
            raise SchemaError("'properties' must be an object and 'required' a list")
        for name, value in listed.items():
            properties.setdefault(name, []).append(value)
    closed = [set(branch.get("properties", {})) for branch in schemas if branch.get("additionalProperties") is False]
    allowed = set(properties).intersection(*closed) if closed else set(properties)
    required: list[str] = []
    for branch in schemas:
        names = branch.get("required", [])
        if not isinstance(names, list):
            raise SchemaError("'properties' must be an object and 'required' a list")
        required += [name for name in names if name not in required]
    missing = [name for name in required if name not in allowed]
    if missing:
        raise SchemaError(f"'allOf' requires {missing[0]!r}, which a branch does not allow or none describes")
    merged_properties = {
        name: values[0] if len(values) == 1 else {"allOf": values}
        for name, values in properties.items()
        if name in allowed
    }
    result: dict[str, Any] = {"properties": merged_properties, "required": required}
    if merged_properties or closed:
        result["additionalProperties"] = False
    return result


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _same_json(first: Any, second: Any) -> bool:
    """JSON equality (1 and 1.0 are one number; true is not 1)."""
    return _json_kind(first) == _json_kind(second) and first == second


def kinds(node: Node) -> set[str]:
    """The JSON types of the values `node` accepts (integer counted as number)."""
    if isinstance(node, Obj):
        return {"object"}
    if isinstance(node, Arr):
        return {"array"}
    if isinstance(node, Str):
        return {"string"}
    if isinstance(node, Num):
        return {"number"}
    if isinstance(node, Lit):
        return {_json_kind(json.loads(option)).replace("integer", "number") for option in node.options}
    if isinstance(node, Alt):
        return set().union(*(kinds(option) for option in node.options))
    return {"object", "array", "string", "number", "boolean", "null"}


def disjoint(first: Node, second: Node) -> bool:
    """True when no value can match both nodes: they accept other JSON types, other literal values, or objects
    of which each requires a member whose values cannot meet (or the other does not allow it). False when that
    cannot be shown (they may still be disjoint)."""
    if not kinds(first) & kinds(second):
        return True
    if isinstance(first, Alt):
        return all(disjoint(option, second) for option in first.options)
    if isinstance(second, Alt):
        return all(disjoint(first, option) for option in second.options)
    if isinstance(first, Lit) and isinstance(second, Lit):
        values = [json.loads(option) for option in first.options]
        return not any(_same_json(value, json.loads(other)) for value in values for other in second.options)
    if isinstance(first, Obj) and isinstance(second, Obj):
        return _objects_disjoint(first, second) or _objects_disjoint(second, first)
    return False


def _objects_disjoint(first: Obj, second: Obj) -> bool:
    """A member `first` requires that `second` does not allow, or that both require with values that cannot meet."""
    for name in first.required:
        if not second.free and name not in dict(second.properties):
            return True
        if name in second.required and disjoint(first.value_of(name), second.value_of(name)):
            return True
    return False


def _compile_object(schema: dict[str, Any], compiler: SchemaCompiler) -> Obj:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        raise SchemaError("'properties' must be an object and 'required' a list")
    if not all(isinstance(name, str) for name in required) or not set(required) <= set(properties):
        raise SchemaError("'required' must name properties the schema lists")
    extra = schema.get("additionalProperties", not properties)
    if extra == {}:
        extra = True
    if not isinstance(extra, bool):
        raise SchemaError("'additionalProperties' must be true or false (a schema there is not supported)")
    if properties and extra:
        raise SchemaError("'additionalProperties' must be false when 'properties' are given")
    compiled = tuple((name, compiler.compile(value)) for name, value in properties.items())
    return Obj(compiled, frozenset(required), free=extra)


def _compile_array(schema: dict[str, Any], compiler: SchemaCompiler) -> Arr:
    least, most = schema.get("minItems", 0), schema.get("maxItems")
    if not isinstance(least, int) or least < 0 or (most is not None and (not isinstance(most, int) or most < least)):
        raise SchemaError("'minItems' and 'maxItems' must be integers, minItems <= maxItems")
    return Arr(compiler.compile(schema.get("items", {})), least, most)


def minimal(node: Node) -> bytes:
    """The shortest JSON text `node` accepts."""
    if isinstance(node, Obj):
        members = [
            b'"' + name.encode() + b'":' + minimal(value) for name, value in node.properties if name in node.required
        ]
        return b"{" + b",".join(members) + b"}"
    if isinstance(node, Arr):
        return b"[" + b",".join([minimal(node.items)] * node.min_items) + b"]"
    if isinstance(node, Str):
        return b'""'
    if isinstance(node, Lit):
        return min(node.options, key=len)
    if isinstance(node, Alt):
        return min((minimal(option) for option in node.options), key=len)
    return b"0"  # AnyValue, Num


def _key_text(name: str) -> bytes:
    return json.dumps(name, ensure_ascii=False).encode()


# ----------------------------------------------------------------------------------------------- the automaton
# A state is a tuple of branches (see the module doc); a branch is (frames, whitespace run); frames is a tuple, the
# innermost last:
#   ("val", node, top)                     a value of `node` comes next (top: the document itself, no whitespace)
#   ("lit", options, position)             inside a literal: `options` are those that match so far
#   ("str", phase)                         inside a free string: "body", "esc", or the hex digits still due (int)
#   ("num", integer, phase)                inside a number (phase as in NUMBER_END_STATES and the others)
#   ("key", options, position)             inside a key of a fixed object: (text, name) pairs that match so far
#   ("obj", node, seen, phase, key)        phase: first ('{' read), key (',' read), colon, after (a value read)
#   ("arr", node, count, phase)            phase: first ('[' read), next (',' read), after (a value read)
# () with no frames: the document is complete.

Branch = tuple[tuple[tuple, ...], int]
State = tuple[Branch, ...]
DONE: tuple = ()
# what a step of one branch gives: no branch (None), one, or several (the first byte of a choice's value)
Moved = Branch | list[Branch] | None


def start_state(node: Node) -> State:
    return (((("val", node, True),), 0),)


def advance(state: State, byte: int) -> State | None:
    """The state after `byte`, or None when the byte cannot come next (in any branch)."""
    if len(state) == 1:  # the common case: no choice pending
        moved = _branches(_advance(state[0], byte))
        return (tuple(moved) if len(moved) < 2 else tuple(dict.fromkeys(moved))[:MAX_BRANCHES]) or None
    after: list[Branch] = []
    for branch in state:
        after += _branches(_advance(branch, byte))
    return tuple(dict.fromkeys(after))[:MAX_BRANCHES] or None


def _branches(moved: Moved) -> list[Branch]:
    if moved is None:
        return []
    return moved if isinstance(moved, list) else [moved]


def _advance(branch: Branch, byte: int) -> Moved:
    """One branch after `byte`."""
    frames, run = branch
    if not frames:
        return None
    frame = frames[-1]
    kind = frame[0]
    if kind == "str":
        return _string(frames, frame, byte)
    if kind == "lit" or kind == "key":
        return _literal_byte(frames, frame, byte)
    if kind == "num":
        moved = _number(frame, byte)
        if moved is not None:
            return frames[:-1] + (moved,), 0
        if frame[2] not in NUMBER_END_STATES:
            return None
        return _advance((frames[:-1], run), byte) if frames[:-1] else None  # the number ended: judge the byte after
    if byte in WHITESPACE:
        if run >= MAX_WHITESPACE_RUN or (kind == "val" and frame[2]):
            return None
        return frames, run + 1
    if kind == "val":
        return _value(frames[:-1], frame[1], byte)
    if kind == "obj":
        return _object(frames, frame, byte)
    return _array(frames, frame, byte)


def _value(below: tuple, node: Node, byte: int) -> Moved:
    """The first byte of a value of `node` (its frame already popped: `below` is the rest of the stack); a choice
    gives a branch for each of its options the byte can start."""
    if isinstance(node, Alt):
        moved: list[Branch] = []
        for option in node.options:
            moved += _branches(_value(below, option, byte))
        return moved
    if isinstance(node, Lit):
        options = tuple(option for option in node.options if option[0] == byte)
        if not options:
            return None
        return _after_literal_byte(below, ("lit", options, 1))
    if byte == ord("{") and isinstance(node, Obj | AnyValue):
        obj = node if isinstance(node, Obj) else ANY_OBJECT
        return below + (("obj", obj, frozenset(), "first", None),), 0
    if byte == ord("[") and isinstance(node, Arr | AnyValue):
        arr = node if isinstance(node, Arr) else Arr(ANY)
        if arr.max_items == 0:
            return below + (("arr", arr, 0, "after"),), 0  # only ']' may follow
        return below + (("arr", arr, 0, "first"),), 0
    if byte == ord('"') and isinstance(node, Str | AnyValue):
        return below + (("str", "body"),), 0
    if isinstance(node, Num | AnyValue) and (byte == ord("-") or byte in DIGITS):
        phase = "sign" if byte == ord("-") else ("zero" if byte == ord("0") else "int")
        return below + (("num", isinstance(node, Num) and node.integer, phase),), 0
    if isinstance(node, AnyValue) and byte in b"tfn":
        literal = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}[byte]
        return _after_literal_byte(below, ("lit", (literal,), 1))
    return None


def _after_literal_byte(below: tuple, frame: tuple) -> Branch:
    """A literal that is complete and cannot go on is popped at once (a string enum after its closing quote)."""
    _, options, position = frame
    if all(len(option) == position for option in options):
        return _complete(below), 0
    return below + (frame,), 0


def _literal_byte(frames: tuple, frame: tuple, byte: int) -> Moved:
    kind, options, position = frame
    if kind == "key":
        matching = tuple(option for option in options if option[0][position] == byte)
        if not matching:
            return None
        if len(matching) == 1 and len(matching[0][0]) == position + 1:  # the key's closing quote
            obj = frames[-2]
            return frames[:-2] + (("obj", obj[1], obj[2] | {matching[0][1]}, "colon", matching[0][1]),), 0
        return frames[:-1] + (("key", matching, position + 1),), 0
    matching = tuple(option for option in options if len(option) > position and option[position] == byte)
    if matching:
        return _after_literal_byte(frames[:-1], ("lit", matching, position + 1))
    if any(len(option) == position for option in options) and frames[:-1]:  # complete (a number enum): pop, retry
        return _advance((_complete(frames[:-1]), 0), byte)
    return None


def _complete(frames: tuple) -> tuple:
    """The stack after the value on top of `frames` is complete (its frame already popped): the container below
    was already moved past the value when it was pushed; no container left: the document is done."""
    return frames if frames else DONE


def _string(frames: tuple, frame: tuple, byte: int) -> Branch | None:
    """Phases: "body"; "esc" after a backslash; an int, the hex digits of a \\u escape still due; ("utf", low,
    high, more): inside a UTF-8 character, the next byte in low..high and `more` after it (only whole characters
    are text, so every answer decodes)."""
    phase = frame[1]
    if phase == "esc":
        if byte == ord("u"):
            return frames[:-1] + (("str", 4),), 0
        return (frames[:-1] + (("str", "body"),), 0) if byte in ESCAPES else None
    if isinstance(phase, int):
        if byte not in HEX:
            return None
        return frames[:-1] + (("str", phase - 1 if phase > 1 else "body"),), 0
    if isinstance(phase, tuple):
        _, low, high, more = phase
        if not low <= byte <= high:
            return None
        return frames[:-1] + (("str", ("utf", 0x80, 0xBF, more - 1) if more else "body"),), 0
    if byte == ord('"'):
        below = frames[:-1]
        if below and below[-1][0] == "obj" and below[-1][3] == "keystr":  # a free object's key ended
            obj = below[-1]
            return below[:-1] + (("obj", obj[1], obj[2], "colon", None),), 0
        return _complete(below), 0
    if byte == ord("\\"):
        return frames[:-1] + (("str", "esc"),), 0
    if byte >= 0x80:
        lead = UTF8_LEADS.get(byte)
        return (frames[:-1] + (("str", ("utf", *lead)),), 0) if lead else None
    return (frames, 0) if byte >= 0x20 else None  # raw control characters are not allowed inside JSON strings


def _utf8_leads() -> dict[int, tuple[int, int, int]]:
    """UTF-8 lead byte -> (lowest, highest second byte, continuation bytes after the second): no overlong forms,
    no surrogates, nothing past U+10FFFF."""
    leads = {byte: (0x80, 0xBF, 0) for byte in range(0xC2, 0xE0)}
    leads |= {byte: (0x80, 0xBF, 1) for byte in range(0xE1, 0xF0)}
    leads |= {0xE0: (0xA0, 0xBF, 1), 0xED: (0x80, 0x9F, 1)}
    leads |= {byte: (0x80, 0xBF, 2) for byte in range(0xF1, 0xF4)}
    leads |= {0xF0: (0x90, 0xBF, 2), 0xF4: (0x80, 0x8F, 2)}
    return leads


UTF8_LEADS = _utf8_leads()


def _number(frame: tuple, byte: int) -> tuple | None:
    _, integer, phase = frame
    char = chr(byte)
    if byte in DIGITS:
        key = "0" if char == "0" and phase == "sign" else "digit"  # no leading zero: "-0" is "zero", like "0"
    else:
        key = "e" if char in "eE" else "sign" if char in "+-" else char
    moves = {
        "sign": {"0": "zero", "digit": "int"},
        "zero": {".": "dot", "e": "exp"},
        "int": {"digit": "int", ".": "dot", "e": "exp"},
        "dot": {"digit": "frac"},
        "frac": {"digit": "frac", "e": "exp"},
        "exp": {"sign": "exp_sign", "digit": "exp_digits"},
        "exp_sign": {"digit": "exp_digits"},
        "exp_digits": {"digit": "exp_digits"},
    }[phase]
    if key not in moves or (integer and key in (".", "e")):
        return None
    return ("num", integer, moves[key])


def _object(frames: tuple, frame: tuple, byte: int) -> Branch | None:
    _, obj, seen, phase, key = frame
    below = frames[:-1]
    if phase in ("first", "key"):
        if byte == ord("}") and phase == "first" and obj.required <= seen:
            return _complete(below), 0
        if byte != ord('"'):
            return None
        if obj.free:
            return below + (("obj", obj, seen, "keystr", None), ("str", "body")), 0
        options = tuple((_key_text(name), name) for name, _ in obj.properties if name not in seen)
        return (below + (frame, ("key", options, 1)), 0) if options else None
    if phase == "colon":
        if byte != ord(":"):
            return None
        return below + (("obj", obj, seen, "after", None), ("val", obj.value_of(key), False)), 0
    # after a value
    if byte == ord(",") and (obj.free or any(name not in seen for name, _ in obj.properties)):
        return below + (("obj", obj, seen, "key", None),), 0
    if byte == ord("}") and obj.required <= seen:
        return _complete(below), 0
    return None


def _array(frames: tuple, frame: tuple, byte: int) -> Moved:
    _, arr, count, phase = frame
    below = frames[:-1]
    closes = byte == ord("]") and count >= arr.min_items and phase != "next"
    if closes:
        return _complete(below), 0
    if phase == "after":
        if byte == ord(",") and (arr.max_items is None or count < arr.max_items):
            return below + (("arr", arr, count, "next"),), 0
        return None
    pushed = below + (("arr", arr, count + 1, "after"),)
    return _value(pushed, arr.items, byte)


def closing(state: State) -> bytes:
    """The shortest bytes that complete the document from `state` (fed one byte token at a time near the limit):
    the shortest of its branches' closings."""
    return min((_closing(frames) for frames, _ in state), key=len)


def _closing(frames: tuple) -> bytes:
    """The shortest bytes that complete the document in one branch (a stack of frames)."""
    out, typing_key = b"", None
    for depth in range(len(frames) - 1, -1, -1):
        frame = frames[depth]
        kind = frame[0]
        if kind == "val":
            out += minimal(frame[1])
        elif kind == "lit":
            out += min((option for option in frame[1]), key=len)[frame[2] :]
        elif kind == "str":
            phase = frame[1]
            if isinstance(phase, tuple):  # the rest of a UTF-8 character
                out += bytes([phase[1]]) + b"\x80" * phase[3]
            elif phase == "esc" or isinstance(phase, int):
                out += b"n" if phase == "esc" else b"0" * phase
            out += b'"'
        elif kind == "num":
            out += b"" if frame[2] in NUMBER_END_STATES else b"0"
        elif kind == "key":  # the shortest key that matches so far, a required one if any is
            obj = frames[depth - 1]
            missing = [option for option in frame[1] if option[1] in obj[1].required]
            text, typing_key = min(missing or frame[1], key=lambda option: len(option[0]))
            out += text[frame[2] :]
        elif kind == "obj":
            out += _close_object(frame, typing_key)
            typing_key = None
        else:
            out += _close_array(frame)
    return out


def _close_object(frame: tuple, typing_key: str | None) -> bytes:
    """The bytes that close an object: the value of the key being written (if any), then the required members it
    lacks (or, right after a ',', one member), then '}'."""
    _, obj, seen, phase, key = frame
    current = typing_key if typing_key is not None else key
    in_member = typing_key is not None or phase in ("colon", "keystr")
    out = b":" + minimal(obj.value_of(current)) if in_member else b""
    if current is not None:
        seen = seen | {current}
    missing = [name for name, _ in obj.properties if name in obj.required and name not in seen]
    members = [_key_text(name) + b":" + minimal(obj.value_of(name)) for name in missing]
    after_comma = phase == "key" and not in_member
    if after_comma and not members:  # a member must follow the ','
        if obj.free:
            members = [b'"":0']
        else:
            name = min((name for name, _ in obj.properties if name not in seen), key=len)
            members = [_key_text(name) + b":" + minimal(obj.value_of(name))]
    if after_comma or (phase == "first" and not in_member):  # nothing written since the '{' or the ','
        return out + b",".join(members) + b"}"
    return out + b"".join(b"," + member for member in members) + b"}"


def _close_array(frame: tuple) -> bytes:
    _, arr, count, phase = frame
    if phase == "next":
        count += 1
        items = [minimal(arr.items)]
    else:
        items = []
    missing = max(0, arr.min_items - count)
    items += [minimal(arr.items)] * missing
    if phase == "first":
        return b",".join(items) + b"]"
    return b"".join((b"," if i or phase == "after" else b"") + item for i, item in enumerate(items)) + b"]"


def in_free_string(state: State) -> bool:
    """Whether every branch is inside a free string (where plain text changes nothing but the whitespace run)."""
    return all(frames and frames[-1] == ("str", "body") for frames, _ in state)


class Matcher:
    """Output bytes against a node, one at a time: `feed` is False (and changes nothing) for a byte that cannot
    come next."""

    def __init__(self, node: Node = ANY_OBJECT, state: State | None = None) -> None:
        self.node = node
        self.state = start_state(node) if state is None else state

    def copy(self) -> Matcher:
        return Matcher(self.node, self.state)

    @property
    def done(self) -> bool:
        """The document is complete (brackets decide the nesting, so all live branches complete together)."""
        return any(frames == DONE for frames, _ in self.state)

    def feed(self, byte: int) -> bool:
        moved = advance(self.state, byte)
        if moved is None:
            return False
        self.state = moved
        return True

    def feed_all(self, data: bytes) -> bool:
        return all(self.feed(byte) for byte in data)

    def closing(self) -> bytes:
        return closing(self.state)


# ----------------------------------------------------------------------------------------------- the vocabulary


def is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class TokenTrie:
    """The vocabulary's token bytes as a trie (special and empty tokens left out), and the numpy mask of the tokens
    a free string takes whatever they hold (whole UTF-8 text without a quote, backslash or control character)."""

    def __init__(self, token_bytes: list[bytes], excluded: set[int]) -> None:
        self.vocab = len(token_bytes)
        self.plain = np.zeros(self.vocab, dtype=bool)
        self.children: list[dict[int, int]] = [{}]  # the full trie: node -> {byte: child}
        self.ends: list[list[int]] = [[]]  # node -> tokens whose bytes end there
        # the tokens a free string may take but not as they come: holding '"' or '\\', or a part of a character
        self.quoted_children: list[dict[int, int]] = [{}]
        self.quoted_ends: list[list[int]] = [[]]
        for token, data in enumerate(token_bytes):
            if token in excluded or not data:
                continue
            self._insert(self.children, self.ends, token, data)
            if b'"' in data or b"\\" in data or not is_text(data):
                self._insert(self.quoted_children, self.quoted_ends, token, data)
            elif min(data) >= 0x20:
                self.plain[token] = True

    @staticmethod
    def _insert(children: list[dict[int, int]], ends: list[list[int]], token: int, data: bytes) -> None:
        node = 0
        for byte in data:
            following = children[node].get(byte)
            if following is None:
                following = len(children)
                children[node][byte] = following
                children.append({})
                ends.append([])
            node = following
        ends[node].append(token)

    def allowed(self, state: State) -> tuple[np.ndarray, list[tuple[int, State]]]:
        """(a mask of tokens that leave `state` unchanged but for its whitespace run: the plain ones inside a free
        string, else none; every other allowed token with the state after it)."""
        if in_free_string(state):
            plain_state = tuple((frames, 0) for frames, _ in state)
            return self.plain, self._walk(self.quoted_children, self.quoted_ends, plain_state)
        return np.zeros(self.vocab, dtype=bool), self._walk(self.children, self.ends, state)

    @staticmethod
    def _walk(children: list[dict[int, int]], ends: list[list[int]], state: State) -> list[tuple[int, State]]:
        found: list[tuple[int, State]] = []
        pending = [(0, state)]
        while pending:
            node, at = pending.pop()
            for byte, child in children[node].items():
                moved = advance(at, byte)
                if moved is None:
                    continue
                found.extend((token, moved) for token in ends[child])
                if children[child]:
                    pending.append((child, moved))
        return found
