"""`python -m tg.llm` runs the tg-llm command line (mirrors the seed's `python3 -m tinygrad.llm`)."""

from tg.llm.cli import main

main()
