"""tg-llm: run and serve LLMs from GGUF files."""
