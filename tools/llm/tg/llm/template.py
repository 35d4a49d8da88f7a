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
}


class FallbackTemplate:
    """A fixed template for files without one (or without jinja2): role headers of the model's family."""

    def __init__(self, family: str, bos_token: str = "") -> None:
        self.header, self.end = FALLBACKS[family]
        self.bos_token = bos_token

    def render(self, messages: list[Message], add_generation_prompt: bool = True, **_: Any) -> str:
        parts = [self.bos_token]
        for message in messages:
            parts.append(self.header.format(role=message["role"]) + message_text(message) + self.end)
        if add_generation_prompt:
            parts.append(self.header.format(role="assistant"))
        return "".join(parts)


def fallback_family(preset: str, tokens: dict[str, int]) -> str:
    """Which built-in template suits a tokenizer: by its special tokens first, then by its preset."""
    if "<|im_start|>" in tokens:
        return "chatml"
    if "<|start_header_id|>" in tokens:
        return "llama3"
    return "olmo" if preset == "olmo" else "chatml"


def chat_template(metadata: dict[str, Any], bos_token: str, eos_token: str, tokens: dict[str, int]) -> Any:
    """The file's jinja2 template if it has one, else the fallback for its tokenizer family."""
    source = metadata.get("tokenizer.chat_template")
    if source:
        return JinjaTemplate(source, bos_token, eos_token)
    return FallbackTemplate(fallback_family(metadata.get("tokenizer.ggml.pre", ""), tokens), bos_token)
