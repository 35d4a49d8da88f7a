"""What a tg process reads from its environment, in one place every package and tool can import (it imports nothing of
tg): the flags registry (tg.env.flags: environment variables, each declared once with a description) and the installed
versions the tools' `--version` prints (tg.env.version)."""
