"""Weights files: safetensors load/save against the `safetensors` package, torch checkpoints
against fixtures written by torch.save (tests/tensor/fixtures/make_state_fixtures.py), memory mapping through the
DISK device, the common `load` interface, and clear errors for corrupt or truncated files."""

import json
import os
import pickle
import sys
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from tg.codegen import dtypes
from tg.tensor import Tensor
from tg.tensor.state import StateFileError, detect_format, load, safe_load, safe_load_metadata, safe_save, torch_load

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f16": rng.standard_normal(5).astype(np.float16),
        "bf16": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
        "f64": np.array(2.5),  # 0-d
        "i64": np.array([-(2**40), 3], np.int64),
        "i8": np.array([-128, 127], np.int8),
        "u16": np.array([65535, 1], np.uint16),
        "flags": np.array([True, False]),
        "empty": np.zeros((0, 3), np.float32),
    }


# ---------------------------------------------------------------------------------------------------- safetensors


def test_safe_load_reads_what_the_safetensors_package_wrote(tmp_path):
    arrays = _arrays()
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np", "epoch": "3"})
    loaded = safe_load(path)
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].shape == array.shape
        np.testing.assert_array_equal(loaded[name].numpy(), array)
        assert loaded[name].numpy().dtype == array.dtype
    assert loaded["f32"].device.startswith("DISK:")
    assert safe_load_metadata(path) == {"format": "np", "epoch": "3"}


def test_safe_save_is_read_back_by_the_safetensors_package(tmp_path):
    arrays = _arrays()
    path = tmp_path / "out.safetensors"
    safe_save({name: Tensor(array, device="PYTHON") for name, array in arrays.items()}, path, {"writer": "tg"})
    back = safetensors.numpy.load_file(str(path))
    assert sorted(back) == sorted(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(back[name], array)
        assert back[name].dtype == array.dtype
    with safetensors.safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"writer": "tg"}


def test_saving_computed_and_loaded_tensors(tmp_path):
    source = tmp_path / "a.safetensors"
    safetensors.numpy.save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(source))
    loaded = safe_load(source)
    target = tmp_path / "b.safetensors"
    safe_save({"w": loaded["w"], "w2": loaded["w"].to("PYTHON") * 2}, target)  # a DISK tensor and a computed one
    back = safetensors.numpy.load_file(str(target))
    np.testing.assert_array_equal(back["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(back["w2"], 2 * np.arange(6, dtype=np.float32).reshape(2, 3))


def _tensor_bytes(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """An independent reading of a safetensors file: {name: (dtype, shape, raw bytes)} straight from the format."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    data = raw[8 + size :]
    return {n: (e["dtype"], e["shape"], data[e["data_offsets"][0] : e["data_offsets"][1]]) for n, e in header.items()}


def test_fp8_and_bfloat16_written_by_safetensors_torch(tmp_path):
    path = FIXTURES / "fp8.safetensors"
    expected = np.load(FIXTURES / "fp8.expected.npz")
    loaded = safe_load(path)
    assert (loaded["e4m3"].dtype, loaded["e5m2"].dtype, loaded["bf16"].dtype) == (
        dtypes.fp8e4m3,
        dtypes.fp8e5m2,
        dtypes.bfloat16,
    )
    for name in expected.files:
        np.testing.assert_array_equal(loaded[name].numpy().astype(np.float32), expected[name])
    copy = tmp_path / "copy.safetensors"
    safe_save(loaded, copy)
    assert _tensor_bytes(copy) == _tensor_bytes(path)  # same dtype names, shapes and bytes as the reference writer


def test_load_to_a_device_gives_tensors_that_compute(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"w": np.arange(4, dtype=np.float32)}, str(path))
    weights = load(path, device="PYTHON")
    assert weights["w"].device == "PYTHON"
    np.testing.assert_array_equal((weights["w"] * 3 + 1).numpy(), np.arange(4, dtype=np.float32) * 3 + 1)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_1gb_file_loads_without_being_read(tmp_path):
    """A sparse 1 GiB tensor followed by a small one: loading and reading the small one must not pull the big one
    into memory (reading the file whole would add 1 GiB of resident pages, even of a sparse file)."""
    big = 1 << 30
    small = np.array([1.5, -2.0, 3.25, 4.0], np.float32)
    header = {
        "big": {"dtype": "U8", "shape": [big], "data_offsets": [0, big]},
        "small": {"dtype": "F32", "shape": [4], "data_offsets": [big, big + small.nbytes]},
    }
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little") + encoded)
        f.truncate(8 + len(encoded) + big)  # a hole: no disk blocks
        f.seek(8 + len(encoded) + big)
        f.write(small.tobytes())
    before = _rss_bytes()
    weights = load(path)
    np.testing.assert_array_equal(weights["small"].to("CPU").numpy(), small)
    assert weights["big"].shape == (big,)
    grown = _rss_bytes() - before
    assert grown < 64 << 20, f"resident memory grew by {grown >> 20} MiB loading a 1 GiB file"


def test_save_is_atomic_and_refuses_bad_input(tmp_path):
    path = tmp_path / "keep.safetensors"
    safe_save({"a": Tensor([1.0, 2.0], device="PYTHON")}, path)
    original = path.read_bytes()
    with pytest.raises(ValueError, match="__metadata__"):
        safe_save({"__metadata__": Tensor([1.0])}, path)
    failing = Tensor([1.0, 2.0], device="PYTHON").reshape(2, 1).expand(2, 3)
    with pytest.raises(ZeroDivisionError):  # a failure while writing the data: the old file must survive whole
        safe_save({"a": failing, "b": _ExplodingTensor(failing)}, path)
    assert path.read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["keep.safetensors"]  # no temporary file left behind


class _ExplodingTensor:
    """Looks like a tensor to safe_save's header, then fails when its data is read."""

    def __init__(self, like: Tensor) -> None:
        self.dtype, self.shape = like.dtype, like.shape

    def nbytes(self) -> int:
        return 4

    def data(self) -> bytes:
        raise ZeroDivisionError("simulated failure while writing")


def _two_tensor_file(tmp_path) -> Path:
    path = tmp_path / "two.safetensors"
    safetensors.numpy.save_file({"a": np.arange(4, dtype=np.float32), "b": np.ones(8, np.float32)}, str(path))
    return path


def _rewrite_header(path: Path, change) -> None:
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    change(header)
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + raw[8 + size :])


def test_truncated_safetensors_names_the_file_and_the_tensor(tmp_path):
    path = _two_tensor_file(tmp_path)
    last = max(_tensor_bytes(path).items(), key=lambda item: item[0])[0]  # sorted by name, "b" comes last
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(StateFileError, match="truncated") as error:
        load(path)
    assert str(path) in str(error.value) and repr(last) in str(error.value)
    assert error.value.tensor == last


def test_header_cut_short_or_garbled(tmp_path):
    path = _two_tensor_file(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[:20])
    with pytest.raises(StateFileError, match="does not fit") as error:
        safe_load(path)
    assert str(path) in str(error.value)
    path.write_bytes(raw[:5])
    with pytest.raises(StateFileError, match="fewer than the 8-byte"):
        safe_load(path)
    path.write_bytes(len(b"{nope").to_bytes(8, "little") + b"{nope")
    with pytest.raises(StateFileError, match="not valid JSON"):
        safe_load(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h["a"].update(dtype="C64"), "unsupported dtype"),
        (lambda h: h["a"].update(shape=[5]), "do not hold"),
        (lambda h: h["a"].update(shape=[-4]), "non-negative"),
        (lambda h: h["b"].update(data_offsets=[8, 40]), "overlap"),
        (lambda h: h["a"].pop("dtype"), "needs dtype"),
        (lambda h: h.update(__metadata__={"k": 1}), "__metadata__"),
    ],
)
def test_corrupt_safetensors_entries_name_the_tensor(tmp_path, change, message):
    path = _two_tensor_file(tmp_path)
    _rewrite_header(path, change)
    with pytest.raises(StateFileError, match=message) as error:
        load(path)
    assert str(path) in str(error.value)


# ---------------------------------------------------------------------------------------------------- torch


def test_torch_checkpoint_loads_without_torch():
    expected = np.load(FIXTURES / "checkpoint.expected.npz")
    weights = load(FIXTURES / "checkpoint.pt")
    assert sorted(weights) == sorted(expected.files)
    for name in expected.files:
        assert weights[name].shape == expected[name].shape, name
        np.testing.assert_array_equal(weights[name].numpy().astype(expected[name].dtype), expected[name], err_msg=name)
    kinds = {name: weights[name].dtype for name in ("bf16", "fp8", "f16", "i64", "flags", "u8")}
    assert kinds == {"bf16": dtypes.bfloat16, "fp8": dtypes.fp8e4m3, "f16": dtypes.float16, "i64": dtypes.int64,
                     "flags": dtypes.bool, "u8": dtypes.uint8}  # fmt: skip
    assert weights["f64"].shape == ()
    assert "torch" not in sys.modules


def test_torch_load_keeps_the_saved_structure():
    state = torch_load(FIXTURES / "checkpoint.pt")
    assert state["step"] == 12
    assert isinstance(state["layers"], list) and len(state["layers"]) == 2
    assert set(state["model"]) == {"linear.weight", "linear.bias"}
    assert state["model"]["linear.weight"].shape == (3, 4)


def _copy_zip(source: Path, target: Path, change) -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as new:
        for info in old.infolist():
            data = change(info.filename, old.read(info.filename))
            if data is not None:
                new.writestr(info.filename, data)


def test_truncated_torch_checkpoint(tmp_path):
    path = tmp_path / "cut.pt"
    path.write_bytes((FIXTURES / "checkpoint.pt").read_bytes()[:-200])
    with pytest.raises(StateFileError, match="not a readable zip") as error:
        load(path)
    assert str(path) in str(error.value)


def test_torch_storage_shorter_than_its_tensor_names_the_tensor(tmp_path):
    path = tmp_path / "short.pt"
    _copy_zip(FIXTURES / "checkpoint.pt", path, lambda name, data: data[:-4] if name.endswith("data/0") else data)
    with pytest.raises(StateFileError, match="data/0") as error:
        load(path)
    assert error.value.tensor in np.load(FIXTURES / "checkpoint.expected.npz").files
    assert str(path) in str(error.value)
    path2 = tmp_path / "missing.pt"
    _copy_zip(FIXTURES / "checkpoint.pt", path2, lambda name, data: None if name.endswith("data/1") else data)
    with pytest.raises(StateFileError, match="missing") as error:
        load(path2)
    assert error.value.tensor is not None


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_checkpoint_pickle_cannot_run_code(tmp_path):
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil/data.pkl", pickle.dumps({"x": _Evil()}, protocol=2))
    with pytest.raises(StateFileError, match="system"):
        load(path)


# ---------------------------------------------------------------------------------------------------- the loader


def test_load_dispatches_by_content(tmp_path):
    assert detect_format(FIXTURES / "checkpoint.pt") == "torch"
    assert detect_format(FIXTURES / "fp8.safetensors") == "safetensors"
    renamed = tmp_path / "weights.bin"  # the contents decide, not the name
    renamed.write_bytes((FIXTURES / "fp8.safetensors").read_bytes())
    assert sorted(load(renamed)) == ["bf16", "e4m3", "e5m2"]
    unknown = tmp_path / "notes.txt"
    unknown.write_bytes(b"hello, not weights")
    with pytest.raises(StateFileError, match="unknown weights format"):
        load(unknown)
    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"GGUF" + b"\x00" * 4)
    assert detect_format(gguf) == "gguf"
    with pytest.raises(ValueError):
        load(gguf)


# ------------------------------------------------------------------------------------------------ files and archives


def test_tensor_of_a_path_is_the_mapped_file(tmp_path):
    path = tmp_path / "raw.bin"
    data = np.arange(16, dtype=np.float32)
    path.write_bytes(data.tobytes())
    t = Tensor(path)
    assert t.device == f"DISK:{path}" and t.dtype is dtypes.uint8 and t.shape == (64,)
    assert t.numpy().tobytes() == data.tobytes()
    floats = Tensor(path, dtype=dtypes.float32)
    np.testing.assert_array_equal(floats.to("PYTHON").numpy(), data)
    on_device = Tensor(path, device="PYTHON", dtype="float32")
    assert on_device.device == "PYTHON"
    np.testing.assert_array_equal((on_device * 2).numpy(), data * 2)


def _archive_members() -> dict[str, bytes]:
    return {"weights/a.bin": bytes(range(40)), "notes.txt": b"hello tar", "empty": b""}


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_tar_extract_maps_or_reads_members(tmp_path, mode):
    import io
    import tarfile

    from tg.tensor.state import tar_extract

    path = tmp_path / "bundle.tar"
    with tarfile.open(path, mode) as tar:
        for name, data in _archive_members().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for source in (path, Tensor(path)):
        members = tar_extract(source)
        assert sorted(members) == sorted(_archive_members())
        for name, data in _archive_members().items():
            assert members[name].numpy().tobytes() == data
        if mode == "w":
            assert members["notes.txt"].device.startswith("DISK:")  # uncompressed members are views of the file


def test_zip_extract_maps_stored_and_reads_deflated_members(tmp_path):
    from tg.tensor.state import zip_extract

    path = tmp_path / "bundle.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("stored.bin", bytes(range(50)), compress_type=zipfile.ZIP_STORED)
        archive.writestr("packed.txt", b"a" * 300, compress_type=zipfile.ZIP_DEFLATED)
    members = zip_extract(path)
    assert members["stored.bin"].device.startswith("DISK:")
    assert members["stored.bin"].numpy().tobytes() == bytes(range(50))
    assert members["packed.txt"].numpy().tobytes() == b"a" * 300
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(StateFileError, match="not a readable zip"):
        zip_extract(bad)
