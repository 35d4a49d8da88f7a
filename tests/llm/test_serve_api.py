"""tg-llm serve driven by the official `openai` client over real HTTP, on a tiny random-weight GGUF model.

Expected answers come from tg-llm's own generation path (Generator + Sampler, no server), which tests/llm checks
against a numpy reference forward; here they pin that the server adds nothing and loses nothing.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

import llm_reference  # noqa: E402
from llm_fixtures import write_model  # noqa: E402
from serve_helpers import RunningServer, start  # noqa: E402

from tg.llm.generate import Generator  # noqa: E402
from tg.llm.sampling import SamplingOptions  # noqa: E402
from tg.llm.serve.engine import wait_idle  # noqa: E402
from tg.llm.session import Session  # noqa: E402

MODEL = "tiny-llama-F32"
CONTEXT = 96


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", "F32", seed=3)


@pytest.fixture(scope="module")
def server(model_path: Path):
    running = start(model_path, CONTEXT, max_concurrency=4, max_queue=8)
    yield running
    running.close()


@pytest.fixture(scope="module")
def client(server: RunningServer):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def reference(model_path: Path) -> Session:
    return Session.load(model_path, CONTEXT)


def expected_tokens(session: Session, prompt: list[int], count: int, options: SamplingOptions) -> list[int]:
    """The tokens tg-llm's Generator produces without the server (the end token excluded)."""
    session.generator = Generator(session.model)
    out = []
    for token in session.generator.generate(prompt, count, options, session.tokenizer.is_end):
        if session.tokenizer.is_end(token):
            break
        out.append(token)
    return out


def chat_tokens(session: Session, text: str) -> list[int]:
    return session.tokenizer.encode(session.template.render([{"role": "user", "content": text}]))


def still_answers(server: RunningServer) -> None:
    """After a bad request: the server still serves a correct small completion."""
    answer = httpx.post(
        server.url + "/v1/completions", json={"model": MODEL, "prompt": "ok", "max_tokens": 2}, timeout=180
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 2


# ----------------------------------------------------------------------------------------------- endpoints


def test_models_and_health(client, server: RunningServer) -> None:
    models = client.models.list()
    assert [model.id for model in models.data] == [MODEL]
    assert models.data[0].object == "model"
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["slots_idle"] + health["slots_busy"] == 4


def test_chat_greedy_matches_the_generator(client, reference: Session) -> None:
    want = expected_tokens(reference, chat_tokens(reference, "hello"), 6, SamplingOptions())
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=6, temperature=0
    )
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == reference.tokenizer.decode(want)
    assert answer.choices[0].finish_reason == "length"
    usage = answer.usage
    assert usage.prompt_tokens == len(chat_tokens(reference, "hello"))
    assert usage.completion_tokens == 6 and usage.total_tokens == usage.prompt_tokens + 6


def test_chat_stream_equals_non_stream_and_reports_usage(client) -> None:
    request = {"model": MODEL, "messages": [{"role": "user", "content": "stream me"}], "temperature": 0}
    whole = client.chat.completions.create(**request, max_completion_tokens=7)
    chunks = list(
        client.chat.completions.create(**request, max_tokens=7, stream=True, stream_options={"include_usage": True})
    )
    assert len({chunk.id for chunk in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content
    finishing = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finishing == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_completions_text_tokens_and_echo(client, reference: Session) -> None:
    want = expected_tokens(reference, reference.tokenizer.encode("the cat", allow_special=False), 5, SamplingOptions())
    answer = client.completions.create(model=MODEL, prompt="the cat", max_tokens=5, temperature=0)
    assert answer.object == "text_completion" and answer.id.startswith("cmpl-")
    assert answer.choices[0].text == reference.tokenizer.decode(want)
    by_ids = client.completions.create(
        model=MODEL, prompt=reference.tokenizer.encode("the cat", allow_special=False), max_tokens=5, temperature=0
    )
    assert by_ids.choices[0].text == answer.choices[0].text
    echoed = client.completions.create(model=MODEL, prompt="the cat", max_tokens=5, temperature=0, echo=True)
    assert echoed.choices[0].text == "the cat" + answer.choices[0].text
    streamed = client.completions.create(model=MODEL, prompt="the cat", max_tokens=5, temperature=0, stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == answer.choices[0].text


def test_seeded_sampling_is_reproducible_and_matches_the_sampler(client, reference: Session) -> None:
    options = SamplingOptions(
        temperature=1.3, top_k=40, top_p=0.95, min_p=0.01, presence_penalty=0.5, frequency_penalty=0.3, seed=11
    )
    want = expected_tokens(reference, reference.tokenizer.encode("abc", allow_special=False), 12, options)
    request = {
        "model": MODEL,
        "prompt": "abc",
        "max_tokens": 12,
        "temperature": 1.3,
        "top_p": 0.95,
        "seed": 11,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.3,
    }
    extra = {"top_k": 40, "min_p": 0.01}
    first = client.completions.create(**request, extra_body=extra).choices[0].text
    second = client.completions.create(**request, extra_body=extra).choices[0].text
    assert first == second == reference.tokenizer.decode(want)


def test_top_k_1_top_p_0_and_min_p_1_are_greedy(client) -> None:
    request = {"model": MODEL, "prompt": "xyz", "max_tokens": 6}
    greedy = client.completions.create(**request, temperature=0).choices[0].text
    assert (
        client.completions.create(**request, temperature=1.5, seed=1, extra_body={"top_k": 1}).choices[0].text == greedy
    )
    assert client.completions.create(**request, temperature=1.5, seed=2, top_p=0.0).choices[0].text == greedy
    assert (
        client.completions.create(**request, temperature=1.5, seed=3, extra_body={"min_p": 1.0}).choices[0].text
        == greedy
    )


def test_stop_strings_cut_the_answer(client) -> None:
    request = {"model": MODEL, "prompt": "abc", "max_tokens": 16, "temperature": 1.0, "seed": 5}
    full = client.completions.create(**request).choices[0].text
    assert len(full) >= 4
    stop = full[2:4]
    cut = client.completions.create(**request, stop=stop)
    assert cut.choices[0].text == full[: full.find(stop)] and cut.choices[0].finish_reason == "stop"
    listed = client.completions.create(**request, stop=["\u2603", stop])
    assert listed.choices[0].text == cut.choices[0].text
    streamed = client.completions.create(**request, stop=[stop], stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.choices[0].text


def test_logprobs_are_the_model_distribution(client, reference: Session) -> None:
    prompt = chat_tokens(reference, "hi")
    reference.generator = Generator(reference.model)
    logits = reference.generator.prefill(prompt).astype(np.float64)
    log_softmax = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=3,
        temperature=0,
        logprobs=True,
        top_logprobs=5,
    )
    entries = answer.choices[0].logprobs.content
    assert len(entries) == 3 and all(len(entry.top_logprobs) == 5 for entry in entries)
    first = entries[0]
    best = int(np.argmax(logits))
    # float32 logits from other kernels: the server runs the prompt as a chunk padded to 32 rows attending over the
    # whole cache under a mask, the Generator as its own rows over their keys only; sums run in another order, so
    # logits near 18 differ by ~4e-6 (a few float32 ulps), and so do the logprobs
    tolerance = 2e-5
    assert first.logprob == pytest.approx(log_softmax[best], abs=tolerance)
    assert first.top_logprobs[0].token == first.token  # greedy picked the most likely
    assert [t.logprob for t in first.top_logprobs] == pytest.approx(sorted(log_softmax)[::-1][:5], abs=tolerance)
    assert bytes(first.bytes) == reference.tokenizer.token_bytes(best)
    legacy = client.completions.create(model=MODEL, prompt="hi", max_tokens=3, temperature=0, logprobs=2)
    assert len(legacy.choices[0].logprobs.tokens) == 3
    assert all(len(top) <= 2 for top in legacy.choices[0].logprobs.top_logprobs)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_object_output_parses(client, temperature: float) -> None:
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "json please"}],
        max_tokens=14,
        temperature=temperature,
        seed=4,
        response_format={"type": "json_object"},
    )
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


def test_json_schema_output_validates(client) -> None:
    """A random-weight model, sampled, answers documents that validate (jsonschema is the oracle)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "units": {"enum": ["C", "F"]},
            "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        },
        "required": ["city", "days", "units"],
    }
    for seed in range(3):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "weather"}],
            max_tokens=60,
            temperature=1.0,
            seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}},
        )
        jsonschema.validate(json.loads(answer.choices[0].message.content), schema)


def test_tokenize_and_detokenize(server: RunningServer, reference: Session) -> None:
    tokens = httpx.post(server.url + "/tokenize", json={"content": "the <|im_end|> end"}).json()["tokens"]
    assert tokens == reference.tokenizer.encode("the <|im_end|> end")
    text = httpx.post(server.url + "/detokenize", json={"tokens": tokens}).json()["content"]
    assert text == "the <|im_end|> end"


def test_chat_page_is_self_contained(server: RunningServer) -> None:
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script" in page.text and "/v1/chat/completions" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN, nothing fetched from elsewhere


# ----------------------------------------------------------------------------------------------- concurrency


def slow_decode_steps(server: RunningServer, monkeypatch: pytest.MonkeyPatch, seconds: float = 0.05) -> None:
    """Make every decode step of the server's engine take `seconds` longer (for the rest of the test)."""
    runner = server.state.engine.runner
    decode = runner.decode

    def slow_decode(steps: list) -> list:
        time.sleep(seconds)
        return decode(steps)

    monkeypatch.setattr(runner, "decode", slow_decode)


def test_concurrent_requests_get_their_own_answers_in_batched_steps(
    client, server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = ["abc", "xyz", "klm"]  # same length: the batched steps reuse one set of kernels
    alone = {
        p: client.completions.create(model=MODEL, prompt=p, max_tokens=4, temperature=0).choices[0].text
        for p in prompts
    }
    largest_before = server.state.engine.largest_batch
    # the jitted tiny model can answer a request in a few milliseconds, before a thread started with the others has
    # sent its own (a busy machine runs the three threads one after another)
    slow_decode_steps(server, monkeypatch)
    results: dict[str, str] = {}
    barrier = threading.Barrier(len(prompts))

    def ask(prompt: str) -> None:
        barrier.wait()
        answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
        results[prompt] = answer.choices[0].text

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == alone
    assert server.state.engine.largest_batch > 1 or largest_before > 1  # decodes shared a forward


def test_follow_up_turn_reuses_its_prefix_and_other_prefixes_do_not(client, reference: Session) -> None:
    first = [{"role": "user", "content": "1"}]
    reply = client.chat.completions.create(model=MODEL, messages=first, max_tokens=2, temperature=0)
    follow = first + [
        {"role": "assistant", "content": reply.choices[0].message.content},
        {"role": "user", "content": "two"},
    ]
    again = client.chat.completions.create(model=MODEL, messages=follow, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    want = expected_tokens(
        reference, reference.tokenizer.encode(reference.template.render(follow)), 2, SamplingOptions()
    )
    assert again.choices[0].message.content == reference.tokenizer.decode(want)
    other = [{"role": "user", "content": "3"}]  # shares only the template's first tokens
    answer = client.chat.completions.create(model=MODEL, messages=other, max_tokens=2, temperature=0)
    want = expected_tokens(reference, chat_tokens(reference, "3"), 2, SamplingOptions())
    assert answer.choices[0].message.content == reference.tokenizer.decode(want)


def test_disconnect_mid_stream_stops_generation_and_frees_the_slot(server: RunningServer) -> None:
    steps_before = server.state.engine.steps
    body = {"model": MODEL, "prompt": "go", "max_tokens": 80, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=180) as response:
        lines = response.iter_lines()
        received = [line for _, line in zip(range(6), lines, strict=False)]
    assert any(line.startswith("data: ") for line in received)
    assert wait_idle(server.state.engine, 20)
    assert server.state.engine.steps - steps_before < 60  # it did not run on to max_tokens
    still_answers(server)


def test_disconnect_while_waiting_for_a_whole_answer_stops_generation(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the jitted tiny model would finish all 80 tokens before the client gives up
    slow_decode_steps(server, monkeypatch)
    steps_before = server.state.engine.steps
    body = {"model": MODEL, "prompt": "go", "max_tokens": 80, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        httpx.post(server.url + "/v1/completions", json=body, timeout=httpx.Timeout(5, read=1.0))
    assert wait_idle(server.state.engine, 20)
    assert server.state.engine.steps - steps_before < 60
    still_answers(server)


# ----------------------------------------------------------------------------------------------- several choices


def test_n_choices_are_single_requests_with_successive_seeds(client) -> None:
    """Choice i of n is what one request seeded with seed + i answers (so the choices differ, reproducibly)."""
    request = {"model": MODEL, "prompt": "abc", "max_tokens": 5, "temperature": 1.2}
    singles = [client.completions.create(**request, seed=7 + i).choices[0].text for i in range(3)]
    answer = client.completions.create(**request, seed=7, n=3)
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    assert [choice.text for choice in answer.choices] == singles
    assert answer.usage.completion_tokens == 15
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 1.2}
    alone = [client.chat.completions.create(**chat, seed=3 + i).choices[0].message.content for i in range(2)]
    both = client.chat.completions.create(**chat, seed=3, n=2)
    assert [choice.message.content for choice in both.choices] == alone
    assert both.usage.prompt_tokens == client.chat.completions.create(**chat, seed=3).usage.prompt_tokens
    streamed = ["", ""]
    for chunk in client.chat.completions.create(**chat, seed=3, n=2, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
    assert streamed == alone


def test_batched_prompts_get_one_choice_each(client) -> None:
    prompts = ["the cat", "xyz", "a"]
    alone = [
        client.completions.create(model=MODEL, prompt=p, max_tokens=4, temperature=0).choices[0].text for p in prompts
    ]
    batch = client.completions.create(model=MODEL, prompt=prompts, max_tokens=4, temperature=0, echo=True)
    assert [choice.text for choice in batch.choices] == [p + text for p, text in zip(prompts, alone, strict=True)]
    twice = client.completions.create(model=MODEL, prompt=prompts[:2], max_tokens=4, temperature=0, n=2)
    assert [choice.text for choice in twice.choices] == [alone[0], alone[0], alone[1], alone[1]]
    streamed = ["", "", ""]
    for chunk in client.completions.create(model=MODEL, prompt=prompts, max_tokens=4, temperature=0, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert streamed == alone


def test_one_model_by_id_and_alias(client, server: RunningServer, model_path: Path) -> None:
    assert client.models.retrieve(MODEL).id == MODEL
    assert httpx.get(server.url + f"/v1/models/{model_path.stem}").json()["id"] == MODEL
    answer = httpx.get(server.url + "/v1/models/gpt-9")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"


# ----------------------------------------------------------------------------------------------- embeddings, echo


def prompt_ids(session: Session, text: str) -> list[int]:
    tokenizer = session.tokenizer
    bos = [tokenizer.bos_id] if tokenizer.add_bos and tokenizer.bos_id is not None else []
    return bos + tokenizer.encode(text, allow_special=False)


def test_embeddings_are_mean_pooled_final_hidden_states(client, server: RunningServer, model_path: Path) -> None:
    """Each input's embedding is the mean over its tokens of the model's final normalized hidden states (the numpy
    reference forward); the openai client (base64 by default) and a plain float request agree. A 40-token input
    goes through the model in chunks."""
    metadata, weights = llm_reference.load(model_path)
    session = Session.load(model_path, CONTEXT)
    texts = ["hello world", "the quick brown fox jumps over the lazy dog again", "a"]
    answer = client.embeddings.create(model=MODEL, input=texts)
    assert [item.index for item in answer.data] == [0, 1, 2]
    for item, text in zip(answer.data, texts, strict=True):
        want = llm_reference.forward(metadata, weights, prompt_ids(session, text), hidden=True).mean(0)
        np.testing.assert_allclose(item.embedding, want, atol=2e-4 * np.abs(want).max())
    tokens = sum(len(prompt_ids(session, text)) for text in texts)
    assert answer.usage.prompt_tokens == tokens and answer.usage.total_tokens == tokens
    plain = httpx.post(
        server.url + "/v1/embeddings",
        json={"model": MODEL, "input": prompt_ids(session, "hello world"), "encoding_format": "float"},
        timeout=180,
    ).json()
    assert plain["object"] == "list" and plain["data"][0]["object"] == "embedding" and plain["model"] == MODEL
    np.testing.assert_allclose(plain["data"][0]["embedding"], answer.data[0].embedding, atol=1e-6)
    single = client.embeddings.create(model=MODEL, input="a", dimensions=len(answer.data[0].embedding))
    np.testing.assert_allclose(single.data[0].embedding, answer.data[2].embedding, atol=1e-6)
    encoded = httpx.post(
        server.url + "/v1/embeddings", json={"model": MODEL, "input": "a", "encoding_format": "base64"}, timeout=180
    ).json()["data"][0]["embedding"]
    vector = np.frombuffer(base64.b64decode(encoded), dtype="<f4")  # little-endian float32, as OpenAI sends
    np.testing.assert_array_equal(vector, np.array(answer.data[2].embedding, dtype=np.float32))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_echo_with_logprobs_gives_the_prompt_tokens_logprobs(client, model_path: Path, reference: Session) -> None:
    """With echo and logprobs the prompt's tokens come first: the first with no logprob (nothing precedes it), each
    other with its log-probability after the ones before (the reference forward), then the generated tokens; the
    stream says the same."""
    metadata, weights = llm_reference.load(model_path)
    prompt = "the cat sat"
    ids = prompt_ids(reference, prompt)
    request = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "temperature": 0, "echo": True, "logprobs": 2}
    answer = client.completions.create(**request)
    plain = client.completions.create(**{**request, "echo": False})
    choice = answer.choices[0]
    assert choice.text == prompt + plain.choices[0].text
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == len(ids) + 3
    assert "".join(logprobs.tokens[: len(ids)]) == prompt
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    want = log_softmax(llm_reference.forward(metadata, weights, ids))
    expected = [want[i - 1, ids[i]] for i in range(1, len(ids))]
    assert logprobs.token_logprobs[1 : len(ids)] == pytest.approx(expected, abs=2e-4)
    assert all(1 <= len(top) <= 2 for top in logprobs.top_logprobs[1:])  # two, or one text for both
    assert logprobs.tokens[len(ids) :] == plain.choices[0].logprobs.tokens
    assert logprobs.text_offset[: len(ids) + 1] == [len("".join(logprobs.tokens[:i])) for i in range(len(ids) + 1)]
    chunks = [chunk for chunk in client.completions.create(**request, stream=True) if chunk.choices]
    assert "".join(chunk.choices[0].text for chunk in chunks) == choice.text
    streamed = [token for chunk in chunks if chunk.choices[0].logprobs for token in chunk.choices[0].logprobs.tokens]
    assert streamed == logprobs.tokens
    offsets = [o for chunk in chunks if chunk.choices[0].logprobs for o in chunk.choices[0].logprobs.text_offset]
    assert offsets == logprobs.text_offset
