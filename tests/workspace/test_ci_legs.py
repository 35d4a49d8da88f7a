"""CI proves the fresh machine, from one definition: `.ci/run` holds the legs (issue 12 item 5: the full suite with
gcc before clang is installed, then clang, then SPEC=1), and every job of ci.yml runs one of those legs (issue 29
item 6), so the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CI_RUN = ROOT / ".ci" / "run"
LEG_COMMAND = re.compile(r"""^sudo -E env "PATH=\$PATH" bash \.ci/run (\w+)$""")


def ci_run_legs() -> list[str]:
    """The legs .ci/run runs, in order: its LEGS list, each with a leg_NAME function."""
    text = CI_RUN.read_text()
    legs = re.search(r'^LEGS="([^"]+)"$', text, re.M)
    assert legs is not None, "no LEGS list in .ci/run"
    names = legs.group(1).split()
    assert all(re.search(rf"^leg_{name}\(\) \{{$", text, re.M) for name in names)
    return names


def leg_body(name: str) -> list[str]:
    lines = [line.strip() for line in CI_RUN.read_text().splitlines()]
    start = lines.index(f"leg_{name}() {{")
    return lines[start + 1 : lines.index("}", start)]


def test_ci_run_tests_with_gcc_before_installing_clang() -> None:
    legs = ci_run_legs()
    assert legs.index("gcc") < legs.index("clang") < legs.index("spec")
    assert "CC=gcc uv run --frozen pytest" in leg_body("gcc")
    assert not any("clang" in line for leg in legs[: legs.index("gcc") + 1] for line in leg_body(leg))
    clang = leg_body("clang")
    assert clang[0].startswith("install_missing clang-19")
    assert clang[-1].endswith("CC=clang-19 uv run --frozen pytest tests/codegen tests/tensor tests/backends")
    assert leg_body("spec") == ["CC=gcc SPEC=1 uv run --frozen pytest tests/tensor"]


def test_every_ci_yml_job_runs_a_leg_of_ci_run_and_every_leg_runs() -> None:
    """ci.yml has no test commands of its own: each job's one command is `.ci/run LEG` (process-replay aside, which
    needs the pull request's base commit), and together they run every leg once (the gcc leg once per Python)."""
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    ran: list[str] = []
    for name, job in jobs.items():
        if name == "process-replay":
            continue
        commands = [step["run"] for step in job["steps"] if "run" in step]
        assert len(commands) == 1, f"job {name} runs {commands}, not one leg of .ci/run"
        match = LEG_COMMAND.match(commands[0])
        assert match is not None, f"job {name} runs {commands[0]!r}, not a leg of .ci/run"
        ran.append(match.group(1))
    assert sorted(ran) == sorted(ci_run_legs())


def test_ci_run_drives_the_chat_page_in_chromium_after_installing_it() -> None:
    browser = leg_body("browser")
    assert browser[0] == "install_missing chromium"
    assert browser[1].startswith("TG_REQUIRE_BROWSER=1 ") and "tests/llm/test_serve_browser.py" in browser[1]


def test_the_cluster_leg_installs_the_extra_and_requires_ray() -> None:
    """The cluster tests skip without Ray; in the leg that installs the extra, TG_REQUIRE=ray makes a skip a failure."""
    legs = ci_run_legs()
    assert legs[-1] == "cluster"  # after every leg that must run without Ray
    body = leg_body("cluster")
    assert body[0] == "uv sync --frozen --extra cluster"
    assert body[-1].startswith("TG_REQUIRE=ray ") and "--extra cluster pytest -m cluster" in body[-1]


def test_the_amd_leg_installs_llvm_and_requires_its_disassembler() -> None:
    """The emulator's decoder and the renderer's code objects are checked against llvm-objdump, which a fresh machine
    lacks: those tests skip there; the amd leg installs llvm-19 and TG_REQUIRE=llvm-objdump makes a skip a failure."""
    body = [line for line in leg_body("amd") if not line.startswith("#")]
    assert body[0] == "install_missing llvm-19"
    commands = " ".join(body[1:]).split("DEV=MOCKKFD+AMD ")  # the pytest lines go on after backslashes
    assert commands[0].startswith("TG_REQUIRE=llvm-objdump ") and "tests/drivers" in commands[0]
    assert "tests/hcq" in commands[0]


def test_the_amd_leg_runs_the_tensor_suite_on_the_simulated_gpu() -> None:
    """The whole of tests/tensor on DEV=MOCKKFD+AMD, but for files left out by name (for the emulator's speed): each
    of those exists, so the list cannot name a file that moved or went away."""
    body = " ".join(line.rstrip("\\") for line in leg_body("amd") if not line.startswith("#"))
    kfd = body.split("DEV=MOCKKFD+AMD ")[1].split("DEV=MOCKPCI+AMD ")[0].split()
    assert kfd[:5] == ["CC=gcc", "uv", "run", "--frozen", "pytest"] and kfd[5] == "tests/tensor"
    left_out = [word.removeprefix("--ignore=") for word in kfd[6:]]
    assert all(word.startswith("tests/tensor/test_") and (ROOT / word).is_file() for word in left_out), left_out
    assert len(left_out) <= 5  # the tensor suite runs on the GPU, a few slow files aside


def test_the_amd_leg_runs_tensor_tests_through_the_userspace_pci_driver() -> None:
    """DEV=MOCKPCI+AMD: the same HCQ device over the PCI interface (boot, page tables, doorbells) on the sim board."""
    body = " ".join(line for line in leg_body("amd") if not line.startswith("#"))
    pci = body.split("DEV=MOCKPCI+AMD ")
    assert pci[1].startswith("CC=gcc uv run --frozen pytest tests/tensor/test_elementwise.py")
    assert pci[1].rstrip().endswith("MOCKGPU_PROCESS=1")  # the next run: the board in a process of its own
    assert pci[2].startswith("CC=gcc uv run --frozen pytest tests/tensor/test_elementwise.py")
