"""Translate the body of a C macro (or a constant initializer) into a Python expression.

The translator works on tokens and knows only what headers need: integer, float, char and string literals
(strings become bytes, which is what C APIs take), arithmetic and logical operators, casts, `sizeof(type)`,
`struct X` names, and type names passed to macros such as `_IOR('K', 1, struct args)`. Anything else raises
`Untranslatable`, and the macro is skipped (object-like macros then get their value from clang, see evaluate.py).

Function-like macros are translated with C semantics (`c_semantics=True`): the lambda is wrapped in
`cbind.c_macro`, and literals with a non-int type, casts, `sizeof`, `!`, `&&`, `||` and the object-like macros it
names carry their C types through tg.drivers.cint, so the result is the value C computes, width and sign included.
Object-like macros need none of that: their values are checked against clang's.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass

TOKEN = re.compile(
    r"""
    (?P<space>\s+|/\*.*?\*/|//[^\n]*)
  | (?P<number>(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[uUlLfF]*)
  | (?P<char>'(?:\\.|[^\\'])+')
  | (?P<string>"(?:\\.|[^\\"])*")
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|\.\.\.|&&|\|\||==|!=|<=|>=|<<|>>|->|\+\+|--|\#\#|[-+*/%&|^~!<>()?:,.\[\]{}=;\#])
    """,
    re.VERBOSE | re.DOTALL,
)

PLAIN_INTEGER = re.compile(r"\s*\(?\s*(0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)\s*\)?\s*")

# C words that can start or continue a type name.
TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool", "const"}
TYPE_WORDS |= {"volatile", "struct", "union", "enum"}
BUILTIN_CTYPES = {
    ("void",): "None",
    ("char",): "ctypes.c_char",
    ("signed", "char"): "ctypes.c_byte",
    ("unsigned", "char"): "ctypes.c_ubyte",
    ("short",): "ctypes.c_short",
    ("unsigned", "short"): "ctypes.c_ushort",
    ("int",): "ctypes.c_int",
    ("signed",): "ctypes.c_int",
    ("unsigned",): "ctypes.c_uint",
    ("unsigned", "int"): "ctypes.c_uint",
    ("long",): "ctypes.c_long",
    ("unsigned", "long"): "ctypes.c_ulong",
    ("long", "long"): "ctypes.c_longlong",
    ("unsigned", "long", "long"): "ctypes.c_ulonglong",
    ("float",): "ctypes.c_float",
    ("double",): "ctypes.c_double",
    ("_Bool",): "ctypes.c_bool",
}
# asm-generic/ioctl.h helpers that macros use without the target including that header: cbind has them.
IOCTL_NAMES = {f"_IOC_{part}" for part in ("NONE", "READ", "WRITE")}
IOCTL_NAMES |= {f"_IOC_{field}{kind}" for field in ("NR", "TYPE", "SIZE", "DIR") for kind in ("BITS", "SHIFT", "MASK")}
PYTHON_OPERATORS = {"&&": " and ", "||": " or ", "!": " not "}
UNSUPPORTED_OPERATORS = {"?", ":", "=", ";", "{", "}", "#", "##", "->", "++", "--", "...", "[", "]", ".", "<<=", ">>="}


class Untranslatable(Exception):
    """The macro uses C that has no Python equivalent here."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


def tokenize(text: str) -> list[Token]:
    text = text.replace("\\\n", " ")
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        match = TOKEN.match(text, position)
        if match is None:
            raise Untranslatable(f"cannot tokenize {text[position : position + 10]!r}")
        position = match.end()
        if match.lastgroup != "space":
            tokens.append(Token(match.lastgroup or "", match.group()))
    return tokens


def python_number(text: str) -> str:
    """A C integer or float literal as a Python literal: suffixes dropped, octal spelled 0o."""
    is_hex = text[:2] in ("0x", "0X")
    digits = text.rstrip("uUlL") if is_hex else text.rstrip("uUlLfF")
    if not is_hex and len(digits) > 1 and digits[0] == "0" and digits.isdigit():
        return "0o" + digits[1:]
    return digits


def bytes_literal(text: str) -> str:
    """A C string literal as a Python bytes literal (C APIs take bytes, not str).

    The literal's bytes are the source file's bytes: UTF-8 text stays UTF-8, and bytes that are not UTF-8 (read as
    surrogates, see generate.macro_text) are written back unchanged; escapes (`\\xff`) are C's, as in Python.
    """
    if text.isascii():
        return "b" + text
    raw = text.encode("utf-8", "surrogateescape")
    return "b" + "".join(chr(byte) if byte < 0x80 else f"\\x{byte:02x}" for byte in raw)


def char_value(text: str) -> str:
    value = ast.literal_eval(text)
    if len(value) != 1:
        raise Untranslatable(f"multi-character constant {text}")
    return str(ord(value))


def safe_name(name: str) -> str:
    """C identifiers that are Python keywords get a trailing underscore."""
    return name + "_" if keyword.iskeyword(name) else name


class ExpressionTranslator:
    """Token-level C-to-Python translation; `type_of` maps a typedef name to a ctypes expression or None."""

    def __init__(self, type_of: Callable[[str], str | None], c_semantics: bool = False) -> None:
        self.type_of = type_of
        self.c_semantics = c_semantics
        # C types of object-like macros other than int (from clang), for C semantics in macro functions.
        self.macro_types: dict[str, str] = {}

    def with_c_semantics(self) -> ExpressionTranslator:
        translator = ExpressionTranslator(self.type_of, c_semantics=True)
        translator.macro_types = self.macro_types
        return translator

    def translate(self, text: str, params: tuple[str, ...] = ()) -> str:
        plain = PLAIN_INTEGER.fullmatch(text)
        if plain and not self.c_semantics:  # the common case, a bare integer, skips the tokenizer
            return python_number(plain.group(1))
        tokens = tokenize(text)
        if not tokens:
            raise Untranslatable("empty")
        uses_float = any(t.text == "/" for t in tokens) and any(
            t.kind == "number" and _is_float(t.text) for t in tokens
        )
        return self._translate_tokens(tokens, params, uses_float)

    def _translate_tokens(self, tokens: list[Token], params: tuple[str, ...], uses_float: bool) -> str:
        if not tokens:
            raise Untranslatable("empty expression")
        question = _top_level_index(tokens, "?")
        if question is not None:  # c ? a : b  ->  (a if c else b)
            colon = _matching_colon(tokens, question)
            condition = self._translate_tokens(tokens[:question], params, uses_float)
            then = self._translate_tokens(tokens[question + 1 : colon], params, uses_float)
            other = self._translate_tokens(tokens[colon + 1 :], params, uses_float)
            return f"({then} if {condition} else {other})"
        if self.c_semantics and any(_top_level_index(tokens, op) is not None for op in ("&&", "||")):
            return f"cbind.c_truth({self._translate_plain(tokens, params, uses_float)})"
        return self._translate_plain(tokens, params, uses_float)

    def _translate_plain(self, tokens: list[Token], params: tuple[str, ...], uses_float: bool) -> str:
        out: list[str] = []
        index = 0
        while index < len(tokens):
            # C joins a string literal to a preceding string-valued name (`PREFIX "d"`); Python needs a `+`.
            if tokens[index].kind == "string" and index and tokens[index - 1].kind == "name":
                out.append(" + ")
            if tokens[index].text == "(" and self._cast_end(tokens, index, params) is None:
                piece, index = self._group(tokens, index, params, uses_float)
            else:
                piece, index = self._next(tokens, index, params, uses_float)
            if piece in (" - ", " + ") and _before_operand(out):
                piece = piece.strip()  # unary sign: -1, not - 1
            if out and out[-1][-1:].isalnum() and piece[:1].isalnum():
                out.append(" ")  # keep `1 2` two tokens (a syntax error), never `12`
            out.append(piece)
        return "".join(out).strip()

    def _group(self, tokens: list[Token], index: int, params: tuple[str, ...], uses_float: bool) -> tuple[str, int]:
        """A parenthesized group (or call arguments), translated part by part so ternaries inside work."""
        close = _matching_paren(tokens, index)
        inner = tokens[index + 1 : close]
        if not inner:
            return "()", close + 1
        parts = [self._translate_tokens(part, params, uses_float) for part in _split_commas(inner)]
        return "(" + ", ".join(parts) + ")", close + 1

    def _next(self, tokens: list[Token], index: int, params: tuple[str, ...], uses_float: bool) -> tuple[str, int]:
        token = tokens[index]
        if token.kind == "number":
            return self._number(token.text), index + 1
        if token.kind == "char":
            return char_value(token.text), index + 1
        if token.kind == "string":
            return bytes_literal(token.text), index + 1
        if token.kind == "name":
            return self._name(tokens, index, params)
        if token.text == "(":
            cast_end = self._cast_end(tokens, index, params)
            if cast_end is not None:
                if not self.c_semantics:
                    return "", cast_end
                end = self._operand_end(tokens, cast_end, params)
                operand = self._translate_tokens(tokens[cast_end:end], params, uses_float)
                return f"cbind.c_cast({self._cast_type(tokens, index, params)}, {operand})", end
            return "(", index + 1
        if token.text == "!" and self.c_semantics:
            end = self._operand_end(tokens, index + 1, params)
            return f"cbind.c_truth(not {self._translate_tokens(tokens[index + 1 : end], params, uses_float)})", end
        if token.text in UNSUPPORTED_OPERATORS:
            raise Untranslatable(f"operator {token.text!r}")
        if token.text == "/":
            return ("/" if uses_float else "//"), index + 1
        if token.text in PYTHON_OPERATORS:
            return PYTHON_OPERATORS[token.text], index + 1
        if token.text == ",":
            return ", ", index + 1
        return f" {token.text} " if token.text not in "()~" else token.text, index + 1

    def _number(self, text: str) -> str:
        number = python_number(text)
        if not self.c_semantics or _is_float(text):
            return number
        value = int(number, 0)
        suffix = text[len(text.rstrip("uUlL")) :]
        decimal = not text[:1] == "0" or text == "0"
        if not suffix and -(2**31) <= value < 2**31:
            return number  # an int, which is what a plain Python int means to cbind.c_macro
        return f'cbind.c_literal({number}, "{suffix.lower()}", {decimal})'

    def _operand_end(self, tokens: list[Token], index: int, params: tuple[str, ...]) -> int:
        """Index after the unary expression (the operand of a cast or `!`) that starts at INDEX."""
        if index >= len(tokens):
            raise Untranslatable("missing operand")
        token = tokens[index]
        if token.text in ("-", "+", "~", "!"):
            return self._operand_end(tokens, index + 1, params)
        if token.text == "(":
            cast_end = self._cast_end(tokens, index, params)
            if cast_end is not None:
                return self._operand_end(tokens, cast_end, params)
            end = _matching_paren(tokens, index) + 1
        elif token.text == "sizeof":
            end = _matching_paren(tokens, index + 1) + 1
        elif token.kind in ("name", "number", "char", "string"):
            end = index + 1
        else:
            raise Untranslatable(f"operand starting with {token.text!r}")
        while end < len(tokens) and tokens[end].text == "(":  # calls of other macros
            end = _matching_paren(tokens, end) + 1
        return end

    def _cast_type(self, tokens: list[Token], index: int, params: tuple[str, ...]) -> str:
        end = self._type_end(tokens, index + 1, params)
        if end < len(tokens) and tokens[end].text == "*":
            return "ctypes.c_void_p"  # pointer casts: the value is an address
        return self._type(tokens[index + 1 : end])

    def _name(self, tokens: list[Token], index: int, params: tuple[str, ...]) -> tuple[str, int]:
        word = tokens[index].text
        if word in params:
            return safe_name(word), index + 1
        if word in IOCTL_NAMES:
            return f"cbind.{word}", index + 1
        if self.c_semantics and word in self.macro_types and self.macro_types[word] != "int":
            return f'cbind.c_typed({word}, "{self.macro_types[word]}")', index + 1
        if word == "sizeof":
            return self._sizeof(tokens, index, params)
        if word == "defined" or word.startswith("__builtin") or word.startswith("__attribute"):
            raise Untranslatable(f"{word} is not an expression")
        end = self._type_end(tokens, index, params)
        if end > index:
            return self._type(tokens[index:end]), end
        if keyword.iskeyword(word):
            raise Untranslatable(f"{word} is a Python keyword")
        return word, index + 1

    def _sizeof(self, tokens: list[Token], index: int, params: tuple[str, ...]) -> tuple[str, int]:
        if index + 1 >= len(tokens) or tokens[index + 1].text != "(":
            raise Untranslatable("sizeof without parentheses")
        close = _matching_paren(tokens, index + 1)
        inner = ExpressionTranslator(self.type_of).translate(_join(tokens[index + 2 : close]), params)
        return f"{'cbind.c_sizeof' if self.c_semantics else 'ctypes.sizeof'}({inner})", close + 1

    def _type_end(self, tokens: list[Token], index: int, params: tuple[str, ...]) -> int:
        """Index after the type name starting at INDEX, or INDEX itself when no type name starts there."""
        end = index
        while end < len(tokens) and tokens[end].kind == "name" and tokens[end].text not in params:
            word = tokens[end].text
            if word in ("struct", "union", "enum"):
                end += 2
                continue
            if word not in TYPE_WORDS and (end > index or self.type_of(word) is None):
                break
            end += 1
        return end

    def _type(self, words: list[Token]) -> str:
        names = tuple(w.text for w in words if w.text not in ("const", "volatile"))
        if names and names[0] in ("struct", "union", "enum"):
            if len(names) != 2:
                raise Untranslatable(f"type {' '.join(names)}")
            return f"{names[0]}_{names[1]}"
        names = tuple(n for n in names if n != "signed") if names not in (("signed",), ("signed", "char")) else names
        names = tuple(n for n in names if n != "int") if len(names) > 1 else names
        if names in BUILTIN_CTYPES:
            return BUILTIN_CTYPES[names]
        if len(names) == 1 and self.type_of(names[0]):
            return self.type_of(names[0]) or ""
        raise Untranslatable(f"type {' '.join(names)}")

    def _cast_end(self, tokens: list[Token], index: int, params: tuple[str, ...]) -> int | None:
        """If a cast `(type)` or `(type *)` starts at INDEX and an operand follows, the index after it."""
        end = self._type_end(tokens, index + 1, params)
        if end == index + 1:
            return None
        while end < len(tokens) and tokens[end].text == "*":
            end += 1
        if end >= len(tokens) or tokens[end].text != ")":
            return None
        after = end + 1
        starts_operand = after < len(tokens) and (
            tokens[after].kind in ("name", "number", "char") or tokens[after].text in ("(", "-", "+", "~", "!")
        )
        return after if starts_operand else None


def _is_float(text: str) -> bool:
    return not text.lower().startswith("0x") and any(ch in text for ch in ".eE")


def _matching_paren(tokens: list[Token], open_index: int) -> int:
    depth = 0
    for index in range(open_index, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[index].text, 0)
        if depth == 0:
            return index
    raise Untranslatable("unbalanced parentheses")


def _before_operand(out: list[str]) -> bool:
    """True when the next token starts an operand (so a sign there is unary)."""
    previous = "".join(out).rstrip()
    return not previous or previous[-1] in "(,+-*/%&|^~<>=!" or previous.endswith((" not", " and", " or"))


def _top_level_index(tokens: list[Token], text: str) -> int | None:
    depth = 0
    for index, token in enumerate(tokens):
        depth += {"(": 1, ")": -1}.get(token.text, 0)
        if depth == 0 and token.text == text:
            return index
    return None


def _matching_colon(tokens: list[Token], question: int) -> int:
    depth = nested = 0
    for index in range(question + 1, len(tokens)):
        text = tokens[index].text
        depth += {"(": 1, ")": -1}.get(text, 0)
        if depth == 0 and text == "?":
            nested += 1
        elif depth == 0 and text == ":":
            if nested == 0:
                return index
            nested -= 1
    raise Untranslatable("'?' without ':'")


def _split_commas(tokens: list[Token]) -> list[list[Token]]:
    parts: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        depth += {"(": 1, ")": -1}.get(token.text, 0)
        if depth == 0 and token.text == ",":
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _join(tokens: list[Token]) -> str:
    return " ".join(t.text for t in tokens)


@dataclass(frozen=True)
class MacroDefinition:
    """A #define split into its name, parameters (None for object-like macros) and body text."""

    name: str
    params: tuple[str, ...] | None
    body: str


MACRO_HEAD = re.compile(r"([A-Za-z_]\w*)(\(([^)]*)\))?")


def split_macro(text: str) -> MacroDefinition:
    """Split the source text of a macro definition (`NAME(a, b) body` or `NAME body`)."""
    head = MACRO_HEAD.match(text)
    if head is None:
        raise Untranslatable("no macro name")
    if head.group(2) is None:
        return MacroDefinition(head.group(1), None, text[head.end() :].strip())
    params = tuple(p.strip() for p in head.group(3).split(",") if p.strip())
    if any(p == "..." or p.endswith("...") for p in params):
        raise Untranslatable("variadic macro")
    return MacroDefinition(head.group(1), params, text[head.end() :].strip())


def macro_line(definition: MacroDefinition, translator: ExpressionTranslator) -> str:
    """The Python assignment for a macro: `NAME = expr` or `NAME = lambda a, b: expr`."""
    if definition.params is None:
        return f"{definition.name} = {translator.translate(definition.body)}"
    body = translator.with_c_semantics().translate(definition.body, definition.params)
    params = ", ".join(safe_name(p) for p in definition.params)
    function = f"lambda {params}: {body}" if params else f"lambda: {body}"
    return f"{definition.name} = cbind.c_macro({function})"
