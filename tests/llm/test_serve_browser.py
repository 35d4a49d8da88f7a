"""The chat page in a real headless Chromium (Debian's package, driven by playwright): type a question, watch the
answer stream in, press stop.

Skips when no Chromium binary is installed; CI installs one (`apt-get install -y chromium`) and sets
TG_REQUIRE_BROWSER=1, which turns that skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest

pytest.importorskip("gguf")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (group llm-test)")

from llm_fixtures import write_model  # noqa: E402
from serve_helpers import RunningServer, start  # noqa: E402

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if shutil.which(p)), None)
if CHROMIUM is None and os.environ.get("TG_REQUIRE_BROWSER") == "1":
    raise RuntimeError("TG_REQUIRE_BROWSER=1 but no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium at /usr/bin/chromium: install it with `apt-get install -y chromium`"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    path = write_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", "F32", seed=3)
    running = start(path, 96, max_concurrency=2)
    yield running
    running.close()


@pytest.fixture(scope="module")
def page(server: RunningServer):
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(server.url + "/")
        yield page
        browser.close()


def test_a_question_gets_a_streamed_answer(page, server: RunningServer) -> None:
    steps_before = server.state.engine.steps
    page.fill("#max_tokens", "6")
    page.fill("#temperature", "0")
    page.fill("#prompt", "What is a rooster?")
    page.press("#prompt", "Enter")
    page.wait_for_selector(".msg.user")
    assert page.inner_text(".msg.user .body") == "What is a rooster?"
    page.wait_for_function("document.getElementById('send').disabled === false", timeout=180_000)
    answer = page.locator(".msg.assistant .body")
    assert answer.count() == 1 and not page.locator(".msg.error").count()
    assert server.state.engine.steps - steps_before >= 5  # six tokens were generated (five fed back)
    assert "tok/s" in page.inner_text("#speed")
    page.click("#reset")
    assert page.locator(".msg").count() == 0


def test_stop_ends_the_stream_and_the_generation(page, server: RunningServer) -> None:
    """Stop is pressed while the model is held at a gate, so the answer is certainly still streaming."""
    engine = server.state.engine
    gate, prefill, holding = threading.Event(), engine.runner.prefill_step, threading.Event()

    def gated_prefill(*args):  # type: ignore[no-untyped-def]
        holding.set()
        assert gate.wait(60)
        return prefill(*args)

    engine.runner.prefill_step = gated_prefill  # type: ignore[method-assign]
    try:
        page.fill("#max_tokens", "30")
        page.fill("#prompt", "Tell me a long story")
        page.press("#prompt", "Enter")
        assert holding.wait(30)
        page.wait_for_selector(".msg.assistant")
        assert page.is_enabled("#stop") and not page.is_enabled("#send")
        page.click("#stop")
        page.wait_for_function("document.getElementById('send').disabled === false", timeout=30_000)
        assert "stopped" in page.inner_text(".msg.assistant .role")
    finally:
        gate.set()
        engine.runner.prefill_step = prefill  # type: ignore[method-assign]
    from tg.llm.serve.engine import wait_idle

    assert wait_idle(engine, 30)  # the server noticed the closed stream and freed the slot
    assert engine.stats()["slots_busy"] == 0


def test_markdown_renders_code_blocks_and_escapes_html(page) -> None:
    html = page.evaluate(
        "renderMarkdown('Some **bold** and `x`.\\n\\n```python\\nif a < b: pass\\n```\\n\\n"
        "<img src=x onerror=alert(1)>')"
    )
    assert "<strong>bold</strong>" in html and "<code>x</code>" in html
    assert '<pre><code data-lang="python">if a &lt; b: pass\n</code></pre>' in html
    assert "<img" not in html and "&lt;img" in html  # model output cannot inject markup
