"""Bad input, limits and authentication: each answer is an OpenAI error body with the right status, and the
server answers a correct request right after each one."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("gguf")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from llm_fixtures import write_model  # noqa: E402
from serve_helpers import RunningServer, start  # noqa: E402

MODEL = "tiny-llama-F32"
KEY = "sk-test-key"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMPLETION = {"model": MODEL, "prompt": "hi", "max_tokens": 2, "temperature": 0}  # greedy: the same answer every time
EMBED = {"model": MODEL, "input": "hi"}
CONTEXT = 64


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    path = write_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", "F32", seed=3)
    running = start(
        path,
        CONTEXT,
        api_key=KEY,
        max_concurrency=1,
        max_queue=1,
        max_body_bytes=4096,
        cors_origins=["http://example.test"],
    )
    yield running
    running.close()


def post(server: RunningServer, path: str, body: object, key: str | None = KEY, raw: bytes | None = None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(
        server.url + path, content=content, headers=headers | {"Content-Type": "application/json"}, timeout=180
    )


def still_answers(server: RunningServer) -> None:
    answer = post(server, "/v1/completions", COMPLETION)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["finish_reason"] == "length"


def check_error(response: httpx.Response, status: int, code: str | None, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["code"] == code
    if param is not None:
        assert error["param"] == param


BAD_BODIES = [
    # (name, path, body or raw bytes, status, code, param)
    ("invalid json", "/v1/chat/completions", b'{"model": ', 400, "invalid_json", None),
    ("not utf-8", "/v1/chat/completions", b"\xff\xfe{}", 400, "invalid_json", None),
    ("json array body", "/v1/chat/completions", [1, 2], 400, "invalid_json", None),
    (
        "missing model",
        "/v1/chat/completions",
        {"messages": CHAT["messages"]},
        400,
        "missing_required_parameter",
        "model",
    ),
    ("model not a string", "/v1/chat/completions", {**CHAT, "model": 7}, 422, "invalid_type", "model"),
    ("unknown model", "/v1/chat/completions", {**CHAT, "model": "gpt-9"}, 404, "model_not_found", "model"),
    ("missing messages", "/v1/chat/completions", {"model": MODEL}, 400, "missing_required_parameter", "messages"),
    ("messages not a list", "/v1/chat/completions", {**CHAT, "messages": "hi"}, 422, "invalid_type", "messages"),
    ("empty messages", "/v1/chat/completions", {**CHAT, "messages": []}, 400, "invalid_value", "messages"),
    (
        "bad role",
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "robot", "content": "x"}]},
        400,
        "invalid_value",
        "messages[0].role",
    ),
    (
        "content a number",
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": 5}]},
        422,
        "invalid_type",
        "messages[0].content",
    ),
    (
        "image content part",
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        400,
        "invalid_value",
        "messages[0].content",
    ),
    (
        "temperature a string",
        "/v1/chat/completions",
        {**CHAT, "temperature": "hot"},
        422,
        "invalid_type",
        "temperature",
    ),
    ("temperature too high", "/v1/chat/completions", {**CHAT, "temperature": 5}, 400, "invalid_value", "temperature"),
    ("top_p negative", "/v1/chat/completions", {**CHAT, "top_p": -0.1}, 400, "invalid_value", "top_p"),
    ("top_k a float", "/v1/chat/completions", {**CHAT, "top_k": 1.5}, 422, "invalid_type", "top_k"),
    ("max_tokens zero", "/v1/chat/completions", {**CHAT, "max_tokens": 0}, 400, "invalid_value", "max_tokens"),
    ("max_tokens a bool", "/v1/chat/completions", {**CHAT, "max_tokens": True}, 422, "invalid_type", "max_tokens"),
    (
        "too many tokens requested",
        "/v1/chat/completions",
        {**CHAT, "max_tokens": 10_000},
        400,
        "context_length_exceeded",
        "max_tokens",
    ),
    (
        "context overflow",
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": "x" * 200}]},
        400,
        "context_length_exceeded",
        "messages",
    ),
    ("n = 17", "/v1/chat/completions", {**CHAT, "n": 17}, 400, "invalid_value", "n"),
    (
        "logit_bias id outside",
        "/v1/chat/completions",
        {**CHAT, "logit_bias": {"99999": 1}},
        400,
        "invalid_value",
        "logit_bias",
    ),
    (
        "logit_bias key a word",
        "/v1/chat/completions",
        {**CHAT, "logit_bias": {"a": 1}},
        400,
        "invalid_value",
        "logit_bias",
    ),
    ("logit_bias 101", "/v1/chat/completions", {**CHAT, "logit_bias": {"5": 101}}, 400, "invalid_value", "logit_bias"),
    (
        "tool_choice required",
        "/v1/chat/completions",
        {**CHAT, "tool_choice": "required"},
        400,
        "invalid_value",
        "tool_choice",
    ),
    (
        "tools the template cannot show",
        "/v1/chat/completions",
        {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]},
        400,
        "tools_unsupported",
        "tools",
    ),
    (
        "batch times n over 16",
        "/v1/completions",
        {**COMPLETION, "prompt": ["a"] * 9, "n": 2},
        400,
        "invalid_value",
        "prompt",
    ),
    ("stop a number", "/v1/chat/completions", {**CHAT, "stop": 3}, 422, "invalid_type", "stop"),
    ("too many stops", "/v1/chat/completions", {**CHAT, "stop": ["a"] * 17}, 400, "invalid_value", "stop"),
    (
        "top_logprobs 21",
        "/v1/chat/completions",
        {**CHAT, "logprobs": True, "top_logprobs": 21},
        400,
        "invalid_value",
        "top_logprobs",
    ),
    (
        "top_logprobs without logprobs",
        "/v1/chat/completions",
        {**CHAT, "top_logprobs": 2},
        400,
        "invalid_value",
        "top_logprobs",
    ),
    (
        "json_schema without its schema",
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema"}},
        422,
        "invalid_type",
        "response_format",
    ),
    (
        "json_schema keyword not enforced",
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}}}},
        400,
        "invalid_value",
        "response_format",
    ),
    (
        "json_schema top level not an object",
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "array"}}}},
        400,
        "invalid_value",
        "response_format",
    ),
    (
        "json_schema recursive $ref",
        "/v1/completions",
        {**COMPLETION, "response_format": {"type": "json_schema", "json_schema": {"schema": {
            "type": "object", "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
            "properties": {"a": {"$ref": "#/$defs/n"}}}}}},
        400,
        "invalid_value",
        "response_format",
    ),
    (
        "json_schema oneOf whose options overlap",
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"oneOf": [{"type": "number"}, {"type": "integer"}]}}}}}},
        400,
        "invalid_value",
        "response_format",
    ),
    (
        "json_schema allOf of types with nothing in common",
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"type": "integer"}]}}}}}},
        400,
        "invalid_value",
        "response_format",
    ),
    (
        "stream_options without stream",
        "/v1/chat/completions",
        {**CHAT, "stream_options": {"include_usage": True}},
        400,
        "invalid_value",
        "stream_options",
    ),
    ("stream a string", "/v1/chat/completions", {**CHAT, "stream": "yes"}, 422, "invalid_type", "stream"),
    ("tools not a list", "/v1/chat/completions", {**CHAT, "tools": {"x": 1}}, 422, "invalid_type", "tools"),
    ("prompt missing", "/v1/completions", {"model": MODEL}, 400, "missing_required_parameter", "prompt"),
    ("prompt a dict", "/v1/completions", {**COMPLETION, "prompt": {"a": 1}}, 422, "invalid_type", "prompt"),
    (
        "prompt token out of vocabulary",
        "/v1/completions",
        {**COMPLETION, "prompt": [1, 999999]},
        400,
        "invalid_value",
        "prompt",
    ),
    ("logprobs 50", "/v1/completions", {**COMPLETION, "logprobs": 50}, 400, "invalid_value", "logprobs"),
    ("tokenize without content", "/tokenize", {}, 422, "invalid_type", "content"),
    ("detokenize strings", "/detokenize", {"tokens": ["a"]}, 422, "invalid_type", "tokens"),
    ("detokenize out of vocabulary", "/detokenize", {"tokens": [-1]}, 400, "invalid_value", "tokens"),
    ("oversized body", "/v1/chat/completions", {**CHAT, "pad": "x" * 5000}, 413, "request_too_large", None),
    ("embeddings without input", "/v1/embeddings", {"model": MODEL}, 400, "missing_required_parameter", "input"),
    ("embeddings input a dict", "/v1/embeddings", {**EMBED, "input": {"a": 1}}, 422, "invalid_type", "input"),
    ("embeddings input a number", "/v1/embeddings", {**EMBED, "input": 3}, 422, "invalid_type", "input"),
    ("embeddings empty string", "/v1/embeddings", {**EMBED, "input": ["a", ""]}, 400, "invalid_value", "input"),
    ("embeddings empty list", "/v1/embeddings", {**EMBED, "input": []}, 400, "invalid_value", "input"),
    ("embeddings token out of vocabulary", "/v1/embeddings", {**EMBED, "input": [5, 99999]}, 400, "invalid_value",
     "input"),
    ("embeddings too long", "/v1/embeddings", {**EMBED, "input": "x y " * 200}, 400, "context_length_exceeded",
     "input"),
    ("embeddings encoding", "/v1/embeddings", {**EMBED, "encoding_format": "int8"}, 400, "invalid_value",
     "encoding_format"),
    ("embeddings encoding a number", "/v1/embeddings", {**EMBED, "encoding_format": 1}, 422, "invalid_type",
     "encoding_format"),
    ("embeddings 65 inputs", "/v1/embeddings", {**EMBED, "input": ["a"] * 65}, 400, "invalid_value", "input"),
    ("embeddings dimensions", "/v1/embeddings", {**EMBED, "dimensions": 7}, 400, "invalid_value", "dimensions"),
    ("embeddings unknown model", "/v1/embeddings", {**EMBED, "model": "gpt-9"}, 404, "model_not_found", "model"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "path", "body", "status", "code", "param"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES]
)
def test_bad_input_gets_an_openai_error_and_the_server_goes_on(server, name, path, body, status, code, param) -> None:
    raw = body if isinstance(body, bytes) else None
    check_error(post(server, path, body, raw=raw), status, code, param)
    still_answers(server)


def test_oversized_chunked_body_without_a_length_is_cut_off(server: RunningServer) -> None:
    def pieces():  # no Content-Length: the limit is enforced while reading
        yield b'{"model": "' + MODEL.encode() + b'", "prompt": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    response = httpx.post(server.url + "/v1/completions", content=pieces(), headers=headers, timeout=180)
    check_error(response, 413, "request_too_large")
    still_answers(server)


def test_unknown_path_and_method(server: RunningServer) -> None:
    check_error(httpx.get(server.url + "/v2/nothing"), 404, "unknown_url")
    check_error(httpx.get(server.url + "/v1/chat/completions"), 405, "method_not_allowed")
    still_answers(server)


def test_api_key_is_required_except_for_health_and_the_page(server: RunningServer) -> None:
    check_error(post(server, "/v1/completions", COMPLETION, key=None), 401, "invalid_api_key")
    check_error(post(server, "/v1/completions", COMPLETION, key="wrong"), 401, "invalid_api_key")
    check_error(httpx.get(server.url + "/v1/models"), 401, "invalid_api_key")
    check_error(post(server, "/tokenize", {"content": "hi"}, key=None), 401, "invalid_api_key")
    check_error(post(server, "/detokenize", {"tokens": [1]}, key=None), 401, "invalid_api_key")
    check_error(post(server, "/v1/chat/completions", CHAT, key=None), 401, "invalid_api_key")
    check_error(post(server, "/v1/embeddings", EMBED, key=None), 401, "invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert openai.OpenAI(base_url=server.url + "/v1", api_key=KEY).models.list().data[0].id == MODEL
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/").status_code == 200
    still_answers(server)


def test_cors_origin_is_allowed(server: RunningServer) -> None:
    preflight = httpx.options(
        server.url + "/v1/chat/completions",
        headers={
            "Origin": "http://example.test",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.headers["access-control-allow-origin"] == "http://example.test"
    other = httpx.get(server.url + "/health", headers={"Origin": "http://elsewhere.test"})
    assert "access-control-allow-origin" not in other.headers


def test_a_full_queue_answers_429_with_retry_after(server: RunningServer) -> None:
    """One slot and a queue of one: a third concurrent request is turned away, and served once the others end.

    The model's decode waits on a gate while the test fills the slot and the queue, so no timing is guessed.
    """
    engine = server.state.engine
    gate, decode = threading.Event(), engine.runner.decode

    def gated_decode(steps):  # type: ignore[no-untyped-def]
        assert gate.wait(60)
        return decode(steps)

    engine.runner.decode = gated_decode  # type: ignore[method-assign]
    statuses: list[int] = []

    def ask() -> None:
        statuses.append(post(server, "/v1/completions", {**COMPLETION, "max_tokens": 3}).status_code)

    try:
        threads = [threading.Thread(target=ask) for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while engine.stats()["queued"] + engine.stats()["slots_busy"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = post(server, "/v1/completions", COMPLETION)
        check_error(refused, 429, "queue_full")
        assert refused.headers["retry-after"] == "1"
        with pytest.raises(openai.RateLimitError):
            openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0).completions.create(**COMPLETION)
    finally:
        gate.set()
        engine.runner.decode = decode  # type: ignore[method-assign]
    for thread in threads:
        thread.join(timeout=180)
    assert statuses == [200, 200]
    still_answers(server)
