"""Reasoning and tool calls through the real server and the `openai` client, with a scripted model.

A random-weight model never writes `<think>` or `<tool_call>`, so here the model is replaced by a runner whose
logits pick a given text's tokens one by one; the tokenizer, template, scheduler, router and HTTP layer are the
real ones. The router and the JSON constraint are also checked alone against Python's `json` module.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

pytest.importorskip("gguf")
openai = pytest.importorskip("openai")

from llm_fixtures import CHATML_TOOLS_TEMPLATE, write_model  # noqa: E402
from serve_helpers import RunningServer, ScriptedRunner  # noqa: E402

from tg.llm.serve.app import ServerState  # noqa: E402
from tg.llm.serve.engine import Engine  # noqa: E402
from tg.llm.serve.json_constraint import Matcher  # noqa: E402
from tg.llm.serve.router import StreamRouter  # noqa: E402
from tg.llm.session import Session  # noqa: E402
from tg.llm.template import JinjaTemplate  # noqa: E402

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
HERMES = (
    '<think>Let me think.</think>Calling.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    "</tool_call>"
)
XML = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
    "</parameter>\n</function>\n</tool_call>"
)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory):
    session = Session.load(write_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", "F32"), 256)
    tokenizer = session.tokenizer
    runner = ScriptedRunner(len(tokenizer.tokens), tokenizer.eos_id)
    engine = Engine(runner, tokenizer)  # type: ignore[arg-type]
    server = RunningServer(ServerState(engine, tokenizer, JinjaTemplate(CHATML_TOOLS_TEMPLATE), "scripted", 256))
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    client.tokenizer = tokenizer  # type: ignore[attr-defined]  (for the tests that need the script's tokens)

    def say(text: str) -> None:
        runner.script = tokenizer.encode(text, allow_special=False)

    yield client, say
    server.close()


def scripted_tokens(client, text: str) -> list[int]:  # type: ignore[no-untyped-def]
    return client.tokenizer.encode(text, allow_special=False)


def ask(client, stream: bool = False, tools: list | None = None):  # type: ignore[no-untyped-def]
    extra = {"tools": tools} if tools else {}
    return client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "weather?"}], temperature=0, stream=stream, **extra
    )


def test_hermes_tool_call_and_reasoning(scripted) -> None:
    client, say = scripted
    say(HERMES)
    answer = ask(client, tools=[WEATHER])
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Calling."
    assert choice.message.model_extra["reasoning_content"] == "Let me think."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}


def test_streamed_tool_call_and_reasoning(scripted) -> None:
    client, say = scripted
    say(HERMES)
    chunks = list(ask(client, stream=True, tools=[WEATHER]))
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert "".join(d.content or "" for d in deltas) == "Calling."
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == "Let me think."
    calls = [call for d in deltas for call in d.tool_calls or []]
    assert [(c.index, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        (0, "get_weather", {"city": "Paris"})
    ]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_xml_function_tool_call(scripted) -> None:
    client, say = scripted
    say(XML)
    choice = ask(client, tools=[WEATHER]).choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Paris", "days": 3}


def test_without_tools_the_text_stays_content(scripted) -> None:
    client, say = scripted
    say(HERMES)
    choice = ask(client).choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == HERMES.split("</think>")[1]


@pytest.mark.parametrize("script", ['Sure! Here is JSON: {"a": [1, 2, {"b": "c', '{" the": " the the the"}'])
def test_json_object_cut_by_max_tokens_still_parses(scripted, script: str) -> None:
    """Regression: a multi-byte token (' the') must not open a string that the tokens left cannot close."""
    client, say = scripted
    say(script)
    for max_tokens in (2, 3, 4, 5, 6, 9, 30):
        answer = json_mode_answer(client, max_tokens)
        assert isinstance(json.loads(answer.choices[0].message.content), dict)


def json_mode_answer(client, max_tokens: int, response_format: dict | None = None):  # noqa: ANN001, ANN201
    """The scripted model's greedy answer to one user turn in JSON mode (or another response_format)."""
    return client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "j"}],
        max_tokens=max_tokens,
        temperature=0,
        response_format=response_format or {"type": "json_object"},
    )


def json_mode_answer_status(client, max_tokens: int, response_format: dict) -> int:  # noqa: ANN001
    try:
        json_mode_answer(client, max_tokens, response_format)
    except openai.BadRequestError as error:
        assert error.body["param"] == "max_tokens"  # type: ignore[index]
        return 400
    return 200


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "minItems": 1},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "script",
    [
        '{"name": "Ann", "age": 7, "pets": ["dog"], "ok": true}',  # conforms: the model's own answer
        '{"name": 5, "age": 7.5, "pets": [], "colour": "red"}',  # every member breaks the schema
        "Sure! Here it is.",
    ],
)
def test_json_schema_answers_conform_also_when_cut(scripted, script: str) -> None:
    """Whatever the model prefers, the answer validates against the schema (jsonschema is the oracle), also when
    max_tokens cuts it (then finish_reason is "length"); a conforming answer comes back as the model wrote it."""
    jsonschema = pytest.importorskip("jsonschema")
    client, say = scripted
    say(script)
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    shortest = len('{"name":"","age":0,"pets":["cat"]}')
    assert json_mode_answer_status(client, shortest - 1, response_format) == 400  # no room for any document
    for max_tokens in (shortest, shortest + 5, shortest + 20, 200):
        answer = json_mode_answer(client, max_tokens, response_format)
        content = answer.choices[0].message.content
        jsonschema.validate(json.loads(content), PERSON)
        if max_tokens == 200:
            assert answer.choices[0].finish_reason == "stop"
            if script.startswith('{"name": "Ann"'):
                assert content == script


@pytest.mark.parametrize(
    ("schema", "script"),
    [
        ("CHOICES", '{"where": {"x": 1, "y": 2}, "either": {"a": "s", "b": null}, "size": null, "tag": "t"}'),
        ("CHOICES", '{"where": {"x": 1}, "either": {"a": "s"}, "size": 2.5, "tag": 3}'),  # breaks every choice
        ("PETS", '{"kind": "dog", "good": "yes"}'),
        ("PETS", '{"kind": "cow", "age": "old"}'),
        ("COMPOSED", '{"name": "bo", "age": 4, "shape": {"kind": "box", "side": 2}, "id": 9, "tags": [true]}'),
        ("COMPOSED", '{"name": "cy", "age": 4.5, "shape": {"kind": "dot"}, "id": 9.5, "tags": ["a"]}'),  # breaks
    ],
)
def test_answers_to_schemas_with_choices_and_refs_conform(scripted, schema: str, script: str) -> None:
    """anyOf, oneOf, allOf, $ref and type lists through the server: whatever the model prefers, and however
    max_tokens cuts it, the answer validates (jsonschema is the oracle); a conforming answer comes back as the
    model wrote it."""
    jsonschema = pytest.importorskip("jsonschema")
    client, say = scripted
    say(script)
    chosen = {"CHOICES": CHOICES, "PETS": PETS, "COMPOSED": COMPOSED}[schema]
    response_format = {"type": "json_schema", "json_schema": {"name": schema.lower(), "schema": chosen}}
    from tg.llm.serve.json_constraint import compile_schema, minimal

    shortest = len(minimal(compile_schema(chosen)))  # single-byte tokens: a token per byte
    for max_tokens in (shortest, shortest + 9, 200):
        answer = json_mode_answer(client, max_tokens, response_format)
        content = answer.choices[0].message.content
        jsonschema.validate(json.loads(content), chosen)
        if max_tokens == 200:
            assert answer.choices[0].finish_reason == "stop"
            if jsonschema.Draft202012Validator(chosen).is_valid(json.loads(script)):
                assert content == script


def test_json_object_finish_reason_says_whether_max_tokens_cut_it(scripted) -> None:
    """A complete object written in `count` tokens: "stop" with room to spare, "length" when max_tokens forced it
    closed early (the closing text then is the constraint's, not the model's)."""
    client, say = scripted
    script = '{"a": [1, 2], "b": "the end"}'
    say(script)
    count = len(scripted_tokens(client, script))

    def finish(max_tokens: int) -> tuple[str, str]:
        answer = json_mode_answer(client, max_tokens)
        return answer.choices[0].message.content, answer.choices[0].finish_reason

    assert finish(count + 3) == (script, "stop")
    for max_tokens in (3, count // 2, count - 1):
        content, reason = finish(max_tokens)
        assert isinstance(json.loads(content), dict) and content != script and reason == "length"


def test_logit_bias_outweighs_the_model(scripted) -> None:
    """+100 on one token beats the script's logit of 30 at every step; -100 on the script's first token removes
    it (the scripted logits are 30 for the script's token and 0 elsewhere)."""
    client, say = scripted
    say("the end")
    tokens = scripted_tokens(client, "the end")
    request = {"model": "scripted", "messages": [{"role": "user", "content": "b"}], "temperature": 0}
    forced = client.chat.completions.create(**request, max_tokens=4, logit_bias={str(tokens[-1]): 100})
    assert forced.choices[0].message.content == client.tokenizer.decode([tokens[-1]] * 4)
    banned = client.chat.completions.create(**request, max_tokens=1, logit_bias={str(tokens[0]): -100})
    assert banned.choices[0].message.content != client.tokenizer.decode(tokens[:1])


# ----------------------------------------------------------------------------------------------- units


@pytest.mark.parametrize("text", [HERMES, XML, "<think>a</think>b", "plain <b>text</b> with <thin and <tool"])
def test_router_output_does_not_depend_on_how_the_text_is_split(text: str) -> None:
    def route(pieces: list[str]) -> tuple[str, str, list]:
        router = StreamRouter(parse_tools=True)
        content = reasoning = ""
        for piece in pieces:
            delta = router.feed(piece)
            content, reasoning = content + delta.content, reasoning + delta.reasoning
        last, calls = router.finish()
        return content + last.content, reasoning + last.reasoning, [c["function"] for c in calls]

    whole = route([text])
    assert route(list(text)) == whole
    rng = random.Random(0)
    cuts = sorted(rng.sample(range(1, len(text)), min(5, len(text) - 1)))
    assert route([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]) == whole


DOCUMENTS = ['{"a": [1, -2.5e+3, true, null, {"b": "c\\u00e9\\n"}], "d": false}', "{}", '{"k": [[], {}, 0.0]}']


@pytest.mark.parametrize("document", DOCUMENTS)
def test_json_prefix_accepts_json_and_every_prefix_closes_into_json(document: str) -> None:
    data = document.encode()
    checker = Matcher()
    for index, byte in enumerate(data):
        assert checker.feed(byte), document[: index + 1]
        closed = document[: index + 1].encode() + checker.closing()
        assert isinstance(json.loads(closed), dict), closed
    assert checker.done and not checker.copy().feed(ord(" "))


@pytest.mark.parametrize("text", ['{"a" 1}', '{"a": 01}', '{"a": tru}', '{"a": "\x01"}', "{}}", '{"a":1,}', "{'a': 1}"])
def test_json_prefix_refuses_invalid_json(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # the oracle agrees it is not JSON
    assert not Matcher().feed_all(text.encode())


@pytest.mark.parametrize("text", ["[1]", '"s"', "3", " {}"])
def test_json_prefix_wants_the_answer_to_start_with_an_object(text: str) -> None:
    json.loads(text)  # valid JSON, but json_object asks for an object, written from the first byte
    assert not Matcher().feed_all(text.encode())


# ----------------------------------------------------------------------------------------------- schemas, the trie

# anyOf (of objects that share a key, and of other kinds), $ref to $defs and to definitions, type lists; keys spelled
# with the random walks' letters
CHOICES = {
    "type": "object",
    "$defs": {
        "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                  "required": ["x", "y"], "additionalProperties": False},
        "tag": {"type": ["string", "null"]},
    },
    "definitions": {"old": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
    "properties": {
        "where": {"$ref": "#/$defs/point"},
        "path": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 3},
        "tag": {"$ref": "#/$defs/tag", "description": "a label"},
        "size": {"type": ["integer", "null", "boolean"]},
        "either": {"anyOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
             "additionalProperties": False},
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "null"}}, "required": ["a", "b"],
             "additionalProperties": False},
            {"type": "array", "items": {"type": "string"}},
            {"enum": [1, "x"]},
        ]},
        "legacy": {"$ref": "#/definitions/old"},
    },
    "required": ["where", "either", "size"],
    "additionalProperties": False,
}  # fmt: skip
# a choice of objects at the top level, told apart by a const
PETS = {"anyOf": [
    {"type": "object", "properties": {"kind": {"const": "cat"}, "age": {"type": "integer"}},
     "required": ["kind", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": ["boolean", "string"]}},
     "required": ["kind"], "additionalProperties": False},
]}  # fmt: skip

# allOf (two $refs, a branch of literal values, the keywords beside it), oneOf told apart by type and by a const
COMPOSED = {
    "$defs": {
        "named": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "aged": {"properties": {"age": {"type": "integer", "maxItems": 3}, "name": {"enum": ["ann", "bo", 7]}},
                 "required": ["age"]},
    },
    "type": "object",
    "allOf": [{"$ref": "#/$defs/named"}, {"$ref": "#/$defs/aged"}],
    "properties": {
        "name": {},
        "age": {},
        "id": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "array", "items": {"type": "null"}}]},
        "shape": {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "dot"}, "r": {"type": "number"}},
             "required": ["kind", "r"], "additionalProperties": False},
            {"type": "object", "properties": {"kind": {"const": "box"}, "side": {"type": "number"}},
             "required": ["kind"], "additionalProperties": False},
        ]},
        "flag": {"allOf": [{"type": ["boolean", "null"]}, {"type": ["null", "string"]}]},
        "tags": {"allOf": [{"type": "array", "items": {"type": ["string", "integer"]}, "maxItems": 3},
                           {"items": {"type": ["integer", "boolean"]}, "minItems": 1}]},
    },
    "required": ["shape"],
}  # fmt: skip

SCHEMAS = [
    PERSON,
    {"type": "object"},
    {
        "type": "object",
        "properties": {
            "n": {"type": "number"},
            "k": {"enum": [1, 12, "x", None, True]},
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}},
                                                   "required": ["a"]}, "maxItems": 2},
            "c": {"const": {"deep": [1, "two"]}},
            "free": {"type": "object", "additionalProperties": True},
            "none": {"type": "null"},
        },
        "required": ["k", "list", "c"],
    },
    CHOICES,
    PETS,
    COMPOSED,
]  # fmt: skip


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_random_walks_through_a_schema_always_close_into_valid_documents(index: int) -> None:
    """From every state on 100 random byte walks (each step a byte the automaton accepts, drawn from a mix of JSON
    syntax, letters and parts of UTF-8 characters), the bytes so far plus `closing()` are a document that
    json.loads parses and jsonschema validates, and a walk that ends is itself valid."""
    jsonschema = pytest.importorskip("jsonschema")
    from tg.llm.serve.json_constraint import compile_schema

    schema = SCHEMAS[index]
    node = compile_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)  # built once: jsonschema.validate checks the schema each call
    rng = random.Random(index)
    alphabet = list(b'{}[],:"\\ \n0123456789-+.eEtruefalsnabckdxyzpiotwgh') + [
        0xC3,
        0xA9,
        0xE2,
        0x82,
        0xAC,
        0xED,
        0xF0,
        0x9F,
        0x01,
    ]
    for _ in range(100):
        matcher, written = Matcher(node), b""
        for _ in range(rng.randrange(1, 80)):
            choices = [byte for byte in alphabet if matcher.copy().feed(byte)]
            if not choices:
                break
            byte = rng.choice(choices)
            assert matcher.feed(byte)
            written += bytes([byte])
            closed = written + matcher.closing()
            validator.validate(json.loads(closed))
            assert Matcher(node).feed_all(closed) and closing_is_complete(node, closed)
        if matcher.done:
            validator.validate(json.loads(written))


@pytest.mark.parametrize(
    ("schema", "document"),
    [
        (CHOICES, '{"where": {"x": 1, "y": -2.5}, "either": 1, "size": 2}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": {"a": 3}, "size": null, "tag": null}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": {"a": "s", "b": null}, "size": true, "tag": "t"}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": ["p", "q"], "size": false, "legacy": "old"}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": "x", "size": 0, "legacy": 7, "path": [{"y": 1, "x": 0}]}'),
        (PETS, '{"kind": "cat", "age": 3}'),
        (PETS, '{"age": 3, "kind": "cat"}'),
        (PETS, '{"kind": "dog"}'),
        (PETS, '{"good": "very", "kind": "dog"}'),
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "dot", "r": 1}}'),
        (COMPOSED, '{"shape": {"side": 2, "kind": "box"}, "age": -1, "name": "bo", "id": "x", "flag": null}'),
        (COMPOSED, '{"name": "bo", "age": 0, "shape": {"kind": "box"}, "id": [null, null], "tags": [1, 2]}'),
    ],
)
def test_documents_that_keep_to_a_choice_are_accepted(schema: dict, document: str) -> None:
    """Valid documents (jsonschema agrees) are accepted whole, whichever option of each choice they take."""
    jsonschema = pytest.importorskip("jsonschema")
    from tg.llm.serve.json_constraint import compile_schema

    jsonschema.validate(json.loads(document), schema)
    assert closing_is_complete(compile_schema(schema), document.encode())


def test_recursive_and_dangling_refs_are_refused_with_a_reason() -> None:
    from tg.llm.serve.json_constraint import SchemaError, compile_schema

    tree = {"type": "object", "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array",
            "items": {"$ref": "#/$defs/node"}}}, "additionalProperties": False}},
            "properties": {"root": {"$ref": "#/$defs/node"}}, "additionalProperties": False}  # fmt: skip
    with pytest.raises(SchemaError, match=r"recursive '\$ref' is not supported \(#/\$defs/node -> #/\$defs/node\)"):
        compile_schema(tree)
    with pytest.raises(SchemaError, match="recursive"):
        compile_schema({"type": "object", "properties": {"again": {"$ref": "#"}}, "additionalProperties": False})
    with pytest.raises(SchemaError, match="points at nothing"):
        compile_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})
    with pytest.raises(SchemaError, match="must point into this schema"):
        compile_schema({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}})
    with pytest.raises(SchemaError, match="'anyOf' beside 'type'"):
        compile_schema({"type": "object", "anyOf": [{"required": ["a"]}]})
    with pytest.raises(SchemaError, match="top level"):
        compile_schema({"anyOf": [{"type": "object"}, {"type": "null"}]})


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, "'oneOf' options 0 and 1 may match the same value"),
        (
            {
                "oneOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}},
                    {"type": "object", "properties": {"b": {"type": "integer"}}},
                ]
            },
            "'oneOf' options 0 and 1",
        ),
        ({"oneOf": [{"enum": [1, "x"]}, {"const": 1.0}]}, "'oneOf' options 0 and 1"),
        ({"oneOf": [{"type": "string"}, {}]}, "'oneOf' options 0 and 1"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "'allOf' of types that have no value in common"),
        ({"allOf": [{"enum": [1, 2]}, {"const": 3}]}, "'allOf' of literal values .* no value in common"),
        ({"allOf": [{"enum": [{"a": 1}]}, {"required": ["a"]}]}, "'allOf' of literal values .* and 'required'"),
        (
            {"allOf": [{"properties": {"a": {}}, "additionalProperties": False}, {"required": ["b"]}]},
            "'allOf' requires 'b'",
        ),
        ({"allOf": [{"type": "string"}, {"pattern": "^a"}]}, "'pattern' is not supported"),
        (
            {"allOf": [{"$ref": "#/properties/x/$defs/a"}], "$defs": {"a": {"allOf": [{"$ref": "#/properties/x"}]}}},
            "recursive",
        ),
        (
            {"allOf": [{"$ref": "#/properties/x/$defs/a", "type": "string"}], "$defs": {"a": {}}},
            "'\\$ref' beside 'type'",
        ),
        ({"type": "string", "oneOf": [{"type": "string"}]}, "'oneOf' beside 'type'"),
    ],
)
def test_compositions_that_cannot_be_enforced_are_refused_naming_the_keyword(schema: dict, reason: str) -> None:
    """A oneOf whose options may overlap (jsonschema would refuse a value matching two: exclusivity that a byte
    automaton cannot enforce), an allOf that nothing matches or that mixes what cannot be merged: each refused
    with a reason that names the keyword (the 400 of response_format)."""
    from tg.llm.serve.json_constraint import SchemaError, compile_schema

    with pytest.raises(SchemaError, match=reason):
        compile_schema({"type": "object", "properties": {"x": schema}, "additionalProperties": False})


def test_a_one_of_refused_for_overlap_does_overlap() -> None:
    """The overlapping options refused above: one value matches two options, so jsonschema refuses it under
    oneOf and accepts it under anyOf (the two differ exactly there)."""
    jsonschema = pytest.importorskip("jsonschema")
    for options, value in (([{"type": "number"}, {"type": "integer"}], 3), ([{"enum": [1, "x"]}, {"const": 1.0}], 1)):
        assert not jsonschema.Draft202012Validator({"oneOf": options}).is_valid(value)
        assert jsonschema.Draft202012Validator({"anyOf": options}).is_valid(value)


def closing_is_complete(node, data: bytes) -> bool:  # type: ignore[no-untyped-def]
    matcher = Matcher(node)
    return matcher.feed_all(data) and matcher.done


@pytest.mark.parametrize(
    ("schema", "document"),
    [
        (PERSON, '{"name": "a", "age": 1.5, "pets": ["cat"]}'),
        (PERSON, '{"name": "a", "age": 1, "pets": []}'),
        (PERSON, '{"name": "a", "age": 1, "pets": ["cow"]}'),
        (PERSON, '{"name": "a", "age": 1, "pets": ["cat"], "x": 1}'),
        (PERSON, '{"name": "a", "pets": ["cat"]}'),
        (PERSON, '{"name": "a", "name": "b", "age": 1, "pets": ["cat"]}'),
        ({"type": "object", "properties": {"k": {"enum": [1, 12]}}}, '{"k": 123}'),
        (CHOICES, '{"where": {"x": 1}, "either": 1, "size": 2}'),  # the $ref's required y
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": 1, "size": 2.5}'),  # no number in the type list
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": 1, "size": "2"}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": {"a": "s"}, "size": 2}'),  # a string a needs b
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": {"a": 1, "b": null}, "size": 2}'),  # integer a: no b
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": 2, "size": null}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": [1], "size": null}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": 1, "size": null, "tag": 3}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": 1, "size": null, "legacy": 1.5}'),
        (CHOICES, '{"where": {"x": 1, "y": 2}, "either": 1, "size": null, "path": [{}, {}, {}, {}]}'),
        (PETS, '{"kind": "cat", "good": true}'),
        (PETS, '{"kind": "dog", "age": 3}'),
        (PETS, '{"kind": "cow"}'),
        (COMPOSED, '{"name": "ann", "shape": {"kind": "dot", "r": 1}}'),  # the second $ref's required age
        (COMPOSED, '{"name": "cy", "age": 3, "shape": {"kind": "dot", "r": 1}}'),  # a string, but not in the enum
        (COMPOSED, '{"name": 7, "age": 3, "shape": {"kind": "dot", "r": 1}}'),  # in the enum, but not a string
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "dot"}}'),  # a dot needs r
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "box", "r": 1}}'),
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "box"}, "id": 1.5}'),
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "box"}, "flag": true}'),  # boolean, not string
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "box"}, "tags": ["a"]}'),  # string, not boolean
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "box"}, "tags": []}'),  # minItems 1
        (COMPOSED, '{"name": "ann", "age": 3, "shape": {"kind": "box"}, "tags": [1, 2, 3, 4]}'),
    ],
)
def test_documents_that_break_the_schema_are_refused(schema: dict, document: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from tg.llm.serve.json_constraint import compile_schema

    duplicate = document.count('"name"') > 1
    if not duplicate:  # the oracle agrees (json.loads keeps the last of duplicate keys, so it cannot judge those)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(document), schema)
    assert not closing_is_complete(compile_schema(schema), document.encode())


def test_the_trie_allows_exactly_the_tokens_a_loop_over_the_vocabulary_would() -> None:
    """TokenTrie.allowed against the plain oracle (every token's bytes fed to the automaton), at every state along
    two documents, on a vocabulary rich in quotes, escapes, digits and whitespace."""
    from tg.llm.serve.json_constraint import TokenTrie, advance, compile_schema

    words = [b'"', b'",', b'":', b'"}', b'\\', b'\\n', b'\\"', b" ", b"  ", b"\n", b"\t", b"{", b'{"', b"}", b"[", b"]",
             b"],", b",", b", ", b":", b": ", b'": "', b"1", b"12", b"0", b"-", b".5", b"e", b"E+", b"true", b"tr",
             b"ue", b"null", b"false", b"name", b"age", b"pets", b"cat", b"dog", b"ca", b" the", b"\xc3\xa9", b"a\x01",
             b"\xc3", b"\xa9", b"\xe2\x82", b"\xac ", b"\xed\xa0\x80",
             b"", b"ok", b'"name', b'"age":', b'"pets": ["', b"x y"]  # fmt: skip
    trie = TokenTrie(words, excluded={len(words) - 1})
    for node, document in ((compile_schema(PERSON), '{"name": "a\\n\\"b\u20ac", "age": -12, "pets": ["cat", "dog"]}'),
                           (Matcher().node, '{"x": [1.5e+3, true, {"y": null}], "z": "t"}'),
                           (compile_schema(CHOICES), '{"where": {"x": 1, "y": 2}, "either": {"a": "ca", "b": null}, '
                                                     '"size": null, "tag": "dog", "legacy": 12}'),
                           (compile_schema(PETS), '{"kind": "dog", "good": "true"}')):  # fmt: skip
        matcher = Matcher(node)
        for byte in document.encode():
            plain, walked = trie.allowed(matcher.state)
            found = {token for token, _ in walked} | set(np.flatnonzero(plain).tolist())
            oracle = set()
            for token, data in enumerate(words[:-1]):
                trial = matcher.copy()
                if data and trial.feed_all(data):
                    oracle.add(token)
            assert found == oracle, (matcher.state, sorted(found ^ oracle))
            for token, state in walked:
                trial = matcher.copy()
                trial.feed_all(words[token])
                assert trial.state == state
            assert advance(matcher.state, byte) is not None
            matcher.feed(byte)
