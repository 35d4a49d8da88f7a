"""A request's jobs seen from asyncio (one per choice: n, times the prompts of a batch), and the server-sent events
a streamed answer is written as."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from tg.llm.serve.engine import Embedding, Event, Failure, Finish, Job, Piece, PromptLogprobs
from tg.llm.serve.errors import APIError
from tg.llm.serve.intake import ServerState
from tg.llm.serve.params import GenerationParams

PING_SECONDS = 15  # an SSE comment this often while nothing else is sent keeps proxies from closing the stream
DONE = "data: [DONE]\n\n"


class JobGroup:
    """The jobs of one request; their events come through one queue the scheduler thread fills, each tagged with
    its choice index (the job's place in `runs`)."""

    def __init__(
        self,
        state: ServerState,
        runs: list[tuple[list[int], GenerationParams]],
        embed: bool = False,
        echo_logprobs: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        self.jobs: list[Job] = []
        try:
            for index, (prompt, params) in enumerate(runs):
                emit = functools.partial(self._emit, loop, index)
                job = Job(prompt, params, emit, embed=embed, echo_logprobs=echo_logprobs)
                state.engine.submit(job)
                self.jobs.append(job)
        except APIError:  # the queue is full: none of this request's jobs runs
            self.cancel()
            raise

    def _emit(self, loop: asyncio.AbstractEventLoop, index: int, event: Event) -> None:
        loop.call_soon_threadsafe(self.queue.put_nowait, (index, event))

    def cancel(self) -> None:
        for job in self.jobs:
            job.cancel()  # a no-op after its Finish; frees the slot when the client went away

    async def events(self) -> AsyncIterator[tuple[int, Piece | Finish | PromptLogprobs | Embedding]]:
        """Every job's events until each has finished (a Finish, or its Embedding); a Failure raises its error."""
        running = len(self.jobs)
        try:
            while running:
                index, event = await self.queue.get()
                if isinstance(event, Failure):
                    raise event.error
                yield index, event
                running -= isinstance(event, Finish | Embedding)
        finally:
            self.cancel()


async def until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


@dataclass
class Collected:
    """What a request's jobs sent: per choice its pieces, its finish (None for an embedding) and its other events
    (the prompt's logprobs, an embedding)."""

    pieces: list[list[Piece]]
    finishes: list[Finish | None]
    others: list[list[PromptLogprobs | Embedding]]

    def done(self) -> list[Finish]:
        return [finish for finish in self.finishes if finish is not None]


async def collect(request: Request, group: JobGroup) -> Collected:
    """Every choice's events; the jobs are cancelled if the client disconnects first."""
    found = Collected([[] for _ in group.jobs], [None for _ in group.jobs], [[] for _ in group.jobs])

    async def gather() -> None:
        async for index, event in group.events():
            if isinstance(event, Finish):
                found.finishes[index] = event
            elif isinstance(event, Piece):
                found.pieces[index].append(event)
            else:
                found.others[index].append(event)

    work, watch = asyncio.create_task(gather()), asyncio.create_task(until_disconnected(request))
    done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    if work not in done:
        work.cancel()
        group.cancel()
        raise APIError(499, "the client closed the request", "client_closed")  # nobody reads this answer
    watch.cancel()
    work.result()
    return found


def usage(finishes: list[Finish], choices_per_prompt: int) -> dict[str, Any]:
    """Token counts of a request: each prompt once (its first choice's), every choice's completion."""
    firsts = finishes[::choices_per_prompt]
    prompt = sum(finish.prompt_tokens for finish in firsts)
    completion = sum(finish.completion_tokens for finish in finishes)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(finish.cached_tokens for finish in firsts)},
    }


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


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
    finally:  # the client went away (or the stream ended): end the events, which cancels the jobs
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
            await following
        await events.aclose()  # type: ignore[attr-defined]
