"""The scheduler's warm-up and its chunked prefill, by counting what it does (never by timing it).

The warm-up: `/health` answers 503 `loading` with its progress until the runner's warm-up is done, and a request
that comes meanwhile gets a 503 error body at once; with a real model, every step a short request needs was captured
before `/health` said ok. The chunked prefill: a long prompt goes in chunks, and between two of its chunks the
stream already running gets a decode step and its next token.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
httpx = pytest.importorskip("httpx")

import llm_reference as reference  # noqa: E402
from llm_fixtures import CHATML_TEMPLATE, write_model  # noqa: E402
from serve_helpers import WARMUP_STEPS, RunningServer, ScriptedRunner, start  # noqa: E402

from tg.llm.model import load_model  # noqa: E402
from tg.llm.serve.app import ServerState  # noqa: E402
from tg.llm.serve.engine import Embedding, Engine, Event, Finish, Job, Piece, wait_idle  # noqa: E402
from tg.llm.serve.params import GenerationParams  # noqa: E402
from tg.llm.serve.runner import ModelRunner  # noqa: E402
from tg.llm.session import Session  # noqa: E402
from tg.llm.template import JinjaTemplate  # noqa: E402

CONTEXT = 96


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", "F32", seed=3)


@pytest.fixture(scope="module")
def session(model_path: Path) -> Session:
    return Session.load(model_path, 256)


def completion(url: str, **extra: object) -> httpx.Response:
    body = {"model": "scripted", "prompt": "hello", "max_tokens": 2, **extra}
    return httpx.post(url + "/v1/completions", json=body, timeout=60)


def test_health_says_loading_with_progress_and_requests_get_503_until_warm(session: Session) -> None:
    tokenizer = session.tokenizer
    runner = ScriptedRunner(len(tokenizer.tokens), tokenizer.eos_id)
    engine = Engine(runner, tokenizer, warmup=True)  # type: ignore[arg-type]
    server = RunningServer(ServerState(engine, tokenizer, JinjaTemplate(CHATML_TEMPLATE), "scripted", 256))
    try:
        health = httpx.get(server.url + "/health", timeout=10)
        assert health.status_code == 503 and health.headers["retry-after"]
        assert health.json()["status"] == "loading"
        assert health.json()["progress"] == {"done": 0, "total": WARMUP_STEPS}
        for answer in (
            completion(server.url),
            completion(server.url, stream=True),
            httpx.post(
                server.url + "/v1/chat/completions",
                json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}]},
                timeout=60,
            ),
            httpx.post(server.url + "/v1/embeddings", json={"model": "scripted", "input": "hi"}, timeout=60),
        ):
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "model_loading"
            assert "warming up (0 of 3 steps captured)" in answer.json()["error"]["message"]
            assert answer.headers["retry-after"]
        assert runner.calls == []  # nothing reached the model
        runner.warm_gate.set()
        assert engine.ready.wait(30)
        health = httpx.get(server.url + "/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        runner.script = tokenizer.encode("ok then", allow_special=False)
        answer = completion(server.url)
        assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == "ok"
    finally:
        runner.warm_gate.set()
        server.close()


def test_a_failed_warm_up_is_reported_not_hung(session: Session) -> None:
    tokenizer = session.tokenizer
    runner = ScriptedRunner(len(tokenizer.tokens), tokenizer.eos_id)

    def broken(report, context=None):  # type: ignore[no-untyped-def]
        raise MemoryError("no room for the captures")

    runner.warm_up = broken  # type: ignore[method-assign]
    engine = Engine(runner, tokenizer, warmup=True)  # type: ignore[arg-type]
    server = RunningServer(ServerState(engine, tokenizer, JinjaTemplate(CHATML_TEMPLATE), "scripted", 256))
    try:
        engine.thread.join(30)
        health = httpx.get(server.url + "/health", timeout=10)
        assert health.status_code == 503 and health.json()["status"] == "error"
        assert "no room for the captures" in health.json()["error"]
        answer = completion(server.url)
        assert answer.status_code == 503 and "failed to warm up" in answer.json()["error"]["message"]
    finally:
        server.close()


@pytest.mark.slow
def test_warm_up_captures_what_short_requests_replay(model_path: Path) -> None:
    """With a real model: once /health says ok, chat and completion requests (and two at once) replay captures
    the warm-up made; none is captured while they run."""
    server = start(model_path, CONTEXT, max_concurrency=2, warmup=True)
    try:
        engine = server.state.engine
        assert engine.ready.wait(600)
        runner = engine.runner
        warmed = set(runner.steps)
        expected = {(tuple(rows), kv_window_of(runner, start), output) for start, rows, output in runner.warm_up_plan()}
        assert warmed == expected
        assert engine.warm == {"done": len(expected), "total": len(expected)}
        assert httpx.get(server.url + "/health", timeout=10).json()["status"] == "ok"
        body = {"model": "tiny-llama-F32", "prompt": "the cat sat on", "max_tokens": 20, "temperature": 0}
        url = server.url + "/v1/completions"
        results: list[httpx.Response] = []
        clients = [
            threading.Thread(target=lambda: results.append(httpx.post(url, json=body, timeout=300))) for _ in range(2)
        ]
        for client in clients:
            client.start()
        for client in clients:
            client.join(300)
        assert [answer.status_code for answer in results] == [200, 200]
        assert results[0].json()["choices"][0]["text"] == results[1].json()["choices"][0]["text"]
        assert set(runner.steps) == warmed  # nothing new was captured
    finally:
        server.close()


def kv_window_of(runner: ModelRunner, start: int) -> int:
    from tg.llm.model import kv_window

    return kv_window(start, runner.max_context)


# ----------------------------------------------------------------------------------------------- chunked prefill


def test_a_long_prompt_is_prefilled_in_chunks_between_decode_steps(session: Session) -> None:
    """Stream A is running when B arrives with a 40-token prompt (10 chunks of 4): between any two of B's chunks
    A gets a decode step and a token, in the order the scheduler thread did them."""
    tokenizer = session.tokenizer
    runner = ScriptedRunner(len(tokenizer.tokens), tokenizer.eos_id)
    runner.script = [ord("a")] * 200
    engine = Engine(runner, tokenizer, prefill_chunk=4)  # type: ignore[arg-type]
    a_started, b_submitted = threading.Event(), threading.Event()
    finished = {"A": threading.Event(), "B": threading.Event()}

    def emit(name: str, event: Event) -> None:
        runner.calls.append(("emit", name, type(event).__name__))  # on the scheduler thread: in order with calls
        if isinstance(event, Piece) and not a_started.is_set():
            a_started.set()
            # A's first token holds the scheduler (outside its lock) until B is queued: however slowly this test's
            # thread runs on a busy machine, A cannot finish its 150 tokens before B's prompt arrives
            b_submitted.wait(30)
        if isinstance(event, Finish):
            finished[name].set()

    try:
        engine.submit(Job([1, 2, 3], GenerationParams(max_tokens=150), lambda event: emit("A", event)))
        assert a_started.wait(30)
        long_prompt = [(7 * i) % 200 + 1 for i in range(40)]
        engine.submit(Job(long_prompt, GenerationParams(max_tokens=3), lambda event: emit("B", event)))
        b_submitted.set()
        assert finished["B"].wait(30) and finished["A"].wait(30)
    finally:
        engine.stop()
    assert runner.calls[0] == ("prefill", 0, 3)  # A, in slot 0; B in slot 1
    b_chunks = [i for i, call in enumerate(runner.calls) if call[:2] == ("prefill", 1)]
    assert [runner.calls[i][2] for i in b_chunks] == [4] * 10
    for before, after in zip(b_chunks, b_chunks[1:], strict=False):
        between = runner.calls[before + 1 : after]
        assert any(call[0] == "decode" and 0 in call[1] for call in between), between  # A's slot is 0
        assert ("emit", "A", "Piece") in between, between


def test_prompts_being_prefilled_take_turns(session: Session) -> None:
    """Two long prompts submitted together are fed chunk by chunk in turn (round robin), not one after the other."""
    tokenizer = session.tokenizer
    runner = ScriptedRunner(len(tokenizer.tokens), tokenizer.eos_id)
    runner.script = [ord("a")]
    engine = Engine(runner, tokenizer, prefill_chunk=4)  # type: ignore[arg-type]
    finished = [threading.Event(), threading.Event()]
    try:
        with engine.condition:  # both wait in the queue before the scheduler admits either
            for index in range(2):
                prompt = [(5 * i + index) % 200 + 1 for i in range(16)]
                job = Job(prompt, GenerationParams(max_tokens=2), lambda event, i=index: finished[i].set()
                          if isinstance(event, Finish) else None)  # fmt: skip
                engine.waiting.append(job)
            engine.condition.notify()
        assert finished[0].wait(30) and finished[1].wait(30)
    finally:
        engine.stop()
    chunks = [call[1] for call in runner.calls if call[0] == "prefill"]
    assert chunks == [0, 1, 0, 1, 0, 1, 0, 1]


def test_chunked_prefill_beside_a_decoding_slot_matches_the_reference(tmp_path: Path) -> None:
    """The real runner: a 30-token prompt fed 8 at a time with decode steps of another slot between the chunks
    gives the reference's logits for both."""
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=128)
    runner = ModelRunner(model, 2)
    running, filling = runner.slots
    runner.prefill(running, [5, 6, 7])
    prompt = [(11 * i + 3) % 250 for i in range(30)]
    logits, token = None, 40
    while logits is None:
        logits = runner.prefill_step(filling, prompt, 8)
        assert len(filling.cached) in (8, 16, 24, 30)
        (row,) = runner.decode([(running, token)])
        want = reference.forward(metadata, weights, running.cached)[-1]
        np.testing.assert_allclose(row, want, atol=2e-3 * np.abs(want).max())
        token += 1
    want = reference.forward(metadata, weights, prompt)[-1]
    np.testing.assert_allclose(logits, want, atol=2e-3 * np.abs(want).max())


@pytest.mark.slow
def test_a_running_stream_never_waits_for_the_capture_of_its_next_window(model_path: Path) -> None:
    """The real runner, warmed up to 64 positions: a stream decodes past position 64 into the 128 window (which
    the warm-up did not capture) through the widest window's capture; no step is captured while it runs (each
    capture is counted with the requests running at that moment), and once it is done the idle scheduler captures
    the queued windows."""
    session = Session.load(model_path, 256)
    runner = ModelRunner(session.model, 2, defer_captures=True)
    engine = Engine(runner, session.tokenizer, warmup=True, warmup_context=64)
    running_at_capture: list[int] = []
    runner.before_capture = lambda key: running_at_capture.append(len(engine.active) + len(engine.waiting))
    pieces, finished = [], threading.Event()

    def emit(event: Event) -> None:
        if isinstance(event, Piece):
            pieces.append(event)
        if isinstance(event, Finish):
            finished.set()

    try:
        assert engine.ready.wait(600)
        no_end = {token: -100.0 for token in session.tokenizer.special_ids}  # it runs to max_tokens
        engine.submit(Job([5, 6, 7], GenerationParams(max_tokens=120, logit_bias=no_end), emit))
        assert finished.wait(600)
        assert engine.stats()["decode_steps"] >= 110 and len(runner.slots[0].cached) > 120
        assert runner.inline_captures == 0 and runner.covered_steps > 50
        stats = engine.stats()
        assert stats["captures_waited_for"] == 0 and stats["steps_on_wider_captures"] == runner.covered_steps
        assert wait_idle_captures(runner) and ((1,), 128, "last") in runner.steps
        assert running_at_capture and set(running_at_capture) == {0}  # every capture came with nobody running
    finally:
        engine.stop()


def test_without_a_warm_up_no_capture_is_made_while_a_stream_decodes(model_path: Path) -> None:
    """No warm-up: a stream runs; a long prompt (new KV windows, then a batch of two), an echo and an embedding
    request join it. Every capture (each counted with the streams decoding at that moment) comes while none is:
    the first prompt's, then the echo's and the embedding's first chunks once the streams are done (those prompts
    wait in line meanwhile), then the queued ones at idle. The stream gets every token it asked for."""
    session = Session.load(model_path, 256)
    runner = ModelRunner(session.model, 2, defer_captures=True)
    engine = Engine(runner, session.tokenizer)
    decoding_at_capture: list[int] = []
    runner.before_capture = lambda key: decoding_at_capture.append(sum(job.prefilled for job in engine.active))
    events: list[tuple[str, Event]] = []
    finished = {name: threading.Event() for name in ("stream", "long", "echo", "embed")}
    first_piece = threading.Event()

    def emitter(name: str) -> Callable[[Event], None]:
        def emit(event: Event) -> None:
            events.append((name, event))
            if isinstance(event, Piece):
                first_piece.set()
            if isinstance(event, (Finish, Embedding)):
                finished[name].set()

        return emit

    no_end = {token: -100.0 for token in session.tokenizer.special_ids}
    try:
        engine.submit(Job([5, 6, 7], GenerationParams(max_tokens=60, logit_bias=no_end), emitter("stream")))
        assert first_piece.wait(600)
        long_prompt = [(13 * i + 5) % 250 for i in range(100)]
        engine.submit(Job(long_prompt, GenerationParams(max_tokens=5, logit_bias=no_end), emitter("long")))
        echo = GenerationParams(max_tokens=1, logprobs=True, logit_bias=no_end)
        engine.submit(Job([4, 9, 16], echo, emitter("echo"), echo_logprobs=True))
        engine.submit(Job([4, 9, 16], GenerationParams(), emitter("embed"), embed=True))
        assert all(event.wait(600) for event in finished.values())
        (stream_end,) = [event for name, event in events if name == "stream" and isinstance(event, Finish)]
        assert stream_end.completion_tokens == 60
        assert runner.split_steps > 0  # the two streams' decode steps, before their own capture was made
        assert engine.stats()["captures_waited_for"] == 3  # the first prompt chunk, echo and embedding
        decoding_done = max(i for i, (name, _) in enumerate(events) if name in ("stream", "long"))
        assert min(i for i, (name, _) in enumerate(events) if name in ("echo", "embed")) > decoding_done
        assert wait_idle(engine)
        assert decoding_at_capture and set(decoding_at_capture) == {0}
    finally:
        engine.stop()


def wait_idle_captures(runner: ModelRunner, timeout: float = 600.0) -> bool:
    """A hang guard, not a timing: True once the scheduler captured every queued step."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not runner.wanted and ((1,), 128, "last") in runner.steps:
            return True
        time.sleep(0.05)
    return False


class CapturingRunner(ScriptedRunner):
    """A ScriptedRunner with one step queued for capture, whose capture (run by the idle scheduler) lasts until
    `release` is set."""

    def __init__(self, vocab: int, end: int) -> None:
        super().__init__(vocab, end)
        self.wanted = ["a step"]
        self.capturing, self.release = threading.Event(), threading.Event()

    def capture_wanted(self) -> None:
        self.capturing.set()
        self.release.wait(60)
        self.wanted.clear()


@pytest.mark.slow
def test_stop_waits_for_the_idle_capture_to_finish(session: Session) -> None:
    """Regression (busy-machine suite run): stop() gave up on the scheduler thread after 10 s while it still ran an
    idle capture, so a closed server kept launching kernels into the next test (its kernel count was off by 45)."""
    runner = CapturingRunner(len(session.tokenizer.tokens), session.tokenizer.eos_id)
    engine = Engine(runner, session.tokenizer)  # type: ignore[arg-type]
    assert runner.capturing.wait(30)
    stopper = threading.Thread(target=engine.stop, daemon=True)
    stopper.start()
    stopper.join(12)  # (longer than the old 10 s limit)
    stopped_early = not stopper.is_alive()
    runner.release.set()
    stopper.join(30)
    assert not stopped_early and not engine.thread.is_alive()
