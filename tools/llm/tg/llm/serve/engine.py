"""The scheduler: one thread owns the model and runs every request's generation, step by step.

Before it takes requests it warms up: it captures the steps requests will replay (see ModelRunner.warm_up), while
`/health` reports the progress and requests are refused with a 503. Requests wait in a bounded queue; up to
`max_concurrency` of them are active at once, each in its own KV-cache slot. Each step the scheduler feeds one
chunk (at most `prefill_chunk` tokens) of one admitted prompt (round robin among the prompts being prefilled),
then samples one token for every request past its prefill and feeds all of those tokens to the model in one
batched forward: a long prompt holds the running streams for one chunk at a time, never for its whole prefill.
Results go back to the asyncio side through each job's `emit` callback; a cancelled job (its client went away) is
dropped at the next step and frees its slot. When no request runs, it captures the steps the runner queued while
they ran on another step's capture (see ModelRunner._run), one at a time: nobody waits for those. An echo or
embedding prompt whose first chunk would wait for a capture (the first of its kind, without a warm-up) waits in line
until no stream is decoding, so no running stream waits for that capture either.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg.llm.generate import cut_at_stop
from tg.llm.sampling import Sampler
from tg.llm.serve.errors import APIError
from tg.llm.serve.json_constraint import ANY_OBJECT, Matcher, TokenTrie, closing
from tg.llm.serve.params import GenerationParams
from tg.llm.serve.runner import ALL, LAST, POOLED, ModelRunner, Slot
from tg.llm.tokenizer import Tokenizer, byte_to_unicode

log = logging.getLogger("tg.llm.serve")
PREFILL_CHUNK = 32  # prompt tokens fed between two decode steps of the running streams


@dataclass
class Piece:
    """New visible text, and the log-probabilities of the tokens that produced it (when asked for)."""

    text: str
    logprobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Finish:
    reason: str  # stop, length
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass
class Failure:
    error: APIError


@dataclass
class PromptLogprobs:
    """The log-probability of every prompt token after the ones before it (the first's logprob and top_logprobs
    are None: nothing precedes it), sent before any Piece of a job with `echo_logprobs`."""

    entries: list[dict[str, Any]]


@dataclass
class Embedding:
    """The mean of the final hidden states over the prompt's tokens."""

    vector: np.ndarray
    prompt_tokens: int


Event = Piece | Finish | Failure | PromptLogprobs | Embedding


@dataclass
class Job:
    prompt: list[int]
    params: GenerationParams
    emit: Callable[[Event], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    embed: bool = False  # an embedding: prefill only, then one Embedding event
    echo_logprobs: bool = False  # a PromptLogprobs event first (the prompt is prefilled from its first token)
    # set by the scheduler
    slot: Slot | None = None
    sampler: Sampler | None = None
    text: TextStream | None = None
    json: Matcher | None = None
    logits: np.ndarray | None = None
    generated: int = 0
    pending: int | None = None  # sampled right after prefill, fed at the next step
    cached_tokens: int = 0
    json_cut: bool = False  # the token budget kept JSON mode from a token the model preferred: finish "length"
    prefilled: bool = False
    pooled: np.ndarray | None = None  # an embedding's sum of hidden states so far
    prompt_entries: list[dict[str, Any]] = field(default_factory=list)  # echo_logprobs, so far

    def cancel(self) -> None:
        self.cancelled.set()


class TextStream:
    """Token ids -> visible text: stop strings cut the text, and text that may begin a stop string is held back."""

    def __init__(self, tokenizer: Tokenizer, stops: list[str]) -> None:
        self.decoder, self.stops = tokenizer.stream_decoder(), stops
        self.hold = max((len(stop) - 1 for stop in stops), default=0)
        self.text, self.shown = "", 0

    def add(self, token: int) -> tuple[str, bool]:
        """(newly visible text, whether a stop string was found)."""
        self.text += self.decoder.add(token)
        return self._visible(final=False)

    def finish(self) -> str:
        self.text += self.decoder.flush()
        return self._visible(final=True)[0]

    def _visible(self, final: bool) -> tuple[str, bool]:
        visible, stopped = cut_at_stop(self.text, self.stops)
        safe = len(visible) if stopped or final else max(self.shown, len(visible) - self.hold)
        out = visible[self.shown : safe] if safe > self.shown else ""
        self.shown = max(self.shown, safe)
        return out, stopped


class QueueFull(APIError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            429,
            f"the server is busy: {limit} requests are already waiting; retry later",
            "queue_full",
            headers={"Retry-After": "1"},
        )


class Engine:
    def __init__(
        self,
        runner: ModelRunner,
        tokenizer: Tokenizer,
        max_queue: int = 16,
        idle_timeout: float = 0.5,
        warmup: bool = False,
        warmup_context: int | None = None,
        prefill_chunk: int = PREFILL_CHUNK,
    ) -> None:
        self.runner, self.tokenizer = runner, tokenizer
        self.max_concurrency, self.max_queue = len(runner.slots), max_queue
        self.prefill_chunk = prefill_chunk
        self.waiting: collections.deque[Job] = collections.deque()
        self.active: list[Job] = []
        self.prefilling: collections.deque[Job] = collections.deque()  # admitted, prompt not all fed (round robin)
        self.free_slots = list(runner.slots)
        self.condition = threading.Condition()
        self.running = True
        self.idle_timeout = idle_timeout
        self.vocab = len(tokenizer.tokens)
        byte_map = byte_to_unicode()
        self.byte_tokens = {byte: tokenizer.ids.get(byte_map[byte], 0) for byte in range(256)}  # for json closing
        self._trie: TokenTrie | None = None  # built at the first JSON-constrained request
        self.steps = 0  # decode steps run, and the largest batch seen: for /health and tests
        self.largest_batch = 0
        self.prefill_chunks = 0
        self.warmup, self.warmup_context = warmup, warmup_context
        self.warm = {"done": 0, "total": 0}  # the warm-up's progress, in captures
        self.ready = threading.Event()
        self.warmup_error: str | None = None
        if not warmup:
            self.ready.set()
        self.thread = threading.Thread(target=self._loop, name="tg-llm-scheduler", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------------------------------ asyncio side

    def submit(self, job: Job) -> None:
        """Queue a job, or raise QueueFull (429) when max_queue jobs already wait for a slot, or a 503 while the
        server warms up or shuts down."""
        with self.condition:
            if not self.running:
                raise APIError(503, "the server is shutting down", "unavailable", headers={"Retry-After": "5"})
            if not self.ready.is_set():
                raise self.loading_error()
            if len(self.active) + len(self.waiting) >= self.max_concurrency + self.max_queue:
                raise QueueFull(self.max_queue)
            self.waiting.append(job)
            self.condition.notify()

    def loading_error(self) -> APIError:
        if self.warmup_error is not None:
            return APIError(503, f"the model failed to warm up: {self.warmup_error}", "unavailable")
        done, total = self.warm["done"], self.warm["total"]
        return APIError(
            503,
            f"the model is warming up ({done} of {total} steps captured); retry when /health says ok",
            "model_loading",
            headers={"Retry-After": "5"},
        )

    def stats(self) -> dict[str, int]:
        with self.condition:
            return {
                "slots_busy": len(self.active),
                "slots_idle": self.max_concurrency - len(self.active),
                "queued": len(self.waiting),
                "decode_steps": self.steps,
                "prefill_chunks": self.prefill_chunks,
                "largest_batch": self.largest_batch,
                # captures made after the warm-up that a step waited for (none once warmed up; without a warm-up one
                # per kind of step), and steps that ran through another step's capture (a wider KV window, or more
                # rows) while their own waited for the scheduler to be idle
                "captures_waited_for": getattr(self.runner, "inline_captures", 0),
                "steps_on_wider_captures": getattr(self.runner, "covered_steps", 0),
            }

    def shutdown(self) -> None:
        """Stop taking jobs and end the running and waiting ones with a 503 (their streams close properly) once the
        step in progress is done; returns at once (it is called from the event loop, on SIGTERM)."""
        with self.condition:
            self.running = False
            self.condition.notify()

    def stop(self) -> None:
        """Shut down and wait for the scheduler thread to end. A capture it started while idle finishes first: it
        cannot stop half way, and a thread left running it would launch kernels after the server closed, into
        whatever the process does next (a busy machine's test suite saw another test's kernel counts change)."""
        self.shutdown()
        self.thread.join()

    # ------------------------------------------------------------------------------------------ the thread

    def _warm_up(self) -> None:
        def report(done: int, total: int) -> None:
            self.warm = {"done": done, "total": total}
            if not self.running:
                raise InterruptedError("shutting down")

        try:
            self.trie  # noqa: B018  (built now, not at the first JSON-constrained request, in the middle of serving)
            self.runner.warm_up(report, self.warmup_context)
        except InterruptedError:
            return
        except Exception as error:  # noqa: BLE001  (reported by /health and every request, not a dead thread)
            log.exception("warm-up failed")
            self.warmup_error = f"{type(error).__name__}: {error}"
            return
        self.ready.set()

    def _loop(self) -> None:
        if self.warmup:
            self._warm_up()
            if not self.ready.is_set():
                return
        while True:
            with self.condition:
                while self.running and not self.waiting and not self.active and not self._captures_wanted():
                    self.condition.wait(self.idle_timeout)
                if not self.running:
                    break
                idle = not self.waiting and not self.active
                admitted = self._admit()
            if idle:  # nobody to stall: capture one step queued while requests ran (see ModelRunner._run)
                self.runner.capture_wanted()
                continue
            try:
                for job in admitted:
                    self._start(job)
                self._prefill_chunk()
                self._step()
            except Exception as error:  # noqa: BLE001  (a bug here must fail these requests, not hang the server)
                log.exception("scheduler step failed")
                for job in list(self.active):
                    self._end(job, Failure(APIError(500, f"generation failed: {error}", "generation_failed")))
        for job in self.active + list(self.waiting):
            job.emit(Failure(APIError(503, "the server is shutting down", "unavailable")))

    def _captures_wanted(self) -> bool:
        return bool(getattr(self.runner, "wanted", None))  # (a scripted stand-in for tests has none)

    def _admit(self) -> list[Job]:
        """Move waiting jobs into free slots (the one holding the longest prefix of the job's prompt first)."""
        admitted = []
        while self.waiting and self.free_slots:
            job = self.waiting.popleft()
            if job.cancelled.is_set():
                continue
            job.slot = max(self.free_slots, key=lambda slot: self.runner.reusable_prefix(slot, job.prompt))
            self.free_slots.remove(job.slot)
            self.active.append(job)
            admitted.append(job)
        return admitted

    def _start(self, job: Job) -> None:
        assert job.slot is not None
        job.sampler = Sampler(job.params.sampling)
        job.text = TextStream(self.tokenizer, job.params.stops)
        node = job.params.json_schema or (ANY_OBJECT if job.params.json_object else None)
        job.json = Matcher(node) if node is not None else None
        if job.embed or job.echo_logprobs:  # every prompt token's output is needed: none comes from the cache
            job.slot.cached = []
        job.cached_tokens = self.runner.reusable_prefix(job.slot, job.prompt)
        self.prefilling.append(job)

    def _prefill_chunk(self) -> None:
        """Feed the next chunk of the prompt first in line, which then goes to the back of the line (or, all fed,
        on to decoding: its first token is sampled now, not after the other prompts' chunks). A prompt whose chunk
        would wait for a capture is passed over while a stream is decoding (see ModelRunner.covers)."""
        while True:
            job = self._next_prompt()
            if job is None:
                return
            self.prefilling.remove(job)
            if job.cancelled.is_set():
                self._end(job, None)
                continue
            assert job.slot is not None
            try:
                done = self._feed_prompt(job)
            except Exception as error:  # noqa: BLE001  (any model failure is this request's 500, not the server's)
                log.exception("prefill failed")
                self._end(job, Failure(APIError(500, f"generation failed: {error}", "generation_failed")))
                return
            self.prefill_chunks += 1
            if not done:
                self.prefilling.append(job)
            elif job.embed:
                assert job.pooled is not None
                self._end(job, Embedding(job.pooled / len(job.prompt), len(job.prompt)))
            else:
                job.prefilled = True
                if job.echo_logprobs:
                    job.emit(PromptLogprobs(job.prompt_entries))
                job.pending = self._sample(job)
            return

    def _next_prompt(self) -> Job | None:
        decoding = any(job.prefilled for job in self.active)
        covers = getattr(self.runner, "covers", None)  # (a scripted stand-in for tests has none)
        for job in self.prefilling:
            if job.cancelled.is_set() or not decoding or covers is None or covers(prompt_output(job)):
                return job
        return None

    def _feed_prompt(self, job: Job) -> bool:
        """One chunk of the job's prompt into its slot; True once the whole prompt is in."""
        assert job.slot is not None
        if job.embed:
            pooled = self.runner.prefill_step(job.slot, job.prompt, self.prefill_chunk, POOLED)
            job.pooled = pooled if job.pooled is None else job.pooled + pooled
            return len(job.slot.cached) == len(job.prompt)
        if job.echo_logprobs:
            first = len(job.slot.cached)
            rows = self.runner.prefill_step(job.slot, job.prompt, self.prefill_chunk, ALL)
            assert rows is not None
            if first == 0:  # nothing precedes the first token: no logprob (OpenAI's null)
                job.prompt_entries.append({**self._token_entry(job.prompt[0], None), "top_logprobs": None})
            following = job.prompt[first + 1 : first + 1 + len(rows)]  # the last row's token is not in the prompt
            job.prompt_entries += [
                self._logprob_entry(job, row, token) for row, token in zip(rows, following, strict=False)
            ]
            if len(job.slot.cached) < len(job.prompt):
                return False
            job.logits = rows[-1]
            return True
        job.logits = self.runner.prefill_step(job.slot, job.prompt, self.prefill_chunk)
        return job.logits is not None

    def _step(self) -> None:
        """Sample one token for every job past its prefill, then feed the survivors' tokens in one forward."""
        steps: list[tuple[Job, Slot, int]] = []
        for job in list(self.active):
            if job.cancelled.is_set():
                self._end(job, None)
                continue
            if not job.prefilled:
                continue
            token: int | None
            if job.pending is not None:
                token, job.pending = job.pending, None
            else:
                token = self._sample(job)
            if token is not None:
                assert job.slot is not None  # a job past its prefill holds a slot until it ends
                steps.append((job, job.slot, token))
        if not steps:
            return
        try:
            logits = self.runner.decode([(slot, token) for _, slot, token in steps])
        except Exception as error:  # noqa: BLE001
            log.exception("decode failed")
            for job, _, _ in steps:
                self._end(job, Failure(APIError(500, f"generation failed: {error}", "generation_failed")))
            return
        self.steps += 1
        self.largest_batch = max(self.largest_batch, len(steps))
        for (job, _, _), row in zip(steps, logits, strict=True):
            job.logits = row

    def _sample(self, job: Job) -> int | None:
        """Pick the job's next token and emit its text; None when the job ended here."""
        assert job.logits is not None and job.sampler is not None and job.text is not None and job.slot is not None
        logits = job.logits[: self.vocab].astype(np.float64)
        for biased, bias in job.params.logit_bias.items():
            logits[biased] += bias
        best_refused = -np.inf
        if job.json is not None:
            logits, best_refused = self._json_mask(job, logits)
        token = job.sampler(logits)
        job.json_cut = job.json_cut or best_refused > logits[token]
        job.generated += 1
        if self.tokenizer.is_end(token):
            self._finish(job, "stop", [])
            return None
        entries = [self._logprob_entry(job, job.logits, token)] if job.params.logprobs else []
        text, stopped = job.text.add(token)
        if job.json is not None:
            job.json.feed_all(self.tokenizer.token_bytes(token))
        if stopped or (job.json is not None and job.json.done):
            self._finish(job, "length" if job.json_cut and not stopped else "stop", entries, text)
            return None
        if self._budget(job) <= 0:
            self._finish(job, "length", entries, text)
            return None
        if text or entries:
            job.emit(Piece(text, entries))
        return token

    def _finish(self, job: Job, reason: str, entries: list[dict[str, Any]], text: str = "") -> None:
        assert job.text is not None
        text += job.text.finish()
        if text or entries:
            job.emit(Piece(text, entries))
        completion = job.generated
        self._end(job, Finish(reason, len(job.prompt), completion, job.cached_tokens))

    def _end(self, job: Job, event: Event | None) -> None:
        if job in self.prefilling:
            self.prefilling.remove(job)
        with self.condition:
            if job in self.active:
                self.active.remove(job)
                assert job.slot is not None
                self.free_slots.append(job.slot)
        if event is not None:
            job.emit(event)

    # ------------------------------------------------------------------------------------------ helpers

    def _budget(self, job: Job) -> int:
        """How many more tokens the job may sample: its max_tokens, and the room left in the context."""
        assert job.slot is not None
        room = self.runner.max_context - 1 - len(job.slot.cached)
        return room if job.params.max_tokens is None else min(room, job.params.max_tokens - job.generated)

    @property
    def trie(self) -> TokenTrie:
        if self._trie is None:
            tokens = [self.tokenizer.token_bytes(token) for token in range(self.vocab)]
            self._trie = TokenTrie(tokens, set(self.tokenizer.special_ids))
        return self._trie

    def _json_mask(self, job: Job, logits: np.ndarray) -> tuple[np.ndarray, float]:
        """(-inf for every token that cannot continue the JSON document within the token budget, the highest logit
        of a token refused only for want of budget: -inf when none was).

        The allowed tokens come from the vocabulary trie (see json_constraint.TokenTrie), not a loop over the
        vocabulary. A token is kept when the bytes still needed to close the document after it fit in the tokens
        left (as single-byte tokens, which byte-level vocabularies always have); so an answer cut by max_tokens
        still parses. The end token is allowed only once the document is complete.
        """
        assert job.json is not None
        masked, best_refused = np.full_like(logits, -np.inf), -np.inf
        if job.json.done:
            end = self.tokenizer.eot_id if self.tokenizer.eot_id is not None else self.tokenizer.eos_id
            masked[end] = 0.0
            return masked, best_refused
        left_after = self._budget(job) - 1
        plain, walked = self.trie.allowed(job.json.state)
        allowed = plain & np.isfinite(logits)
        if allowed.any() and len(job.json.closing()) > left_after:  # plain tokens keep the closing as it is
            best_refused = float(logits[allowed].max())
            allowed[:] = False
        for token, state in walked:
            if not np.isfinite(logits[token]):
                continue
            if len(closing(state)) > left_after:
                best_refused = max(best_refused, float(logits[token]))
            else:
                allowed[token] = True
        if not allowed.any():  # no room for anything else: the next byte of the shortest closing (a cut, whatever)
            masked[self.byte_tokens[job.json.closing()[0]]] = 0.0
            return masked, np.inf
        masked[allowed] = logits[allowed]
        return masked, best_refused

    def _logprob_entry(self, job: Job, logits: np.ndarray, token: int) -> dict[str, Any]:
        """OpenAI's per-token logprobs entry, from the model's distribution `logits` (before sampling settings)."""
        raw = logits[: self.vocab].astype(np.float64)
        logprobs = raw - raw.max()
        logprobs -= np.log(np.exp(logprobs).sum())
        entry = self._token_entry(token, float(logprobs[token]))
        top = np.argsort(-logprobs, kind="stable")[: job.params.top_logprobs]
        entry["top_logprobs"] = [self._token_entry(int(t), float(logprobs[t])) for t in top]
        return entry

    def _token_entry(self, token: int, logprob: float | None) -> dict[str, Any]:
        data = self.tokenizer.token_bytes(token)
        return {"token": data.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(data)}


def prompt_output(job: Job) -> str:
    """What the job's prompt chunks return (see ModelRunner.prefill_step)."""
    return POOLED if job.embed else ALL if job.echo_logprobs else LAST


def wait_idle(engine: Engine, timeout: float = 10.0) -> bool:
    """True once no job is active or waiting (tests use it after a client disconnects)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = engine.stats()
        if not stats["slots_busy"] and not stats["queued"]:
            return True
        time.sleep(0.02)
    return False
