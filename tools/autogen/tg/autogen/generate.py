"""The generator: walk a libclang translation unit and write a ctypes module for the declarations of the headers.

Every emitted statement is executed as it is produced (in a namespace that mirrors the final module), so a
declaration that would not import is dropped with a message instead of breaking the file. Output order is the
headers' order, so the same headers always give the same text.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tg.autogen.ctypes_names import BUILTIN_KINDS, WELL_KNOWN_TYPEDEFS
from tg.autogen.evaluate import MacroValues
from tg.autogen.macros import (
    PLAIN_INTEGER,
    ExpressionTranslator,
    Untranslatable,
    macro_line,
    safe_name,
    split_macro,
)
from tg.autogen.parse import AutogenError, clang_args, diagnostics, parse_headers

PRELUDE = """\
import ctypes

from tg.drivers import cbind
from tg.drivers.cbind import _IO, _IOC, _IOR, _IOW, _IOWR
"""

# C integer types the macro functions know (tg.drivers.cint.C_TYPES), by spelling.
C_TYPES = {"_Bool", "char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned int", "long"}
C_TYPES |= {"unsigned long", "long long", "unsigned long long"}


@dataclass(frozen=True)
class Options:
    """What to generate: the module NAME from HEADERS, binding functions to shared library LIB (if any)."""

    name: str
    headers: tuple[str, ...]
    lib: str | None = None
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    clang_args: tuple[str, ...] = ()
    # Only names matching one of these regexes (re.match) are emitted; empty means all.
    patterns: tuple[str, ...] = ()
    # (header, regex) pairs: names from that header must also match its regex.
    header_patterns: tuple[tuple[str, str], ...] = ()
    # Headers whose declarations are emitted too but that are reached through HEADERS, not included directly.
    indirect: tuple[str, ...] = ()
    # Emit what parses even when libclang reports errors (missing includes); off by default.
    allow_errors: bool = False
    # Comment lines for the top of the file (provenance), without the leading '# '.
    comments: tuple[str, ...] = ()
    # Also record every other header the translation unit reads, with package, version and hash (for regen --check).
    record_includes: bool = False


@dataclass(frozen=True)
class Skipped:
    name: str
    reason: str


@dataclass(frozen=True)
class Generated:
    source: str
    skipped: tuple[Skipped, ...]
    diagnostics: tuple[str, ...]
    # Facts the user should know that are not failures (a record left opaque because another header defines it).
    notes: tuple[str, ...] = ()


class Unsupported(Exception):
    """A declaration the generator cannot express; it is skipped with this reason."""


@dataclass
class _Macro:
    """A #define (or a static const initializer, already translated into LINE), emitted after declarations."""

    name: str
    text: str
    line: str | None = None


@dataclass
class _State:
    chunks: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    namespace: dict[str, Any] = field(default_factory=dict)
    record_names: dict[str, str] = field(default_factory=dict)
    taken_record_names: set[str] = field(default_factory=set)  # record_names' values, for a constant-time check
    record_cursors: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    declared_records: set[str] = field(default_factory=set)
    defined_records: set[str] = field(default_factory=set)
    typedefs: dict[str, Any] = field(default_factory=dict)
    emitted_typedefs: set[str] = field(default_factory=set)
    macros: list[_Macro] = field(default_factory=list)
    c_bodies: dict[str, str] = field(default_factory=dict)
    anonymous_count: int = 0


def generate(options: Options) -> Generated:
    """Parse the headers of OPTIONS and return the module text, what was skipped and libclang's errors."""
    for pattern in (*options.patterns, *(p for _, p in options.header_patterns)):
        _regex(pattern)  # a bad pattern is an error before any parsing
    args = clang_args(options.include_dirs, options.defines, options.clang_args)
    missing = [h for h in options.headers + options.indirect if not Path(h).is_file()]
    if missing:
        raise AutogenError(f"header not found: {', '.join(missing)}")
    unit = parse_headers(options.headers, args)
    errors = diagnostics(unit)
    if errors and not options.allow_errors:
        # A header that does not compile gives records with missing fields: refuse rather than emit wrong layouts.
        raise AutogenError(f"libclang reported {len(errors)} error(s), first: {errors[0]}")
    from tg.autogen.parse import builtin_include_dir
    from tg.autogen.umbrella import expand

    expansion = expand(unit, options.headers, builtin_include_dir())
    if expansion.added:
        options = dataclasses.replace(options, indirect=options.indirect + expansion.added)
    writer = ModuleWriter(options)
    writer.state.notes.extend(expansion.notes)
    for umbrella, others in expansion.elsewhere:
        writer.state.notes.append(f"{umbrella} includes from other folders, not bound: {' '.join(others)}")
    if options.record_includes:
        writer.include_comments = include_comments(unit, options.headers + options.indirect)
    writer.walk(unit.cursor)
    writer.finish_records()
    macro_start = len(writer.state.chunks)
    writer.evaluate_macros(args)
    writer.emit_macros()
    writer.use_c_values(macro_start)
    writer.bind_on_use()
    outside = [n for n in writer.bound_outside if n.startswith("enum ") or n in writer.state.namespace]
    if outside:
        writer.state.notes.append(f"bound from included headers, as the targets use them: {', '.join(outside)}")
    if not writer.state.chunks or writer.state.chunks == writer.initial_chunks:
        if expansion.elsewhere:  # an umbrella whose headers are all elsewhere: an empty module would hide that
            elsewhere = " ".join(path for _, paths in expansion.elsewhere for path in paths)
            raise AutogenError(
                f"nothing to bind in {', '.join(options.headers)}: it declares nothing itself and includes only "
                f"headers from other folders; pass the ones to bind as headers: {elsewhere}"
            )
        errors.append(f"nothing to bind in {', '.join(options.headers)}: the module is empty")
    return Generated(writer.source(), tuple(writer.state.skipped), tuple(errors), tuple(writer.state.notes))


def include_comments(unit: Any, sources: Sequence[str]) -> list[str]:
    """Provenance lines for every header UNIT read besides SOURCES and the compiler's builtin headers: a change in
    any of them changes the output."""
    from tg.autogen.parse import builtin_include_dir
    from tg.autogen.provenance import describe_sources, recorded_path

    seen = {os.path.realpath(s) for s in sources}
    builtin = builtin_include_dir()
    paths: list[str] = []
    for inclusion in unit.get_includes():
        name = os.path.normpath(inclusion.include.name)
        if builtin and name.startswith(builtin.rstrip("/") + "/"):
            continue  # the compiler's own headers (gcc's or some clang's): not part of what the module depends on
        if os.path.realpath(name) not in seen:
            seen.add(os.path.realpath(name))
            paths.append(recorded_path(name))
    if not paths:
        return []
    return ["Included headers:", *(source.comment() for source in describe_sources(paths))]


class ModuleWriter:
    """Turns cursors into validated Python statements, in order."""

    def __init__(self, options: Options) -> None:
        from clang import cindex

        self.ci = cindex
        self.options = options
        self.state = _State()
        self.targets = {os.path.realpath(h): h for h in options.headers + options.indirect}
        self.header_patterns = {os.path.realpath(h): _regex(p) for h, p in options.header_patterns}
        self.patterns = [_regex(p) for p in options.patterns]
        self.texts: dict[str, bytes] = {}
        self.file_cache: dict[str, str | None] = {}
        self.translator = ExpressionTranslator(self.typedef_ctype)
        exec(PRELUDE, self.state.namespace)
        if options.lib:
            self.add(f'dll = cbind.DLL("{options.lib}", use_errno=True)', "dll")
        self.initial_chunks = list(self.state.chunks)
        self.include_comments: list[str] = []
        # Macros and enums of the headers the targets include, by name: bound only when a target's macro, constant
        # or declaration uses them (binding all of libc for one constant would bury the target's names).
        self.outside_macros: dict[str, Any] = {}
        self.outside_enums: list[Any] = []
        self.outside_constants: dict[str, int] | None = None  # enumerator -> value, built on first need
        self.bound_outside: list[str] = []
        self.variables: dict[str, str] = {}  # extern variable -> ctypes type, bound by bind_variables()
        # Names whose evaluation reaches into the library: C functions, extern variables, and the macros that use
        # them. An object-like macro among them (`#define zlib_version zlibVersion()`) is evaluated on use, never at
        # import (the module must import without the library), through the module's __getattr__.
        self.calls_library: set[str] = set()
        self.by_value_noted = False
        self.on_use: set[str] = set()  # extern variables and macros evaluated on use: module attributes only
        self.deferred: dict[str, str] = {}  # macro -> Python expression, evaluated on each use
        self.c_values = MacroValues([], [], [])  # filled by evaluate_macros()
        self.c_values_more: list[MacroValues] = []
        self.args: Sequence[str] = ()

    # ---------------------------------------------------------------------------------------------------- output

    def source(self) -> str:
        comments = self.options.comments + tuple(self.include_comments)
        header = [f"# {line}" if line else "#" for line in comments]
        # Generated code is exempt from lint and formatting, even when a hook passes the file to ruff by name.
        parts = ["\n".join(header + ["# ruff: noqa", "# fmt: off"]), PRELUDE.rstrip()]
        body: list[str] = []
        for chunk in self.state.chunks:
            multiline = "\n" in chunk
            if body and (multiline or "\n" in body[-1]):
                body.append("")
            body.append(chunk)
        return "\n\n".join(parts) + "\n\n" + "\n".join(body) + "\n"

    def add(self, chunk: str, name: str) -> None:
        """Execute CHUNK in the module namespace and keep it; raise Unsupported if it does not run."""
        try:
            exec(compile(chunk, f"<{name}>", "exec"), self.state.namespace)
        except Exception as exc:  # any failure means the statement cannot be part of the module
            raise Unsupported(f"{type(exc).__name__}: {exc}") from exc
        self.state.chunks.append(chunk)

    def skip(self, name: str, reason: str) -> None:
        self.state.skipped.append(Skipped(name, reason))

    # ---------------------------------------------------------------------------------------------------- walking

    def target_of(self, cursor: Any) -> str | None:
        """The real path of the target header CURSOR is in, or None when it is in another header."""
        location_file = cursor.location.file
        if location_file is None:
            return None
        name = location_file.name
        if name not in self.file_cache:
            real = os.path.realpath(name)
            self.file_cache[name] = real if real in self.targets else None
        return self.file_cache[name]

    def wanted(self, name: str, path: str) -> bool:
        if self.patterns and not any(p.match(name) for p in self.patterns):
            return False
        pattern = self.header_patterns.get(path)
        return pattern is None or pattern.match(name) is not None

    def walk(self, root: Any) -> None:
        kinds = self.ci.CursorKind
        handlers = {
            kinds.MACRO_DEFINITION: self.collect_macro,
            kinds.STRUCT_DECL: self.emit_record,
            kinds.UNION_DECL: self.emit_record,
            kinds.ENUM_DECL: self.emit_enum,
            kinds.TYPEDEF_DECL: self.emit_typedef,
            kinds.FUNCTION_DECL: self.emit_function,
            kinds.VAR_DECL: self.emit_variable,
        }
        for cursor in root.get_children():
            kind = cursor.kind
            if kind == kinds.TYPEDEF_DECL:
                self.state.typedefs.setdefault(cursor.spelling, cursor)
            handler = handlers.get(kind)
            if handler is None:
                continue
            path = self.target_of(cursor)
            if path is None:
                if kind == kinds.MACRO_DEFINITION:  # a target's macro may name it: bound then (see bind_outside)
                    self.outside_macros[cursor.spelling] = cursor
                elif kind == kinds.ENUM_DECL:
                    self.outside_enums.append(cursor)
                continue
            name = cursor.spelling
            if kind not in (kinds.ENUM_DECL, kinds.STRUCT_DECL, kinds.UNION_DECL) and not self.wanted(name, path):
                continue
            try:
                handler(cursor, path)
            except (Unsupported, Untranslatable) as exc:
                self.skip(name, str(exc))
            except ValueError as exc:  # clang.cindex meets a kind it does not know
                self.skip(name, f"not understood by clang.cindex: {exc}")

    # ---------------------------------------------------------------------------------------------------- types

    def ctype(self, t: Any, by_value: bool = True, param: bool = False) -> str:
        """The ctypes expression for libclang type T; records used by value are defined first."""
        try:
            return self._ctype(t, by_value, param)
        except ValueError as exc:  # kinds newer than the clang.cindex module (_Float16 is kind 32)
            raise Unsupported(f"type {t.spelling} is not known to clang.cindex ({exc})") from exc

    def _ctype(self, t: Any, by_value: bool, param: bool) -> str:
        kinds = self.ci.TypeKind
        kind = t.kind
        if kind == kinds.ELABORATED:
            return self.ctype(t.get_named_type(), by_value, param)
        if kind.name in BUILTIN_KINDS:
            return BUILTIN_KINDS[kind.name]
        if kind == kinds.VOID:
            return "None"
        if kind == kinds.TYPEDEF:
            return self.typedef_type(t, by_value, param)
        if kind == kinds.RECORD:
            decl = t.get_declaration()
            return self.define_record(decl) if by_value else self.declare_record(decl)
        if kind == kinds.ENUM:
            decl = t.get_declaration()
            named = f"enum_{decl.spelling}"
            if named not in self.state.namespace and self.target_of(decl) is None and not decl.is_anonymous():
                self.bind_outside_enum(decl)  # an enum of an included header that a target uses: its constants too
            return named if named in self.state.namespace else self.ctype(decl.enum_type)
        if kind == kinds.POINTER:
            return self.pointer_type(t.get_pointee())
        if kind in (kinds.CONSTANTARRAY, kinds.INCOMPLETEARRAY):
            element = self.ctype(t.element_type)
            if param:
                return f"ctypes.POINTER({element})"
            count = t.element_count if kind == kinds.CONSTANTARRAY else 0
            return f"({element} * {count})"
        if kind in (kinds.FUNCTIONPROTO, kinds.FUNCTIONNOPROTO):
            return self.function_type(t)
        raise Unsupported(f"type {t.spelling} ({kind.name}) has no ctypes equivalent")

    def typedef_type(self, t: Any, by_value: bool, param: bool) -> str:
        name = t.get_declaration().spelling
        if name in self.state.emitted_typedefs:
            underlying = t.get_canonical()
            if by_value and underlying.kind == self.ci.TypeKind.RECORD:
                self.define_record(underlying.get_declaration())
            return name
        if name in WELL_KNOWN_TYPEDEFS:
            return WELL_KNOWN_TYPEDEFS[name]
        return self.ctype(t.get_declaration().underlying_typedef_type, by_value, param)

    def typedef_ctype(self, name: str) -> str | None:
        """For macros: the ctypes spelling of typedef NAME, or None when NAME is not a type."""
        if name in self.state.emitted_typedefs:
            return name
        if name in WELL_KNOWN_TYPEDEFS:
            return WELL_KNOWN_TYPEDEFS[name]
        cursor = self.state.typedefs.get(name)
        if cursor is None:
            return None
        try:
            return self.ctype(cursor.underlying_typedef_type)
        except Unsupported:
            return None

    def pointer_type(self, pointee: Any) -> str:
        kinds = self.ci.TypeKind
        canonical = pointee.get_canonical()
        if canonical.kind == kinds.VOID:
            return "ctypes.c_void_p"
        if canonical.kind in (kinds.CHAR_S, kinds.CHAR_U):
            return "ctypes.c_char_p"
        if canonical.kind in (kinds.FUNCTIONPROTO, kinds.FUNCTIONNOPROTO):
            return self.function_type(canonical)
        return f"ctypes.POINTER({self.ctype(pointee, by_value=False)})"

    def function_type(self, t: Any) -> str:
        restype = self.ctype(t.get_result(), param=True)
        args = [self.ctype(a, param=True) for a in t.argument_types()] if t.kind.name == "FUNCTIONPROTO" else []
        # Prototypes with records by value need cbind's CFUNCTYPE (the ABI shadow types); the others stay plain.
        by_value = any(self.is_record_class(name) for name in [restype, *args])
        return f"{'cbind' if by_value else 'ctypes'}.CFUNCTYPE({', '.join([restype, *args])})"

    def is_record_class(self, expression: str) -> bool:
        from tg.drivers import cbind

        value = self.state.namespace.get(expression)
        return isinstance(value, type) and issubclass(value, cbind.Struct | cbind.Union)

    # ---------------------------------------------------------------------------------------------------- records

    def record_key(self, decl: Any) -> str:
        """Identity of a record within the translation unit: its definition, else its USR (opaque types).

        Neither USRs (anonymous siblings share one) nor locations (records written by one macro expansion, like
        the kernel's __DECLARE_FLEX_ARRAY, share one) are unique alone; together they are.
        """
        definition = decl.get_definition()
        if definition is not None:
            start = definition.extent.start
            return f"{definition.get_usr()}@{start.file.name if start.file else ''}:{start.offset}"
        return decl.get_usr() or decl.spelling

    def declare_record(self, decl: Any) -> str:
        """The class name of record DECL, emitting an empty class for it the first time it is seen."""
        key = self.record_key(decl)
        name = self.state.record_names.get(key)
        if name is None:
            name = self.name_record(key, self.record_class_name(decl), decl)
        self.state.record_cursors.setdefault(key, decl)
        if key not in self.state.declared_records:
            base = "Union" if decl.kind == self.ci.CursorKind.UNION_DECL else "Struct"
            # The docstring is the C spelling of the type (for named records), which the ABI tests use.
            body = "pass" if decl.is_anonymous() else f'"""{decl.type.get_canonical().spelling}"""'
            self.add(f"class {name}(cbind.{base}):\n    {body}", name)
            self.state.declared_records.add(key)
        return name

    def name_record(self, key: str, wanted: str, decl: Any) -> str:
        """Give the record KEY the class name WANTED, or WANTED_2, ... when another record has it already
        (`struct a_b` and the member `b` of `struct a`; `typedef struct {...} foo` and `struct foo`): two C types
        must never become one class. A renamed record is named in a note."""
        taken = self.state.taken_record_names
        name, number = wanted, 1
        while name in taken:
            number += 1
            name = f"{wanted}_{number}"
        if name != wanted:
            where = decl.location
            origin = f"{where.file.name}:{where.line}" if where.file else "?"
            self.state.notes.append(f"the record at {origin} is named {name}: {wanted} is another record")
        self.state.record_names[key] = name
        taken.add(name)
        return name

    def record_class_name(self, decl: Any) -> str:
        prefix = "union" if decl.kind == self.ci.CursorKind.UNION_DECL else "struct"
        if decl.is_anonymous():
            self.state.anonymous_count += 1
            return f"_anon_{prefix}{self.state.anonymous_count}"
        return f"{prefix}_{decl.spelling}"

    def define_record(self, decl: Any) -> str:
        """Emit the class and layout of record DECL (once) and return its class name."""
        name = self.declare_record(decl)
        definition = decl.get_definition()
        key = self.record_key(decl)
        if key in self.state.defined_records:
            return name
        if definition is None:
            raise Unsupported(f"{name} is an incomplete type")
        self.state.defined_records.add(key)
        members = self.record_members(name, definition)
        self.define_nested_records(definition)
        size = definition.type.get_size()
        align = definition.type.get_align()
        body = "".join(f"    {m},\n" for m in members)
        # The C alignment matters to calls only beyond 8 (16-byte stack slots); it is written only then.
        align_argument = f", align={align}" if align > 8 else ""
        # The pointer type is made before the layout: ctypes copies the pointee's buffer format string into every
        # new pointer type, so a pointer made after the layout carries the whole nested format, and a chain of
        # records each pointing to the previous one grew quadratically (20,000 records took 19.5 GB).
        pointer = f"ctypes.POINTER({name})\n"
        try:
            self.add(f"{pointer}{name}.layout({size}, [\n{body}]{align_argument})", name)
        except Unsupported:
            self.state.defined_records.discard(key)
            raise
        return name

    def define_nested_records(self, definition: Any) -> None:
        """Lay out named records declared inside DEFINITION (C gives them file scope), which the walk of the
        top-level cursors never reaches; otherwise a pointer to one would index a size-0 class."""
        kinds = self.ci.CursorKind
        for child in definition.get_children():
            if (
                child.kind in (kinds.STRUCT_DECL, kinds.UNION_DECL)
                and child.is_definition()
                and not child.is_anonymous()
            ):
                try:
                    self.define_record(child)
                except Unsupported as exc:
                    self.skip(child.spelling, str(exc))

    def finish_records(self) -> None:
        """Every record named so far but not laid out: lay it out when a target header defines it, else make it
        explicitly opaque (with a note when another header has the definition the user might want to add)."""
        for key, decl in list(self.state.record_cursors.items()):
            if key in self.state.defined_records:
                continue
            name = self.state.record_names[key]
            definition = decl.get_definition()
            if definition is not None and self.target_of(definition) is not None:
                try:
                    self.define_record(definition)
                    continue
                except Unsupported as exc:
                    self.skip(name, str(exc))
            if definition is not None:
                where = definition.location.file.name if definition.location.file else "another header"
                self.state.notes.append(f"{name} is opaque: its definition is in {where}, which is not a target header")
                reason = f"defined in {where}"
            else:
                reason = "declared but never defined in C"
            self.add(f'{name}.opaque("{reason}")', name)

    def record_members(self, record: str, definition: Any) -> list[str]:
        members: list[str] = []
        anonymous = 0
        for member in definition.type.get_fields():
            offset = member.get_field_offsetof()
            name = member.spelling
            member_type = member.type
            if member.is_bitfield():
                if name:
                    members.append(self.bitfield(name, member, offset))
                continue
            decl = member_type.get_canonical().get_declaration()
            if not name.isidentifier() and decl.is_anonymous():
                if self.record_key(decl) not in self.state.record_names:
                    self.name_record(self.record_key(decl), f"{record}_anon{anonymous}", decl)
                nested = self.define_record(decl)
                members.append(f'cbind.Anonymous("_anon{anonymous}", {nested}, {offset // 8})')
                anonymous += 1
                continue
            if decl.kind in (self.ci.CursorKind.STRUCT_DECL, self.ci.CursorKind.UNION_DECL) and decl.is_anonymous():
                if self.record_key(decl) not in self.state.record_names:
                    self.name_record(self.record_key(decl), f"{record}_{name}", decl)
            members.append(f'cbind.Field("{name}", {self.field_type(record, name, member_type)}, {offset // 8})')
        return members

    def field_type(self, record: str, name: str, member_type: Any) -> str:
        try:
            return self.ctype(member_type)
        except Unsupported as exc:
            # Keep the layout exact even when the member's type cannot be expressed: expose its raw bytes.
            self.skip(f"{record}.{name}", f"{exc}; exposed as raw bytes")
            return f"(ctypes.c_ubyte * {member_type.get_size()})"

    def bitfield(self, name: str, member: Any, offset: int) -> str:
        integer = self.ctype(member.type)
        return f'cbind.BitField("{name}", {integer}, {offset // 8}, {offset % 8}, {member.get_bitfield_width()})'

    def emit_record(self, cursor: Any, path: str) -> None:
        if not cursor.is_definition() or cursor.is_anonymous():
            return
        if not self.wanted(cursor.spelling, path):
            return
        self.define_record(cursor)

    # ---------------------------------------------------------------------------------------------------- others

    def emit_enum(self, cursor: Any, path: str) -> None:
        if not cursor.is_definition():
            return
        lines = []
        for constant in cursor.get_children():
            if constant.kind == self.ci.CursorKind.ENUM_CONSTANT_DECL and self.wanted(constant.spelling, path):
                lines.append(f"{safe_name(constant.spelling)} = {constant.enum_value}")
        if not cursor.is_anonymous() and self.wanted(cursor.spelling, path):
            lines.append(f"enum_{cursor.spelling} = {self.ctype(cursor.enum_type)}")
        if lines:
            self.add("\n".join(lines), cursor.spelling)

    def bind_outside_enum(self, cursor: Any) -> None:
        """Emit enum CURSOR from a non-target header (its constants and `enum_NAME`), noting that it was."""
        definition = cursor.get_definition()
        if definition is None:
            return
        lines = [
            f"{safe_name(c.spelling)} = {c.enum_value}"
            for c in definition.get_children()
            if c.kind == self.ci.CursorKind.ENUM_CONSTANT_DECL and c.spelling not in self.state.namespace
        ]
        lines.append(f"enum_{definition.spelling} = {self.ctype(definition.enum_type)}")
        self.add("\n".join(lines), definition.spelling)
        self.bound_outside.append(f"enum {definition.spelling}")

    def emit_typedef(self, cursor: Any, path: str) -> None:
        name = cursor.spelling
        underlying = cursor.underlying_typedef_type
        canonical = underlying.get_canonical()
        if canonical.kind in (self.ci.TypeKind.FUNCTIONPROTO, self.ci.TypeKind.FUNCTIONNOPROTO):
            value = self.function_type(canonical)
        else:
            # A typedef only names the record; the record itself is defined where the headers define it.
            value = self.ctype(underlying, by_value=False)
        if value != name:
            self.add(f"{name} = {value}", name)
        self.state.emitted_typedefs.add(name)

    def emit_function(self, cursor: Any, path: str) -> None:
        name = cursor.spelling
        if not self.options.lib or name in self.state.namespace:
            return
        if cursor.linkage != self.ci.LinkageKind.EXTERNAL:
            raise Unsupported("not an exported function (static or inline)")
        t = cursor.type
        restype = self.ctype(t.get_result(), param=True)
        argtypes = "None"
        arguments: list[str] = []
        if t.kind == self.ci.TypeKind.FUNCTIONPROTO:
            arguments = [self.ctype(a, param=True) for a in t.argument_types()]
            argtypes = "[" + ", ".join(arguments) + "]"
        if not self.by_value_noted and any(self.is_record_class(c) for c in [restype, *arguments]):
            self.state.chunks.append(BY_VALUE_NOTE)  # once, before the first function that needs it
            self.by_value_noted = True
        self.add(f'{name} = dll.function("{name}", {restype}, {argtypes})', name)
        self.calls_library.add(name)

    def emit_variable(self, cursor: Any, path: str) -> None:
        """`static const` scalars and arrays become Python values; extern variables are found in the library."""
        if cursor.storage_class in (self.ci.StorageClass.EXTERN, self.ci.StorageClass.NONE):
            if not self.options.lib:
                raise Unsupported("an extern variable: binding it needs a library (--lib)")
            self.variables[cursor.spelling] = self.ctype(cursor.type)
            self.calls_library.add(cursor.spelling)
            self.on_use.add(cursor.spelling)
            return
        if cursor.storage_class != self.ci.StorageClass.STATIC:
            raise Unsupported(f"{cursor.storage_class.name.lower()} variables are not bound")
        text = self.text(path, cursor.extent.start.offset, cursor.extent.end.offset)
        if "=" not in text:
            raise Unsupported("no initializer")
        initializer = text.split("=", 1)[1].strip()
        if initializer.startswith("{"):
            items = _split_top_level(initializer.strip("{} \n"))
            values = [self.translator.translate(item) for item in items]
            value = f"({values[0]},)" if len(values) == 1 else f"({', '.join(values)})"
        else:
            value = self.translator.translate(initializer)
        # Initializers may name macros, which are emitted last, so the line joins them in source order.
        self.state.macros.append(_Macro(cursor.spelling, text, f"{cursor.spelling} = {value}"))

    def bind_on_use(self) -> None:
        """Extern variables and macros that call into the library, as module attributes made on each use (a module
        __getattr__): importing the module never needs the library. A variable is a ctypes object over its memory."""
        if not self.variables and not self.deferred:
            return
        variables = _dict_literal({name: ctype for name, ctype in self.variables.items()})
        deferred = _dict_literal({name: f"lambda: {value}" for name, value in self.deferred.items()})
        try:
            self.add(_ON_USE.format(variables=variables, deferred=deferred), "__getattr__")
        except Unsupported as exc:  # never expected: each entry was built from types that ran; say so, do not crash
            for name in [*self.variables, *self.deferred]:
                self.skip(name, f"the module's __getattr__ does not run: {exc}")

    def text(self, path: str, start: int, end: int) -> str:
        if path not in self.texts:
            self.texts[path] = Path(path).read_bytes()
        return self.texts[path][start:end].decode("utf-8", "surrogateescape")  # see macro_text

    # ---------------------------------------------------------------------------------------------------- macros

    def collect_macro(self, cursor: Any, path: str) -> None:
        self.state.macros.append(_Macro(cursor.spelling, self.macro_text(cursor, path)))

    def macro_text(self, cursor: Any, path: str) -> str:
        """The definition runs from the name to the end of the line, continuation lines included. Reading it
        from the file is much faster than asking libclang for the extent of each of thousands of macros."""
        start = cursor.location.offset
        if path not in self.texts:
            self.texts[path] = Path(path).read_bytes()
        source = self.texts[path]
        end = start
        while True:
            end = source.find(b"\n", end)
            if end == -1:
                end = len(source)
                break
            if source[end - 1 : end] != b"\\":
                break
            end += 1
        # Bytes that are not UTF-8 (a Latin-1 string literal) survive as surrogates, back to bytes in bytes_literal.
        text = source[start:end].decode("utf-8", "surrogateescape")
        return _strip_comments(text)

    def expression_macros(self, macros: Iterable[_Macro]) -> dict[str, str]:
        """{name: body} of the object-like macros among MACROS that could be C expressions (see evaluate.py); every
        macro's body is kept in state.c_bodies on the way."""
        from tg.autogen.evaluate import could_be_expression

        found = {}
        for macro in macros:
            try:
                definition = split_macro(macro.text)
            except Untranslatable:
                continue
            body = " ".join(definition.body.replace("\\\n", " ").split())
            self.state.c_bodies[macro.name] = body
            if definition.params is None and body != macro.name and could_be_expression(body):
                found[macro.name] = body
        return found

    def evaluate_macros(self, args: Sequence[str]) -> None:
        """Ask clang for the value of every object-like macro that could be an expression (see evaluate.py)."""
        names = []
        literal_types: dict[str, str] = {}
        own = (macro for macro in self.state.macros if macro.line is None)
        for name, body in self.expression_macros(own).items():
            literal = PLAIN_INTEGER.fullmatch(body)
            if literal:  # a literal's value and C type need no compiler
                literal_types[name] = literal_type(literal.group(1))
            else:
                names.append(name)
        self.args = args
        self.c_values = MacroValues(self.options.headers, args, names)
        self.translator.macro_types = literal_types | {
            name: value.type_name for name, value in self.c_values.values.items() if value.type_name in C_TYPES
        }

    def emit_macros(self) -> None:
        """Translate macros in source order; ones naming a later macro are retried until nothing changes.

        An object-like macro that does not translate (or does not run) but that C evaluates gets C's value.
        """
        pending = [entry for macro in self.state.macros if (entry := self.first_line(macro)) is not None]
        while pending:
            # Each line after the lines it names: one pass runs a chain of macros that each name the next one,
            # where passes in source order took one per link (quadratic in the chain's length).
            failed = self.run_macros(_dependency_order(pending))
            if len(failed) == len(pending):
                added = self.bind_outside(failed)
                if not added:
                    break
                failed = added + failed
            pending = failed
        self.fall_back_to_c_values(pending)

    def first_line(self, macro: _Macro) -> tuple[str, str] | None:
        """(name, Python line) to try for MACRO: a pointer for pointer values, else the translation, else C's value."""
        value = self.c_values.values.get(macro.name)
        if value is not None and value.type_name == "pointer":
            line = self.pointer_line(macro.name, value)
            if line is not None:
                return macro.name, line
        line, reason = (macro.line, "") if macro.line else self.macro_statement(macro)
        if line is not None:
            return macro.name, line
        if value is not None:
            return macro.name, self.c_value_line(macro.name, value.value)
        if reason:
            self.skip(macro.name, reason)
        return None

    def bind_outside(self, failed: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Lines for the enumerators and macros of included headers that the FAILED lines name and the module
        lacks (`#define MY_FLAG (THEIR_FLAG | 4)`); their own dependencies follow in the next rounds."""
        known = self.state.namespace.keys() | vars(builtins).keys()
        missing = sorted({name for _, line in failed for name in _free_names(line)} - known)
        if self.outside_constants is None:
            self.outside_constants = {
                c.spelling: c.enum_value
                for enum in self.outside_enums
                for c in enum.get_children()
                if c.kind == self.ci.CursorKind.ENUM_CONSTANT_DECL
            }
        lines: list[tuple[str, str]] = []
        macros: list[_Macro] = []
        for name in missing:
            if name in self.outside_constants:
                lines.append((name, f"{name} = {self.outside_constants[name]}"))
            elif name in self.outside_macros:
                cursor = self.outside_macros.pop(name)  # popped: a name is tried once
                macros.append(_Macro(name, self.macro_text(cursor, os.path.realpath(cursor.location.file.name))))
        if macros:
            self.evaluate_more(macros)
        for macro in macros:
            entry = self.first_line(macro)
            if entry is not None:
                lines.append(entry)
        self.bound_outside += [name for name, _ in lines]
        return lines

    def evaluate_more(self, macros: list[_Macro]) -> None:
        """C values for MACROS too (macros of included headers bound on demand), as evaluate_macros() gives."""
        names = list(self.expression_macros(macros))
        if names:
            more = MacroValues(self.options.headers, self.args, names)
            self.c_values.values.update(more.values)
            self.c_values_more.append(more)  # keeps its translation unit alive while its types are in use

    def fall_back_to_c_values(self, failed: list[tuple[str, str]]) -> None:
        """Macros whose translation did not run: C's value where clang has one, else a skip with the reason."""
        fallback = []
        for name, line in failed:
            value = self.c_values.values.get(name)
            if value is not None and value.type_name != "pointer":
                fallback.append((name, self.c_value_line(name, value.value)))
            else:
                self.skip(name, f"does not evaluate: {self.macro_error(line)}")
        for name, line in self.run_macros(fallback) if fallback else []:
            self.skip(name, f"does not evaluate: {self.macro_error(line)}")

    def c_value_line(self, name: str, value: int) -> str:
        body = self.state.c_bodies.get(name, "?").encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return f"{name} = {value}{C_VALUE_COMMENT}{body}"

    def pointer_line(self, name: str, value: Any) -> str | None:
        """A pointer-valued macro (`((void *) -1)`, a function pointer cast) as a ctypes pointer of its type."""
        try:
            pointer = self.pointer_type(value.pointer_type.get_pointee())
        except Unsupported:
            return None
        if pointer == "ctypes.c_void_p":
            return f"{name} = ctypes.c_void_p({value.value:#x})"
        return f"{name} = ctypes.cast({value.value:#x}, {pointer})"

    def run_macros(self, lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Execute LINES in one compiled batch (each guarded by try), keep those that ran, return the rest.

        One compile for all lines is what keeps macro-heavy headers (elf.h has ~3000) fast.
        """
        known = set(self.state.namespace) | set(vars(builtins)) | self.on_use | {"__getattr__"}
        lines = list(lines)
        runnable = []
        literal_ok: set[tuple[str, str]] = set()
        for index, (name, line) in enumerate(lines):
            literal = _INTEGER_ASSIGNMENT.fullmatch(line)
            if literal:  # most macros are plain numbers: no need to compile them
                self.state.namespace[name] = int(literal.group(1), 0)
                literal_ok.add((name, line))
                known.add(name)
                continue
            names = _free_names(line)
            if names - known:
                continue
            known.add(name)
            if names & self.calls_library:
                self.calls_library.add(name)
                line = _through_module(line, self.on_use)
                lines[index] = (name, line)
                if not _is_macro_function(line):
                    if _compiles(line):  # never run here: it would call into the library
                        self.defer(name, line)
                        literal_ok.add((name, line))
                    continue
            runnable.append((name, line))
        guarded = [
            f"try:\n    {line}\nexcept Exception:\n    _failed_.add({i})" for i, (_, line) in enumerate(runnable)
        ]
        code = self.compile_lines(runnable, guarded)
        failed_indices: set[int] = set()
        self.state.namespace["_failed_"] = failed_indices
        exec(code, self.state.namespace)
        del self.state.namespace["_failed_"]
        kept = {(n, line) for i, (n, line) in enumerate(runnable) if i not in failed_indices} | literal_ok
        self.state.chunks.extend(line for n, line in lines if (n, line) in kept and n not in self.deferred)
        return [entry for entry in lines if entry not in kept]

    def defer(self, name: str, line: str) -> None:
        """Keep macro NAME (its LINE) to be evaluated on use: it reaches into the library."""
        self.deferred[name] = line.split(" = ", 1)[1]
        self.on_use.add(name)

    def compile_lines(self, runnable: list[tuple[str, str]], guarded: list[str]) -> Any:
        """Compile the guarded batch; lines with syntax errors become recorded failures."""
        try:
            return compile("\n".join(guarded), "<macros>", "exec")
        except SyntaxError:
            pass
        for index, (_, line) in enumerate(runnable):  # rare: find the bad lines one by one
            try:
                compile(line, "<macro>", "exec")
            except SyntaxError:
                guarded[index] = f"_failed_.add({index})"
        return compile("\n".join(guarded), "<macros>", "exec")

    def use_c_values(self, macro_start: int) -> None:
        """Replace integer macros whose Python value differs from C's (`~0U`, `1 << 31`) by C's value."""
        lines = self.state.chunks[macro_start:]
        index_of = {}
        for offset, line in enumerate(lines):
            name, _, value = line.partition(" = ")
            if not _INTEGER_ASSIGNMENT.fullmatch(line) and isinstance(self.state.namespace.get(name), int):
                index_of[name] = macro_start + offset
        exact = {n: v.value for n, v in self.c_values.values.items() if n in index_of and v.type_name != "pointer"}
        for _ in range(3):  # a corrected macro changes the ones computed from it: re-run until stable
            wrong = {n: v for n, v in exact.items() if self.state.namespace.get(n) != v}
            if not wrong:
                return
            for name, number in wrong.items():
                self.state.chunks[index_of[name]] = self.c_value_line(name, number)
            exec(compile("\n".join(self.state.chunks[macro_start:]), "<macros>", "exec"), self.state.namespace)

    def macro_statement(self, macro: _Macro) -> tuple[str | None, str]:
        """The Python line for MACRO, or None and why not ('' when the macro carries no value)."""
        try:
            definition = split_macro(macro.text)
        except Untranslatable as exc:
            return None, str(exc)
        if not definition.body or definition.body == definition.name:
            return None, ""  # include guards, feature flags and `#define x x` carry no value
        if keyword_or_defined(definition.name, self.state.namespace):
            return None, "name is a Python keyword or already defined"
        try:
            return macro_line(definition, self.translator), ""
        except (Untranslatable, SyntaxError, ValueError) as exc:
            return None, f"cannot translate {definition.body!r}: {exc}"

    def macro_error(self, line: str) -> str:
        missing = _free_names(line) - self.state.namespace.keys() - vars(builtins).keys() - self.on_use
        if missing:
            return f"undefined {', '.join(sorted(missing))}"
        if not _compiles(line):
            return "not a Python expression"
        if _free_names(line) & self.calls_library or "__getattr__(" in line:
            return "calls into the library: not run here"  # running it to find the error would call the library
        try:
            exec(compile(line, "<macro>", "exec"), dict(self.state.namespace))
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return "unknown"


_ON_USE = '''_variables_ = {variables}
_on_use_ = {deferred}


def __getattr__(name):
    """Extern variables (a ctypes object over the library's variable: `.value` reads and writes it) and macros that
    call into the library (evaluated on each use, as C does), so that importing needs no library."""
    if name in _variables_:
        return _variables_[name].in_dll(dll.handle, name)
    if name in _on_use_:
        return _on_use_[name]()
    raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")'''


BY_VALUE_NOTE = """\
# Records passed or returned by value: call the functions bound here (and C function pointers of cbind.CFUNCTYPE
# types), which pass records as the x86-64 psABI does (tg.drivers.cabi). Setting these classes as argtypes or
# restype of a plain ctypes function is not supported: ctypes misplaces records with padding or packing (this
# module writes padding as byte arrays, which ctypes classifies differently from C)."""


def _dependency_order(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """LINES with each one after the lines defining the names it reads (source order otherwise; cycles as found).

    Depth-first with an explicit stack: a chain of 200,000 macros must not meet the recursion limit."""
    by_name: dict[str, list[int]] = {}
    for index, (name, _) in enumerate(lines):
        by_name.setdefault(name, []).append(index)
    needs = [
        [other for word in sorted(_free_names(line)) if word != name for other in by_name.get(word, ())]
        for name, line in lines
    ]
    order: list[int] = []
    seen = [False] * len(lines)
    for start in range(len(lines)):
        if seen[start]:
            continue
        seen[start] = True
        stack = [(start, 0)]
        while stack:
            node, next_need = stack[-1]
            if next_need < len(needs[node]):
                stack[-1] = (node, next_need + 1)
                other = needs[node][next_need]
                if not seen[other]:
                    seen[other] = True
                    stack.append((other, 0))
            else:
                stack.pop()
                order.append(node)
    return [lines[index] for index in order]


def _dict_literal(entries: dict[str, str]) -> str:
    """A dict display of string keys to the Python expressions ENTRIES gives, one entry a line."""
    if not entries:
        return "{}"
    return "{\n" + "".join(f'    "{key}": {value},\n' for key, value in entries.items()) + "}"


def _compiles(line: str) -> bool:
    try:
        compile(line, "<macro>", "exec")
    except SyntaxError:
        return False
    return True


def _is_macro_function(line: str) -> bool:
    return line.split(" = ", 1)[1].startswith("cbind.c_macro(lambda")


def _through_module(line: str, names: set[str]) -> str:
    """LINE with each read of NAMES (module attributes that exist only through __getattr__) spelled as a call of it."""
    target, value = line.split(" = ", 1)
    params: set[str] = set()
    if value.startswith("cbind.c_macro(lambda"):
        params = {p.strip() for p in value.split("lambda", 1)[1].split(":", 1)[0].split(",")}

    def replace(match: re.Match[str]) -> str:
        word = match.group()
        return f'__getattr__("{word}")' if word in names and word not in params else word

    pieces = []
    last = 0
    for string in _STRING.finditer(value):  # names inside string literals stay
        pieces.append(_IDENTIFIER.sub(replace, value[last : string.start()]))
        pieces.append(string.group())
        last = string.end()
    pieces.append(_IDENTIFIER.sub(replace, value[last:]))
    return f"{target} = {''.join(pieces)}"


def literal_type(text: str) -> str:
    """The C type of an integer literal (`0xFFFFFFFF` is unsigned int, `1UL` unsigned long)."""
    from tg.drivers.cbind import c_literal

    digits = text.rstrip("uUlL")
    decimal = not (digits[:1] == "0" and len(digits) > 1)
    value = int(digits, 16) if digits[:2] in ("0x", "0X") else int(digits, 8 if not decimal else 10)
    return c_literal(value, text[len(digits) :], decimal).ctype.name


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise AutogenError(f"invalid pattern {pattern!r}: {exc}") from exc


def keyword_or_defined(name: str, namespace: dict[str, Any]) -> bool:
    return safe_name(name) != name or name in namespace


_INTEGER_ASSIGNMENT = re.compile(r"\w+ = (0[xX][0-9a-fA-F]+|0o[0-7]+|[1-9]\d*|0)")
_COMMENT = re.compile(r"/\*.*?(?:\*/|$)|//[^\n]*", re.DOTALL)


def _strip_comments(text: str) -> str:
    if "/" not in text:
        return text
    return _COMMENT.sub(" ", text)


_STRING = re.compile(r'(?:\bb)?"(?:\\.|[^\\"])*"|\bb\'(?:\\.|[^\\\'])*\'')
_IDENTIFIER = re.compile(r"(?<![.\w])[A-Za-z_]\w*")


def _free_names(line: str) -> set[str]:
    """Module-level names the right-hand side of LINE reads (lambda parameters excluded)."""
    value = line.split(" = ", 1)[1].split(C_VALUE_COMMENT, 1)[0]
    if "lambda" not in value:
        return set(_IDENTIFIER.findall(_STRING.sub("", value))) - _PYTHON_WORDS
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return set()
    params: set[str] = set()
    loads: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            params |= {a.arg for a in node.args.args}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loads.add(node.id)
    return loads - params


C_VALUE_COMMENT = "  # C value of "
_PYTHON_WORDS = {"and", "or", "not", "if", "else", "lambda"}


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text:
        depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        items.append(current.strip())
    return items


def print_skipped(generated: Generated, stream: Any = None, limit: int | None = None) -> None:
    stream = stream or sys.stderr
    for note in generated.notes:
        print(f"note: {note}", file=stream)
    for index, skipped in enumerate(generated.skipped):
        if limit is not None and index >= limit:
            print(f"... and {len(generated.skipped) - limit} more skipped", file=stream)
            break
        print(f"skipping {skipped.name}: {skipped.reason}", file=stream)


def gen(
    name: str,
    headers: Sequence[str],
    lib: str | None = None,
    include_dirs: Sequence[str] = (),
    defines: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    patterns: Sequence[str] = (),
) -> Generated:
    """Library entry point: generate module NAME from HEADERS (see Options)."""
    options = Options(
        name, tuple(headers), lib, tuple(include_dirs), tuple(defines), tuple(extra_args), tuple(patterns)
    )
    return generate(options)
