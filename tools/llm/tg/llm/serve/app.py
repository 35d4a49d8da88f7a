"""The HTTP layer: starlette routes for the OpenAI-compatible API, the chat page, and OpenAI-style errors."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import secrets
import time
from collections.abc import AsyncIterator
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tg.llm.serve.engine import Event, Failure, Finish, Job, Piece
from tg.llm.serve.errors import APIError
from tg.llm.serve.intake import (
    HostGuard,
    ServerState,
    check_api_key,
    check_budget,
    check_model,
    completion_tokens,
    off_loop,
    read_json,
    render_chat,
)
from tg.llm.serve.params import GenerationParams, parse_chat, parse_completion
from tg.llm.serve.router import StreamRouter

__all__ = ["ServerState", "create_app"]
PING_SECONDS = 15  # an SSE comment this often while nothing else is sent keeps proxies from closing the stream


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


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


DONE = "data: [DONE]\n\n"


def sse_response(events: AsyncIterator[str]) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(with_pings(events), media_type="text/event-stream", headers=headers)


async def with_pings(events: AsyncIterator[str]) -> AsyncIterator[str]:
    """`events`, with a `: ping` comment whenever none came for PING_SECONDS (a long prefill, a full queue)."""
    following = asyncio.ensure_future(anext(events))
    try:
        while True:
            done, _ = await asyncio.wait({following}, timeout=PING_SECONDS)
            if not done:
                yield ": ping\n\n"
                continue
            try:
                event = following.result()
            except StopAsyncIteration:
                return
            yield event
            following = asyncio.ensure_future(anext(events))
    finally:  # the client went away (or the stream ended): end the events, which cancels the job
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
            await following
        await events.aclose()  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------------------- endpoints


async def chat_completions(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    chat = parse_chat(await read_json(request, state))
    check_model(chat.model, state)
    prompt = await off_loop(render_chat, state, chat.messages, chat.tools)
    check_budget(prompt, chat.params, state, "messages")
    stream = JobStream(state, prompt, chat.params)
    head = {
        "id": new_id("chatcmpl"),
        "created": int(time.time()),
        "model": state.model_id,
        "system_fingerprint": "tg-llm",
    }
    if chat.params.stream:
        return sse_response(chat_chunks(stream, head, chat.params, chat.parse_tools))
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
) -> AsyncIterator[str]:
    extra = {"usage": None} if params.include_usage else {}

    def chunk(delta: dict[str, Any], reason: str | None = None, logprobs: list | None = None) -> str:
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
    yield DONE


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
    prompt = await off_loop(completion_tokens, state, completion.prompt)
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
        return sse_response(completion_chunks(stream, head, completion.params, echo))
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
) -> AsyncIterator[str]:
    extra = {"usage": None} if params.include_usage else {}
    offset = len(echo)

    def chunk(text: str, reason: str | None = None, entries: list | None = None) -> str:
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
    yield DONE


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
    return JSONResponse({"tokens": bos + await off_loop(tokenizer.encode, content)})


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


def create_app(
    state: ServerState, cors_origins: list[str] | None = None, allowed_hosts: set[str] | None = None
) -> Starlette:
    """The ASGI app. `allowed_hosts`: names the Host header may carry besides IP addresses and localhost (see
    HostGuard); CORS answers only `cors_origins`."""
    routes = [
        Route("/", chat_page, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
    ]
    middleware = [Middleware(HostGuard, allowed=allowed_hosts or set())]
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
