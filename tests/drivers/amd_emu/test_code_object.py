"""The code-object loader (tg.drivers.amd.code_object) on objects LLVM emits for gfx1100, and on hand-made ELF
files for the cases LLVM does not produce (ET_DYN, absolute relocations, an unsupported relocation)."""

import struct

import pytest

from tg.drivers.amd.code_object import (
    CodeObjectError,
    KernelDescriptor,
    build_program,
    load_code_object,
    rsrc2_lds_bytes,
    rsrc2_user_sgpr_count,
    rsrc2_workgroup_id_enables,
)

from .llvm_kernels import compile_ir

ADD_ONE = """
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @add_one(ptr addrspace(1) %out, ptr addrspace(1) %a) #0 {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %v = load float, ptr addrspace(1) %pa
  %s = fadd float %v, 1.0
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %s, ptr addrspace(1) %po
  ret void
}
"""

LDS_KERNEL = """
@shared = internal addrspace(3) global [{n} x float] undef, align 4
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @uses_lds(ptr addrspace(1) %out, i32 %n) #0 {{
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %p = getelementptr [{n} x float], ptr addrspace(3) @shared, i32 0, i32 %i
  store volatile float 1.0, ptr addrspace(3) %p
  %v = load volatile float, ptr addrspace(3) %p
  %po = getelementptr float, ptr addrspace(1) %out, i32 %g
  store float %v, ptr addrspace(1) %po
  ret void
}}
"""


def test_llvm_object_kernel_descriptor_and_entry() -> None:
    obj = load_code_object(compile_ir(ADD_ONE))
    kernel = obj.kernel()
    assert kernel.name == "add_one" and list(obj.kernels) == ["add_one"]
    desc = kernel.descriptor
    # the entry is the kernel function (the REL64 relocation resolved against the descriptor's address)
    assert kernel.entry_offset == obj.symbols["add_one"] == obj.sections[".text"][0]
    assert kernel.descriptor_offset == obj.symbols["add_one.kd"] == obj.sections[".rodata"][0]
    assert desc.kernel_code_entry_byte_offset == kernel.entry_offset - kernel.descriptor_offset
    assert desc.kernarg_size == 16  # two 8-byte pointers
    assert desc.wavefront_size32 and desc.enable_sgpr_kernarg_segment_ptr
    assert not desc.enable_sgpr_dispatch_ptr and not desc.enable_sgpr_queue_ptr
    # LLVM 20 keeps USER_SGPR_COUNT at 13 for code object v6 even with only the kernarg pointer enabled (s[0:1])
    assert desc.user_sgpr_count >= 2
    assert kernel.code_size > 0 and len(obj.image) % 4 == 0
    # the image holds the section bytes: the first instruction word is not zero, the descriptor round-trips
    assert obj.image[kernel.entry_offset : kernel.entry_offset + 4] != b"\0\0\0\0"
    assert KernelDescriptor.from_bytes(obj.image[kernel.descriptor_offset :][:64]) == desc


def test_default_implicit_sgprs_are_read_from_the_descriptor() -> None:
    desc = load_code_object(compile_ir(ADD_ONE, implicit=True)).kernel().descriptor
    # LLVM's defaults without the amdgpu-no-* attributes: dispatch ptr, queue ptr, kernarg ptr, dispatch id
    assert desc.enable_sgpr_dispatch_ptr and desc.enable_sgpr_queue_ptr and desc.enable_sgpr_dispatch_id
    program = build_program(compile_ir(ADD_ONE, implicit=True))
    assert program.enable_dispatch_ptr
    assert program.kernargs_alloc_size == desc.kernarg_size + 64  # + hsa_kernel_dispatch_packet_t


def test_build_program_registers() -> None:
    code = compile_ir(LDS_KERNEL.format(n=200))  # 800 bytes of LDS: 2 granules of 512
    program = build_program(code, "uses_lds", gfx_version=(11, 0, 0))
    desc = program.descriptor
    assert desc.group_segment_fixed_size == 800
    assert program.rsrc1 == desc.compute_pgm_rsrc1 | 1 << 20
    assert program.rsrc2 == desc.compute_pgm_rsrc2 | 2 << 15
    assert rsrc2_lds_bytes(program.rsrc2) == 1024
    assert rsrc2_workgroup_id_enables(program.rsrc2)[0]
    assert rsrc2_user_sgpr_count(program.rsrc2) == program.user_sgpr_count == desc.user_sgpr_count >= 2
    assert program.kernargs_alloc_size == program.kernargs_segment_size == 12
    assert program.entry_point_offset == program.code_object.kernel().entry_offset
    # gfx12 does not set PRIV
    assert build_program(code, gfx_version=(12, 0, 0)).rsrc1 == desc.compute_pgm_rsrc1


def test_too_much_lds() -> None:
    code = compile_ir(LDS_KERNEL.format(n=5000))  # 20000 bytes: fits 64 KiB, not 16 KiB
    build_program(code, lds_size_in_kb=64)
    with pytest.raises(RuntimeError, match="Too many resources requested: group_segment_size"):
        build_program(code, lds_size_in_kb=16)


def test_several_kernels_need_a_name() -> None:
    second = ADD_ONE.split("\n", 2)[2].replace("@add_one", "@add_two").replace("1.0", "2.0")
    two = ADD_ONE + second
    obj = load_code_object(compile_ir(two))
    assert sorted(obj.kernels) == ["add_one", "add_two"]
    assert obj.kernel("add_two").entry_offset != obj.kernel("add_one").entry_offset
    with pytest.raises(CodeObjectError, match="2 kernels"):
        obj.kernel()
    with pytest.raises(CodeObjectError, match="no kernel 'nope'"):
        obj.kernel("nope")


def test_not_amdgpu() -> None:
    with pytest.raises(CodeObjectError, match="not an ELF"):
        load_code_object(b"hello")
    elf = bytearray(compile_ir(ADD_ONE))
    struct.pack_into("<H", elf, 0x12, 0x3E)  # x86-64
    with pytest.raises(CodeObjectError, match="not EM_AMDGPU"):
        load_code_object(bytes(elf))


# -- hand-made ELF files: a minimal writer for the cases LLVM's emit_object does not produce --


def _elf(elf_type: int, sections: list[tuple[str, int, int, int, bytes, int, int, int]]) -> bytes:
    """sections: (name, type, flags, addr, data, link, info, entsize); section 0 (NULL) and .shstrtab are added."""
    names = b"\0"
    entries = []
    body = bytearray(64)
    all_sections = [*sections, (".shstrtab", 3, 0, 0, b"", 0, 0, 0)]
    name_offsets = []
    for sec in all_sections:
        name_offsets.append(len(names))
        names += sec[0].encode() + b"\0"
    for (name, stype, flags, addr, data, link, info, entsize), name_off in zip(all_sections, name_offsets, strict=True):
        if name == ".shstrtab":
            data = names
        while len(body) % 8:
            body.append(0)
        entries.append((name_off, stype, flags, addr, len(body), len(data), link, info, 8, entsize))
        body += data
    while len(body) % 8:
        body.append(0)
    shoff = len(body)
    body += bytes(64)
    for entry in entries:
        body += struct.pack("<IIQQQQIIQQ", *entry)
    header = b"\x7fELF" + bytes([2, 1, 1, 64, 3]) + bytes(7)
    header += struct.pack(
        "<HHIQQQIHHHHHH", elf_type, 0xE0, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(entries) + 1, len(entries)
    )
    body[:64] = header
    return bytes(body)


def _descriptor(entry: int) -> bytes:
    kd = bytearray(64)
    struct.pack_into("<III", kd, 0, 0, 0, 8)
    struct.pack_into("<q", kd, 16, entry)
    struct.pack_into("<III", kd, 44, 0, 0x60AF0000, 0x84)
    struct.pack_into("<H", kd, 56, 0x408)  # kernarg segment pointer, wave32
    return bytes(kd)


def _symtab(symbols: list[tuple[str, int, int, int]]) -> tuple[bytes, bytes]:
    """symbols: (name, value, size, shndx) -> (.symtab, .strtab)"""
    strtab = b"\0"
    table = bytes(24)
    for name, value, size, shndx in symbols:
        table += struct.pack("<IBBHQQ", len(strtab), 0x10, 0, shndx, value, size)
        strtab += name.encode() + b"\0"
    return table, strtab


CODE = struct.pack("<II", 0xBF800000, 0xBFB00000)  # s_nop 0; s_endpgm


def test_shared_object_with_placed_sections_and_absolute_relocations() -> None:
    # .text at 0x1000, .rodata (descriptor) at 0x400, .data with a pointer to the kernel at 0x2000, resolved by an
    # R_AMDGPU_ABS64 against the kernel symbol and an R_AMDGPU_RELATIVE64 (base + addend)
    symtab, strtab = _symtab([("k", 0x1000, 8, 1), ("k.kd", 0x400, 64, 2)])
    rela = struct.pack("<QQq", 0x2000, (1 << 32) | 3, 4) + struct.pack("<QQq", 0x2008, 13, 0x1234)
    elf = _elf(
        3,
        [
            (".text", 1, 0x6, 0x1000, CODE, 0, 0, 0),
            (".rodata", 1, 0x2, 0x400, _descriptor(0x1000 - 0x400), 0, 0, 0),
            (".data", 1, 0x3, 0x2000, bytes(16), 0, 0, 0),
            (".dynsym", 11, 0x2, 0, symtab, 5, 1, 24),
            (".dynstr", 3, 0x2, 0, strtab, 0, 0, 0),
            (".rela.dyn", 4, 0x2, 0, rela, 4, 0, 24),
        ],
    )
    obj = load_code_object(elf)
    kernel = obj.kernel("k")
    assert kernel.entry_offset == 0x1000 and kernel.descriptor_offset == 0x400
    assert obj.image[0x1000:0x1008] == CODE
    assert struct.unpack_from("<QQ", obj.image, 0x2000) == (0x1004, 0x1234)
    at = obj.image_at(0x7F0000000000)
    assert struct.unpack_from("<QQ", at, 0x2000) == (0x7F0000001004, 0x7F0000001234)
    assert build_program(obj).entry_point_offset == 0x1000


def test_relocatable_abs32_lo_hi_and_rel32() -> None:
    symtab, strtab = _symtab([("k", 0, 8, 1), ("k.kd", 0, 64, 2)])
    # descriptor entry via REL64; .data gets ABS32_LO/HI of k+8 and REL32_LO/HI of k relative to the site
    rela_rodata = struct.pack("<QQq", 16, (1 << 32) | 5, 16)
    rela_data = b"".join(
        struct.pack("<QQq", off, (1 << 32) | rtype, addend)
        for off, rtype, addend in ((0, 1, 8), (4, 2, 8), (8, 10, 0), (12, 11, 0))
    )
    elf = _elf(
        1,
        [
            (".text", 1, 0x6, 0, CODE, 0, 0, 0),
            (".rodata", 1, 0x2, 0, _descriptor(0), 0, 0, 0),
            (".data", 1, 0x3, 0, bytes(16), 0, 0, 0),
            (".symtab", 2, 0, 0, symtab, 5, 1, 24),
            (".strtab", 3, 0, 0, strtab, 0, 0, 0),
            (".rela.rodata", 4, 0, 0, rela_rodata, 4, 2, 24),
            (".rela.data", 4, 0, 0, rela_data, 4, 3, 24),
        ],
    )
    obj = load_code_object(elf)
    text, rodata, data = obj.sections[".text"][0], obj.sections[".rodata"][0], obj.sections[".data"][0]
    assert (text, rodata, data) == (0, 8, 72)  # packed by alignment (8)
    assert obj.kernel().entry_offset == text
    lo, hi, rel_lo, rel_hi = struct.unpack_from("<IIii", obj.image, data)
    assert (lo, hi) == (8, 0)
    assert rel_lo == text - (data + 8) and rel_hi == -1  # a negative 64-bit displacement's high half
    at = obj.image_at(0x1_2345_6000)
    assert struct.unpack_from("<II", at, data) == (0x2345_6008, 1)


def test_unsupported_relocation_is_named() -> None:
    symtab, strtab = _symtab([("k", 0, 8, 1)])
    elf = _elf(
        1,
        [
            (".text", 1, 0x6, 0, CODE, 0, 0, 0),
            (".data", 1, 0x3, 0, bytes(8), 0, 0, 0),
            (".symtab", 2, 0, 0, symtab, 4, 1, 24),
            (".strtab", 3, 0, 0, strtab, 0, 0, 0),
            (".rela.data", 4, 0, 0, struct.pack("<QQq", 0, (1 << 32) | 7, 0), 3, 2, 24),
        ],
    )
    with pytest.raises(CodeObjectError, match="R_AMDGPU_GOTPCREL"):
        load_code_object(elf)
