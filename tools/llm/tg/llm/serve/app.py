"""The HTTP layer: starlette routes for the OpenAI-compatible API, the chat page, and OpenAI-style errors."""

from __future__ import annotations

import asyncio
import html
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tg.llm.serve.engine import Engine, Event, Failure, Finish, Job, Piece
from tg.llm.serve.errors import APIError
from tg.llm.serve.params import GenerationParams, parse_chat, parse_completion
from tg.llm.serve.router import StreamRouter
from tg.llm.template import TemplateError
from tg.llm.tokenizer import Tokenizer


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


# ----------------------------------------------------------------------------------------------- request intake


async def read_json(request: Request, state: ServerState) -> dict[str, Any]:
    """The body as a JSON object: 413 past max_body_bytes (by header or while reading), 400 if it does not parse."""
    limit = state.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"the request body is larger than {limit} bytes", "request_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise APIError(413, f"the request body is larger than {limit} bytes", "request_too_large")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise APIError(400, f"the request body is not valid JSON: {error}", "invalid_json") from error
    if not isinstance(value, dict):
        raise APIError(400, "the request body must be a JSON object", "invalid_json")
    return value


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


def check_budget(prompt: list[int], params: GenerationParams, state: ServerState, param: str) -> None:
    """400 when the prompt fills the context or prompt + max_tokens does not fit in it."""
    if len(prompt) >= state.max_context:
        raise APIError(
            400,
            f"this model's maximum context length is {state.max_context} tokens, but the prompt "
            f"has {len(prompt)} tokens",
            "context_length_exceeded",
            param,
        )
    if params.max_tokens is not None and len(prompt) + params.max_tokens > state.max_context:
        raise APIError(
            400,
            f"this model's maximum context length is {state.max_context} tokens; you requested "
            f"{len(prompt) + params.max_tokens} ({len(prompt)} in the prompt, {params.max_tokens} for "
            "the completion)",
            "context_length_exceeded",
            "max_tokens",
        )


def chat_prompt(state: ServerState, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    extra = {"tools": tools} if tools else {}
    try:
        text = state.template.render(messages, add_generation_prompt=True, **extra)
    except (TemplateError, KeyError, TypeError) as error:
        raise APIError(
            400, f"the chat template refused the messages: {error}", "invalid_messages", "messages"
        ) from error
    return state.tokenizer.encode(text)


def completion_prompt(state: ServerState, prompt: str | list[int]) -> list[int]:
    tokenizer = state.tokenizer
    if isinstance(prompt, list):
        bad = [token for token in prompt if not 0 <= token < len(tokenizer.tokens)]
        if bad:
            raise APIError(
                400,
                f"token id {bad[0]} is outside the vocabulary of {len(tokenizer.tokens)}",
                "invalid_value",
                "prompt",
            )
        return prompt
    bos = [tokenizer.bos_id] if tokenizer.add_bos and tokenizer.bos_id is not None else []
    tokens = bos + tokenizer.encode(prompt, allow_special=False)
    if not tokens:
        raise APIError(400, "the prompt is empty", "invalid_value", "prompt")
    return tokens


# ----------------------------------------------------------------------------------------------- running a job


class JobStream:
    """One submitted job, seen from asyncio: its events arrive through a queue the scheduler thread fills."""

    def __init__(self, state: ServerState, prompt: list[int], params: GenerationParams) -> None:
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.job = Job(prompt, params, lambda event: loop.call_soon_threadsafe(self.queue.put_nowait, event))
        state.engine.submit(self.job)

    async def events(self) -> AsyncIterator[Piece | Finish]:
        try:
            while True:
                event = await self.queue.get()
                if isinstance(event, Failure):
                    raise event.error
                yield event
                if isinstance(event, Finish):
                    return
        finally:
            self.job.cancel()  # a no-op after Finish; frees the slot when the client went away


async def until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def collect(request: Request, stream: JobStream) -> tuple[list[Piece], Finish]:
    """All of a non-streamed job's events; the job is cancelled if the client disconnects first."""
    pieces: list[Piece] = []
    finish: list[Finish] = []

    async def gather() -> None:
        async for event in stream.events():
            (finish if isinstance(event, Finish) else pieces).append(event)

    work, watch = asyncio.create_task(gather()), asyncio.create_task(until_disconnected(request))
    done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    if work not in done:
        work.cancel()
        stream.job.cancel()
        raise APIError(499, "the client closed the request", "client_closed")  # nobody reads this answer
    watch.cancel()
    work.result()
    return pieces, finish[0]


def usage(finish: Finish) -> dict[str, Any]:
    return {
        "prompt_tokens": finish.prompt_tokens,
        "completion_tokens": finish.completion_tokens,
        "total_tokens": finish.prompt_tokens + finish.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": finish.cached_tokens},
    }


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def sse(payload: dict[str, Any]) -> dict[str, str]:
    return {"data": json.dumps(payload, ensure_ascii=False)}


# ----------------------------------------------------------------------------------------------- endpoints


async def chat_completions(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    chat = parse_chat(await read_json(request, state))
    check_model(chat.model, state)
    prompt = chat_prompt(state, chat.messages, chat.tools)
    check_budget(prompt, chat.params, state, "messages")
    stream = JobStream(state, prompt, chat.params)
    head = {
        "id": new_id("chatcmpl"),
        "created": int(time.time()),
        "model": state.model_id,
        "system_fingerprint": "tg-llm",
    }
    if chat.params.stream:
        return EventSourceResponse(chat_chunks(stream, head, chat.params, chat.parse_tools), sep="\n", ping=15)
    pieces, finish = await collect(request, stream)
    router = StreamRouter(chat.parse_tools)
    content, reasoning = "", ""
    for piece in pieces:
        delta = router.feed(piece.text)
        content, reasoning = content + delta.content, reasoning + delta.reasoning
    last, calls = router.finish()
    content, reasoning = content + last.content, reasoning + last.reasoning
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    logprobs = {"content": [e for p in pieces for e in p.logprobs]} if chat.params.logprobs else None
    reason = "tool_calls" if calls else finish.reason
    choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": reason}
    return JSONResponse({**head, "object": "chat.completion", "choices": [choice], "usage": usage(finish)})


async def chat_chunks(
    stream: JobStream, head: dict[str, Any], params: GenerationParams, parse_tools: bool
) -> AsyncIterator[dict[str, str]]:
    extra = {"usage": None} if params.include_usage else {}

    def chunk(delta: dict[str, Any], reason: str | None = None, logprobs: list | None = None) -> dict[str, str]:
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": {"content": logprobs} if logprobs else None,
            "finish_reason": reason,
        }
        return sse({**head, "object": "chat.completion.chunk", "choices": [choice], **extra})

    router = StreamRouter(parse_tools)
    yield chunk({"role": "assistant", "content": ""})
    try:
        async for event in stream.events():
            if isinstance(event, Piece):
                delta = router.feed(event.text)
                if delta or event.logprobs:
                    yield chunk(delta_fields(delta), logprobs=event.logprobs or None)
                continue
            last, calls = router.finish()
            if last:
                yield chunk(delta_fields(last))
            if calls:
                yield chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
            yield chunk({}, "tool_calls" if calls else event.reason)
            if params.include_usage:
                yield sse({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage(event)})
    except APIError as error:
        yield sse(error.body())
    yield {"data": "[DONE]"}


def delta_fields(delta: Any) -> dict[str, str]:
    fields = {}
    if delta.content:
        fields["content"] = delta.content
    if delta.reasoning:
        fields["reasoning_content"] = delta.reasoning
    return fields


def legacy_logprobs(entries: list[dict[str, Any]], offset: int) -> dict[str, Any]:
    """The completions endpoint's logprobs shape: parallel lists, and top alternatives as {token: logprob}."""
    offsets, position = [], offset
    for entry in entries:
        offsets.append(position)
        position += len(entry["token"])
    return {
        "tokens": [entry["token"] for entry in entries],
        "token_logprobs": [entry["logprob"] for entry in entries],
        "top_logprobs": [{top["token"]: top["logprob"] for top in entry["top_logprobs"]} for entry in entries],
        "text_offset": offsets,
    }


async def completions(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    completion = parse_completion(await read_json(request, state))
    check_model(completion.model, state)
    prompt = completion_prompt(state, completion.prompt)
    check_budget(prompt, completion.params, state, "prompt")
    echo = ""
    if completion.echo:
        echo = completion.prompt if isinstance(completion.prompt, str) else state.tokenizer.decode(prompt)
    stream = JobStream(state, prompt, completion.params)
    head = {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": state.model_id,
        "system_fingerprint": "tg-llm",
    }
    want_logprobs = completion.params.logprobs
    if completion.params.stream:
        return EventSourceResponse(completion_chunks(stream, head, completion.params, echo), sep="\n", ping=15)
    pieces, finish = await collect(request, stream)
    entries = [e for p in pieces for e in p.logprobs]
    text = echo + "".join(piece.text for piece in pieces)
    choice = {
        "index": 0,
        "text": text,
        "logprobs": legacy_logprobs(entries, len(echo)) if want_logprobs else None,
        "finish_reason": finish.reason,
    }
    return JSONResponse({**head, "choices": [choice], "usage": usage(finish)})


async def completion_chunks(
    stream: JobStream, head: dict[str, Any], params: GenerationParams, echo: str
) -> AsyncIterator[dict[str, str]]:
    extra = {"usage": None} if params.include_usage else {}
    offset = len(echo)

    def chunk(text: str, reason: str | None = None, entries: list | None = None) -> dict[str, str]:
        logprobs = legacy_logprobs(entries or [], offset) if params.logprobs else None
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}
        return sse({**head, "choices": [choice], **extra})

    if echo:
        yield chunk(echo)
    try:
        async for event in stream.events():
            if isinstance(event, Piece):
                yield chunk(event.text, entries=event.logprobs)
                offset += len(event.text)
                continue
            yield chunk("", event.reason)
            if params.include_usage:
                yield sse({**head, "choices": [], "usage": usage(event)})
    except APIError as error:
        yield sse(error.body())
    yield {"data": "[DONE]"}


async def models(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    model = {
        "id": state.model_id,
        "object": "model",
        "created": state.created,
        "owned_by": "tg-llm",
        "context_length": state.max_context,
    }
    return JSONResponse({"object": "list", "data": [model]})


async def health(request: Request) -> Response:
    state: ServerState = request.app.state.server
    return JSONResponse({"status": "ok", "model": state.model_id, **state.engine.stats()})


async def tokenize(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    body = await read_json(request, state)
    content = body.get("content")
    if not isinstance(content, str):
        raise APIError(422, "'content' must be a string", "invalid_type", "content")
    special = body.get("add_special", False)
    if not isinstance(special, bool):
        raise APIError(422, "'add_special' must be a boolean", "invalid_type", "add_special")
    tokenizer = state.tokenizer
    bos = [tokenizer.bos_id] if special and tokenizer.bos_id is not None else []
    return JSONResponse({"tokens": bos + tokenizer.encode(content)})


async def detokenize(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    body = await read_json(request, state)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise APIError(422, "'tokens' must be a list of integers", "invalid_type", "tokens")
    vocab = len(state.tokenizer.tokens)
    bad = [token for token in tokens if not 0 <= token < vocab]
    if bad:
        raise APIError(400, f"token id {bad[0]} is outside the vocabulary of {vocab}", "invalid_value", "tokens")
    return JSONResponse({"content": state.tokenizer.decode(tokens)})


async def chat_page(request: Request) -> Response:
    state: ServerState = request.app.state.server
    page = files("tg.llm.serve").joinpath("chat.html").read_text(encoding="utf-8")
    return HTMLResponse(page.replace("__TG_MODEL__", html.escape(state.model_id, quote=True)))


# ----------------------------------------------------------------------------------------------- the app


async def api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, APIError)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    message = f"no route for {request.method} {request.url.path}" if error.status_code == 404 else str(error.detail)
    code = {404: "unknown_url", 405: "method_not_allowed"}.get(error.status_code)
    return api_error_response(APIError(error.status_code, message, code), error.headers)


def api_error_response(error: APIError, headers: Any = None) -> Response:
    return JSONResponse(error.body(), status_code=error.status, headers=dict(headers or {}) | error.headers)


async def server_error(request: Request, error: Exception) -> Response:
    return api_error_response(APIError(500, f"internal error: {type(error).__name__}: {error}", "internal_error"))


def create_app(state: ServerState, cors_origins: list[str] | None = None) -> Starlette:
    routes = [
        Route("/", chat_page, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
    ]
    middleware = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    handlers = {APIError: api_error, HTTPException: http_error, Exception: server_error}
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)
    app.state.server = state
    return app
