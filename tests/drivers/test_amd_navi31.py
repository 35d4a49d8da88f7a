"""The simulated Navi31 executing hand-built PM4 and SDMA packet streams through the KFD-style interface."""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Iterator

import pytest

from tg.drivers.amd.iface import GPUAllocation, GPUFault, QueueKind, WaveLaunch
from tg.drivers.amd.kfd import SimKFDInterface
from tg.drivers.amd.navi31_engine import compare

from .amd_sim_helpers import (
    DriverQueue,
    RecordingEngines,
    acquire_mem,
    dispatch_direct,
    event_write_cs_partial_flush,
    indirect_buffer,
    pm4,
    release_mem,
    sdma_copy,
    sdma_fence,
    sdma_poll,
    sdma_timestamp,
    sdma_trap,
    sdma_write,
    set_sh_reg,
    set_u32,
    u32,
    u64,
    wait_for,
    wait_reg_mem,
    write_data,
)

VRAM = 1 << 28


@pytest.fixture
def engines() -> RecordingEngines:
    return RecordingEngines()


@pytest.fixture
def sim(engines: RecordingEngines) -> Iterator[SimKFDInterface]:
    iface = SimKFDInterface(shader_engines=engines, vram_size=VRAM)
    yield iface
    iface.close()


def program_registers(address: int) -> tuple[int, int]:
    """COMPUTE_PGM_LO/HI: the code address in 256-byte units, split in two dwords."""
    return (address >> 8) & 0xFFFFFFFF, address >> 40


def fault_text(sim: SimKFDInterface) -> str:
    """The RuntimeError text sleep() raises once the device has latched a fault."""
    wait_for(lambda: sim.device.fault is not None, "the fault to be latched")
    with pytest.raises(RuntimeError) as raised:
        sim.sleep(10)
    return str(raised.value)


# -- memory ------------------------------------------------------------------------------------------------------
def test_cpu_and_gpu_see_the_same_bytes_at_the_same_address(sim: SimKFDInterface) -> None:
    for mem in (sim.alloc(0x3000, host=True), sim.alloc(0x2000, cpu_access=True)):
        assert mem.cpu_address == mem.va_addr
        set_u32(mem, 0x12345678, 0x1004)
        assert sim.device.memory.read(mem.va_addr + 0x1004, 4) == struct.pack("<I", 0x12345678)
        sim.device.memory.write(mem.va_addr + 8, b"\xaa\xbb")
        assert ctypes.string_at(mem.cpu_address + 8, 2) == b"\xaa\xbb"


def test_unmapped_and_freed_addresses_fault(sim: SimKFDInterface) -> None:
    memory = sim.device.memory
    with pytest.raises(GPUFault) as raised:
        memory.read(0xDEAD00000000, 4)
    assert raised.value.address == 0xDEAD00000000
    with pytest.raises(GPUFault):
        memory.write(0, b"\0")
    mem = sim.alloc(0x1000)
    assert mem.cpu_address == 0  # VRAM without cpu_access is not CPU-visible
    memory.write(mem.va_addr, b"x" * 0x1000)
    with pytest.raises(GPUFault) as raised:  # one byte past the allocation
        memory.read(mem.va_addr + 0xFFF, 2)
    assert raised.value.address == mem.va_addr + 0x1000
    sim.free(mem)
    with pytest.raises(GPUFault):
        memory.read(mem.va_addr, 4)


def test_vram_is_reused_after_free(sim: SimKFDInterface) -> None:
    first = sim.alloc(VRAM // 2)
    sim.free(first)
    again = sim.alloc(VRAM // 2)
    assert again.va_addr == first.va_addr
    with pytest.raises(MemoryError):
        sim.alloc(VRAM)


# -- PM4 ---------------------------------------------------------------------------------------------------------
def test_release_mem_writes_the_signal_and_interrupts(sim: SimKFDInterface) -> None:
    queue = DriverQueue(sim, QueueKind.COMPUTE)
    signal = sim.alloc(0x1000, cpu_access=True)
    queue.submit(
        write_data(signal.va_addr + 16, 7, 8, 9)
        + release_mem(signal.va_addr, 0xCAFEF00D, data_sel=1, int_sel=2, ctxid=5)
        + release_mem(signal.va_addr + 8, 0x1_2345_6789, data_sel=2, int_sel=0)
    )
    queue.drain()
    assert [u32(signal, 16), u32(signal, 20), u32(signal, 24)] == [7, 8, 9]
    assert u32(signal) == 0xCAFEF00D
    assert u64(signal, 8) == 0x1_2345_6789
    assert list(sim.device.interrupts.context_ids) == [5]  # only the packet with int_sel 2 interrupted
    sim.sleep(0)  # the pending interrupt is consumed without an error


def test_sleep_waits_for_an_interrupt_posted_later(sim: SimKFDInterface) -> None:
    queue = DriverQueue(sim, QueueKind.COMPUTE)
    flag = sim.alloc(0x1000, host=True)
    signal = sim.alloc(0x1000, host=True)
    queue.submit(wait_reg_mem(flag.va_addr, 1, function=3) + release_mem(signal.va_addr, 1, int_sel=2))
    woke = threading.Event()

    def sleeper() -> None:
        sim.sleep(60_000)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    set_u32(flag, 1)  # a CPU write: the CP finds it by polling
    assert woke.wait(60)
    thread.join()
    assert u32(signal) == 1


def test_doorbell_only_wakes_the_engine_thread(sim: SimKFDInterface, engines: RecordingEngines) -> None:
    release = threading.Event()
    engines.action = lambda memory, launch: release.wait(60)
    queue = DriverQueue(sim, QueueKind.COMPUTE)
    code = sim.alloc(0x1000, host=True)
    queue.submit(
        set_sh_reg(0x2E0C, *program_registers(code.va_addr)) + set_sh_reg(0x2E07, 1, 1, 1) + dispatch_direct(1, 1, 1)
    )
    # The doorbell write has returned while the dispatch is still blocked: it ran elsewhere.
    wait_for(lambda: len(engines.launches) == 1, "the dispatch to start")
    assert queue.executed < queue.put
    assert engines.threads[0] is not threading.current_thread()
    release.set()
    queue.drain()


def test_dispatch_direct_hands_the_compute_registers_to_the_shader_engines(
    sim: SimKFDInterface, engines: RecordingEngines
) -> None:
    queue = DriverQueue(sim, QueueKind.COMPUTE)
    code = sim.alloc(0x2000, host=True)
    program = code.va_addr + 0x100
    rsrc2 = 3 << 1 | 1 << 7  # USER_SGPR = 3, TGID_X_EN
    queue.submit(
        acquire_mem()
        + set_sh_reg(0x2E0C, *program_registers(program))  # COMPUTE_PGM_LO/HI
        + set_sh_reg(0x2E12, 0x00AF0041, rsrc2)  # COMPUTE_PGM_RSRC1/2
        + set_sh_reg(0x2E28, 0x7)  # COMPUTE_PGM_RSRC3
        + set_sh_reg(0x2E18, 4 << 12 | 32)  # COMPUTE_TMPRING_SIZE: WAVESIZE 4 x 256 bytes
        + set_sh_reg(0x2E10, 0x123456, 0)  # COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI
        + set_sh_reg(0x2E1B, 0, 0, 0)  # COMPUTE_RESTART_X/Y/Z
        + set_sh_reg(0x2E40, 0x11, 0x22, 0x33, 0x44)  # COMPUTE_USER_DATA_0..3
        + set_sh_reg(0x2E15, 0)  # COMPUTE_RESOURCE_LIMITS
        + set_sh_reg(0x2E04, 0, 0, 0, 64, 2, 1, 0, 0)  # COMPUTE_START_X.., NUM_THREAD_X/Y/Z
        + dispatch_direct(5, 3, 2)
        + event_write_cs_partial_flush()
    )
    queue.drain()
    assert engines.launches == [
        WaveLaunch(
            program_address=program,
            rsrc1=0x00AF0041,
            rsrc2=rsrc2,
            rsrc3=0x7,
            user_data=(0x11, 0x22, 0x33),  # as many as RSRC2.USER_SGPR says
            grid=(5, 3, 2),
            workgroup=(64, 2, 1),
            wave32=True,
            scratch_address=0x123456 << 8,
            scratch_bytes_per_lane=4 * 256 // 64,
        )
    ]


def test_indirect_buffer_runs_its_packets(sim: SimKFDInterface) -> None:
    queue = DriverQueue(sim, QueueKind.COMPUTE)
    target = sim.alloc(0x1000, host=True)
    ib = sim.alloc(0x1000, host=True)
    packets = write_data(target.va_addr, 1, 2) + release_mem(target.va_addr + 8, 3, int_sel=0)
    ctypes.memmove(ib.cpu_address, (ctypes.c_uint32 * len(packets))(*packets), 4 * len(packets))
    queue.submit(indirect_buffer(ib.va_addr, len(packets)) + write_data(target.va_addr + 12, 4))
    queue.drain()
    assert [u32(target, 4 * i) for i in range(4)] == [1, 2, 3, 4]


def test_pm4_ring_wraps_mid_packet(sim: SimKFDInterface) -> None:
    queue = DriverQueue(sim, QueueKind.COMPUTE, ring_size=64 * 4)
    target = sim.alloc(0x1000, host=True)
    # (Also the regression test for the sim reporting a ring's size rounded up to a page: it wrapped at 1024 dwords.)
    for round_ in range(10):  # 10 x 14 dwords through a 64-dword ring: packets straddle the end
        queue.submit(write_data(target.va_addr, round_, round_ + 1) + release_mem(target.va_addr + 8, round_ * 3))
        queue.drain()
        assert (u32(target), u32(target, 4), u32(target, 8)) == (round_, round_ + 1, round_ * 3)
    assert queue.put == 140 and queue.executed == 140  # read pointers count on; the ring index wraps


def test_wait_reg_mem_blocks_until_another_queue_writes(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    sdma = DriverQueue(sim, QueueKind.SDMA)
    signal = sim.alloc(0x1000, host=True)
    marker = sim.alloc(0x1000, host=True)
    wait = wait_reg_mem(signal.va_addr, 10, function=5)  # GE 10
    compute.submit(wait + write_data(marker.va_addr, 1))
    sdma.submit(sdma_fence(signal.va_addr, 9))  # not enough
    sdma.drain()
    wait_for(lambda: compute.engine.waiting, "the CP to block in the WAIT_REG_MEM")
    assert compute.executed == 0 and u32(marker) == 0
    sdma.submit(sdma_fence(signal.va_addr, 10))
    compute.drain()
    assert u32(marker) == 1


@pytest.mark.parametrize(
    ("function", "mask", "reference", "written", "passes"),
    [
        (3, 0xFFFFFFFF, 5, 5, True),  # EQ
        (3, 0x0000FFFF, 5, 0xABCD0005, True),  # EQ under the mask
        (4, 0xFFFFFFFF, 0, 7, True),  # NE
        (5, 0xFFFFFFFF, 8, 7, False),  # GE: 7 is not >= 8
        (1, 0xFFFFFFFF, 8, 7, True),  # LT
    ],
)
def test_wait_reg_mem_functions_and_mask(
    sim: SimKFDInterface, function: int, mask: int, reference: int, written: int, passes: bool
) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    flag = sim.alloc(0x1000, host=True)
    set_u32(flag, written)
    compute.submit(wait_reg_mem(flag.va_addr, reference, mask, function) + write_data(flag.va_addr + 4, 1))
    if passes:
        compute.drain()
        assert u32(flag, 4) == 1
    else:
        wait_for(lambda: compute.engine.waiting, "the CP to block")
        assert compute.executed == 0 and u32(flag, 4) == 0 and sim.device.fault is None
        sim.recover()


def test_compare_functions() -> None:
    assert [compare(f, 3, 4) for f in range(7)] == [True, True, True, False, True, False, False]
    with pytest.raises(Exception, match="reserved"):
        compare(7, 0, 0)


def test_wait_reg_mem_register_write_wait_is_the_hdp_flush(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    marker = sim.alloc(0x1000, host=True)
    # register space, operation 1 (write then wait), EQ: write REQ (0x106), poll DONE (0x107)
    hdp_flush = pm4(0x3C, 1 << 6 | 3, 0x106, 0x107, 1 << 2, 1 << 2, 0x20)
    compute.submit(hdp_flush + write_data(marker.va_addr, 1))
    compute.drain()
    assert u32(marker) == 1


def test_gpu_clock_timestamps_are_ordered_across_engines(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    sdma = DriverQueue(sim, QueueKind.SDMA)
    stamps = sim.alloc(0x1000, host=True)
    compute.submit(release_mem(stamps.va_addr, 0, data_sel=3, int_sel=0))
    compute.drain()
    sdma.submit(sdma_timestamp(stamps.va_addr + 8) + sdma_timestamp(stamps.va_addr + 16))
    sdma.drain()
    compute.submit(release_mem(stamps.va_addr + 24, 0, data_sel=3, int_sel=0))
    compute.drain()
    values = [u64(stamps, 8 * i) for i in range(4)]
    assert 0 < values[0] < values[1] < values[2] < values[3]


# -- SDMA --------------------------------------------------------------------------------------------------------
def test_sdma_copy_fence_write_and_trap(sim: SimKFDInterface) -> None:
    sdma = DriverQueue(sim, QueueKind.SDMA)
    host = sim.alloc(0x3000, host=True)
    vram = sim.alloc(0x3000)
    back = sim.alloc(0x3000, host=True)
    payload = bytes(range(256)) * 40 + b"tail"
    ctypes.memmove(host.cpu_address, payload, len(payload))
    sdma.submit(
        sdma_copy(vram.va_addr, host.va_addr, len(payload))
        + [0]  # a NOP
        + sdma_copy(back.va_addr, vram.va_addr, len(payload))
        + sdma_write(back.va_addr + 0x2900, 0xA, 0xB)
        + sdma_fence(back.va_addr + 0x2FF0, 77)
        + sdma_trap(9)
    )
    sdma.drain()
    assert ctypes.string_at(back.cpu_address, len(payload)) == payload
    assert (u32(back, 0x2900), u32(back, 0x2904), u32(back, 0x2FF0)) == (0xA, 0xB, 77)
    assert list(sim.device.interrupts.context_ids) == [9]


def test_sdma_poll_regmem_blocks_until_the_cp_writes(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    sdma = DriverQueue(sim, QueueKind.SDMA)
    signal = sim.alloc(0x1000, host=True)
    sdma.submit(sdma_poll(signal.va_addr, 3) + sdma_fence(signal.va_addr + 4, 1))
    wait_for(lambda: sdma.engine.waiting, "the SDMA engine to block in POLL_REGMEM")
    assert sdma.executed == 0
    assert u32(signal, 4) == 0
    compute.submit(release_mem(signal.va_addr, 3, int_sel=0))
    sdma.drain()
    assert u32(signal, 4) == 1


def test_sdma_tail_rule(sim: SimKFDInterface) -> None:
    sdma = DriverQueue(sim, QueueKind.SDMA, ring_size=256)
    target = sim.alloc(0x1000, host=True)
    # Contiguous packets: the driver zero-fills the tail (zero dwords are NOPs) and restarts at 0.
    for round_ in range(12):
        sdma.submit(sdma_fence(target.va_addr, round_) + sdma_write(target.va_addr + 4, round_, 2 * round_))
        sdma.drain()
        assert (u32(target), u32(target, 4), u32(target, 8)) == (round_, round_, 2 * round_)
    # A packet that straddles the end is rejected.
    sdma.write([0] * ((256 - sdma.put % 256) // 4 - 2))  # leave two dwords before the end
    sdma.submit(sdma_fence(target.va_addr, 99), contiguous=False)
    text = fault_text(sim)
    assert "straddles the ring end" in text and "sdma" in text and "FENCE" in text
    assert u32(target) != 99
    sim.recover()
    sdma.reset_after_recover()
    sdma.submit(sdma_fence(target.va_addr, 100))
    sdma.drain()
    assert u32(target) == 100


# -- faults and recovery -----------------------------------------------------------------------------------------
def recovered(sim: SimKFDInterface, *queues: DriverQueue) -> None:
    """Recover, then prove every queue executes again."""
    sim.recover()
    sim.sleep(0)  # no fault left
    check = sim.alloc(0x1000, host=True)
    for index, queue in enumerate(queues):
        queue.reset_after_recover()
        if queue.kind == QueueKind.COMPUTE:
            queue.submit(write_data(check.va_addr + 4 * index, 0x600D))
        else:
            queue.submit(sdma_fence(check.va_addr + 4 * index, 0x600D))
        queue.drain()
        assert u32(check, 4 * index) == 0x600D


def test_unknown_pm4_opcode_faults_and_recovers(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    marker = sim.alloc(0x1000, host=True)
    compute.submit(pm4(0x7F, 0) + write_data(marker.va_addr, 1))  # 0x7F: not a packet the MEC knows
    text = fault_text(sim)
    assert text.startswith("HW fault") and "compute" in text and "opcode 0x7F" in text and "0xC0007F00" in text
    assert u32(marker) == 0  # the queue stopped at the bad packet
    recovered(sim, compute)


def test_page_fault_reports_the_address(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    sdma = DriverQueue(sim, QueueKind.SDMA)
    compute.submit(write_data(0xDEAD0000, 1))
    text = fault_text(sim)
    assert text.startswith("MMU fault: 0xDEAD0000") and "WRITE_DATA" in text and "compute" in text
    recovered(sim, compute, sdma)
    sdma.submit(sdma_copy(0xBAD000, 0xBAD000, 16))
    text = fault_text(sim)
    assert text.startswith("MMU fault: 0xBAD000") and "COPY" in text and "sdma" in text
    recovered(sim, compute, sdma)


def test_dispatch_with_a_bad_code_address_faults(sim: SimKFDInterface, engines: RecordingEngines) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    bad = 0x7F0000000000
    compute.submit(set_sh_reg(0x2E0C, *program_registers(bad)) + set_sh_reg(0x2E07, 1, 1, 1) + dispatch_direct(1, 1, 1))
    text = fault_text(sim)
    assert text.startswith(f"MMU fault: 0x{bad:X}") and "DISPATCH_DIRECT" in text
    assert engines.launches == []  # never reached the shader engines
    recovered(sim, compute)


def test_malformed_packets_fault(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    cases = [
        (pm4(0x49, 0x14 | 5 << 8, 1 << 29, 0, 0), "RELEASE_MEM"),  # 4 body dwords instead of 7
        (pm4(0x76, 0x500, 1), "outside"),  # SET_SH_REG past the SH range
        (indirect_buffer(0x1000, 4, valid=False), "VALID"),
        (set_sh_reg(0x2E07, 0, 1, 1) + dispatch_direct(1, 1, 1), "NUM_THREAD"),  # empty workgroup
        ([0x00001234], "type-0"),
    ]
    for packets, expected in cases:
        compute.submit(packets)
        text = fault_text(sim)
        assert text.startswith("HW fault") and expected in text
        recovered(sim, compute)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (GPUFault(0xDEADBEE1, "read"), "MMU fault: 0xDEADBEE1"),
        (RuntimeError("unknown rdna3 format word=0x7e01fe00"), "unknown rdna3 format word=0x7e01fe00"),
    ],
)
def test_shader_engine_errors_become_device_faults(
    sim: SimKFDInterface, engines: RecordingEngines, error: Exception, expected: str
) -> None:
    def fail(memory: object, launch: WaveLaunch) -> None:
        raise error

    engines.action = fail
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    code = sim.alloc(0x1000, host=True)
    compute.submit(
        set_sh_reg(0x2E0C, *program_registers(code.va_addr)) + set_sh_reg(0x2E07, 1, 1, 1) + dispatch_direct(1, 1, 1)
    )
    text = fault_text(sim)
    assert expected in text and "DISPATCH_DIRECT" in text
    with pytest.raises(RuntimeError):  # the fault stays latched until recovery
        sim.sleep(0)
    engines.action = None
    recovered(sim, compute)


def test_hung_wait_is_left_to_the_driver_and_recovery_abandons_it(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    sdma = DriverQueue(sim, QueueKind.SDMA)
    never = sim.alloc(0x1000, host=True)
    compute.submit(wait_reg_mem(never.va_addr, 1, function=3))
    sdma.submit(sdma_poll(never.va_addr, 1, function=3))
    wait_for(lambda: all(queue.waiting for queue in sim.device.queues), "both engines to block")
    sim.sleep(20)  # the sim reports nothing: a hang is the driver's timeout
    assert sim.device.fault is None and compute.executed == 0 and sdma.executed == 0
    recovered(sim, compute, sdma)
    set_u32(never, 1)  # the old waits are gone: nothing replays them
    assert compute.executed == 1 * len(write_data(0, 0x600D))


def test_create_queue_rejects_unmapped_pointers(sim: SimKFDInterface) -> None:
    ring = sim.alloc(0x1000, host=True)
    pointer = sim.alloc(8, host=True)
    bogus = type(pointer)(0xDEAD000, 8)
    with pytest.raises(ValueError, match="not mapped"):
        sim.create_queue(QueueKind.COMPUTE, ring, bogus, pointer)


def test_injected_fault_address_is_reported_while_set(sim: SimKFDInterface, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCKGPU_EMU_FAULTADDR", "0xDEADBEE1")
    with pytest.raises(RuntimeError, match="MMU fault: 0xDEADBEE1"):
        sim.sleep(0)
    monkeypatch.delenv("MOCKGPU_EMU_FAULTADDR")
    recovered(sim, DriverQueue(sim, QueueKind.COMPUTE))


def test_device_clock_runs_at_100_ticks_per_microsecond(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.drivers.amd import navi31_engine

    now = [5_000_000]
    monkeypatch.setattr(navi31_engine.time, "perf_counter_ns", lambda: now[0])
    clock = navi31_engine.DeviceClock()
    now[0] += 2_000  # 2 µs
    assert clock.ticks() == 200
    assert clock.ticks() == 201  # the host clock did not move: still strictly increasing
    now[0] += 1_000_000  # 1 ms
    assert clock.ticks() == 100_200


def test_chaos_mode_shuffles_timing_but_not_results(engines: RecordingEngines) -> None:
    sim = SimKFDInterface(shader_engines=engines, vram_size=VRAM, chaos_seed=7)
    try:
        compute, sdma = DriverQueue(sim, QueueKind.COMPUTE), DriverQueue(sim, QueueKind.SDMA)
        assert all(queue.chaos is not None for queue in sim.device.queues)
        signal, marker = sim.alloc(0x1000, host=True), sim.alloc(0x1000, host=True)
        for round_ in range(1, 21):  # the CP waits for each SDMA fence, then copies it on
            compute.submit(wait_reg_mem(signal.va_addr, round_, function=3) + write_data(marker.va_addr, round_))
            sdma.submit(sdma_fence(signal.va_addr, round_))
            compute.drain()
            assert u32(marker) == round_
    finally:
        sim.close()


def test_default_vram_is_a_navi31s_24_gib_even_on_a_smaller_machine(engines: RecordingEngines) -> None:
    # Regression: without MAP_NORESERVE the kernel refused an arena larger than RAM (Python 3.11 lacks the name).
    sim = SimKFDInterface(shader_engines=engines)
    try:
        assert sim.device.memory.vram.size == 24 << 30
        far = sim.alloc(20 << 30)  # only the pages touched are ever backed
        sim.device.memory.write(far.va_addr + (20 << 30) - 4, b"\1\2\3\4")
        assert sim.device.memory.read(far.va_addr + (20 << 30) - 4, 4) == b"\1\2\3\4"
    finally:
        sim.close()


def test_sdma_poll_regmem_register_hdp_flush(sim: SimKFDInterface) -> None:
    sdma = DriverQueue(sim, QueueKind.SDMA)
    marker = sim.alloc(0x1000, host=True)
    # POLL_REGMEM in register space with HDP_FLUSH (bit 26), EQ: write REQ (byte address 0x106 << 2), poll DONE
    hdp_flush = [8 | 1 << 26 | 3 << 28, 0x107 << 2, 0x106 << 2, 1 << 28, 1 << 28, 10 | 0xFFF << 16]
    sdma.submit(hdp_flush + sdma_fence(marker.va_addr, 1))
    sdma.drain()
    assert u32(marker) == 1


def test_a_fault_inside_an_indirect_buffer_names_it(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    ib = sim.alloc(0x1000, host=True)
    packets = write_data(0xBADBAD000, 1)
    ctypes.memmove(ib.cpu_address, (ctypes.c_uint32 * len(packets))(*packets), 4 * len(packets))
    compute.submit(indirect_buffer(ib.va_addr, len(packets)))
    text = fault_text(sim)
    assert text.startswith("MMU fault: 0xBADBAD000") and f"IB 0x{ib.va_addr:X} dword 0" in text
    recovered(sim, compute)


def test_indirect_buffers_nest_one_level_only(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    target = sim.alloc(0x1000, host=True)
    inner, middle, outer = (sim.alloc(0x1000, host=True) for _ in range(3))

    def fill(mem: GPUAllocation, packets: list[int]) -> int:
        ctypes.memmove(mem.cpu_address, (ctypes.c_uint32 * len(packets))(*packets), 4 * len(packets))
        return len(packets)

    inner_size = fill(inner, write_data(target.va_addr, 5))
    middle_size = fill(middle, indirect_buffer(inner.va_addr, inner_size))
    compute.submit(indirect_buffer(middle.va_addr, middle_size))  # ring -> IB -> IB: allowed
    compute.drain()
    assert u32(target) == 5
    outer_size = fill(outer, indirect_buffer(middle.va_addr, middle_size))
    compute.submit(indirect_buffer(outer.va_addr, outer_size))  # ring -> IB -> IB -> IB: too deep
    assert "nested deeper" in fault_text(sim)
    recovered(sim, compute)


def test_freeing_a_live_queues_read_pointer_is_a_fault_not_a_crash(sim: SimKFDInterface) -> None:
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    target = sim.alloc(0x1000, host=True)
    sim.free(compute.read_ptr)
    compute.submit(write_data(target.va_addr, 1))
    text = fault_text(sim)
    assert text.startswith(f"MMU fault: 0x{compute.read_ptr.va_addr:X}") and "read pointer" in text
    assert u32(target) == 1  # the packet itself ran
    sim.recover()  # does not trip over the missing pointer


def test_recovery_abandons_the_rest_of_a_long_indirect_buffer(sim: SimKFDInterface, engines: RecordingEngines) -> None:
    release = threading.Event()
    engines.action = lambda memory, launch: release.wait(60)
    compute = DriverQueue(sim, QueueKind.COMPUTE)
    code, target, ib = (sim.alloc(0x1000, host=True) for _ in range(3))
    dispatch = set_sh_reg(0x2E0C, *program_registers(code.va_addr)) + set_sh_reg(0x2E07, 1, 1, 1)
    packets = dispatch + dispatch_direct(1, 1, 1) + write_data(target.va_addr, 1)
    ctypes.memmove(ib.cpu_address, (ctypes.c_uint32 * len(packets))(*packets), 4 * len(packets))
    compute.submit(indirect_buffer(ib.va_addr, len(packets)))
    wait_for(lambda: len(engines.launches) == 1, "the dispatch to start")
    sim.recover()  # while the dispatch inside the IB runs
    release.set()
    engines.action = None
    recovered(sim, compute)
    assert u32(target) == 0  # the packet after the dispatch never ran


def test_a_peer_gpus_memory_is_reachable_once_mapped(sim: SimKFDInterface, engines: RecordingEngines) -> None:
    other = SimKFDInterface(shader_engines=engines, vram_size=VRAM)
    try:
        signal = sim.alloc(0x1000)  # VRAM of the first GPU, not CPU-visible
        waiter = DriverQueue(other, QueueKind.SDMA)
        marker = other.alloc(0x1000, host=True)
        waiter.submit(sdma_poll(signal.va_addr, 5) + sdma_fence(marker.va_addr, 1))
        assert "MMU fault" in fault_text(other)  # not mapped to the second GPU yet
        other.recover()
        waiter.reset_after_recover()
        other.map(signal)
        waiter.submit(sdma_poll(signal.va_addr, 5) + sdma_fence(marker.va_addr, 1))
        wait_for(lambda: waiter.engine.waiting, "the second GPU to wait on the first one's memory")
        DriverQueue(sim, QueueKind.SDMA).submit(sdma_fence(signal.va_addr, 5))  # the first GPU signals
        waiter.drain()
        assert u32(marker) == 1
        other.free(signal)  # drops the mapping only
        sim.device.memory.write_u32(signal.va_addr, 6)
        assert sim.device.memory.read_u32(signal.va_addr) == 6
    finally:
        other.close()


def test_cpu_memory_is_reachable_once_mapped(sim: SimKFDInterface) -> None:
    source = (ctypes.c_uint32 * 1024)(*range(1024))  # memory the process owns, not any GPU
    address = ctypes.addressof(source)
    cpu = GPUAllocation(address, ctypes.sizeof(source), address, host=True)
    sim.map(cpu)
    sdma = DriverQueue(sim, QueueKind.SDMA)
    destination = sim.alloc(0x1000, host=True)
    sdma.submit(sdma_copy(destination.va_addr, address, 4096) + sdma_fence(address + 8, 99))
    sdma.drain()
    assert [u32(destination, 4 * i) for i in (0, 1, 1023)] == [0, 1, 1023]
    assert source[2] == 99  # the GPU wrote the CPU's memory
    sim.free(cpu)
    with pytest.raises(GPUFault):
        sim.device.memory.read(address, 4)
