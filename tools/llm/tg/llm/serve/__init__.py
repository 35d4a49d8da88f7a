"""tg-llm serve: an OpenAI-compatible HTTP server (starlette + uvicorn + server-sent events) and a chat page."""
