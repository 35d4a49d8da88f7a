"""The tg-autogen command line: gen, list, regen and the regen --check CI gate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tg.autogen import regen as regen_module
from tg.autogen.cli import app
from tg.autogen.targets import TARGETS, Header, Target

runner = CliRunner()


@pytest.fixture
def committed_copy(tmp_path, monkeypatch) -> Path:
    """A copy of the committed bindings that regen and regen --check use instead of the real folder."""
    folder = tmp_path / "autogen"
    shutil.copytree(regen_module.bindings_dir(), folder)
    monkeypatch.setattr(regen_module, "bindings_dir", lambda: folder)
    return folder


def test_gen_writes_an_importable_module_atomically(tmp_path):
    header = tmp_path / "api.h"
    header.write_text("struct point { int x, y; };\n#define ORIGIN_X 0\n")
    out = tmp_path / "api.py"
    result = runner.invoke(app, ["gen", str(header), "-n", "api", "-o", str(out), "-D", "UNUSED=1"])
    assert result.exit_code == 0, result.output
    namespace: dict = {}
    exec(out.read_text(), namespace)
    assert namespace["ORIGIN_X"] == 0 and namespace["struct_point"](1, 2).y == 2
    assert not list(tmp_path.glob(".api.py.*"))


def test_gen_missing_header_is_one_error_line(tmp_path):
    result = runner.invoke(app, ["gen", str(tmp_path / "nope.h"), "-n", "x"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: header not found")
    assert "Traceback" not in result.output


def test_gen_without_headers_is_a_usage_error():
    assert runner.invoke(app, ["gen", "-n", "x"]).exit_code == 2


def test_gen_name_defaults_to_the_header_and_names_the_file_in_a_folder(tmp_path):
    header = tmp_path / "if-ether.h"
    header.write_text("#define ETH_ALEN 6\n")
    out_folder = tmp_path / "out"
    out_folder.mkdir()
    assert runner.invoke(app, ["gen", str(header), "-o", str(out_folder)]).exit_code == 0
    assert (out_folder / "if_ether.py").read_text().startswith("# Module if_ether:")
    assert runner.invoke(app, ["gen", str(header), "-n", "eth", "-o", str(out_folder)]).exit_code == 0
    assert "ETH_ALEN = 6" in (out_folder / "eth.py").read_text()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["-o", "{tmp}/missing-folder/out.py"], "error: cannot write"),
        (["-o", "{tmp}/a-file.h/out.py"], "error: cannot write"),
        (["--pattern", "("], "error: invalid pattern '('"),
        (["-n", "not-an-identifier"], "error: module name"),
    ],
)
def test_gen_bad_arguments_are_one_error_line(tmp_path, arguments, message):
    header = tmp_path / "a-file.h"
    header.write_text("struct point { int x; };\n")
    result = runner.invoke(app, ["gen", str(header), *[a.format(tmp=tmp_path) for a in arguments]])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(message)
    assert not list(tmp_path.glob("**/*.py"))


def test_gen_warns_about_an_empty_header(tmp_path):
    header = tmp_path / "empty.h"
    header.write_text("/* nothing */\n")
    result = runner.invoke(app, ["gen", str(header)])
    assert result.exit_code == 0
    assert "warning: nothing to bind" in result.stderr


def test_list_reports_targets_as_json():
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0
    rows = {row["target"]: row for row in json.loads(result.stdout)["targets"]}
    assert {"pci", "vfio", "io_uring", "kfd_ioctl", "libc", "libusb"} <= set(rows)
    assert rows["pci"]["headers"] is True and rows["pci"]["library"] is None and rows["pci"]["committed"] is True
    assert rows["libc"]["library"] is True


def test_regen_check_passes_on_the_committed_bindings(committed_copy):
    result = runner.invoke(app, ["regen", "--check", "pci", "vfio", "kfd_ioctl"])
    assert result.exit_code == 0, result.output
    assert "autogen up to date: pci, vfio, kfd_ioctl" in result.stderr


def test_regen_check_fails_with_a_diff_when_a_committed_file_differs(committed_copy, tmp_path):
    edited = committed_copy / "vfio.py"
    edited.write_text(edited.read_text().replace("VFIO_TYPE = ", "VFIO_TYPE = 1 + "))
    patch = tmp_path / "autogen.patch"
    result = runner.invoke(app, ["regen", "--check", "vfio", "pci", "--patch", str(patch)])
    assert result.exit_code == 1
    assert "error: autogen mismatch in vfio" in result.stderr
    assert "-VFIO_TYPE = 1 + " in result.stdout and "+++ b/lib/drivers/tg/drivers/autogen/vfio.py" in result.stdout
    assert patch.read_text() == result.stdout


def test_regen_rewrites_the_file_the_check_complained_about(committed_copy):
    original = (committed_copy / "pci.py").read_text()
    (committed_copy / "pci.py").write_text("# stale\n")
    assert runner.invoke(app, ["regen", "pci"]).exit_code == 0
    assert (committed_copy / "pci.py").read_text() == original


def test_regen_check_names_skipped_targets_and_never_counts_them_as_passed(committed_copy, monkeypatch):
    absent = Target("absent", "headers not on this machine", (Header("/nonexistent/absent.h"),))
    monkeypatch.setitem(TARGETS, "absent", absent)
    result = runner.invoke(app, ["regen", "--check", "pci", "absent"])
    assert result.exit_code == 0
    assert "absent: skipped: header not found: /nonexistent/absent.h" in result.stderr
    assert "autogen up to date: pci\n" in result.stderr
    strict = runner.invoke(app, ["regen", "--check", "--strict", "pci", "absent"])
    assert strict.exit_code == 1


def test_regen_check_skips_when_the_recorded_header_contents_changed(committed_copy, tmp_path, monkeypatch):
    header = tmp_path / "moving.h"
    header.write_text("#define VERSION 1\n")
    monkeypatch.setitem(TARGETS, "moving", Target("moving", "a header that changes", (Header(str(header)),)))
    assert runner.invoke(app, ["regen", "moving"]).exit_code == 0
    assert runner.invoke(app, ["regen", "--check", "moving"]).exit_code == 0
    header.write_text("#define VERSION 2\n")
    result = runner.invoke(app, ["regen", "--check", "moving"])
    assert "moving: skipped: headers differ from the recorded ones" in result.stderr
    assert "autogen up to date: nothing checked" in result.stderr


def test_regen_check_records_and_watches_every_included_header(committed_copy, tmp_path, monkeypatch):
    included = tmp_path / "typesizes.h"
    included.write_text("#define WORD_SIZE 8\n")
    header = tmp_path / "api.h"
    header.write_text(f'#include "{included}"\n#define DOUBLE_WORD (WORD_SIZE * 2)\n')
    monkeypatch.setitem(TARGETS, "layered", Target("layered", "a header that includes another", (Header(str(header)),)))
    assert runner.invoke(app, ["regen", "layered"]).exit_code == 0
    text = (committed_copy / "layered.py").read_text()
    assert "# Included headers:" in text and f"#   {included}  unpackaged -  sha256:" in text
    assert runner.invoke(app, ["regen", "--check", "layered"]).exit_code == 0
    included.write_text("#define WORD_SIZE 4\n")  # only the included header changes
    result = runner.invoke(app, ["regen", "--check", "layered"])
    assert (
        f"layered: skipped: headers differ from the recorded ones: {included} (unpackaged - recorded, " in result.stderr
    )
    assert "other contents here" in result.stderr


def test_regen_records_system_includes_with_their_debian_package():
    text = (regen_module.bindings_dir() / "libc.py").read_text()
    block = text.split("# Included headers:\n", 1)[1]
    assert "#   /usr/include/features.h  libc6-dev " in block
    assert "/x86_64-linux-gnu/bits/" in block or "/aarch64-linux-gnu/bits/" in block


def test_regen_from_an_unpacked_debian_package(committed_copy, tmp_path, monkeypatch):
    root = tmp_path / "unpacked"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text("Package: libfake-dev\nVersion: 1:2.3-4\nArchitecture: amd64\n")
    (root / "usr/include/fake").mkdir(parents=True)
    (root / "usr/include/fake/fake.h").write_text("#define FAKE_VERSION 23\n")
    target = Target("fake", "a package that is not installed", (Header("/usr/include/fake/fake.h"),))
    monkeypatch.setitem(TARGETS, "fake", target)
    monkeypatch.setenv("TG_AUTOGEN_SYSROOT", "")  # restored after the test, which the CLI sets
    assert "header not found" in runner.invoke(app, ["regen", "fake"]).stderr
    result = runner.invoke(app, ["regen", "fake", "--sysroot", str(root)])
    assert result.exit_code == 0, result.output
    text = (committed_copy / "fake.py").read_text()
    assert "#   /usr/include/fake/fake.h  libfake-dev 1:2.3-4  sha256:" in text and str(root) not in text
    assert "FAKE_VERSION = 23" in text
    assert runner.invoke(app, ["regen", "--check", "fake", "--sysroot", str(root)]).exit_code == 0
    not_a_package = runner.invoke(app, ["regen", "fake", "--sysroot", str(tmp_path)])
    assert not_a_package.exit_code == 1 and not_a_package.stderr.startswith("error: ")


def test_regen_sysroot_headers_include_their_siblings_from_the_sysroot(committed_copy, tmp_path, monkeypatch):
    """A package header includes siblings with angle brackets (found in the sysroot before the system, even where the
    system has its own older copy: linux/pci_regs.h here) and with quotes (next to the including file)."""
    root = tmp_path / "unpacked"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text("Package: libfake-dev\nVersion: 2.0-1\nArchitecture: amd64\n")
    (root / "usr/include/linux").mkdir(parents=True)
    (root / "usr/include/linux/pci_regs.h").write_text("#define PCI_VENDOR_ID 0x77\n#define PCI_NEW_REGISTER 0x99\n")
    (root / "usr/include/fake").mkdir(parents=True)
    (root / "usr/include/fake/fake_types.h").write_text("struct fake_pair { int a; long b; };\n")
    (root / "usr/include/fake/fake_config.h").write_text("#define FAKE_CONFIGURED 5\n")
    api = '#include <fake/fake_types.h>\n#include "fake_config.h"\n#include <linux/pci_regs.h>\n'
    api += "struct fake_api { struct fake_pair pair; };\n"
    api += "#define FAKE_VENDOR PCI_VENDOR_ID\n#define FAKE_NEW PCI_NEW_REGISTER\n"
    api += "#define FAKE_LEVEL (FAKE_CONFIGURED + 1)\n"
    (root / "usr/include/fake/fake.h").write_text(api)
    target = Target("fake", "a package that is not installed", (Header("/usr/include/fake/fake.h"),))
    monkeypatch.setitem(TARGETS, "fake", target)
    monkeypatch.setenv("TG_AUTOGEN_SYSROOT", "")  # restored after the test, which the CLI sets
    result = runner.invoke(app, ["regen", "fake", "--sysroot", str(root)])
    assert result.exit_code == 0, result.output
    text = (committed_copy / "fake.py").read_text()
    namespace: dict = {}
    exec(text, namespace)
    assert (namespace["FAKE_VENDOR"], namespace["FAKE_NEW"], namespace["FAKE_LEVEL"]) == (0x77, 0x99, 6)
    assert namespace["struct_fake_pair"](1, 2).b == 2
    for sibling in ("fake/fake_types.h", "fake/fake_config.h", "linux/pci_regs.h"):
        assert f"#   /usr/include/{sibling}  libfake-dev 2.0-1  sha256:" in text  # recorded as installed paths
    assert str(root) not in text
    assert runner.invoke(app, ["regen", "--check", "fake", "--sysroot", str(root)]).exit_code == 0


def test_regen_unknown_target_is_an_error():
    result = runner.invoke(app, ["regen", "--check", "no_such_target"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: unknown target(s): no_such_target")


def test_regen_check_json_document(committed_copy):
    result = runner.invoke(app, ["regen", "--check", "--json", "pci"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["results"][0]["target"] == "pci" and document["results"][0]["status"] == "same"


def test_committed_files_record_their_sources_and_no_checkout_paths():
    from tg.autogen.provenance import read_sources

    checkout = str(Path(__file__).resolve().parents[2])
    for path in sorted(regen_module.bindings_dir().glob("*.py")):
        if path.name == "__init__.py":
            continue
        text = path.read_text()
        assert read_sources(text), path.name
        assert checkout not in text and "/tmp" not in text, path.name


def test_regen_check_ignores_a_new_package_version_with_identical_headers(committed_copy):
    edited = committed_copy / "pci.py"
    text = edited.read_text()
    assert "linux-libc-dev 6." in text or "unpackaged" in text
    edited.write_text(text.replace("/pci_regs.h  linux-libc-dev ", "/pci_regs.h  linux-libc-dev 0.0-older-"))
    result = runner.invoke(app, ["regen", "--check", "pci"])
    assert result.exit_code == 0, result.output
    assert "autogen up to date: pci" in result.stderr


def test_output_folder_is_the_registry_setting_and_is_tg_drivers_autogen():
    import tg.drivers.autogen
    from tg.autogen import targets

    assert regen_module.bindings_dir() == targets.OUTPUT_DIR
    assert targets.OUTPUT_DIR == Path(tg.drivers.autogen.__file__).resolve().parent


def test_version_matches_the_distribution():
    from importlib.metadata import version

    from tg.autogen import __version__

    result = runner.invoke(app, ["--version"])
    assert (
        result.exit_code == 0
        and result.stdout.strip() == f"tg-autogen {version('tg-autogen')}" == f"tg-autogen {__version__}"
    )


def test_cli_start_up_imports_nothing_heavy():
    """Start-up (< 0.25 s, see bench/bench_autogen.py) is typer plus the CLI module: no libclang, no generator."""
    import subprocess
    import sys

    code = (
        "import sys, tg.autogen.cli; "
        "print(sorted(m for m in ('clang.cindex', 'tg.autogen.generate', 'tg.drivers.cbind', 'rich', "
        "'importlib.metadata', 'json') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_gen_notes_a_record_left_opaque_because_another_header_defines_it(tmp_path):
    other = tmp_path / "types.h"
    other.write_text("struct elsewhere { int x; };\n")
    header = tmp_path / "api.h"
    header.write_text(f'#include "{other}"\nstruct user {{ struct elsewhere *p; }};\n')
    result = runner.invoke(app, ["gen", str(header), "-o", str(tmp_path / "api.py")])
    assert result.exit_code == 0
    assert f"note: struct_elsewhere is opaque: its definition is in {other}" in result.stderr
