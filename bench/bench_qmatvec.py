"""Each quantized matvec of tg-llm alone: GB/s = bytes of the quantized weight (as stored) / time per matvec.

Run: `CC=gcc uv run python bench/bench_qmatvec.py [--types Q4_1,Q4_K,...] [--repeats 50]`. The shapes are those of
the embedded SmolLM2-135M (qkv 960x576, attention output 576x576, gate_up 3072x576, down 576x1536, output head
49152x576); Q4_1 uses the model's own weights (its output head is Q8_0: the type printed is the weight's), other
types random blocks of the same shapes. Times are the median of TinyJit replays of 8 matvecs `linear(x_i, weight)`
divided by 8 (launches included). K-quant rows need a multiple of 256 columns: time them on `--shapes down`.
`--matvec float,int8` times both matvec types (int8: tg.llm.int8_matvec, Q4_1 and Q8_0 on a CPU with AVX-512 VNNI),
taking turns replay by replay. The machine's load average is printed first.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from tg.llm import registry
from tg.llm.int8_matvec import use_int8_activations
from tg.llm.quants import HALF_FIELDS
from tg.llm.quants import type_name as quant_type_name
from tg.llm.weights import Weight, linear, quantized_weight
from tg.tensor import Tensor, TinyJit
from tg.tensor.gguf import GGML_TYPES

SHAPES = {
    "qkv": (960, 576),
    "attn_out": (576, 576),
    "gate_up": (3072, 576),
    "down": (576, 1536),
    "output": (49152, 576),
}
TYPE_IDS = {name: type_id for type_id, (name, _, _) in GGML_TYPES.items()}


def random_weight(type_name: str, rows: int, cols: int, seed: int = 0) -> Weight:
    _, block_elements, block_bytes = GGML_TYPES[TYPE_IDS[type_name]]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, cols // block_elements, block_bytes), dtype=np.uint8)
    for offset in HALF_FIELDS[type_name][0]:
        scales = rng.uniform(-0.01, 0.01, size=raw.shape[:-1]).astype(np.float16)
        raw[..., offset : offset + 2] = scales.view(np.uint8).reshape(*raw.shape[:-1], 2)
    if type_name == "MXFP4":
        raw[..., 0] = rng.integers(120, 130, size=raw.shape[:-1])
    return quantized_weight(raw, TYPE_IDS[type_name], (rows, cols))


def model_weights() -> dict[str, Weight]:
    from tg.llm.model import load_model

    path = registry.embedded_model_path()
    if path is None:
        return {}
    model, _ = load_model(path, max_context=16)
    block = model.blocks[0]
    return {"qkv": block.qkv, "attn_out": block.output, "gate_up": block.gate_up, "down": block.down,
            "output": model.output}  # fmt: skip


PER_REPLAY = 8  # matvecs per captured step, so the replay's fixed cost (a call, a wait, a copy out) is shared


def time_matvecs(weights: list[Weight], repeats: int) -> list[float]:
    """Seconds per matvec of each weight: median replay time of a capture of PER_REPLAY matvecs (each its own
    kernel) / PER_REPLAY, the weights' replays taking turns."""

    def replay(weight: Weight) -> Callable[[], object]:
        def step(x: Tensor) -> list[Tensor]:
            outs = [linear(x[row : row + 1], weight) for row in range(PER_REPLAY)]
            Tensor.realize(*outs)
            return outs

        jitted = TinyJit(step, plain_calls=0)
        x = Tensor(np.random.default_rng(1).standard_normal((PER_REPLAY, weight.shape[1])).astype(np.float32))
        x = x.realize()
        for _ in range(3):
            jitted(x)
        return lambda: jitted(x)[-1].numpy()

    runs = [replay(weight) for weight in weights]
    times: list[list[float]] = [[] for _ in weights]
    for _ in range(repeats):
        for run, seconds in zip(runs, times, strict=True):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
    return [statistics.median(seconds) / PER_REPLAY for seconds in times]


def with_matvec(weight: Weight, matvec: str) -> Weight:
    """`weight` for the `matvec` type: a copy marked for the int8 matvec (tg.llm.int8_matvec), or itself."""
    if matvec == "float":
        return weight
    marked = dataclasses.replace(weight)
    use_int8_activations([marked])
    return marked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default="Q4_1")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--matvec", default="float", help="matvec types, comma-separated: float, int8")
    args = parser.parse_args()
    matvecs = args.matvec.split(",")
    real = model_weights() if "Q4_1" in args.types.split(",") else {}
    print(f"load {os.getloadavg()[0]:.2f}")
    for type_name in args.types.split(","):
        for name in args.shapes.split(","):
            weight = real[name] if type_name == "Q4_1" and name in real else random_weight(type_name, *SHAPES[name])
            all_seconds = time_matvecs([with_matvec(weight, matvec) for matvec in matvecs], args.repeats)
            for matvec, seconds in zip(matvecs, all_seconds, strict=True):
                label = f"{quant_type_name(weight.ggml_type):6} {name:9} {weight.shape[0]:6}x{weight.shape[1]:<5}"
                print(f"{label} {matvec:5} "
                      f"{weight.nbytes() / 1e6:7.2f} MB {seconds * 1e3:8.3f} ms "
                      f"{weight.nbytes() / seconds / 1e9:6.2f} GB/s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
