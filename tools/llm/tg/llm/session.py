"""A chat session: model + tokenizer + template + generator, with the conversation so far."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tg.llm.config import DEFAULT_MATVEC
from tg.llm.generate import Generator, cut_at_stop
from tg.llm.model import DEFAULT_KV_CACHE, ContextOverflowError, Transformer, load_model, parameter_count
from tg.llm.sampling import SamplingOptions
from tg.llm.template import chat_template
from tg.llm.tokenizer import Tokenizer


@dataclass
class Session:
    model: Transformer
    tokenizer: Tokenizer
    template: Any  # None: raw prompts (--no-chat-template)
    model_name: str
    parameters: int
    system: str | None = None  # the system prompt: the first message of every conversation, never dropped
    on_notice: Callable[[str], None] = lambda text: None  # told when turns are dropped or an answer is cut
    generator: Generator = field(init=False)
    messages: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.generator = Generator(self.model)
        self.clear()

    def clear(self) -> None:
        """Forget the conversation (the system prompt stays)."""
        self.messages = [] if self.system is None else [{"role": "system", "content": self.system}]

    @classmethod
    def load(
        cls,
        path: Path,
        max_context: int = 4096,
        raw_prompt: bool = False,
        system: str | None = None,
        kv_cache: str = DEFAULT_KV_CACHE,
        matvec: str = DEFAULT_MATVEC,
    ) -> Session:
        model, gguf = load_model(path, max_context, kv_cache, matvec)
        metadata = gguf.metadata
        tokenizer = Tokenizer.from_gguf_metadata(metadata)
        bos = tokenizer.tokens[tokenizer.bos_id] if tokenizer.bos_id is not None and tokenizer.add_bos else ""
        eos = tokenizer.tokens[tokenizer.eos_id]
        template = None if raw_prompt else chat_template(metadata, bos, eos, tokenizer.ids)
        name = metadata.get("general.name") or metadata.get("general.basename") or Path(path).stem
        return cls(model, tokenizer, template, name, parameter_count(gguf), system=system)

    @property
    def weight_bytes(self) -> int:
        return sum(weight.nbytes() for weight in self.model.weights.values())

    def prompt_tokens(self, prompt: str, answer_room: int = 0) -> list[int]:
        """The token ids for the next turn: the whole conversation through the template, or the raw prompt.

        When the conversation and `answer_room` tokens do not fit the context, the oldest turns are dropped (the
        system prompt stays) and on_notice says so; a single message that cannot fit is a ContextOverflowError."""
        if self.template is None:
            bos = [self.tokenizer.bos_id] if self.tokenizer.add_bos and self.tokenizer.bos_id is not None else []
            return bos + self.tokenizer.encode(prompt, allow_special=False)
        self.messages.append({"role": "user", "content": prompt})
        limit = self.model.max_context
        while True:
            tokens = self.tokenizer.encode(self.template.render(self.messages, add_generation_prompt=True))
            if len(tokens) + answer_room <= limit:
                return tokens
            if not self._drop_oldest_turn():
                if len(tokens) < limit:  # nothing left to drop: the answer gets the room there is
                    return tokens
                self.messages.pop()
                raise ContextOverflowError(
                    f"context overflow: the message needs {len(tokens)} tokens, the maximum context is {limit}"
                )
            self.on_notice("context full: dropped the oldest turn of the conversation")

    def _drop_oldest_turn(self) -> bool:
        """Remove the oldest user message and the replies after it; never the system prompt or the newest message."""
        first = 1 if self.system is not None else 0
        if len(self.messages) - first <= 1:
            return False
        end = first + 1
        while end < len(self.messages) - 1 and self.messages[end]["role"] != "user":
            end += 1
        del self.messages[first:end]
        return True

    def reply(
        self, prompt: str, options: SamplingOptions, max_tokens: int = 512, stops: list[str] | None = None
    ) -> Iterator[str]:
        """Stream the answer's text; the end token and anything from a stop string on are not shown."""
        decoder, answer, shown, count = self.tokenizer.stream_decoder(), "", 0, 0
        tokens = self.prompt_tokens(prompt, answer_room=min(max_tokens, self.model.max_context // 4))
        try:  # an answer stopped early (the caller closes this generator) is kept as far as it got
            for token in self.generator.generate(tokens, max_tokens, options, self.tokenizer.is_end):
                if self.tokenizer.is_end(token):
                    break
                count += 1
                answer += decoder.add(token)
                visible, stopped = cut_at_stop(answer, stops or [])
                hold = max((len(s) - 1 for s in stops or []), default=0)  # a stop string may be half-way in
                safe = len(visible) if stopped else max(shown, len(visible) - hold)
                if safe > shown:
                    yield visible[shown:safe]
                    shown = safe
                if stopped:
                    break
            else:
                answer += decoder.flush()
                if count < max_tokens:  # generate() ended before max_tokens: the KV cache is full
                    self.on_notice("context full: the answer was cut at the end of the context")
            visible, _ = cut_at_stop(answer, stops or [])
            if len(visible) > shown:
                yield visible[shown:]
        finally:
            if self.template is not None:
                self.messages.append({"role": "assistant", "content": cut_at_stop(answer, stops or [])[0]})

    def warmup(self) -> None:
        """Generate 2 tokens twice from a 1-token prompt, so the decode kernels are compiled before timing."""
        start = [self.tokenizer.bos_id or 0]
        for _ in range(2):
            list(self.generator.generate(start, 2))
        self.generator.cached = []

    def benchmark_tokens(self, count: int) -> Iterator[int]:
        yield from self.generator.generate([self.tokenizer.bos_id or 0], count)
