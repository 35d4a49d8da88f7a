"""A byte-level JSON prefix checker, for `response_format: json_object`: each step only tokens that keep the output
a prefix of one JSON object may be sampled, and the answer ends when the object closes.

The checker is a small pushdown automaton over bytes. `copy()` is cheap (a state name and a short stack), so a
candidate token is tried on a copy and kept only if every byte is accepted. Bytes >= 0x80 (UTF-8 continuations
and leads) are accepted only inside strings.
"""

from __future__ import annotations

WHITESPACE = b" \t\n\r"
MAX_WHITESPACE_RUN = 24  # a run of indentation longer than this is refused (a random model could pad forever)
LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}
HEX = b"0123456789abcdefABCDEF"
ESCAPES = b'"\\/bfnrt'
NUMBER_END_STATES = ("zero", "int", "frac", "exp_digits")


class JsonPrefix:
    """Accepts the bytes of one JSON object, in order; `feed` returns False at the first byte that cannot follow."""

    def __init__(self) -> None:
        self.state = "start"  # start, value, key_or_close, key, colon, after_value, string, escape, unicode, ...
        self.stack: list[int] = []  # open containers: ord('{') or ord('[')
        self.in_key = False
        self.pending = b""  # the rest of a literal (true/false/null) or of \uXXXX
        self.number = ""  # the number's sub-state while state == "number"
        self.whitespace = 0

    def copy(self) -> JsonPrefix:
        other = JsonPrefix.__new__(JsonPrefix)
        other.state, other.stack, other.in_key = self.state, list(self.stack), self.in_key
        other.pending, other.number, other.whitespace = self.pending, self.number, self.whitespace
        return other

    @property
    def done(self) -> bool:
        return self.state == "done"

    def feed_all(self, data: bytes) -> bool:
        return all(self.feed(byte) for byte in data)

    def feed(self, byte: int) -> bool:
        if self.state in ("string", "escape", "unicode"):
            return self._string(byte)
        if self.state == "literal":
            if not self.pending or byte != self.pending[0]:
                return False
            self.pending = self.pending[1:]
            if not self.pending:
                self._value_done()
            return True
        if self.state == "number":
            if self._number(byte):
                return True
            if self.number not in NUMBER_END_STATES:
                return False
            self._value_done()  # the number ended; this byte is judged after it
        if byte in WHITESPACE:  # between tokens, but not before the object (the answer starts with '{')
            self.whitespace += 1
            return self.state not in ("start", "done") and self.whitespace <= MAX_WHITESPACE_RUN
        self.whitespace = 0
        return self._structural(byte)

    def closing(self) -> bytes:
        """The shortest bytes that complete the object from here (fed one byte token at a time near the limit)."""
        closers = bytes(ord("}") if opener == ord("{") else ord("]") for opener in reversed(self.stack))
        after_key = b'":null' + closers
        endings = {
            "start": b"{}",
            "key_or_close": closers,
            "value_or_close": closers,
            "key": b'"":null' + closers,
            "colon": b":null" + closers,
            "value": b"null" + closers,
            "after_value": closers,
            "literal": self.pending + closers,
            "string": (after_key if self.in_key else b'"' + closers),
            "escape": b"n" + (after_key if self.in_key else b'"' + closers),
            "unicode": b"0" * len(self.pending) + (after_key if self.in_key else b'"' + closers),
            "done": b"",
        }
        if self.state == "number":
            return (b"" if self.number in NUMBER_END_STATES else b"0") + closers
        return endings[self.state]

    def _structural(self, byte: int) -> bool:
        char, state = chr(byte), self.state
        if state == "start":
            return self._open(byte) if char == "{" else False
        if state in ("key_or_close", "key"):
            if char == "}" and state == "key_or_close":
                return self._close(byte)
            if char == '"':
                self.state, self.in_key = "string", True
                return True
            return False
        if state == "colon":
            if char == ":":
                self.state = "value"
                return True
            return False
        if state in ("value", "value_or_close"):
            if char == "]" and state == "value_or_close":
                return self._close(byte)
            return self._start_value(byte)
        if state == "after_value":
            if char == ",":
                self.state = "key" if self.stack[-1] == ord("{") else "value"
                return True
            if char in "}]":
                return self._close(byte)
        return False

    def _start_value(self, byte: int) -> bool:
        char = chr(byte)
        if char in "{[":
            return self._open(byte)
        if char == '"':
            self.state, self.in_key = "string", False
            return True
        if byte in LITERALS:
            self.state, self.pending = "literal", LITERALS[byte]
            return True
        if char == "-" or char.isdigit():
            self.state = "number"
            self.number = "sign" if char == "-" else ("zero" if char == "0" else "int")
            return True
        return False

    def _open(self, byte: int) -> bool:
        self.stack.append(byte)
        self.state = "key_or_close" if byte == ord("{") else "value_or_close"
        return True

    def _close(self, byte: int) -> bool:
        if not self.stack or {ord("}"): ord("{"), ord("]"): ord("[")}[byte] != self.stack[-1]:
            return False
        self.stack.pop()
        self._value_done()
        return True

    def _value_done(self) -> None:
        self.state = "after_value" if self.stack else "done"

    def _string(self, byte: int) -> bool:
        if self.state == "escape":
            if byte == ord("u"):
                self.state, self.pending = "unicode", b"xxxx"
                return True
            self.state = "string"
            return byte in ESCAPES
        if self.state == "unicode":
            if byte not in HEX:
                return False
            self.pending = self.pending[1:]
            if not self.pending:
                self.state = "string"
            return True
        if byte == ord('"'):
            self.state = "colon" if self.in_key else "after_value"
            if not self.in_key and not self.stack:
                self.state = "done"
            return True
        if byte == ord("\\"):
            self.state = "escape"
            return True
        return byte >= 0x20  # raw control characters are not allowed inside JSON strings

    def _number(self, byte: int) -> bool:
        char, state = chr(byte), self.number
        digit = char.isdigit()
        moves = {
            "sign": {"0": "zero", "digit": "int"},
            "zero": {".": "dot", "e": "exp"},
            "int": {"digit": "int", ".": "dot", "e": "exp"},
            "dot": {"digit": "frac"},
            "frac": {"digit": "frac", "e": "exp"},
            "exp": {"sign": "exp_sign", "digit": "exp_digits"},
            "exp_sign": {"digit": "exp_digits"},
            "exp_digits": {"digit": "exp_digits"},
        }[state]
        key = char.lower() if char in "eE" else ("sign" if char in "+-" else char)
        if digit:
            key = "0" if char == "0" and "0" in moves else "digit"
        if key not in moves:
            return False
        self.number = moves[key]
        return True
