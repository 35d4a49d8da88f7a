"""The HTTP layer: starlette routes for the OpenAI-compatible API, the chat page, and OpenAI-style errors."""

from __future__ import annotations

import base64
import html
import secrets
import time
from collections.abc import AsyncIterator
from importlib.resources import files
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tg.llm.serve.engine import Embedding, Finish, Piece, PromptLogprobs
from tg.llm.serve.errors import APIError
from tg.llm.serve.intake import (
    HostGuard,
    ServerState,
    check_api_key,
    check_budget,
    check_model,
    completion_tokens,
    context_exceeded,
    off_loop,
    read_json,
    render_chat,
)
from tg.llm.serve.jobs import DONE, JobGroup, collect, sse, sse_response, usage
from tg.llm.serve.params import (
    ChatRequest,
    CompletionRequest,
    GenerationParams,
    parse_chat,
    parse_completion,
    parse_embeddings,
)
from tg.llm.serve.router import StreamRouter

__all__ = ["ServerState", "create_app"]


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def response_head(state: ServerState, prefix: str) -> dict[str, Any]:
    return {"id": new_id(prefix), "created": int(time.time()), "model": state.model_id, "system_fingerprint": "tg-llm"}


def check_logit_bias(params: GenerationParams, state: ServerState) -> None:
    vocab = len(state.tokenizer.tokens)
    bad = [token for token in params.logit_bias if token >= vocab]
    if bad:
        raise APIError(400, f"token id {bad[0]} is outside the vocabulary of {vocab}", "invalid_value", "logit_bias")


# ----------------------------------------------------------------------------------------------- chat


async def chat_completions(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    chat = parse_chat(await read_json(request, state))
    check_model(chat.model, state)
    check_logit_bias(chat.params, state)
    prompt = await off_loop(render_chat, state, chat.messages, chat.tools)
    check_budget(prompt, chat.params, state, "messages")
    group = JobGroup(state, [(prompt, chat.params.for_choice(index)) for index in range(chat.params.choices)])
    head = response_head(state, "chatcmpl")
    if chat.params.stream:
        return sse_response(chat_chunks(group, head, chat.params, chat.parse_tools))
    found = await collect(request, group)
    pieces, finishes = found.pieces, found.done()
    choices = [chat_choice(index, pieces[index], finish, chat) for index, finish in enumerate(finishes)]
    return JSONResponse(
        {**head, "object": "chat.completion", "choices": choices, "usage": usage(finishes, chat.params.choices)}
    )


def chat_choice(index: int, pieces: list[Piece], finish: Finish, chat: ChatRequest) -> dict[str, Any]:
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
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": reason}


async def chat_chunks(
    group: JobGroup, head: dict[str, Any], params: GenerationParams, parse_tools: bool
) -> AsyncIterator[str]:
    extra = {"usage": None} if params.include_usage else {}

    def chunk(index: int, delta: dict[str, Any], reason: str | None = None, logprobs: list | None = None) -> str:
        choice = {
            "index": index,
            "delta": delta,
            "logprobs": {"content": logprobs} if logprobs else None,
            "finish_reason": reason,
        }
        return sse({**head, "object": "chat.completion.chunk", "choices": [choice], **extra})

    routers = [StreamRouter(parse_tools) for _ in group.jobs]
    finishes: list[Finish] = []
    for index in range(len(group.jobs)):
        yield chunk(index, {"role": "assistant", "content": ""})
    try:
        async for index, event in group.events():
            router = routers[index]
            if isinstance(event, Piece):
                delta = router.feed(event.text)
                if delta or event.logprobs:
                    yield chunk(index, delta_fields(delta), logprobs=event.logprobs or None)
                continue
            if not isinstance(event, Finish):  # a chat job asks for no prompt logprobs and no embedding
                continue
            last, calls = router.finish()
            if last:
                yield chunk(index, delta_fields(last))
            if calls:
                yield chunk(index, {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
            yield chunk(index, {}, "tool_calls" if calls else event.reason)
            finishes.append(event)
        if params.include_usage:
            yield sse(
                {
                    **head,
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": usage(finishes, params.choices),
                }
            )
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


# ----------------------------------------------------------------------------------------------- completions


def legacy_logprobs(entries: list[dict[str, Any]], offset: int) -> dict[str, Any]:
    """The completions endpoint's logprobs shape: parallel lists, and top alternatives as {token: logprob} (None
    for the first token of an echoed prompt, which nothing precedes)."""
    offsets, position = [], offset
    for entry in entries:
        offsets.append(position)
        position += len(entry["token"])
    return {
        "tokens": [entry["token"] for entry in entries],
        "token_logprobs": [entry["logprob"] for entry in entries],
        "top_logprobs": [
            None if entry["top_logprobs"] is None else {top["token"]: top["logprob"] for top in entry["top_logprobs"]}
            for entry in entries
        ],
        "text_offset": offsets,
    }


async def completions(request: Request) -> Response:
    """One choice per prompt of the batch and per n (choice index = prompt index * n + choice)."""
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    completion = parse_completion(await read_json(request, state))
    check_model(completion.model, state)
    params = completion.params
    check_logit_bias(params, state)
    prompts = [await off_loop(completion_tokens, state, prompt) for prompt in completion.prompts]
    for prompt in prompts:
        check_budget(prompt, params, state, "prompt")
    echoes = [
        echo_text(completion, raw, tokens, state) for raw, tokens in zip(completion.prompts, prompts, strict=True)
    ]
    # the prompt's logprobs: all its tokens but a BOS the server put in front of a text prompt (the echo has none)
    skips = [
        int(isinstance(raw, str) and added_bos(state, tokens))
        for raw, tokens in zip(completion.prompts, prompts, strict=True)
    ]
    n = params.choices
    echo_logprobs = completion.echo and params.logprobs
    runs = [(prompt, params.for_choice(index)) for prompt in prompts for index in range(n)]
    group = JobGroup(state, runs, echo_logprobs=echo_logprobs)
    echoes = [echo for echo in echoes for _ in range(n)]
    skips = [skip for skip in skips for _ in range(n)]
    head = {**response_head(state, "cmpl"), "object": "text_completion"}
    if params.stream:
        return sse_response(completion_chunks(group, head, params, echoes, skips if echo_logprobs else None))
    found = await collect(request, group)
    choices = []
    for index, finish in enumerate(found.done()):
        entries = [entry for piece in found.pieces[index] for entry in piece.logprobs]
        offset = len(echoes[index])
        if echo_logprobs:
            (prompt_logprobs,) = found.others[index]
            assert isinstance(prompt_logprobs, PromptLogprobs)
            entries, offset = prompt_logprobs.entries[skips[index] :] + entries, 0
        choice = {
            "index": index,
            "text": echoes[index] + "".join(piece.text for piece in found.pieces[index]),
            "logprobs": legacy_logprobs(entries, offset) if params.logprobs else None,
            "finish_reason": finish.reason,
        }
        choices.append(choice)
    return JSONResponse({**head, "choices": choices, "usage": usage(found.done(), n)})


def added_bos(state: ServerState, tokens: list[int]) -> bool:
    tokenizer = state.tokenizer
    return bool(tokenizer.add_bos and tokenizer.bos_id is not None and tokens and tokens[0] == tokenizer.bos_id)


def echo_text(completion: CompletionRequest, raw: str | list[int], tokens: list[int], state: ServerState) -> str:
    if not completion.echo:
        return ""
    return raw if isinstance(raw, str) else state.tokenizer.decode(tokens)


async def completion_chunks(
    group: JobGroup, head: dict[str, Any], params: GenerationParams, echoes: list[str], skips: list[int] | None
) -> AsyncIterator[str]:
    """`skips`: with echo and logprobs, how many of each prompt's first tokens its echo leaves out (the echo chunk
    then waits for the prompt's logprobs); None otherwise."""
    extra = {"usage": None} if params.include_usage else {}
    offsets = [0 for _ in echoes]

    def chunk(index: int, text: str, reason: str | None = None, entries: list | None = None) -> str:
        logprobs = legacy_logprobs(entries or [], offsets[index]) if params.logprobs else None
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}
        return sse({**head, "choices": [choice], **extra})

    if skips is None:
        for index, echo in enumerate(echoes):
            if echo:
                yield chunk(index, echo)
                offsets[index] += len(echo)
    finishes: list[Finish | None] = [None for _ in echoes]
    try:
        async for index, event in group.events():
            if isinstance(event, PromptLogprobs):
                assert skips is not None
                yield chunk(index, echoes[index], entries=event.entries[skips[index] :])
                offsets[index] += len(echoes[index])
            elif isinstance(event, Piece):
                yield chunk(index, event.text, entries=event.logprobs)
                offsets[index] += len(event.text)
            elif isinstance(event, Finish):
                yield chunk(index, "", event.reason)
                finishes[index] = event
        if params.include_usage:
            done = [finish for finish in finishes if finish is not None]
            yield sse({**head, "choices": [], "usage": usage(done, params.choices)})
    except APIError as error:
        yield sse(error.body())
    yield DONE


# ----------------------------------------------------------------------------------------------- embeddings


async def embeddings(request: Request) -> Response:
    """POST /v1/embeddings: per input the mean of the model's final (normalized) hidden states over its tokens."""
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    body = await read_json(request, state)
    asked = parse_embeddings(body, state.model_dim)
    check_model(asked.model, state)
    prompts = [await off_loop(completion_tokens, state, text, "input") for text in asked.inputs]
    for prompt in prompts:
        if len(prompt) > state.max_context:
            raise context_exceeded(state, "input", len(prompt))
    group = JobGroup(state, [(prompt, GenerationParams()) for prompt in prompts], embed=True)
    found = await collect(request, group)
    data = []
    for index, events in enumerate(found.others):
        (embedding,) = events
        assert isinstance(embedding, Embedding)
        vector = embedding.vector.astype(np.float32)
        encoded: Any = base64.b64encode(vector.tobytes()).decode() if asked.base64 else vector.tolist()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(len(prompt) for prompt in prompts)
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": state.model_id,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


# ----------------------------------------------------------------------------------------------- the rest


def model_card(state: ServerState) -> dict[str, Any]:
    return {
        "id": state.model_id,
        "object": "model",
        "created": state.created,
        "owned_by": "tg-llm",
        "context_length": state.max_context,
    }


async def models(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    return JSONResponse({"object": "list", "data": [model_card(state)]})


async def model(request: Request) -> Response:
    """GET /v1/models/{id}: the model under its id or any alias it answers to."""
    state: ServerState = request.app.state.server
    check_api_key(request, state)
    check_model(request.path_params["model_id"], state)
    return JSONResponse(model_card(state))


async def health(request: Request) -> Response:
    """200 `ok` once the warm-up is done; until then 503 `loading` with its progress (`error` if it failed)."""
    state: ServerState = request.app.state.server
    engine = state.engine
    if engine.ready.is_set():
        return JSONResponse({"status": "ok", "model": state.model_id, **engine.stats()})
    status = "error" if engine.warmup_error is not None else "loading"
    body: dict[str, Any] = {"status": status, "model": state.model_id, "progress": dict(engine.warm)}
    if engine.warmup_error is not None:
        body["error"] = engine.warmup_error
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})


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
        Route("/v1/models/{model_id:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
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
