"""tests/llm helpers (the GGUF fixture writer and the numpy reference forward) are importable as plain modules."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
