"""Between the socket and a validated job: the Host guard, the body as JSON (type, size, surrogates, depth), the API
key, the model name, and prompts tokenized on worker threads so a long one never blocks the event loop."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import regex
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tg.llm.serve.engine import Engine
from tg.llm.serve.errors import APIError
from tg.llm.serve.params import GenerationParams
from tg.llm.template import TemplateError
from tg.llm.tokenizer import TokenBudgetError, Tokenizer

MAX_JSON_DEPTH = 64  # deeper bodies are refused before any handler (or chat template) walks them
# characters that are never text (Unicode noncharacters): one marks special-token text a user wrote (see protect)
PLAIN_MARKERS = [chr(code) for code in range(0xFDD0, 0xFDF0)]
# tokenization (and chat template rendering) runs here, off the event loop; two threads: a flood of long prompts
# queues instead of taking every core
tokenizer_pool = ThreadPoolExecutor(2, thread_name_prefix="tg-llm-tokenize")
Result = TypeVar("Result")


@dataclass
class ServerState:
    engine: Engine
    tokenizer: Tokenizer
    template: Any
    model_id: str
    max_context: int
    api_key: str | None = None
    max_body_bytes: int = 1 << 20
    aliases: set[str] = field(default_factory=set)  # other names the model answers to (the CLI's --model)
    created: int = field(default_factory=lambda: int(time.time()))
    model_dim: int | None = None  # the width of an embedding (None: not known, `dimensions` is not checked)


# ----------------------------------------------------------------------------------------------- Host guard


def host_name(header: str) -> str:
    """The name in a Host header, without its port: `[::1]:80` -> `::1`, `Example.com.:80` -> `example.com`."""
    if header.startswith("["):
        return header[1 : header.find("]")].lower()
    return header.rsplit(":", 1)[0].rstrip(".").lower() if header.count(":") == 1 else header.rstrip(".").lower()


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostGuard:
    """403 unless the Host header names this server: an IP address, `localhost`, or a name in `allowed` (`*`:
    any). A web page that rebinds its own DNS name to this machine still sends its own name, so it is refused."""

    def __init__(self, app: ASGIApp, allowed: set[str]) -> None:
        self.app, self.allowed = app, {name.lower().rstrip(".") for name in allowed} | {"localhost"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "*" not in self.allowed:
            name = host_name(Headers(scope=scope).get("host", ""))
            if name and not is_ip_literal(name) and name not in self.allowed:
                error = APIError(
                    403, f"the Host '{name}' is not allowed (see --allowed-host)", "host_not_allowed", "Host"
                )
                await JSONResponse(error.body(), status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# ----------------------------------------------------------------------------------------------- the body


async def read_json(request: Request, state: ServerState) -> dict[str, Any]:
    """The body as a JSON object: 415 unless sent as application/json (a web page cannot send that cross-site
    without asking first), 413 past max_body_bytes, 400 if it does not parse, holds a lone surrogate or nests
    deeper than MAX_JSON_DEPTH."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise APIError(
            415, "the request body must be sent as 'Content-Type: application/json'", "unsupported_media_type"
        )
    body = await read_body(request, state.max_body_bytes)
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise APIError(400, f"the request body is not valid JSON: {error}", "invalid_json") from error
    except RecursionError as error:
        raise too_deep() from error
    if not isinstance(value, dict):
        raise APIError(400, "the request body must be a JSON object", "invalid_json")
    check_json_value(value)
    return value


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"the request body is larger than {limit} bytes", "request_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise APIError(413, f"the request body is larger than {limit} bytes", "request_too_large")
    return bytes(body)


def too_deep() -> APIError:
    return APIError(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels", "invalid_json")


def check_json_value(value: Any) -> None:
    """400 for strings that are not Unicode text (JSON's `\\ud800` escapes decode to lone surrogates, which no
    encoder accepts) and for nesting deeper than MAX_JSON_DEPTH; iterative, so any depth is safe to walk."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise too_deep()
        if isinstance(item, str):
            check_text(item)
        elif isinstance(item, dict):
            for key, member in item.items():
                check_text(key)
                pending.append((member, depth + 1))
        elif isinstance(item, list):
            pending.extend((member, depth + 1) for member in item)


def check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise APIError(
            400, "the request body holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text", "invalid_json"
        ) from error


def check_api_key(request: Request, state: ServerState) -> None:
    if state.api_key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if not header:
        raise APIError(401, "missing API key: send 'Authorization: Bearer <key>'", "invalid_api_key")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), state.api_key.encode()):
        raise APIError(401, "incorrect API key provided", "invalid_api_key")


def check_model(model: str, state: ServerState) -> None:
    if model != state.model_id and model not in state.aliases:
        raise APIError(
            404, f"the model '{model}' does not exist (this server has '{state.model_id}')", "model_not_found", "model"
        )


# ----------------------------------------------------------------------------------------------- prompts


async def off_loop(function: Callable[..., Result], *args: Any) -> Result:
    """Run `function` on the tokenizer threads: the event loop keeps answering (/health, other streams)."""
    return await asyncio.get_running_loop().run_in_executor(tokenizer_pool, function, *args)


def context_exceeded(state: ServerState, param: str, count: int | None = None) -> APIError:
    has = f"{count} tokens" if count is not None else f"more than {state.max_context - 1} tokens"
    return APIError(
        400,
        f"this model's maximum context length is {state.max_context} tokens, but the prompt has {has}",
        "context_length_exceeded",
        param,
    )


def check_budget(prompt: list[int], params: GenerationParams, state: ServerState, param: str) -> None:
    """400 when the prompt fills the context or prompt + max_tokens does not fit in it."""
    if len(prompt) >= state.max_context:
        raise context_exceeded(state, param, len(prompt))
    if params.max_tokens is not None and len(prompt) + params.max_tokens > state.max_context:
        raise APIError(
            400,
            f"this model's maximum context length is {state.max_context} tokens; you requested "
            f"{len(prompt) + params.max_tokens} ({len(prompt)} in the prompt, {params.max_tokens} for "
            "the completion)",
            "context_length_exceeded",
            "max_tokens",
        )


def encode_prompt(state: ServerState, text: str, param: str, allow_special: bool, marker: str = "") -> list[int]:
    """`text`'s tokens, within the tokenization budget: a prompt must leave room in the context, so text that
    cannot fit (by its byte count alone, or once its tokens outgrow the context) is refused without encoding it
    all."""
    budget = state.max_context - 1
    if state.tokenizer.fewest_tokens(text.replace(marker, "") if marker else text) > budget:
        raise context_exceeded(state, param)
    try:
        return state.tokenizer.encode(text, allow_special, marker, max_tokens=budget)
    except TokenBudgetError as error:
        raise context_exceeded(state, param) from error


def render_chat(state: ServerState, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """The chat's prompt tokens: special-token text inside the messages and tools stays plain text, so only the
    template itself writes control tokens (a user cannot forge a turn)."""
    marker = plain_marker([messages, tools])
    pattern = state.tokenizer.special_pattern
    messages, tools = protect(messages, pattern, marker), protect(tools, pattern, marker)
    text = render(state, messages, tools)
    if tools and text == render(state, messages, None):
        raise APIError(
            400,
            "this model's chat template has no place for tools: the model would never see them",
            "tools_unsupported",
            "tools",
        )
    return encode_prompt(state, text, "messages", allow_special=True, marker=marker)


def render(state: ServerState, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    extra = {"tools": tools} if tools else {}
    try:
        return str(state.template.render(messages, add_generation_prompt=True, **extra))
    except (TemplateError, KeyError, TypeError, AttributeError, ValueError) as error:
        raise APIError(
            400, f"the chat template refused the messages: {error}", "invalid_messages", "messages"
        ) from error


def plain_marker(value: Any) -> str:
    """A noncharacter that appears nowhere in `value` (400 in the absurd case that all 32 do)."""
    text = json.dumps(value, ensure_ascii=False)
    for marker in PLAIN_MARKERS:
        if marker not in text:
            return marker
    raise APIError(400, "the messages use every Unicode noncharacter U+FDD0..U+FDEF", "invalid_value", "messages")


def protect(value: Any, pattern: regex.Pattern | None, marker: str) -> Any:
    """`value` with `marker` put after the first character of every special token written in its strings."""
    if pattern is None:
        return value
    if isinstance(value, str):
        return pattern.sub(lambda match: match.group()[0] + marker + match.group()[1:], value)
    if isinstance(value, list):
        return [protect(item, pattern, marker) for item in value]
    if isinstance(value, dict):
        return {key: protect(item, pattern, marker) for key, item in value.items()}
    return value


def completion_tokens(state: ServerState, prompt: str | list[int], param: str = "prompt") -> list[int]:
    """A completion prompt's (or an embedding input's, `param` "input") tokens: a token list as given, text with the
    model's BOS in front."""
    tokenizer = state.tokenizer
    if isinstance(prompt, list):
        bad = [token for token in prompt if not 0 <= token < len(tokenizer.tokens)]
        if bad:
            raise APIError(
                400,
                f"token id {bad[0]} is outside the vocabulary of {len(tokenizer.tokens)}",
                "invalid_value",
                param,
            )
        return prompt
    bos = [tokenizer.bos_id] if tokenizer.add_bos and tokenizer.bos_id is not None else []
    tokens = bos + encode_prompt(state, prompt, param, allow_special=False)
    if not tokens:
        raise APIError(400, f"the {param} is empty", "invalid_value", param)
    return tokens
