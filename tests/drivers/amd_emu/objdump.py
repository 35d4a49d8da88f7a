"""llvm-objdump-19 as the oracle for the RDNA3 disassembler: its per-instruction text, normalised for comparison.

Normalisation (both sides): the `_e32`/`_e64` suffix is dropped from mnemonics (the encoding is checked separately
by decoding the same bytes), numbers are compared by value (LLVM prints some immediates in hex, some in decimal),
`s_delay_alu`/`s_waitcnt` operands are compared as sets of fields, and objdump's trailing `// address: dwords <label>`
comment is dropped."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

OBJDUMP = "llvm-objdump-19"


def objdump_path() -> str | None:
    return shutil.which(OBJDUMP)


def objdump_instructions(code_object: bytes) -> dict[int, str]:
    """{offset in .text: instruction text} from llvm-objdump -d."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.o"
        path.write_bytes(code_object)
        out = subprocess.run(
            [OBJDUMP, "-d", "--mcpu=gfx1100", str(path)], capture_output=True, text=True, check=True
        ).stdout
    result = {}
    for line in out.splitlines():
        match = re.match(r"\s+(.*?)\s*// ([0-9A-F]{12}):", line)
        if match:
            result[int(match.group(2), 16)] = match.group(1).strip()
    return result


def _number(token: str) -> str:
    try:
        return str(int(token, 0))
    except ValueError:
        return token


def normalise(text: str) -> tuple[str, ...]:
    mnemonic, _, rest = text.partition(" ")
    if "::" in text:  # VOPD: normalise each half
        x, y = text.split("::")
        return (*normalise(x.strip()), "::", *normalise(y.strip()))
    mnemonic = re.sub(r"_e(32|64)$", "", mnemonic)
    if mnemonic in ("s_delay_alu", "s_waitcnt"):
        return (mnemonic, *sorted(rest.replace("|", " ").split()))
    tokens = [t for t in re.split(r"[,\s]+", rest) if t]
    out = []
    for token in tokens:
        key, sep, value = token.partition(":")
        if sep and key.isalpha() and not token.startswith(("v[", "s[")):
            out.append(f"{key}:{_number(value)}")
        else:
            out.append(_number(token))
    return (mnemonic, *out)
