"""AMDGPU HSA code objects: the ELF loader, the kernel descriptor and the program-build facts a device needs.

A code object is an ELF64 file for EM_AMDGPU. LLVM's `emit_object` gives a relocatable object (ET_REL: every
section at address 0, a relocation for each kernel descriptor's `kernel_code_entry_byte_offset`); a linker gives a
shared object (ET_DYN: sections already placed, dynamic relocations). `load_code_object` handles both the way a
GPU loader does without a linker: it lays the allocatable sections out in one image (each at its alignment, or at
its own address for ET_DYN), applies the relocations, and finds each kernel by its `NAME.kd` symbol, whose 64 bytes
are an `llvm_amdhsa_kernel_descriptor_t`.

Position-independent relocations (REL*) are resolved in the image once; absolute ones (ABS*, RELATIVE64) depend on
where the image lands in GPU memory, so `CodeObject.image_at(base)` re-applies them for a load address.

`build_program` turns a kernel into `AMDProgramData`, the register values the dispatch programs (spec hcq §1.14
"Program build").
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

EM_AMDGPU = 0xE0
ET_REL, ET_DYN = 1, 3
SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 2, 4, 8, 9, 11
SHF_ALLOC = 0x2
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
STT_SECTION = 3

# AMDGPU relocation types (the ELF ABI of the AMDGPU backend)
R_AMDGPU_NONE = 0
R_AMDGPU_ABS32_LO = 1
R_AMDGPU_ABS32_HI = 2
R_AMDGPU_ABS64 = 3
R_AMDGPU_REL32 = 4
R_AMDGPU_REL64 = 5
R_AMDGPU_ABS32 = 6
R_AMDGPU_REL32_LO = 10
R_AMDGPU_REL32_HI = 11
R_AMDGPU_RELATIVE64 = 13

RELOCATION_NAMES = {
    0: "R_AMDGPU_NONE",
    1: "R_AMDGPU_ABS32_LO",
    2: "R_AMDGPU_ABS32_HI",
    3: "R_AMDGPU_ABS64",
    4: "R_AMDGPU_REL32",
    5: "R_AMDGPU_REL64",
    6: "R_AMDGPU_ABS32",
    7: "R_AMDGPU_GOTPCREL",
    8: "R_AMDGPU_GOTPCREL32_LO",
    9: "R_AMDGPU_GOTPCREL32_HI",
    10: "R_AMDGPU_REL32_LO",
    11: "R_AMDGPU_REL32_HI",
    13: "R_AMDGPU_RELATIVE64",
    14: "R_AMDGPU_REL16",
}
# Relocations whose value depends on the image's load address; the others are resolved once in the image.
ABSOLUTE_RELOCATIONS = frozenset(
    {R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_ABS32, R_AMDGPU_RELATIVE64}
)
SUPPORTED_RELOCATIONS = ABSOLUTE_RELOCATIONS | {
    R_AMDGPU_NONE,
    R_AMDGPU_REL32,
    R_AMDGPU_REL64,
    R_AMDGPU_REL32_LO,
    R_AMDGPU_REL32_HI,
}

KERNEL_DESCRIPTOR_SIZE = 64
HSA_KERNEL_DISPATCH_PACKET_SIZE = 64  # sizeof(hsa_kernel_dispatch_packet_t), appended to kernargs for dispatch_ptr
LDS_GRANULE = 512  # COMPUTE_PGM_RSRC2.LDS_SIZE counts 512-byte granules on gfx11


class CodeObjectError(ValueError):
    """A code object this loader cannot load: not an AMDGPU ELF, an unsupported relocation, no such kernel."""


# kernel_code_properties bits (llvm_amdhsa_kernel_descriptor_t)
KCP_ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER = 1 << 0
KCP_ENABLE_SGPR_DISPATCH_PTR = 1 << 1
KCP_ENABLE_SGPR_QUEUE_PTR = 1 << 2
KCP_ENABLE_SGPR_KERNARG_SEGMENT_PTR = 1 << 3
KCP_ENABLE_SGPR_DISPATCH_ID = 1 << 4
KCP_ENABLE_SGPR_FLAT_SCRATCH_INIT = 1 << 5
KCP_ENABLE_SGPR_PRIVATE_SEGMENT_SIZE = 1 << 6
KCP_ENABLE_WAVEFRONT_SIZE32 = 1 << 10
KCP_USES_DYNAMIC_STACK = 1 << 11


def rsrc2_user_sgpr_count(rsrc2: int) -> int:
    """COMPUTE_PGM_RSRC2.USER_SGPR_COUNT (bits 1..5)."""
    return (rsrc2 >> 1) & 0x1F


def rsrc2_workgroup_id_enables(rsrc2: int) -> tuple[bool, bool, bool]:
    """COMPUTE_PGM_RSRC2.TGID_{X,Y,Z}_EN (bits 7, 8, 9): which workgroup ids the hardware puts in SGPRs."""
    return bool(rsrc2 >> 7 & 1), bool(rsrc2 >> 8 & 1), bool(rsrc2 >> 9 & 1)


def rsrc2_lds_bytes(rsrc2: int) -> int:
    """COMPUTE_PGM_RSRC2.LDS_SIZE (bits 15..23) in bytes."""
    return ((rsrc2 >> 15) & 0x1FF) * LDS_GRANULE


def rsrc2_scratch_enabled(rsrc2: int) -> bool:
    """COMPUTE_PGM_RSRC2.SCRATCH_EN (bit 0)."""
    return bool(rsrc2 & 1)


def rsrc2_workitem_id_vgprs(rsrc2: int) -> int:
    """COMPUTE_PGM_RSRC2.TIDIG_COMP_CNT (bits 11..12): 0 = x only, 1 = x and y, 2 = x, y and z."""
    return (rsrc2 >> 11) & 3


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte `llvm_amdhsa_kernel_descriptor_t`."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int  # signed, relative to the descriptor's own address
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int

    @classmethod
    def from_bytes(cls, data: bytes) -> KernelDescriptor:
        if len(data) < KERNEL_DESCRIPTOR_SIZE:
            raise CodeObjectError(f"kernel descriptor is {len(data)} bytes, expected {KERNEL_DESCRIPTOR_SIZE}")
        group, private, kernarg = struct.unpack_from("<III", data, 0)
        (entry,) = struct.unpack_from("<q", data, 16)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", data, 44)
        properties, preload = struct.unpack_from("<HH", data, 56)
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, properties, preload)

    def _property(self, bit: int) -> bool:
        return bool(self.kernel_code_properties & bit)

    @property
    def enable_sgpr_private_segment_buffer(self) -> bool:
        return self._property(KCP_ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER)

    @property
    def enable_sgpr_dispatch_ptr(self) -> bool:
        return self._property(KCP_ENABLE_SGPR_DISPATCH_PTR)

    @property
    def enable_sgpr_queue_ptr(self) -> bool:
        return self._property(KCP_ENABLE_SGPR_QUEUE_PTR)

    @property
    def enable_sgpr_kernarg_segment_ptr(self) -> bool:
        return self._property(KCP_ENABLE_SGPR_KERNARG_SEGMENT_PTR)

    @property
    def enable_sgpr_dispatch_id(self) -> bool:
        return self._property(KCP_ENABLE_SGPR_DISPATCH_ID)

    @property
    def enable_sgpr_flat_scratch_init(self) -> bool:
        return self._property(KCP_ENABLE_SGPR_FLAT_SCRATCH_INIT)

    @property
    def enable_sgpr_private_segment_size(self) -> bool:
        return self._property(KCP_ENABLE_SGPR_PRIVATE_SEGMENT_SIZE)

    @property
    def wavefront_size32(self) -> bool:
        return self._property(KCP_ENABLE_WAVEFRONT_SIZE32)

    @property
    def uses_dynamic_stack(self) -> bool:
        return self._property(KCP_USES_DYNAMIC_STACK)

    @property
    def user_sgpr_count(self) -> int:
        return rsrc2_user_sgpr_count(self.compute_pgm_rsrc2)


@dataclass(frozen=True)
class Kernel:
    """A kernel of a loaded code object. Offsets are byte offsets into `CodeObject.image`."""

    name: str
    descriptor_offset: int
    entry_offset: int  # the first instruction: descriptor_offset + kernel_code_entry_byte_offset
    code_size: int  # the kernel function symbol's size (0 when the object does not say)
    descriptor: KernelDescriptor


@dataclass(frozen=True)
class Relocation:
    """A relocation still to apply at load time (absolute: depends on the image's base address)."""

    offset: int  # in the image
    type: int
    value: int  # symbol value (image offset for a defined symbol) + addend, i.e. the value at base 0


@dataclass(frozen=True)
class CodeObject:
    """A loaded code object: one image of its allocatable sections, with the base-independent relocations applied;
    `image` is as if loaded at GPU address 0 (absolute relocations resolved against base 0)."""

    image: bytes
    kernels: dict[str, Kernel]
    symbols: dict[str, int]  # defined symbols -> image offset (SHN_ABS symbols: their value)
    sections: dict[str, tuple[int, int]]  # allocatable section name -> (image offset, size)
    absolute_relocations: tuple[Relocation, ...] = field(default=())

    def kernel(self, name: str | None = None) -> Kernel:
        """The named kernel; without a name, the only one (an error when there are several)."""
        if name is None:
            if len(self.kernels) != 1:
                raise CodeObjectError(f"code object has {len(self.kernels)} kernels {sorted(self.kernels)}; name one")
            return next(iter(self.kernels.values()))
        if name not in self.kernels:
            raise CodeObjectError(f"no kernel {name!r} in code object (kernels: {sorted(self.kernels)})")
        return self.kernels[name]

    def image_at(self, base: int) -> bytes:
        """The image as loaded at GPU address `base`: absolute relocations re-applied for that address."""
        if not self.absolute_relocations or base == 0:
            return self.image
        out = bytearray(self.image)
        for rel in self.absolute_relocations:
            _write_relocation(out, rel.offset, rel.type, base + rel.value)
        return bytes(out)


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


def _sections(data: bytes) -> list[_Section]:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = raw[shstrndx][4] if shnum else 0

    def name(off: int) -> str:
        end = data.index(b"\0", strtab_off + off)
        return data[strtab_off + off : end].decode()

    return [_Section(name(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], max(r[8], 1), r[9]) for r in raw]


def _layout(elf_type: int, sections: list[_Section]) -> dict[int, int]:
    """Image offset of each allocatable section: its own address in a shared object, else packed by alignment."""
    placed: dict[int, int] = {}
    cursor = 0
    for index, sec in enumerate(sections):
        if not sec.flags & SHF_ALLOC:
            continue
        if elf_type == ET_DYN:
            placed[index] = sec.addr
        else:
            cursor = (cursor + sec.align - 1) // sec.align * sec.align
            placed[index] = cursor
            cursor += sec.size
    return placed


@dataclass(frozen=True)
class _Symbol:
    name: str
    value: int
    size: int
    type: int
    shndx: int


def _symbols(data: bytes, sections: list[_Section], table: _Section) -> list[_Symbol]:
    strtab = sections[table.link]
    out = []
    for off in range(table.offset, table.offset + table.size, 24):
        name_off, info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
        end = data.index(b"\0", strtab.offset + name_off)
        out.append(_Symbol(data[strtab.offset + name_off : end].decode(), value, size, info & 0xF, shndx))
    return out


def _write_relocation(image: bytearray, offset: int, rtype: int, value: int) -> None:
    if rtype in (R_AMDGPU_ABS64, R_AMDGPU_REL64, R_AMDGPU_RELATIVE64):
        struct.pack_into("<Q", image, offset, value & 0xFFFFFFFFFFFFFFFF)
    elif rtype in (R_AMDGPU_ABS32, R_AMDGPU_REL32, R_AMDGPU_ABS32_LO, R_AMDGPU_REL32_LO):
        struct.pack_into("<I", image, offset, value & 0xFFFFFFFF)
    elif rtype in (R_AMDGPU_ABS32_HI, R_AMDGPU_REL32_HI):
        struct.pack_into("<I", image, offset, (value >> 32) & 0xFFFFFFFF)


def _check_header(data: bytes) -> int:
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise CodeObjectError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise CodeObjectError("not a little-endian ELF64 file")
    elf_type, machine = struct.unpack_from("<HH", data, 0x10)
    if machine != EM_AMDGPU:
        raise CodeObjectError(f"ELF machine 0x{machine:X} is not EM_AMDGPU (0xE0)")
    if elf_type not in (ET_REL, ET_DYN):
        raise CodeObjectError(f"ELF type {elf_type} is neither ET_REL nor ET_DYN")
    return elf_type


def load_code_object(data: bytes) -> CodeObject:
    """Load an AMDGPU HSA code object (ET_REL or ET_DYN) into one relocated image and find its kernels."""
    elf_type = _check_header(data)
    sections = _sections(data)
    placed = _layout(elf_type, sections)
    size = max((placed[i] + sections[i].size for i in placed), default=0)
    image = bytearray((size + 3) // 4 * 4)  # padded to dwords
    for index, offset in placed.items():
        sec = sections[index]
        if sec.type != SHT_NOBITS:
            image[offset : offset + sec.size] = data[sec.offset : sec.offset + sec.size]

    def symbol_offset(sym: _Symbol) -> int | None:
        if sym.shndx == SHN_ABS:
            return sym.value
        if sym.shndx == SHN_UNDEF or sym.shndx not in placed:
            return None
        # ET_REL symbol values are section-relative; ET_DYN values are already addresses
        return sym.value if elf_type == ET_DYN else placed[sym.shndx] + sym.value

    tables = {i: _symbols(data, sections, s) for i, s in enumerate(sections) if s.type in (SHT_SYMTAB, SHT_DYNSYM)}
    symbols: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for table in tables.values():
        for sym in table:
            value = symbol_offset(sym)
            if sym.name and sym.type != STT_SECTION and value is not None:
                symbols[sym.name] = value
                sizes[sym.name] = sym.size

    absolute = _apply_relocations(data, elf_type, sections, placed, tables, symbol_offset, image)
    kernels = _find_kernels(bytes(image), symbols, sizes)
    names = {sections[i].name: (off, sections[i].size) for i, off in placed.items()}
    return CodeObject(bytes(image), kernels, symbols, names, tuple(absolute))


def _apply_relocations(
    data: bytes,
    elf_type: int,
    sections: list[_Section],
    placed: dict[int, int],
    tables: dict[int, list[_Symbol]],
    symbol_offset: Callable[[_Symbol], int | None],
    image: bytearray,
) -> list[Relocation]:
    absolute: list[Relocation] = []
    for sec in sections:
        if sec.type not in (SHT_RELA, SHT_REL):
            continue
        # a relocatable object's .rela.X patches section X (skip non-loaded targets such as debug info);
        # a shared object's dynamic relocations carry image addresses
        if elf_type == ET_REL:
            if sec.info not in placed:
                continue
            target_base = placed[sec.info]
        else:
            target_base = 0
        entsize = 24 if sec.type == SHT_RELA else 16
        for off in range(sec.offset, sec.offset + sec.size, entsize):
            r_offset, r_info = struct.unpack_from("<QQ", data, off)
            addend = struct.unpack_from("<q", data, off + 16)[0] if sec.type == SHT_RELA else 0
            rtype, sym_index = r_info & 0xFFFFFFFF, r_info >> 32
            name = RELOCATION_NAMES.get(rtype, f"type {rtype}")
            if rtype not in SUPPORTED_RELOCATIONS:
                raise CodeObjectError(f"unsupported AMDGPU relocation {name} ({rtype}) at offset 0x{r_offset:X}")
            if rtype == R_AMDGPU_NONE:
                continue
            where = target_base + r_offset
            if sec.type == SHT_REL:  # implicit addend: what the site holds
                width = 8 if rtype in (R_AMDGPU_ABS64, R_AMDGPU_REL64, R_AMDGPU_RELATIVE64) else 4
                addend = int.from_bytes(image[where : where + width], "little", signed=True)
            target = 0  # RELATIVE64 and symbol index 0: base + addend
            if rtype != R_AMDGPU_RELATIVE64 and sym_index:
                sym = tables[sec.link][sym_index]
                resolved = symbol_offset(sym)
                if resolved is None:
                    raise CodeObjectError(f"{name} at offset 0x{r_offset:X} refers to undefined symbol {sym.name!r}")
                target = resolved
            if rtype in ABSOLUTE_RELOCATIONS:
                absolute.append(Relocation(where, rtype, target + addend))
                _write_relocation(image, where, rtype, target + addend)
            else:
                _write_relocation(image, where, rtype, target + addend - where)
    return absolute


def _find_kernels(image: bytes, symbols: dict[str, int], sizes: dict[str, int]) -> dict[str, Kernel]:
    kernels = {}
    for sym_name, offset in symbols.items():
        if not sym_name.endswith(".kd"):
            continue
        name = sym_name.removesuffix(".kd")
        if offset + KERNEL_DESCRIPTOR_SIZE > len(image):
            raise CodeObjectError(f"kernel descriptor {sym_name} at 0x{offset:X} lies outside the image")
        desc = KernelDescriptor.from_bytes(image[offset : offset + KERNEL_DESCRIPTOR_SIZE])
        entry = offset + desc.kernel_code_entry_byte_offset
        if not 0 <= entry < len(image):
            raise CodeObjectError(f"kernel {name}: entry 0x{entry:X} lies outside the image ({len(image)} bytes)")
        kernels[name] = Kernel(name, offset, entry, sizes.get(name, 0), desc)
    return kernels


@dataclass(frozen=True)
class AMDProgramData:
    """What a dispatch of one kernel programs (spec hcq §1.14 "Program build")."""

    name: str
    image: bytes  # the whole code object image (as at base 0; see CodeObject.image_at)
    entry_point_offset: int  # first instruction, from the start of the image
    rsrc1: int
    rsrc2: int
    rsrc3: int
    wave32: bool
    group_segment_size: int
    private_segment_size: int
    kernargs_segment_size: int
    kernargs_alloc_size: int
    enable_dispatch_ptr: bool
    enable_private_segment_sgpr: bool
    user_sgpr_count: int
    descriptor: KernelDescriptor
    code_object: CodeObject


def build_program(
    code: bytes | CodeObject,
    name: str | None = None,
    *,
    gfx_version: tuple[int, ...] = (11, 0, 0),
    lds_size_in_kb: int = 64,
) -> AMDProgramData:
    """The register values for dispatching kernel `name` (the only one when None) of a code object.

    LDS is granted in 512-byte granules (RSRC2.LDS_SIZE); a kernel needing more than the device's LDS raises
    RuntimeError("Too many resources requested: group_segment_size"). On gfx11 RSRC1.PRIV (bit 20) is set, which
    the firmware's compute wave save/restore needs."""
    obj = code if isinstance(code, CodeObject) else load_code_object(code)
    kernel = obj.kernel(name)
    desc = kernel.descriptor
    lds_granules = ((desc.group_segment_fixed_size + LDS_GRANULE - 1) // LDS_GRANULE) & 0x1FF
    if lds_granules > (lds_size_in_kb * 1024) // LDS_GRANULE:
        raise RuntimeError("Too many resources requested: group_segment_size")
    rsrc1 = desc.compute_pgm_rsrc1 | ((1 << 20) if gfx_version[0] == 11 else 0)
    rsrc2 = desc.compute_pgm_rsrc2 | (lds_granules << 15)
    dispatch_packet = HSA_KERNEL_DISPATCH_PACKET_SIZE if desc.enable_sgpr_dispatch_ptr else 0
    return AMDProgramData(
        name=kernel.name,
        image=obj.image,
        entry_point_offset=kernel.entry_offset,
        rsrc1=rsrc1,
        rsrc2=rsrc2,
        rsrc3=desc.compute_pgm_rsrc3,
        wave32=desc.wavefront_size32,
        group_segment_size=desc.group_segment_fixed_size,
        private_segment_size=desc.private_segment_fixed_size,
        kernargs_segment_size=desc.kernarg_size,
        kernargs_alloc_size=desc.kernarg_size + dispatch_packet,
        enable_dispatch_ptr=desc.enable_sgpr_dispatch_ptr,
        enable_private_segment_sgpr=desc.enable_sgpr_private_segment_buffer,
        user_sgpr_count=desc.user_sgpr_count,
        descriptor=desc,
        code_object=obj,
    )
