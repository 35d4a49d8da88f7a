"""Benchmark: symbolic simplification of a large integer expression graph, tg against tinygrad 0.14.0.

Run with `uv run --group bench python bench/bench_simplify.py [--repeats N] [--exprs N]`.

The same seeded expression specs are built with each library (fresh variable names every repeat, so no cached
bounds or rewrites carry over) and simplified as one SINK. We print the median build and simplify times over the
repeats, the ratio tg/tinygrad (below 1 means tg is faster), and the node counts after simplify.

Variables are non-negative and divisors positive constants, where tinygrad's floor `//`/`%` and tg's truncating
`//`/`%` agree, so both libraries simplify the same function. The machine is shared and timings are noisy:
read the medians, not single runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

Spec = tuple  # ("var", name, lo, hi) | ("const", v) | (op, a, b)

BINARY_OPS = ["+", "-", "*", "max", "min", "//", "%"]


def random_spec(rng: random.Random, depth: int) -> Spec:
    """A random expression tree over a few non-negative variables (the hypothesis-style workload)."""
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.6:
            name = rng.choice("abcdef")
            return ("var", name, 0, {"a": 7, "b": 3, "c": 15, "d": 31, "e": 1, "f": 100}[name])
        return ("const", rng.randint(0, 9))
    op = rng.choice(BINARY_OPS)
    if op in ("//", "%"):
        return (op, random_spec(rng, depth - 1), ("const", rng.choice([1, 2, 3, 4, 8, 16])))
    return (op, random_spec(rng, depth - 1), random_spec(rng, depth - 1))


def index_spec(rng: random.Random) -> Spec:
    """The index expression of a reshape chain: flatten some ranges, then take one axis of a new shape."""
    dims = [rng.choice([2, 3, 4, 8, 16]) for _ in range(rng.randint(2, 4))]
    names = "ijkl"
    flat: Spec = ("const", 0)
    stride = 1
    for name, dim in reversed(list(zip(names, dims, strict=False))):
        flat = ("+", flat, ("*", ("var", name, 0, dim - 1), ("const", stride)))
        stride *= dim
    split = rng.choice([d for d in range(1, stride + 1) if stride % d == 0])
    return ("%", ("//", flat, ("const", split)), ("const", max(stride // split, 1)))


def build(spec: Spec, make_var: Callable[[str, int, int], Any], make_const: Callable[[int], Any]) -> Any:
    """Build a spec with one library's constructors (iteratively: specs can be deep)."""
    built: dict[int, Any] = {}
    stack: list[tuple[Spec, bool]] = [(spec, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in built:
            continue
        if node[0] == "var":
            built[id(node)] = make_var(node[1], node[2], node[3])
        elif node[0] == "const":
            built[id(node)] = make_const(node[1])
        elif not ready:
            stack.append((node, True))
            stack.extend((child, False) for child in node[1:])
        else:
            built[id(node)] = apply_op(node[0], built[id(node[1])], built[id(node[2])])
    return built[id(spec)]


def apply_op(op: str, x: Any, y: Any) -> Any:
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "//":
        return x // y
    if op == "%":
        return x % y
    if op == "max":
        return x.maximum(y)
    return x.minimum(y)


class Library:
    def __init__(self, name: str, uop: Any, make_var: Callable, make_const: Callable, count: Callable) -> None:
        self.name, self.uop, self.make_var, self.make_const, self.count = name, uop, make_var, make_const, count

    def build_sink(self, specs: list[Spec], suffix: str) -> Any:
        def var(name: str, lo: int, hi: int) -> Any:
            return self.make_var(name + suffix, lo, hi)

        return self.uop.sink(*[build(s, var, self.make_const) for s in specs])


def tg_library() -> Library:
    from tg.codegen import UOp

    return Library("tg", UOp, UOp.variable, UOp.const, lambda u: len(u.toposort()))


def tinygrad_library() -> Library:
    from tinygrad.uop.ops import UOp

    return Library("tinygrad", UOp, UOp.variable, lambda v: UOp.const(v), lambda u: len(u.toposort()))


def time_once(lib: Library, specs: list[Spec], suffix: str) -> tuple[float, float, int, int]:
    start = time.perf_counter()
    sink = lib.build_sink(specs, suffix)
    built = time.perf_counter()
    simplified = sink.simplify()
    done = time.perf_counter()
    return built - start, done - built, lib.count(sink), lib.count(simplified)


def time_libraries(libraries: list[Library], specs: list[Spec], repeats: int) -> dict[str, dict[str, Any]]:
    """Median times per library; the libraries alternate within each repeat so load changes hit both alike."""
    runs: dict[str, list[tuple[float, float, int, int]]] = {lib.name: [] for lib in libraries}
    for r in range(repeats):
        for lib in libraries:
            runs[lib.name].append(time_once(lib, specs, f"_{r}"))
    return {
        name: {
            "build": statistics.median(run[0] for run in lib_runs),
            "simplify": statistics.median(run[1] for run in lib_runs),
            "nodes_before": lib_runs[-1][2],
            "nodes_after": lib_runs[-1][3],
        }
        for name, lib_runs in runs.items()
    }


def per_expression_sizes(lib: Library, specs: list[Spec]) -> list[int]:
    sizes = []
    for s in specs:
        expr = build(s, lambda n, lo, hi: lib.make_var(n + "_size", lo, hi), lib.make_const)
        sizes.append(lib.count(expr.simplify()))
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--exprs", type=int, default=1500, help="random expressions (and as many index ones)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    workloads = {
        "random trees": [random_spec(rng, 5) for _ in range(args.exprs)],
        "reshape indices": [index_spec(rng) for _ in range(args.exprs)],
    }
    libraries = [tg_library(), tinygrad_library()]
    print(f"median of {args.repeats} repeats (shared machine: expect noise)")
    for workload, specs in workloads.items():
        results = time_libraries(libraries, specs, args.repeats)
        tg, ref = results["tg"], results["tinygrad"]
        print(f"\n{workload}: {len(specs)} expressions, {tg['nodes_before']} tg nodes before simplify")
        for name, res in results.items():
            print(
                f"  {name:9s} build {res['build'] * 1e3:8.1f} ms   simplify {res['simplify'] * 1e3:8.1f} ms"
                f"   nodes after {res['nodes_after']}"
            )
        build_ratio, simplify_ratio = tg["build"] / ref["build"], tg["simplify"] / ref["simplify"]
        print(f"  ratio tg/tinygrad: build {build_ratio:.2f}   simplify {simplify_ratio:.2f}")

    specs = workloads["random trees"][:500]
    tg_sizes, ref_sizes = per_expression_sizes(libraries[0], specs), per_expression_sizes(libraries[1], specs)
    larger = sum(a > b for a, b in zip(tg_sizes, ref_sizes, strict=True))
    smaller = sum(a < b for a, b in zip(tg_sizes, ref_sizes, strict=True))
    print(
        f"\nper-expression node counts after simplify ({len(specs)} random trees): tg total {sum(tg_sizes)}, "
        f"tinygrad total {sum(ref_sizes)}; tg smaller on {smaller}, larger on {larger}"
    )


if __name__ == "__main__":
    main()
