"""Each quantized matvec of tg-llm alone: GB/s = bytes of the quantized weight (as stored) / time per matvec.

Run: `CC=gcc uv run python bench/bench_qmatvec.py [--types Q4_1,Q4_K,...] [--repeats 50]`. The shapes are those of
the embedded SmolLM2-135M (qkv 960x576, attention output 576x576, gate_up 3072x576, down 576x1536, output head
49152x576); Q4_1 uses the model's own weights, other types random blocks of the same shapes. Times are the median
of TinyJit replays of 8 matvecs `linear(x_i, weight)` divided by 8 (launches included). K-quant rows need a
multiple of 256 columns: time them on `--shapes down`. The machine's load average is printed first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from tg.llm import registry
from tg.llm.quants import HALF_FIELDS
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


def time_matvec(weight: Weight, repeats: int) -> float:
    """Seconds per matvec: median replay time of a capture of PER_REPLAY matvecs (each its own kernel) / PER_REPLAY."""

    def step(x: Tensor) -> list[Tensor]:
        outs = [linear(x[row : row + 1], weight) for row in range(PER_REPLAY)]
        Tensor.realize(*outs)
        return outs

    jitted = TinyJit(step, plain_calls=0)
    x = Tensor(np.random.default_rng(1).standard_normal((PER_REPLAY, weight.shape[1])).astype(np.float32)).realize()
    for _ in range(3):
        jitted(x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jitted(x)[-1].numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / PER_REPLAY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default="Q4_1")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    real = model_weights() if "Q4_1" in args.types.split(",") else {}
    print(f"load {os.getloadavg()[0]:.2f}")
    for type_name in args.types.split(","):
        for name in args.shapes.split(","):
            weight = real[name] if type_name == "Q4_1" and name in real else random_weight(type_name, *SHAPES[name])
            seconds = time_matvec(weight, args.repeats)
            print(f"{type_name:6} {name:9} {weight.shape[0]:6}x{weight.shape[1]:<5} {weight.nbytes() / 1e6:7.2f} MB "
                  f"{seconds * 1e3:8.3f} ms {weight.nbytes() / seconds / 1e9:6.2f} GB/s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
