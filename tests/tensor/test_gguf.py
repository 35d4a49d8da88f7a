"""The GGUF container reader against files written by the reference `gguf` package (its writer and reader)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from tg.tensor import dtypes  # noqa: E402
from tg.tensor.gguf import GGUFError, bf16_to_float, gguf_load, gguf_read, split_paths  # noqa: E402

METADATA = {
    "test.u8": (7, gguf.GGUFValueType.UINT8),
    "test.i8": (-7, gguf.GGUFValueType.INT8),
    "test.u16": (65535, gguf.GGUFValueType.UINT16),
    "test.i16": (-300, gguf.GGUFValueType.INT16),
    "test.u32": (4_000_000_000, gguf.GGUFValueType.UINT32),
    "test.i32": (-2_000_000_000, gguf.GGUFValueType.INT32),
    "test.f32": (1.5, gguf.GGUFValueType.FLOAT32),
    "test.bool": (True, gguf.GGUFValueType.BOOL),
    "test.string": ("héllo <|im_end|>", gguf.GGUFValueType.STRING),
    "test.u64": (2**63 + 5, gguf.GGUFValueType.UINT64),
    "test.i64": (-(2**62), gguf.GGUFValueType.INT64),
    "test.f64": (0.1, gguf.GGUFValueType.FLOAT64),
}


def write_gguf(path: Path, alignment: int | None = None, split_tensors: bool = False) -> dict[str, np.ndarray]:
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, (value, value_type) in METADATA.items():
        writer.add_key_value(key, value, value_type)
    writer.add_array("test.strings", ["a", "bc", ""])
    writer.add_array("test.ints", [1, -2, 3])
    writer.add_array("test.floats", [0.5, 2.0])
    writer.add_array("test.bools", [True, False])
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((4, 2, 3)).astype(np.float16),
        "i32": rng.integers(-9, 9, (7,)).astype(np.int32),
    }
    for name, array in arrays.items():
        writer.add_tensor(name, array)
    bf16_bits = (rng.standard_normal((2, 8)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    writer.add_tensor("bf16", bf16_bits.view(np.uint8).reshape(2, 16), raw_dtype=gguf.GGMLQuantizationType.BF16)
    arrays["bf16"] = (bf16_bits.astype(np.uint32) << 16).view(np.float32)
    q8 = gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    arrays["q8"] = q8
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return arrays


@pytest.mark.parametrize("alignment", [None, 64])
def test_reads_metadata_and_tensors_like_the_reference(tmp_path: Path, alignment: int | None) -> None:
    path = tmp_path / "model.gguf"
    arrays = write_gguf(path, alignment)
    metadata, tensors = gguf_load(path)
    for key, (value, value_type) in METADATA.items():
        assert metadata[key] == pytest.approx(value) if value_type is gguf.GGUFValueType.FLOAT32 else value, key
    assert metadata["test.strings"] == ["a", "bc", ""]
    assert metadata["test.ints"] == [1, -2, 3]
    assert metadata["test.floats"] == [0.5, 2.0]
    assert metadata["test.bools"] == [True, False]
    assert metadata["general.architecture"] == "llama"
    assert gguf_read(path).alignment == (alignment or 32)
    for name in ("f32", "f16", "i32", "bf16"):
        np.testing.assert_array_equal(tensors[name].numpy(), arrays[name], err_msg=name)
    assert tensors["f16"].dtype is dtypes.float16
    assert tensors["q8"].shape == (2, 2, 34)  # rows, blocks per row, bytes per block
    np.testing.assert_array_equal(tensors["q8"].numpy().reshape(2, -1), arrays["q8"])
    reference, infos, raw = gguf.GGUFReader(str(path)), gguf_read(path).tensors, path.read_bytes()
    for tensor in reference.tensors:  # our offsets point at the bytes the reference reader finds
        ours = raw[infos[tensor.name].offset : infos[tensor.name].offset + infos[tensor.name].nbytes]
        assert ours == np.ascontiguousarray(tensor.data).tobytes(), tensor.name


def test_version_2_is_read_and_version_1_rejected(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    write_gguf(path)
    data = bytearray(path.read_bytes())
    data[4:8] = (2).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert gguf_read(path).version == 2
    data[4:8] = (1).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="version 1"):
        gguf_read(path)


def test_corrupt_files_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    write_gguf(path)
    good = path.read_bytes()
    path.write_bytes(b"GGML" + good[4:])
    with pytest.raises(GGUFError, match="not a GGUF file"):
        gguf_read(path)
    path.write_bytes(good[:100])
    with pytest.raises(GGUFError, match="truncated"):
        gguf_read(path)
    path.write_bytes(good[:-150])
    with pytest.raises(GGUFError, match="past the end"):
        gguf_read(path)


def test_split_files_are_merged(tmp_path: Path) -> None:
    first = write_gguf(tmp_path / "m-00001-of-00002.gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "m-00002-of-00002.gguf"), "llama")
    extra = np.arange(6, dtype=np.float32).reshape(2, 3)
    writer.add_tensor("extra", extra)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert [p.name for p in split_paths(tmp_path / "m-00002-of-00002.gguf")] == [
        "m-00001-of-00002.gguf",
        "m-00002-of-00002.gguf",
    ]
    metadata, tensors = gguf_load(tmp_path / "m-00001-of-00002.gguf")
    np.testing.assert_array_equal(tensors["extra"].numpy(), extra)
    np.testing.assert_array_equal(tensors["f32"].numpy(), first["f32"])
    assert metadata["test.u8"] == 7


def test_bf16_decode_covers_subnormals_and_specials() -> None:
    from tg.tensor import Tensor

    bits = np.arange(0, 65536, 7, dtype=np.uint16)
    expected = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(bf16_to_float(Tensor(bits)).numpy(), expected)


def test_a_load_does_not_hold_the_file_and_its_copy_at_once(tmp_path: Path) -> None:
    """Regression: the file mapping's pages stayed resident until the whole file was read, so a load's peak memory
    was the file twice (its mapped pages and the tensors' copies). A fresh process loads 64 MB of float32 tensors;
    its peak resident memory may grow by the copies and a margin, not by the file as well."""
    path, count, elements = tmp_path / "big.gguf", 8, 2 << 20  # 8 tensors of 8 MB
    writer = gguf.GGUFWriter(str(path), "llama")
    for index in range(count):
        writer.add_tensor(f"t{index}", np.full(elements, index + 1, np.float32))  # (pages of zeros may stay untouched)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    script = textwrap.dedent(f"""
        from tg.tensor.gguf import gguf_load
        from tg.tensor import Tensor
        def peak():  # this process's peak resident memory in bytes (ru_maxrss would start at its parent's)
            return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
        Tensor([1.0]).realize()  # the device and its compiler are up before the baseline
        before = peak()
        _, tensors = gguf_load({str(path)!r}, "CPU")
        grown = peak() - before
        sums = [float(tensors[f"t{{i}}"][:4].sum().item()) for i in range({count})]
        print(grown, sums)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    grown, sums = done.stdout.split(" ", 1)
    assert eval(sums) == [4.0 * (i + 1) for i in range(count)]  # (the loaded values)
    file_bytes = count * elements * 4
    assert int(grown) < 1.4 * file_bytes, f"peak grew by {int(grown) >> 20} MB loading a {file_bytes >> 20} MB file"
