"""`tg-llm serve` and the seed's `tg-llm --serve PORT` as real processes: the startup line, then real requests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("gguf")
httpx = pytest.importorskip("httpx")

from llm_fixtures import write_model  # noqa: E402
from serve_helpers import bind  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", "F32", seed=3)


def serve(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, str]:
    """Start the CLI; returns the process, the URL it printed, and everything it printed before that."""
    command = [sys.executable, "-m", "tg.llm", *args]
    environment = os.environ | {"NO_COLOR": "1"} | (env or {})
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=environment)
    printed = ""
    assert process.stderr is not None
    for line in process.stderr:
        printed += line
        found = re.search(r"at (http://\S+) ", line)
        if found:
            return process, found.group(1), printed
    raise AssertionError(f"the server exited before printing its URL: {printed}")


def wait_ready(url: str, headers: dict[str, str] | None = None) -> dict:
    """Poll /health through the warm-up (503 `loading` with progress) until it says ok; returns what it said
    meanwhile, by status."""
    seen: dict = {}
    deadline = time.monotonic() + 600  # a hang guard only
    while time.monotonic() < deadline:
        health = httpx.get(url + "/health", headers=headers, timeout=30)
        seen.setdefault(health.json()["status"], health)
        if health.status_code == 200:
            return seen
        assert health.status_code == 503 and health.json()["status"] == "loading", health.text
        time.sleep(0.05)
    raise AssertionError("the server never became ready")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def test_serve_prints_url_model_context_device_and_answers(tiny: Path) -> None:
    process, url, printed = serve(
        ["serve", "-m", str(tiny), "--port", "0", "--max-context", "48", "--api-key", "k", "--allowed-host", "llm.lan"]
    )
    try:
        assert url.startswith("http://127.0.0.1:")
        assert '"tiny-llama-F32"' in printed and "max context 48" in printed and "device CPU" in printed
        assert "warning" not in printed and "warming up" in printed
        headers = {"Authorization": "Bearer k"}
        seen = wait_ready(url)
        if "loading" in seen:  # caught during the warm-up: its progress counts captures
            progress = seen["loading"].json()["progress"]
            assert 0 <= progress["done"] < progress["total"]
        models = httpx.get(url + "/v1/models", headers=headers).json()
        assert models["data"][0]["id"] == "tiny-llama-F32"
        body = {"model": str(tiny.stem), "prompt": "hi", "max_tokens": 2}  # the --model name is accepted too
        answer = httpx.post(url + "/v1/completions", json=body, headers=headers, timeout=180)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2
        assert httpx.post(url + "/v1/completions", json=body, timeout=180).status_code == 401
        assert httpx.get(url + "/health", headers={"Host": "llm.lan:8000"}).status_code == 200  # --allowed-host
        assert httpx.get(url + "/health", headers={"Host": "other.lan"}).status_code == 403
    finally:
        stop(process)
    assert process.returncode is not None


def test_seed_spelling_serve_port_non_loopback_warning_and_key_from_the_environment(tiny: Path) -> None:
    port = bind("127.0.0.1", 0).getsockname()[1]  # a free port (closed again when the socket is collected)
    process, url, _ = serve(["-m", str(tiny), "--max_context", "48", "--serve", str(port)])
    try:
        assert url == f"http://127.0.0.1:{port}"
        assert "ok" in wait_ready(url)
    finally:
        stop(process)
    process, url, printed = serve(
        ["serve", "-m", str(tiny), "--host", "127.0.0.2", "--port", "0", "--no-warmup"],
        env={"TG_LLM_API_KEY": "from-env"},
    )
    try:
        assert "warning: listening on 127.0.0.2" in printed and "API key required" in printed
        assert "warming up" not in printed
        assert httpx.get(url + "/health").status_code == 200  # no warm-up: ready at once
        assert httpx.get(url + "/v1/models").status_code == 401
        assert httpx.get(url + "/v1/models", headers={"Authorization": "Bearer from-env"}).status_code == 200
    finally:
        stop(process)


def test_bad_serve_options_fail_with_one_line(tiny: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tg.llm", "serve", "-m", str(tiny), "--max-concurrency", "0"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: --max-concurrency and --max-body-bytes must be at least 1, --max-queue at least 0"
    ]
