"""Choosing the next token from the logits on the host: greedy, or sampled with the usual OpenAI-style knobs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SamplingOptions:
    temperature: float = 0.0
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in the context (CTRL's rule)
    frequency_penalty: float = 0.0  # minus count * this
    presence_penalty: float = 0.0  # minus this for any token seen
    seed: int | None = None


def check_sampling_options(options: SamplingOptions) -> None:
    """Raise ValueError naming the first option outside its range (the ranges OpenAI's API and llama.cpp use)."""
    rules = [
        ("temperature", options.temperature >= 0.0, "must be >= 0 (0 is greedy)"),
        ("top-k", options.top_k >= 0, "must be >= 0 (0 is no limit)"),
        ("top-p", 0.0 < options.top_p <= 1.0, "must be in (0, 1]"),
        ("min-p", 0.0 <= options.min_p <= 1.0, "must be in [0, 1]"),
        ("repetition-penalty", options.repetition_penalty > 0.0, "must be > 0 (1 is none)"),
        ("frequency-penalty", -2.0 <= options.frequency_penalty <= 2.0, "must be in [-2, 2]"),
        ("presence-penalty", -2.0 <= options.presence_penalty <= 2.0, "must be in [-2, 2]"),
        ("seed", options.seed is None or 0 <= options.seed < 2**63, "must be in [0, 2**63)"),
    ]
    for name, ok, requirement in rules:  # a NaN fails every comparison, so it is refused too
        if not ok:
            raise ValueError(f"--{name} {getattr(options, name.replace('-', '_'))} {requirement}")


@dataclass
class Sampler:
    """Stateful sampler: it remembers the tokens generated so far (for the penalties) and owns a seeded RNG."""

    options: SamplingOptions
    counts: Counter = field(default_factory=Counter)
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.options.seed)

    def penalized(self, logits: np.ndarray) -> np.ndarray:
        options, logits = self.options, logits.astype(np.float64)
        if self.counts:
            ids = np.fromiter(self.counts.keys(), dtype=np.int64)
            counts = np.fromiter(self.counts.values(), dtype=np.float64)
            if options.repetition_penalty != 1.0:
                seen = logits[ids]
                logits[ids] = np.where(seen > 0, seen / options.repetition_penalty, seen * options.repetition_penalty)
            logits[ids] -= counts * options.frequency_penalty + options.presence_penalty
        return np.where(np.isnan(logits), -np.inf, logits)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution sampled from after temperature, top-k, top-p and min-p (zeros where excluded)."""
        options = self.options
        scaled = self.penalized(logits) / max(options.temperature, 1e-6)
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        keep = np.ones(len(probs), dtype=bool)
        if options.top_k > 0:
            keep[order[options.top_k :]] = False
        if options.top_p < 1.0:
            cumulative = np.cumsum(probs[order])
            beyond = np.searchsorted(cumulative, options.top_p) + 1  # smallest prefix with mass >= top_p
            keep[order[beyond:]] = False
        if options.min_p > 0.0:
            keep &= probs >= options.min_p * probs.max()
        probs = np.where(keep, probs, 0.0)
        return probs / probs.sum()

    def __call__(self, logits: np.ndarray) -> int:
        if self.options.temperature <= 0.0:
            token = int(np.argmax(self.penalized(logits)))
        else:
            token = int(self.rng.choice(len(logits), p=self.probabilities(logits)))
        self.counts[token] += 1
        return token
