"""Splits a model's streamed text into content, reasoning (`<think>...</think>`) and tool calls.

Tool calls come in the hermes form `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` or the XML function
form `<function=name><parameter=key>value</parameter></function>` (qwen3-coder style, bare or inside
`<tool_call>`). Text that might be the start of a tag is held back until it is known not to be one.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
XML_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)</function>", re.S)
XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)


@dataclass
class Delta:
    content: str = ""
    reasoning: str = ""

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning)


def held_suffix(text: str, tags: tuple[str, ...]) -> int:
    """How many trailing characters of `text` could begin one of `tags`."""
    for length in range(min(len(text), max(len(tag) for tag in tags) - 1), 0, -1):
        if any(tag.startswith(text[-length:]) for tag in tags):
            return length
    return 0


@dataclass
class StreamRouter:
    parse_tools: bool = False
    mode: str = "content"  # content, think, tool
    buffer: str = ""
    tool_text: str = ""
    closing: str = TOOL_CLOSE  # what ends the tool call being read
    tool_texts: list[str] = field(default_factory=list)

    def feed(self, text: str) -> Delta:
        self.buffer += text
        delta = Delta()
        while self.buffer:
            if self.mode == "think":
                if not self._think(delta):
                    break
            elif self.mode == "tool":
                if not self._tool():
                    break
            elif not self._content(delta):
                break
        return delta

    def _opening_tags(self) -> tuple[str, ...]:
        return (THINK_OPEN, TOOL_OPEN, FUNCTION_OPEN) if self.parse_tools else (THINK_OPEN,)

    def _content(self, delta: Delta) -> bool:
        found = [(self.buffer.find(tag), tag) for tag in self._opening_tags() if tag in self.buffer]
        if not found:
            keep = held_suffix(self.buffer, self._opening_tags())
            delta.content += self.buffer[: len(self.buffer) - keep]
            self.buffer = self.buffer[len(self.buffer) - keep :]
            return False
        position, tag = min(found)
        delta.content += self.buffer[:position]
        if tag == THINK_OPEN:
            self.mode, self.buffer = "think", self.buffer[position + len(tag) :]
        else:  # a tool call: <tool_call> is dropped, a bare <function= is part of the call's text
            self.mode = "tool"
            self.buffer = self.buffer[position + (len(tag) if tag == TOOL_OPEN else 0) :]
            self.tool_text = ""
            self.closing = TOOL_CLOSE if tag == TOOL_OPEN else FUNCTION_CLOSE
        return True

    def _think(self, delta: Delta) -> bool:
        if THINK_CLOSE in self.buffer:
            position = self.buffer.find(THINK_CLOSE)
            delta.reasoning += self.buffer[:position]
            self.mode, self.buffer = "content", self.buffer[position + len(THINK_CLOSE) :].lstrip("\n")
            return True
        keep = held_suffix(self.buffer, (THINK_CLOSE,))
        delta.reasoning += self.buffer[: len(self.buffer) - keep]
        self.buffer = self.buffer[len(self.buffer) - keep :]
        return False

    def _tool(self) -> bool:
        self.tool_text += self.buffer
        self.buffer = ""
        if self.closing not in self.tool_text:
            return False
        position = self.tool_text.find(self.closing)
        end = position + (len(self.closing) if self.closing == FUNCTION_CLOSE else 0)
        self.tool_texts.append(self.tool_text[:end])
        self.buffer = self.tool_text[position + len(self.closing) :].lstrip("\n")
        self.mode, self.tool_text = "content", ""
        return True

    def finish(self) -> tuple[Delta, list[dict[str, Any]]]:
        """Flush what was held back; returns the last delta and the parsed tool calls (OpenAI's shape)."""
        delta = Delta()
        if self.mode == "think":
            delta.reasoning += self.buffer
        elif self.mode == "tool":
            self.tool_texts.append(self.tool_text + self.buffer)
        else:
            delta.content += self.buffer
        self.buffer = ""
        calls = []
        for text in self.tool_texts:
            parsed = parse_tool_call(text)
            if parsed is None:  # not a tool call after all: give the text back
                delta.content += text
            else:
                calls.extend(parsed)
        return delta, calls


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function", "function": {"name": name, "arguments": text}}


def parse_tool_call(text: str) -> list[dict[str, Any]] | None:
    """The calls written in one tool-call region, or None when it is neither hermes JSON nor the XML form."""
    functions = XML_FUNCTION.findall(text)
    if functions:
        calls = []
        for name, body in functions:
            arguments = {key: xml_value(value) for key, value in XML_PARAMETER.findall(body)}
            calls.append(tool_call(name, arguments))
        return calls
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    return [tool_call(value["name"], value.get("arguments", value.get("parameters", {})))]


def xml_value(text: str) -> Any:
    """A parameter's text: JSON when it parses (numbers, lists, objects), else the string itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
