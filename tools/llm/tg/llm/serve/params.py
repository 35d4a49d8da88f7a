"""Request bodies -> validated generation parameters. Wrong types answer 422, out-of-range values 400.

Unknown fields are ignored (clients send `user`, `metadata`, ...), as OpenAI does for most of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tg.llm.sampling import SamplingOptions
from tg.llm.serve.errors import APIError
from tg.llm.serve.json_constraint import SchemaError, compile_schema, minimal

MAX_STOPS = 16
MAX_TOP_LOGPROBS = 20
MAX_CHOICES = 16  # n, and n times the prompts of a batched completion
MAX_LOGIT_BIAS = 300  # entries, as OpenAI allows
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class GenerationParams:
    """What the engine needs for one completion, whatever the endpoint."""

    max_tokens: int | None = None  # None: up to the end of the context
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    stops: list[str] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0
    json_object: bool = False
    json_schema: Any = None  # the compiled response_format json_schema (a json_constraint node), or None
    stream: bool = False
    include_usage: bool = False
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit
    choices: int = 1  # n

    def for_choice(self, index: int) -> GenerationParams:
        """The parameters of choice `index` of n: a seeded request gives each choice its own seed (seed + index),
        so the choices differ but each stays reproducible."""
        if index == 0 or self.sampling.seed is None:
            return self
        sampling = replace(self.sampling, seed=(self.sampling.seed + index) % 2**64)
        return replace(self, sampling=sampling)


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    params: GenerationParams
    tools: list[dict[str, Any]] | None = None
    parse_tools: bool = False


@dataclass
class CompletionRequest:
    model: str
    prompts: list[str | list[int]]  # one or more (a batch: a choice per prompt and n)
    params: GenerationParams
    echo: bool = False


def type_error(param: str, expected: str) -> APIError:
    return APIError(422, f"'{param}' must be {expected}", "invalid_type", param)


def value_error(param: str, message: str) -> APIError:
    return APIError(400, f"'{param}' {message}", "invalid_value", param)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not is_number(value):
        raise type_error(name, "a number")
    if not low <= value <= high:
        raise value_error(name, f"must be between {low:g} and {high:g}, got {value}")
    return float(value)


def integer(body: dict[str, Any], name: str, default: int | None, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise type_error(name, "an integer")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise value_error(name, f"must be {bounds}, got {value}")
    return value


def boolean(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise type_error(name, "a boolean")
    return value


def stop_strings(body: dict[str, Any]) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(stop, str) for stop in value):
        raise type_error("stop", "a string or a list of strings")
    if len(value) > MAX_STOPS:
        raise value_error("stop", f"may hold at most {MAX_STOPS} strings")
    return [stop for stop in value if stop]


def require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise APIError(400, "you must provide a model parameter", "missing_required_parameter", "model")
    if not isinstance(model, str):
        raise type_error("model", "a string")
    return model


def common_params(body: dict[str, Any], logprobs: bool, top_logprobs: int) -> GenerationParams:
    """The sampling fields both endpoints share."""
    choices = integer(body, "n", 1, 1, MAX_CHOICES) or 1
    max_tokens = integer(body, "max_completion_tokens", None, 1)
    max_tokens = integer(body, "max_tokens", None, 1) if max_tokens is None else max_tokens
    seed = integer(body, "seed", None, -(2**63), 2**64 - 1)
    sampling = SamplingOptions(
        temperature=number(body, "temperature", 1.0, 0.0, 2.0),
        top_k=integer(body, "top_k", 0, 0) or 0,
        top_p=number(body, "top_p", 1.0, 0.0, 1.0),
        min_p=number(body, "min_p", 0.0, 0.0, 1.0),
        repetition_penalty=number(body, "repetition_penalty", 1.0, 0.01, 10.0),
        frequency_penalty=number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        presence_penalty=number(body, "presence_penalty", 0.0, -2.0, 2.0),
        seed=None if seed is None else seed % 2**64,
    )
    stream = boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise type_error("stream_options", "an object")
    if options is not None and not stream:
        raise value_error("stream_options", "is only allowed when 'stream' is true")
    include_usage = boolean(options or {}, "include_usage")
    json_object, json_schema = response_format(body)
    if json_schema is not None and max_tokens is not None and max_tokens < len(minimal(json_schema)):
        raise value_error(
            "max_tokens",
            f"is too small for the json_schema: its shortest document takes {len(minimal(json_schema))} bytes, and "
            "an answer cut short must still be one",
        )
    return GenerationParams(
        max_tokens,
        sampling,
        stop_strings(body),
        logprobs,
        top_logprobs,
        json_object,
        json_schema,
        stream,
        include_usage,
        logit_bias(body),
        choices,
    )


def logit_bias(body: dict[str, Any]) -> dict[int, float]:
    """OpenAI's `{"token id": bias}`, bias between -100 (never) and 100 (always); ids are checked against the
    vocabulary by the caller."""
    value = body.get("logit_bias")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise type_error("logit_bias", "an object mapping token ids to numbers")
    if len(value) > MAX_LOGIT_BIAS:
        raise value_error("logit_bias", f"may hold at most {MAX_LOGIT_BIAS} entries")
    biases = {}
    for key, bias in value.items():
        if not key.isascii() or not key.isdigit():
            raise value_error("logit_bias", f"keys must be token ids, got {key!r}")
        if not is_number(bias):
            raise type_error("logit_bias", "an object mapping token ids to numbers")
        if not -100 <= bias <= 100:
            raise value_error("logit_bias", f"biases must be between -100 and 100, got {bias}")
        biases[int(key)] = float(bias)
    return biases


def response_format(body: dict[str, Any]) -> tuple[bool, Any]:
    """(json_object, the compiled json_schema or None): `{"type": "json_object"}`, `{"type": "json_schema",
    "json_schema": {"name", "schema", "strict"}}`; `text` is the default."""
    value = body.get("response_format")
    if value is None:
        return False, None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise type_error("response_format", "an object with a string 'type'")
    kind = value["type"]
    if kind not in ("text", "json_object", "json_schema"):
        raise value_error("response_format", f"type {kind!r} is not supported (text, json_object or json_schema)")
    if kind != "json_schema":
        return kind == "json_object", None
    described = value.get("json_schema")
    if not isinstance(described, dict):
        raise type_error("response_format", "an object with a 'json_schema' object for type json_schema")
    if "name" in described and not isinstance(described["name"], str):
        raise type_error("response_format", "an object whose json_schema 'name' is a string")
    if not isinstance(described.get("schema"), dict):
        raise type_error("response_format", "an object whose json_schema has a 'schema' object")
    try:
        return False, compile_schema(described["schema"])
    except SchemaError as error:
        raise value_error("response_format", f"holds a schema this server cannot enforce: {error}") from error


def parse_chat(body: dict[str, Any]) -> ChatRequest:
    model = require_model(body)
    messages = body.get("messages")
    if messages is None:
        raise APIError(400, "you must provide a messages parameter", "missing_required_parameter", "messages")
    if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
        raise type_error("messages", "a list of message objects")
    if not messages:
        raise value_error("messages", "must hold at least one message")
    for index, message in enumerate(messages):
        check_message(message, f"messages[{index}]")
    logprobs = boolean(body, "logprobs")
    top_logprobs = integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS) or 0
    if top_logprobs and not logprobs:
        raise value_error("top_logprobs", "needs 'logprobs' to be true")
    params = common_params(body, logprobs, top_logprobs)
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools)):
        raise type_error("tools", "a list of tool objects")
    tool_choice = body.get("tool_choice", "auto")
    if not isinstance(tool_choice, str | dict):
        raise type_error("tool_choice", "a string or an object")
    if tool_choice not in ("auto", "none"):  # forcing a call would need constrained decoding, which is not done
        raise value_error(
            "tool_choice", "must be 'auto' or 'none': a tool call cannot be forced ('required' or a named function)"
        )
    parse_tools = bool(tools) and tool_choice != "none"
    return ChatRequest(model, [normalized(message) for message in messages], params, tools or None, parse_tools)


def check_message(message: dict[str, Any], where: str) -> None:
    role = message.get("role")
    if not isinstance(role, str):
        raise type_error(f"{where}.role", "a string")
    if role not in ROLES:
        raise value_error(f"{where}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    content = message.get("content")
    if content is None and not (role == "assistant" and message.get("tool_calls")):
        raise APIError(400, f"'{where}.content' is required", "missing_required_parameter", f"{where}.content")
    if content is not None and not isinstance(content, str | list):
        raise type_error(f"{where}.content", "a string or a list of content parts")
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise value_error(f"{where}.content", "parts must be {'type': 'text', 'text': str} (text only)")
    if message.get("tool_calls") is not None:
        check_tool_calls(message["tool_calls"], f"{where}.tool_calls")
    for name in ("name", "tool_call_id"):
        if message.get(name) is not None and not isinstance(message[name], str):
            raise type_error(f"{where}.{name}", "a string")


def check_tool_calls(calls: Any, where: str) -> None:
    """A list of {"function": {"name": str, "arguments": str or object}} (id and type optional)."""
    if not isinstance(calls, list):
        raise type_error(where, "a list of tool call objects")
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise type_error(f"{where}[{index}]", "an object with a 'function' object")
        if not isinstance(function.get("name"), str):
            raise type_error(f"{where}[{index}].function.name", "a string")
        if not isinstance(function.get("arguments", "{}"), str | dict):
            raise type_error(f"{where}[{index}].function.arguments", "a JSON string or an object")
        for name in ("id", "type"):
            if call.get(name) is not None and not isinstance(call[name], str):
                raise type_error(f"{where}[{index}].{name}", "a string")


def normalized(message: dict[str, Any]) -> dict[str, Any]:
    """Text parts joined into one string; tool-call arguments as dicts (chat templates iterate over them)."""
    import json

    out = dict(message)
    if isinstance(out.get("content"), list):
        out["content"] = "".join(part["text"] for part in out["content"])
    if out.get("content") is None:
        out["content"] = ""
    calls = []
    for call in out.get("tool_calls") or []:
        function = dict(call.get("function") or {})
        if isinstance(function.get("arguments"), str):
            try:
                function["arguments"] = json.loads(function["arguments"])
            except json.JSONDecodeError:
                pass
        calls.append({**call, "function": function})
    if calls:
        out["tool_calls"] = calls
    return out


def parse_completion(body: dict[str, Any]) -> CompletionRequest:
    model = require_model(body)
    prompt = body.get("prompt")
    if prompt is None:
        raise APIError(400, "you must provide a prompt parameter", "missing_required_parameter", "prompt")
    prompts = completion_prompts(prompt)
    logprobs = integer(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
    if integer(body, "best_of", 1, 1) != 1:
        raise value_error("best_of", "must be 1")
    if body.get("suffix") is not None:
        raise value_error("suffix", "is not supported")
    params = common_params(body, logprobs is not None, logprobs or 0)
    if len(prompts) * params.choices > MAX_CHOICES:
        raise value_error("prompt", f"times n must be at most {MAX_CHOICES} completions per request")
    return CompletionRequest(model, prompts, params, boolean(body, "echo"))


def is_token_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def completion_prompts(prompt: Any) -> list[str | list[int]]:
    """A string, a list of token ids, or a batch: a list of strings or of token-id lists."""
    if isinstance(prompt, str):
        return [prompt]
    if is_token_list(prompt) and prompt:
        return [prompt]
    batch = isinstance(prompt, list) and all(isinstance(p, str) or (is_token_list(p) and p) for p in prompt)
    if not batch:
        raise type_error("prompt", "a string, a list of token ids, or a list of either")
    if not prompt:
        raise value_error("prompt", "must hold at least one prompt")
    return prompt


MAX_EMBEDDING_INPUTS = 64  # inputs per embeddings request


@dataclass
class EmbeddingsRequest:
    model: str
    inputs: list[str | list[int]]
    base64: bool = False  # encoding_format "base64": little-endian float32 bytes, base64-encoded


def parse_embeddings(body: dict[str, Any], dim: int | None) -> EmbeddingsRequest:
    """`input`: a string, a list of token ids, or a list of either; `encoding_format` float or base64;
    `dimensions` only if it is the model's own width (the vector is not truncated)."""
    model = require_model(body)
    given = body.get("input")
    if given is None:
        raise APIError(400, "you must provide an input parameter", "missing_required_parameter", "input")
    try:
        inputs = completion_prompts(given)
    except APIError as error:  # the same checks as a completion's prompt, named for this field
        if error.status == 422:
            raise type_error("input", "a string, a list of token ids, or a list of either") from error
        raise value_error("input", "must hold at least one input") from error
    if any(text == "" for text in inputs):
        raise value_error("input", "must not hold an empty string")
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise value_error("input", f"may hold at most {MAX_EMBEDDING_INPUTS} inputs")
    encoding = body.get("encoding_format", "float")
    if not isinstance(encoding, str):
        raise type_error("encoding_format", "a string")
    if encoding not in ("float", "base64"):
        raise value_error("encoding_format", f"must be 'float' or 'base64', got {encoding!r}")
    dimensions = integer(body, "dimensions", None, 1)
    if dimensions is not None and dim is not None and dimensions != dim:
        raise value_error("dimensions", f"this model's embeddings have {dim} dimensions, got {dimensions}")
    return EmbeddingsRequest(model, inputs, encoding == "base64")
