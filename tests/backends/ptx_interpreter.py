"""A small interpreter for the PTX that tg.codegen.render.ptx writes, so its semantics can be checked without a GPU.

It executes each instruction as NVIDIA's PTX ISA manual defines it (wrapping integer arithmetic, `.rn` float ops
rounded once to f32/f64, saturating float -> int `cvt` with NaN -> 0, shift amounts clamped to the width, `selp`,
`setp` with ordered and unordered compares, `testp`), on a grid of thread blocks whose threads meet at `bar.sync`.
Registers hold raw bits; every instruction reads its operands as the type it names. Only the subset the renderer
emits is known; anything else raises, naming the instruction. The `.approx` instructions (ex2, lg2, sin, cos) are
computed exactly here: real hardware is within a few ulp of these values.

This is a test oracle's executor, not hardware: it checks the renderer's choice of instructions, types, register
classes and control flow against the PYTHON emulator; `ptxas` (tests/backends/test_ptx.py) checks the syntax.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from itertools import product
from typing import Any

WIDTHS = {"%p": 1, "%h": 16, "%rs": 16, "%r": 32, "%rd": 64, "%f": 32, "%fd": 64}
REGISTER = re.compile(r"^(%p|%h|%rs|%rd|%r|%fd|%f)\d+$|^(%SPL?)$")  # %SP, %SPL: nvcc's local stack pointers
SPECIAL = re.compile(r"^%(tid|ctaid)\.([xyz])$")
ADDRESS = re.compile(r"^\[(\S+?)(?:\+(-?\d+))?\]$")
STRUCT = {"f32": "<f", "f64": "<d"}


class UnknownInstructionError(NotImplementedError):
    pass


@dataclass
class Instruction:
    guard: str | None  # predicate register, or None
    negated: bool
    opcode: list[str]  # "setp.lt.s32" -> ["setp", "lt", "s32"]
    operands: list[str]


def type_bits(t: str) -> int:
    return 1 if t == "pred" else int(t[1:])


def to_signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def float_of(bits: int, t: str) -> float:
    if t == "f16":
        return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]
    return struct.unpack(STRUCT[t], struct.pack("<I" if t == "f32" else "<Q", bits & ((1 << type_bits(t)) - 1)))[0]


def round_fraction_to_double_odd(exact: Fraction) -> float:
    """The double nearest `exact`, made odd when inexact (round to odd): the later rounding to f32 or f16 is then
    the one correct rounding of `exact`."""
    nearest = float(exact)
    if Fraction(nearest) != exact and math.isfinite(nearest):
        if struct.unpack("<Q", struct.pack("<d", nearest))[0] & 1 == 0:
            nearest = math.nextafter(nearest, math.inf if exact > nearest else -math.inf)
    return nearest


def bits_of(value: float, t: str) -> int:
    """`value` rounded to nearest even in float type `t`, as bits (overflow gives an infinity)."""
    if math.isnan(value):
        return {"f16": 0x7E00, "f32": 0x7FC00000, "f64": 0x7FF8000000000000}[t]
    fmt = {"f16": ("<e", "<H"), "f32": ("<f", "<I"), "f64": ("<d", "<Q")}[t]
    try:
        return struct.unpack(fmt[1], struct.pack(fmt[0], value))[0]
    except OverflowError:  # struct refuses values that round to an infinity
        infinity = {"f16": 0x7C00, "f32": 0x7F800000}[t]
        return infinity | (1 << (type_bits(t) - 1) if value < 0 else 0)


def round_toward_zero(value: float, t: str) -> int:
    """`value` (a double) rounded toward zero to f32 bits (cvt.rz.f32.f64)."""
    bits = bits_of(value, t)
    if math.isfinite(value) and abs(float_of(bits, t)) > abs(value):
        bits -= 1
    return bits


class Memory:
    """Byte regions at made-up base addresses: global buffers, each thread's .local arrays, each block's .shared."""

    def __init__(self) -> None:
        self.regions: list[tuple[int, bytearray]] = []
        self.next_base = 1 << 32
        self.next_low = 1 << 16

    def add(self, data: bytearray, low: bool = False) -> int:
        """Place `data`; `low` puts it below 2**32 (shared memory, which nvcc addresses with 32-bit registers)."""
        base = self.next_low if low else self.next_base
        self.regions.append((base, data))
        step = (len(data) + 4095) // 4096 * 4096 + 4096
        if low:
            self.next_low += step
        else:
            self.next_base += step
        return base

    def find(self, address: int, size: int) -> tuple[bytearray, int]:
        for base, data in self.regions:
            if base <= address and address + size <= base + len(data):
                return data, address - base
        raise IndexError(f"PTX access of {size} bytes at {address:#x} is outside every buffer")

    def load(self, address: int, size: int) -> int:
        data, offset = self.find(address, size)
        return int.from_bytes(data[offset : offset + size], "little")

    def store(self, address: int, size: int, value: int) -> None:
        data, offset = self.find(address, size)
        data[offset : offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


@dataclass
class Kernel:
    params: list[str]
    local_arrays: dict[str, int]
    shared_arrays: dict[str, int]
    global_arrays: dict[str, bytes]  # module-scope .global arrays with their initial bytes (nvcc's math tables)
    named_registers: dict[str, int]  # registers declared one by one (`.reg .pred __$temp3;`, `%SP`): their widths
    body: list[Instruction | str]  # a str is a label
    labels: dict[str, int]


def parse(source: str) -> Kernel:
    params = re.findall(r"\.param \.u64\b[^\n]*?(\w+)\s*,?\s*$", source, re.MULTILINE)
    arrays = r"\.{}\s+\.align\s+\d+\s+\.b8\s+(\w+)\[(\d+)\];"
    local_arrays = {m[0]: int(m[1]) for m in re.findall(arrays.format("local"), source)}
    shared_arrays = {m[0]: int(m[1]) for m in re.findall(arrays.format("shared"), source)}
    global_arrays = {}
    for name, size, initial in re.findall(r"^\.global\s+\.align\s+\d+\s+\.b8\s+(\w+)\[(\d+)\](?:\s*=\s*\{([^}]*)\})?;",
                                          source, re.MULTILINE):  # fmt: skip
        data = bytes(int(v) for v in initial.split(",")) if initial else b""
        global_arrays[name] = data.ljust(int(size), b"\0")
    named_registers = {name: type_bits(t) for t, name in re.findall(r"\.reg\s+\.(\w+)\s+([%\w$]+);", source)}
    text = source[source.index("{", source.index(".entry")) + 1 : source.rindex("}")]
    body: list[Instruction | str] = []
    labels: dict[str, int] = {}
    for raw in text.splitlines():
        line = raw.split("//")[0].strip().strip("{}").strip()  # nvcc's inline-asm scopes: { add.f16 ...; }
        if not line or line.startswith("."):
            continue
        if line.endswith(":"):
            labels[line[:-1]] = len(body)
            continue
        line = line.rstrip(";")
        guard, negated = None, False
        if line.startswith("@"):
            guard_text, line = line.split(None, 1)
            negated = guard_text.startswith("@!")
            guard = guard_text.lstrip("@!")
        opcode, _, rest = line.partition(" ")
        operands = [o.strip() for o in rest.split(",")] if rest.strip() else []
        body.append(Instruction(guard, negated, opcode.split("."), operands))
    return Kernel(params, local_arrays, shared_arrays, global_arrays, named_registers, body, labels)


class Thread:
    def __init__(self, kernel: Kernel, memory: Memory, symbols: dict[str, int], tid: tuple, ctaid: tuple) -> None:
        self.kernel, self.memory, self.symbols = kernel, memory, symbols
        self.registers: dict[str, int] = {}
        self.special = {"tid": tid, "ctaid": ctaid}

    # ------------------------------------------------------------------------------------------ operands
    def read(self, operand: str, t: str) -> int:
        """The bits of `operand` as an instruction of type `t` reads them."""
        bits = type_bits(t)
        if REGISTER.match(operand) or operand in self.kernel.named_registers:
            return self.registers.get(operand, 0) & ((1 << bits) - 1)
        special = SPECIAL.match(operand)
        if special:
            return self.special[special.group(1)]["xyz".index(special.group(2))]
        if operand in self.symbols:
            return self.symbols[operand]
        if operand.startswith(("0f", "0d")):
            return int(operand[2:], 16)
        return int(operand, 0) & ((1 << bits) - 1)  # decimal or 0x hex

    def value(self, operand: str, t: str) -> Any:
        """The operand as a Python number of type `t` (a float, or a signed/unsigned int)."""
        bits = self.read(operand, t)
        if t[0] == "f":
            return float_of(bits, t)
        if t[0] == "s":
            return to_signed(bits, type_bits(t))
        return bits

    def write(self, register: str, bits: int) -> None:
        prefix = REGISTER.match(register)
        if prefix is not None:
            width = WIDTHS[prefix.group(1)] if prefix.group(1) else 64
        else:
            width = self.kernel.named_registers[register]
        self.registers[register] = bits & ((1 << width) - 1)

    def write_float(self, register: str, value: float, t: str) -> None:
        self.write(register, bits_of(value, t))

    def address(self, operand: str) -> int:
        match = ADDRESS.match(operand)
        assert match is not None, operand
        return self.read(match.group(1), "u64") + int(match.group(2) or 0)

    # ------------------------------------------------------------------------------------------ execution
    def run(self) -> Iterator[None]:
        """Execute until `ret`; yields at every `bar.sync`."""
        pc, body = 0, self.kernel.body
        while pc < len(body):
            instruction = body[pc]
            pc += 1
            assert isinstance(instruction, Instruction)
            if instruction.guard is not None and bool(self.read(instruction.guard, "pred")) == instruction.negated:
                continue
            name = instruction.opcode[0]
            if name == "ret":
                return
            if name == "bra":
                pc = self.kernel.labels[instruction.operands[0]]
            elif name == "bar":
                yield
            else:
                self.execute(instruction.opcode, instruction.operands)

    def execute(self, opcode: list[str], x: list[str]) -> None:
        name, t = opcode[0], opcode[-1]
        handler = getattr(self, f"op_{name}", None)
        if handler is not None:
            handler(opcode, x)
        elif name in ("add", "sub", "mul", "mad", "div", "rem", "max", "neg", "abs", "fma", "rcp", "sqrt"):
            self.arithmetic(name, opcode, t, x)
        elif name in ("and", "or", "xor", "not"):
            a = self.read(x[1], t)
            result = {"and": lambda: a & self.read(x[2], t), "or": lambda: a | self.read(x[2], t),
                      "xor": lambda: a ^ self.read(x[2], t), "not": lambda: ~a}[name]()  # fmt: skip
            self.write(x[0], result & ((1 << type_bits(t)) - 1))
        elif name in ("ex2", "lg2", "sin", "cos"):
            a = self.value(x[1], "f32")
            self.write_float(x[0], approx(name, a), "f32")
        else:
            raise UnknownInstructionError(".".join(opcode))

    def op_ld(self, opcode: list[str], x: list[str]) -> None:
        space, t = opcode[1], opcode[-1]  # ld.global.nc.f32: the type is last
        if space == "param":
            self.write(x[0], self.symbols[x[1].strip("[]")])
            return
        bits = type_bits(t)
        loaded = self.memory.load(self.address(x[1]), bits // 8)
        self.write(x[0], to_signed(loaded, bits) if t[0] == "s" else loaded)

    def op_st(self, opcode: list[str], x: list[str]) -> None:
        t = opcode[-1]
        self.memory.store(self.address(x[0]), type_bits(t) // 8, self.read(x[1], t))

    def op_cvta(self, opcode: list[str], x: list[str]) -> None:  # every space shares one address range here
        self.write(x[0], self.read(x[1], "u64"))

    def op_mov(self, opcode: list[str], x: list[str]) -> None:
        self.write(x[0], self.read(x[1], opcode[1]))

    def op_selp(self, opcode: list[str], x: list[str]) -> None:
        t = opcode[1]
        self.write(x[0], self.read(x[1] if self.read(x[3], "pred") else x[2], t))

    def op_setp(self, opcode: list[str], x: list[str]) -> None:
        compare, t = opcode[1], opcode[2]
        a, b = self.value(x[1], t), self.value(x[2], t)
        unordered = t[0] == "f" and (math.isnan(a) or math.isnan(b))
        if compare in ("nan", "num"):  # either operand NaN / neither
            self.write(x[0], int(unordered == (compare == "nan")))
            return
        ordered = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}
        if compare.endswith("u"):  # neu, ltu, ...: true when unordered
            result = unordered or ordered[compare[:-1]]
        else:
            result = not unordered and ordered[compare]
        self.write(x[0], int(result))

    def op_testp(self, opcode: list[str], x: list[str]) -> None:
        a = self.value(x[1], opcode[2])
        result = math.isnan(a) if opcode[1] == "notanumber" else math.isfinite(a)
        self.write(x[0], int(result))

    def op_bfe(self, opcode: list[str], x: list[str]) -> None:
        a, position, length = self.read(x[1], "u32"), self.read(x[2], "u32"), self.read(x[3], "u32")
        self.write(x[0], (a >> position) & ((1 << length) - 1))

    def op_bfi(self, opcode: list[str], x: list[str]) -> None:
        """Insert the low `length` bits of a into b at `position`."""
        t = opcode[1]
        a, b = self.read(x[1], t), self.read(x[2], t)
        position, length = self.read(x[3], "u32") & 0xFF, self.read(x[4], "u32") & 0xFF
        mask = ((1 << length) - 1) << position
        self.write(x[0], (b & ~mask) | ((a << position) & mask))

    def op_prmt(self, opcode: list[str], x: list[str]) -> None:
        """Byte permute (default mode): each result byte picks one of the 8 bytes of {b, a} by a selector nibble
        of c, or (selector bit 3) that byte's sign replicated."""
        if len(opcode) > 2:
            raise UnknownInstructionError(".".join(opcode))
        pool = (self.read(x[2], "b32") << 32) | self.read(x[1], "b32")
        selectors, result = self.read(x[3], "b32"), 0
        for i in range(4):
            selector = (selectors >> (4 * i)) & 0xF
            byte = (pool >> (8 * (selector & 7))) & 0xFF
            if selector & 8:
                byte = 0xFF if byte & 0x80 else 0
            result |= byte << (8 * i)
        self.write(x[0], result)

    def op_shl(self, opcode: list[str], x: list[str]) -> None:
        bits = type_bits(opcode[1])
        amount = min(self.read(x[2], "u32"), bits)  # PTX clamps the amount to the width
        self.write(x[0], (self.read(x[1], opcode[1]) << amount) & ((1 << bits) - 1))

    def op_shr(self, opcode: list[str], x: list[str]) -> None:
        t = opcode[1]
        amount = min(self.read(x[2], "u32"), type_bits(t))
        self.write(x[0], self.value(x[1], t) >> amount)

    def op_cvt(self, opcode: list[str], x: list[str]) -> None:
        modifiers, target, source = opcode[1:-2], opcode[-2], opcode[-1]
        value = self.value(x[1], source)
        if target[0] == "f" and source[0] == "f":
            if {"rzi", "rmi", "rni", "rpi"} & set(modifiers):  # to an integer: toward 0, down, nearest even, up
                rounding = {"rzi": math.trunc, "rmi": math.floor, "rni": round, "rpi": math.ceil}
                mode = next(m for m in modifiers if m in rounding)
                result = value if not math.isfinite(value) else math.copysign(float(rounding[mode](value)), value)
                self.write(x[0], bits_of(result, target))
            elif "rz" in modifiers:
                self.write(x[0], round_toward_zero(value, target))
            else:
                self.write(x[0], bits_of(value, target))
        elif target[0] == "f":  # int -> float: one rounding of the exact integer
            wide = float(value) if target == "f64" else round_fraction_to_double_odd(Fraction(value))
            self.write(x[0], bits_of(wide, target))
        elif source[0] == "f":  # float -> int: toward zero, saturating, NaN -> 0
            bits = type_bits(target)
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if target[0] == "s" else (0, (1 << bits) - 1)
            to_integer = {"rzi": math.trunc, "rmi": math.floor, "rni": round, "rpi": math.ceil}
            rounding = next((to_integer[m] for m in modifiers if m in to_integer), math.trunc)
            if math.isnan(value):
                self.write(x[0], 0)
            else:
                whole = rounding(value) if math.isfinite(value) else (high if value > 0 else low)
                self.write(x[0], max(low, min(high, whole)))
        else:  # int -> int: the source's low bits (read as its type), cut or extended to the target's
            bits = type_bits(target)
            self.write(x[0], to_signed(value, bits) if target[0] == "s" else value & ((1 << bits) - 1))

    def arithmetic(self, name: str, opcode: list[str], t: str, x: list[str]) -> None:
        operands = [self.value(o, t) for o in x[1:]]
        if "wide" in opcode and name == "mad":  # mad.wide: the addend is twice as wide
            operands[2] = self.value(x[3], t[0] + str(2 * type_bits(t)))
        if t[0] == "f":
            self.write(x[0], bits_of(float_arithmetic(name, operands, t), t))
            return
        a = operands[0]
        b = operands[1] if len(operands) > 1 else 0
        if name == "div":
            result = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        elif name == "rem":
            result = a - b * (abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1))
        elif name == "mul" and "hi" in opcode:  # the upper half of the double-width product
            result = (a * b) >> type_bits(t)
        else:
            result = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "max": lambda: max(a, b),
                      "neg": lambda: -a, "abs": lambda: abs(a),
                      "mad": lambda: a * b + operands[2]}[name]()  # fmt: skip
        self.write(x[0], result)


def float_arithmetic(name: str, x: list[float], t: str) -> float:
    """The exact result rounded once: through a double rounded to odd where the double itself could round."""
    if name in ("neg", "abs"):
        return -x[0] if name == "neg" else abs(x[0])
    if name == "sqrt":  # a double's sqrt has the room to round to f32 once
        return math.sqrt(x[0]) if x[0] >= 0 or math.isnan(x[0]) else math.nan
    if name in ("div", "rcp"):
        a, b = (x[0], x[1]) if name == "div" else (1.0, x[0])
        if b == 0 or not (math.isfinite(a) and math.isfinite(b)):
            return ieee_divide(a, b)
        exact = Fraction(a) / Fraction(b)
        if exact == 0:  # the sign of a zero quotient: the double division gives it
            return a / b
    elif not all(math.isfinite(v) for v in x):
        return (
            x[0] * x[1] + x[2] if name == "fma" else {"add": x[0] + x[1], "sub": x[0] - x[1], "mul": x[0] * x[1]}[name]
        )
    else:
        terms = [Fraction(v) for v in x]
        exact = {"add": lambda: terms[0] + terms[1], "sub": lambda: terms[0] - terms[1],
                 "mul": lambda: terms[0] * terms[1], "fma": lambda: terms[0] * terms[1] + terms[2]}[name]()  # fmt: skip
        if exact == 0:  # IEEE's sign of an exact zero: what the double operation gives
            return in_double(name, x)
    if t != "f64":
        return round_fraction_to_double_odd(exact)
    try:
        return float(exact)
    except OverflowError:  # rounds beyond the largest double: an infinity, as IEEE's round to nearest gives
        return math.inf if exact > 0 else -math.inf


def in_double(name: str, x: list[float]) -> float:
    """add/sub/mul/fma in double arithmetic: exact for infinities, NaN and the sign of zero."""
    if name == "fma":
        return x[0] * x[1] + x[2]
    return x[0] + x[1] if name == "add" else (x[0] - x[1] if name == "sub" else x[0] * x[1])


def ieee_divide(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
    return a / b


def approx(name: str, a: float) -> float:
    if name == "ex2":
        try:
            return 2.0**a
        except OverflowError:
            return math.inf
    if name == "lg2":
        return math.nan if a < 0 or math.isnan(a) else (-math.inf if a == 0 else math.log2(a))
    if math.isinf(a):
        return math.nan
    return math.sin(a) if name == "sin" else math.cos(a)


def launch(source: str, buffers: list[bytearray], global_size: tuple, local_size: tuple) -> None:
    """Run the kernel in `source` on `buffers` (its .u64 params, in order), writing the results into them."""
    kernel = parse(source)
    memory = Memory()
    params = {name: memory.add(buffer) for name, buffer in zip(kernel.params, buffers, strict=True)}
    params.update({name: memory.add(bytearray(data)) for name, data in kernel.global_arrays.items()})
    for ctaid in product(*(range(n) for n in reversed(global_size))):
        shared = {name: memory.add(bytearray(size), low=True) for name, size in kernel.shared_arrays.items()}
        threads = []
        for tid in product(*(range(n) for n in reversed(local_size))):
            local = {name: memory.add(bytearray(size)) for name, size in kernel.local_arrays.items()}
            symbols = {**params, **shared, **local}
            threads.append(Thread(kernel, memory, symbols, tid[::-1], ctaid[::-1]).run())
        while threads:  # every thread runs to its next barrier (or its end), then the next round starts
            threads = [t for t in threads if next(t, StopIteration) is not StopIteration]
