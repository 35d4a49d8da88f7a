"""llvm-objdump-19 as the oracle for the RDNA3 disassembler: its per-instruction text, normalised for comparison.

objdump runs with `--mattr=+real-true16`: LLVM compiles gfx1100 16-bit code in true16 mode (VOP1/VOP2/VOPC operands
v128+ name the high halves `vN.h`), which LLVM 19's disassembler prints only with that attribute.

Normalisation (both sides): the `_e32`/`_e64` suffix is dropped from mnemonics (the encoding is checked separately
by decoding the same bytes), numbers are compared by value (LLVM prints some immediates in hex, some in decimal),
`s_delay_alu`/`s_waitcnt` operands are compared as sets of fields, the low-half suffix `.l` is dropped (LLVM 19
prints it for some 16-bit operands and not others), for 16-bit operations `op_sel:[...]` is dropped (LLVM 19 prints
neither it nor `.h` for true16 VOP3 operands), and objdump's trailing `// address: dwords <label>` comment is
dropped. Instructions LLVM 19 itself cannot print (`.long`, or an operand it calls "Invalid register": its true16
VOPC e32 forms) are not compared; `compare` returns them, and the tests check my decoder made 16-bit operations of
them."""

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
            [OBJDUMP, "-d", "--mcpu=gfx1100", "--mattr=+real-true16", str(path)],
            capture_output=True,
            text=True,
            check=True,
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
    rest = re.sub(r"\b(v\d+)\.l\b", r"\1", rest)
    if "16" in mnemonic:
        rest = re.sub(r"op_sel:\[[\d,]+\]", "", rest)
    tokens = [t for t in re.split(r"[,\s]+", rest) if t]
    out = []
    for token in tokens:
        key, sep, value = token.partition(":")
        if sep and key.isalpha() and not token.startswith(("v[", "s[")):
            out.append(f"{key}:{_number(value)}")
        else:
            out.append(_number(token))
    return (mnemonic, *out)


def unprintable(text: str) -> bool:
    """LLVM 19 could not print this instruction (see the module docstring)."""
    return text.startswith(".long") or "Invalid register" in text


def compare(code_object: bytes) -> tuple[int, list[str], list[tuple[str, str, str | None]]]:
    """(instructions compared, my text of those LLVM cannot print, mismatches (offset, LLVM, mine)) for one code
    object's .text."""
    from tg.drivers.amd.code_object import load_code_object
    from tg.drivers.amd.rdna3 import disassemble

    reference = objdump_instructions(code_object)
    obj = load_code_object(code_object)
    start, size = obj.sections[".text"]
    mine = dict(disassemble(obj.image, start, start + size))
    compared, skipped, mismatches = 0, [], []
    for offset, text in sorted(reference.items()):
        got = mine.get(start + offset)
        if unprintable(text):
            skipped.append(got or f"<nothing decoded at 0x{offset:x}>")
            continue
        compared += 1
        if got is None or normalise(got) != normalise(text):
            mismatches.append((hex(offset), text, got))
    # the same instruction boundaries: every instruction I decoded starts where one of LLVM's does (its .long
    # lines of an unprintable instruction are one per dword, so only my starts are checked)
    assert all(offset - start in reference for offset in mine), "instruction boundaries differ from LLVM's"
    return compared, skipped, mismatches
