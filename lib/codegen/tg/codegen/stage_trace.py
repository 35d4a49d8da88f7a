"""DEBUG=5: every pipeline stage printed as it finishes, with its time and how many times each rewrite rule fired.

    with traced("kernel", "simplify indices"):   # prints `kernel stage simplify indices: 0.41 ms; rules fired: ...`
        ast = stage.run(ast, flags)

Rule firings are counted only while a traced stage runs (PatternMatcher.rewrite calls `rule_fired`), so tracing
costs nothing when DEBUG is below 5. A stage inside another (a rewrite inside the schedule's kernel building) counts
its rules once, in the innermost stage.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tg.codegen.flags import DEBUG

TRACE_LEVEL = 5
_firings: Counter[str] | None = None  # rule -> times it fired in the stage running now (None: not tracing)


def rule_fired(matcher_name: str, callback: Callable) -> None:
    """Count one firing of `callback`'s rule (a no-op unless a traced stage is running)."""
    if _firings is not None:
        code = getattr(callback, "__code__", None)
        where = f"@{code.co_firstlineno}" if code is not None and callback.__name__ == "<lambda>" else ""
        _firings[f"{matcher_name}:{callback.__name__}{where}"] += 1


@contextmanager
def traced(kind: str, name: str) -> Iterator[None]:
    """Run the with-block as stage `name` of `kind` (schedule, kernel, render): at DEBUG>=5 print its time and the
    rules that fired in it, most frequent first."""
    global _firings
    if int(DEBUG) < TRACE_LEVEL:
        yield
        return
    outer, _firings = _firings, Counter()
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed_ms = (time.perf_counter() - start) * 1e3
        fired, _firings = _firings, outer
        rules = "; rules fired: " + ", ".join(f"{rule} x{n}" for rule, n in fired.most_common()) if fired else ""
        print(f"{kind} stage {name}: {elapsed_ms:.2f} ms{rules}")
