"""Chat templates: the GGUF file's own jinja2 template when it has one, else a built-in one per family."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

Message = dict[str, Any]


class TemplateError(ValueError):
    """The chat template refused the conversation (its `raise_exception`) or failed to render."""


def message_text(message: Message) -> str:
    """A message's text: a plain string, or the text parts of a list of content parts."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if part.get("type", "text") == "text")
    return str(content)


class JinjaTemplate:
    """The GGUF `tokenizer.chat_template`, rendered as Hugging Face does: `tojson` does not HTML-escape, and
    `raise_exception` / `strftime_now` exist."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        import jinja2
        import jinja2.sandbox

        environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def tojson(value: Any, indent: int | None = None, **_: Any) -> str:
            return json.dumps(value, ensure_ascii=False, indent=indent)

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        environment.filters["tojson"] = tojson
        environment.globals.update(
            raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt)
        )
        self.template = environment.from_string(source)
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[Message], add_generation_prompt: bool = True, **extra: Any) -> str:
        import jinja2

        try:
            return self.template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except jinja2.TemplateError as error:
            raise TemplateError(f"chat template failed: {error}") from error


# family -> (role header format, end of turn); `{role}` is replaced
FALLBACKS = {
    "chatml": ("<|im_start|>{role}\n", "<|im_end|>\n"),
    "llama3": ("<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>"),
    "olmo": ("<|{role}|>\n", "\n"),
    "gemma": ("<start_of_turn>{role}\n", "<end_of_turn>\n"),
    "phi3": ("<|{role}|>\n", "<|end|>\n"),
}
# Gemma's turns: the assistant is "model", there is no system turn (its text opens the first turn after it, then a
# blank line) and every message is stripped of surrounding whitespace
ROLE_NAMES = {"gemma": {"assistant": "model"}}
SYSTEM_IN_FIRST_TURN = ("gemma",)
STRIPPED = ("gemma",)


class FallbackTemplate:
    """A fixed template for files without one (or without jinja2): role headers of the model's family."""

    def __init__(self, family: str, bos_token: str = "") -> None:
        self.header, self.end = FALLBACKS[family]
        self.family, self.bos_token = family, bos_token
        self.roles = ROLE_NAMES.get(family, {})

    def render(self, messages: list[Message], add_generation_prompt: bool = True, **_: Any) -> str:
        parts, prefix = [self.bos_token], ""
        if self.family in SYSTEM_IN_FIRST_TURN and messages and messages[0]["role"] == "system":
            prefix, messages = message_text(messages[0]) + "\n\n", messages[1:]
        for message in messages:
            text = message_text(message)
            text = prefix + (text.strip() if self.family in STRIPPED else text)
            parts.append(self.header.format(role=self._role(message["role"])) + text + self.end)
            prefix = ""
        if add_generation_prompt:
            parts.append(self.header.format(role=self._role("assistant")))
        return "".join(parts)

    def _role(self, role: str) -> str:
        return self.roles.get(role, role)


def fallback_family(preset: str, tokens: dict[str, int]) -> str:
    """Which built-in template suits a tokenizer: by its special tokens first, then by its preset."""
    if "<|im_start|>" in tokens:
        return "chatml"
    if "<|start_header_id|>" in tokens:
        return "llama3"
    if "<start_of_turn>" in tokens:
        return "gemma"
    if preset == "olmo":
        return "olmo"
    return "phi3" if "<|assistant|>" in tokens and "<|end|>" in tokens else "chatml"


def chat_template(metadata: dict[str, Any], bos_token: str, eos_token: str, tokens: dict[str, int]) -> Any:
    """The file's jinja2 template if it has one, else the fallback for its tokenizer family."""
    source = metadata.get("tokenizer.chat_template")
    if source:
        return JinjaTemplate(source, bos_token, eos_token)
    return FallbackTemplate(fallback_family(metadata.get("tokenizer.ggml.pre", ""), tokens), bos_token)
