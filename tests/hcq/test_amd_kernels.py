"""Kernels on DEV=MOCKKFD+AMD: tensor programs rendered by the AMD renderer, queued as PM4 by the AMD device, run by
the RDNA3 emulator inside the simulated Navi31. Results equal numpy; a TinyJit replay equals eager and is one submit;
CPU<->AMD copies; an out-of-bounds kernel and an illegal instruction are reported (with the address / encoding) and
the device works afterwards (spec hcq §1.21)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.hcq import Device
from tg.hcq.devices.amd_memory import AMDDeviceError

MOCK = "MOCKKFD+AMD"
UNMAPPED = 0xDEAD_0000_0000

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def dev():
    device = Device[MOCK]
    device.synchronize()
    return device


def tensor(values: np.ndarray):
    from tg.tensor import Tensor

    return Tensor(values, device=MOCK)


def rng_floats(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)


def add_one_works(dev, kit) -> bool:
    """The conformance fixture kernel still computes [1, 2] + 1 == [2, 3] (what the crash tests check before each)."""
    prg = kit.load_program(dev, "add_one", kit.ADD_ONE)
    a, b = dev.allocator.alloc(8), dev.allocator.alloc(8)
    kit.write_floats(a, [1.0, 2.0])
    prg(b, a, global_size=(2, 1, 1), wait=True)
    return kit.read_floats(b, 2) == [2.0, 3.0]


# --- tensor programs ---


def test_elementwise_float_and_int_programs_equal_numpy(dev) -> None:
    a, b = rng_floats(37, seed=1), rng_floats(37, seed=2)
    out = (tensor(a) * tensor(b) - tensor(a) / 4 + 1).numpy()
    np.testing.assert_array_equal(out, a * b - a / np.float32(4) + np.float32(1))
    i, j = np.arange(-20, 20, dtype=np.int32), np.arange(40, dtype=np.int32) % 7 + 1
    np.testing.assert_array_equal((tensor(i) * 3 + tensor(j)).numpy(), i * 3 + j)
    np.testing.assert_array_equal(tensor(a).maximum(tensor(b)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(tensor(a).cast(dtypes.int32).numpy(), a.astype(np.int32))


def test_reductions_equal_numpy(dev) -> None:
    x = rng_floats(8, 33, seed=3)
    np.testing.assert_allclose(tensor(x).sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(tensor(x).max(axis=0).numpy(), x.max(axis=0))
    np.testing.assert_allclose(tensor(x).sum().numpy(), x.sum(), rtol=1e-5)


@pytest.mark.slow
def test_matmul_equals_numpy(dev) -> None:
    a, b = rng_floats(16, 24, seed=4), rng_floats(24, 8, seed=5)
    np.testing.assert_allclose((tensor(a) @ tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_copies_between_cpu_and_amd(dev) -> None:
    from tg.tensor import Tensor

    data = rng_floats(100, seed=6)
    on_cpu = Tensor(data, device="CPU")
    on_amd = (on_cpu.to(MOCK) + 1).realize()
    assert on_amd.device == MOCK
    back = on_amd.to("CPU")
    np.testing.assert_array_equal(back.numpy(), data + np.float32(1))


def test_tinyjit_replay_equals_eager_and_is_one_submit(dev) -> None:
    from tg.tensor import TinyJit

    def step(x):
        y = (x * 2 + 1).contiguous()
        return (y * y - x).contiguous().sum(axis=0)

    jitted = TinyJit(step)
    for seed in range(2):  # the plain call, then the capture
        jitted(tensor(rng_floats(4, 16, seed=seed)))
    for seed in range(2, 5):
        data = rng_floats(4, 16, seed=seed)
        x = tensor(data).realize()
        dev.synchronize()
        submits = dev.compute_ring.sequence
        replayed = jitted(x)
        assert dev.compute_ring.sequence - submits == 1  # every kernel of the step in one indirect buffer
        eager = step(tensor(data))
        np.testing.assert_array_equal(replayed.numpy(), eager.numpy())
    assert jitted.graph is not None and jitted.graph.one_submit


# --- faults and recovery ---


OOB_STORE = f"""
define amdgpu_kernel void @oob(ptr addrspace(1) noalias %out) #0 {{
  store volatile i32 7, ptr addrspace(1) inttoptr (i64 {UNMAPPED} to ptr addrspace(1)), align 4
  ret void
}}
"""
NULL_LOAD = """
define amdgpu_kernel void @null_load(ptr addrspace(1) noalias %out) #0 {
  %v = load volatile i32, ptr addrspace(1) null, align 4
  store i32 %v, ptr addrspace(1) %out, align 4
  ret void
}
"""


ATOMIC_ADD = """
define amdgpu_kernel void @atomic_add(ptr addrspace(1) noalias %out) #0 {
  %old = atomicrmw add ptr addrspace(1) inttoptr (i64 244837814042624 to ptr addrspace(1)), i32 1 monotonic, align 4
  store i32 %old, ptr addrspace(1) %out, align 4
  ret void
}
"""  # global_atomic_add_u32 at 0xDEADBEEF0000 (spec hcq 1.21's case)
SCALAR_LOAD = """
define amdgpu_kernel void @scalar_load(ptr addrspace(1) noalias %out) #0 {
  %v = load i32, ptr addrspace(4) inttoptr (i64 244837814042624 to ptr addrspace(4)), align 4
  store i32 %v, ptr addrspace(1) %out, align 4
  ret void
}
"""  # s_load_b32 from an unmapped base, 0xDEADBEEF0000
FLAT_STORE = """
define amdgpu_kernel void @flat_store(ptr addrspace(1) noalias %out) #0 {
  store volatile i32 1, ptr null, align 4
  ret void
}
"""  # a generic (flat) address: flat_store at NULL


@pytest.mark.parametrize(
    "name, body, address",
    [
        ("oob", OOB_STORE, UNMAPPED),
        ("null_load", NULL_LOAD, 0),
        ("atomic_add", ATOMIC_ADD, 0xDEAD_BEEF_0000),
        ("scalar_load", SCALAR_LOAD, 0xDEAD_BEEF_0000),
        ("flat_store", FLAT_STORE, 0),
    ],
)
def test_an_out_of_bounds_kernel_is_reported_with_its_address_and_the_device_recovers(
    dev, kit, name: str, body: str, address: int
) -> None:
    fault = rf"MMU fault: 0x{address:X} \| queue compute\d+, packet DISPATCH_DIRECT"
    assert_reported_then_recovers(dev, kit, name, body, fault)


def assert_reported_then_recovers(dev, kit, name: str, body: str, fault: str) -> None:  # noqa: ANN001
    """A kernel that works, then `body` (which faults) raising `fault`, then the working kernel again."""
    assert add_one_works(dev, kit)
    prg = dev.runtime(name, dev.compiler.compile(kit.amd_source(body)))
    out = dev.allocator.alloc(64)
    with pytest.raises(AMDDeviceError, match=fault):
        prg(out, wait=True)
    assert add_one_works(dev, kit)


def test_an_illegal_instruction_is_reported_with_its_encoding_and_the_device_recovers(dev, kit) -> None:
    assert add_one_works(dev, kit)
    lib = dev.compiler.compile(kit.amd_source(kit.AMD_KERNELS["add_one"]))
    s_endpgm = bytes.fromhex("0000b0bf")
    assert lib.count(s_endpgm) == 1
    broken = lib.replace(s_endpgm, bytes.fromhex("00fe017e"))  # a VOP1 word with an opcode RDNA3 does not have
    prg = dev.runtime("add_one", broken)
    a, b = dev.allocator.alloc(8), dev.allocator.alloc(8)
    with pytest.raises(AMDDeviceError, match=r"(?i)HW fault: .*DISPATCH_DIRECT.*illegal instruction.*7e01fe00"):
        prg(b, a, wait=True)
    assert add_one_works(dev, kit)


def test_on_device_hang_reports_the_injected_fault_address(dev, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCKGPU_EMU_FAULTADDR", "0xDEADBEE1")
    with pytest.raises(RuntimeError, match="0xDEADBEE1"):
        dev.on_device_hang()


# A private (scratch) array indexed at run time: the kernel gets a private segment, the launch programs
# COMPUTE_TMPRING_SIZE and the scratch base, and each lane's array lives in the scratch buffer.
PRIVATE_ARRAY = """
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @private_array(ptr addrspace(1) noalias %out, i32 %shift) #2 {
entry:
  %table = alloca [32 x i32], align 4, addrspace(5)
  %lane = call i32 @llvm.amdgcn.workitem.id.x()
  br label %fill
fill:
  %i = phi i32 [ 0, %entry ], [ %next, %fill ]
  %slot = getelementptr inbounds [32 x i32], ptr addrspace(5) %table, i32 0, i32 %i
  %value = mul i32 %i, %lane
  store volatile i32 %value, ptr addrspace(5) %slot, align 4
  %next = add i32 %i, 1
  %more = icmp slt i32 %next, 32
  br i1 %more, label %fill, label %read
read:
  %index = and i32 %shift, 31
  %at = getelementptr inbounds [32 x i32], ptr addrspace(5) %table, i32 0, i32 %index
  %got = load volatile i32, ptr addrspace(5) %at, align 4
  %where = getelementptr inbounds i32, ptr addrspace(1) %out, i32 %lane
  store i32 %got, ptr addrspace(1) %where, align 4
  ret void
}
attributes #2 = { nounwind "amdgpu-flat-work-group-size"="1,32" "amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr"
  "amdgpu-no-dispatch-id" "amdgpu-no-implicitarg-ptr" "amdgpu-no-hostcall-ptr" "amdgpu-no-heap-ptr"
  "amdgpu-no-multigrid-sync-arg" "amdgpu-no-default-queue" "amdgpu-no-completion-action" "amdgpu-no-lds-kernel-id" }
"""


def test_a_kernel_with_private_memory_gets_scratch(dev) -> None:
    prg = dev.runtime("private_array", dev.compiler.compile(PRIVATE_ARRAY))
    assert prg.data.private_segment_size >= 128
    out = dev.allocator.alloc(4 * 32)
    prg(out, local_size=(32, 1, 1), vals=(5,), wait=True)
    assert list(np.frombuffer(bytes(out.cpu_view()), np.int32)) == [5 * lane for lane in range(32)]


def test_a_long_dispatch_is_not_taken_for_a_hang(dev, kit) -> None:
    """A kernel that runs ~3x longer on the emulator than the wait's timeout: the signal makes no progress meanwhile,
    but the engine is executing (not blocked in a wait), so the wait goes on (a blocked wait does time out:
    test_amd_device.py's hung-wait test)."""
    prg = kit.load_program(dev, "spin", "")
    out = dev.allocator.alloc(4)
    assert kit.settles_idle(dev)
    iterations = 10_000
    prg(out, vals=(iterations,))
    dev.synchronize(timeout=300)
    expected = np.float32(0)
    for i in range(iterations):  # the kernel's float32 sum, in its order
        expected = np.float32(expected + np.float32(np.float32(i) * np.float32(1e-9)))
    assert np.frombuffer(bytes(out.cpu_view()), np.float32)[0] == expected


# --- the same crashes through the userspace PCI driver (DEV=MOCKPCI+AMD) ---
# The driver learns of a fault from the IH ring, as on hardware: the faulting address and the queue's doorbell, no
# packet name (the KFD simulator's report has one).


@pytest.fixture
def pci_dev():
    device = Device["MOCKPCI+AMD"]
    device.synchronize()
    return device


@pytest.mark.parametrize(
    "name, body, address",
    [("oob", OOB_STORE, UNMAPPED), ("null_load", NULL_LOAD, 0), ("scalar_load", SCALAR_LOAD, 0xDEAD_BEEF_0000)],
)
def test_an_out_of_bounds_kernel_on_the_pci_driver_is_reported_and_the_device_recovers(
    pci_dev, kit, name: str, body: str, address: int
) -> None:
    assert_reported_then_recovers(pci_dev, kit, name, body, rf"MMU fault: 0x{address:X} \| queue at doorbell \d+")


def test_an_illegal_instruction_on_the_pci_driver_is_reported_and_the_device_recovers(pci_dev, kit) -> None:
    lib = pci_dev.compiler.compile(kit.amd_source(kit.AMD_KERNELS["add_one"]))
    prg = pci_dev.runtime("add_one", lib.replace(bytes.fromhex("0000b0bf"), bytes.fromhex("00fe017e")))
    a, b = pci_dev.allocator.alloc(8), pci_dev.allocator.alloc(8)
    with pytest.raises(AMDDeviceError, match=r"HW fault: illegal instruction or packet"):
        prg(b, a, wait=True)
    assert add_one_works(pci_dev, kit)


def test_a_hung_wait_on_the_pci_driver_times_out_clearly_and_the_device_recovers(pci_dev, kit) -> None:
    never = pci_dev.new_signal(value=0)
    pci_dev.hw_compute_queue_t().wait(never, 1).signal(pci_dev.timeline_signal, pci_dev.next_timeline()).submit(pci_dev)
    with pytest.raises(AMDDeviceError, match=r"hang detected \(Wait timeout: 300 ms!.*\); the queues were reset"):
        pci_dev.synchronize(timeout=300)
    assert add_one_works(pci_dev, kit)


def test_a_long_dispatch_on_the_pci_driver_is_not_taken_for_a_hang(pci_dev, kit) -> None:
    """The driver asks the chip (GRBM_STATUS.GUI_ACTIVE) whether an engine is executing rather than blocked."""
    prg = kit.load_program(pci_dev, "spin", "")
    out = pci_dev.allocator.alloc(4)
    assert kit.settles_idle(pci_dev)
    prg(out, vals=(10_000,))
    pci_dev.synchronize(timeout=10)  # far shorter than the dispatch takes on the emulator
    expected = np.float32(0)
    for i in range(10_000):  # the kernel's float32 sum, in its order
        expected = np.float32(expected + np.float32(np.float32(i) * np.float32(1e-9)))
    assert np.frombuffer(bytes(out.cpu_view()), np.float32)[0] == expected


def test_the_pci_driver_runs_kernels_on_a_board_in_another_process(monkeypatch: pytest.MonkeyPatch, kit) -> None:
    monkeypatch.setenv("MOCKGPU_PROCESS", "1")  # read when the board powers on: index 6 is a fresh one
    dev = Device["MOCKPCI+AMD:6"]
    assert type(dev.iface.pci).__name__ == "ProcessPCIDevice"
    assert add_one_works(dev, kit)


def test_on_device_hang_on_the_pci_driver_names_the_fault_address(pci_dev, kit) -> None:
    dest = pci_dev.allocator.alloc(64)
    pci_dev.hw_copy_queue_t().copy(dest.va_addr, UNMAPPED, 64).submit(pci_dev)
    report = ""
    for _ in range(500):  # until the engine's fault reaches the IH ring
        with pytest.raises(RuntimeError) as raised:
            pci_dev.on_device_hang()
        report = str(raised.value)
        if "MMU fault" in report:
            break
        time.sleep(0.01)
    assert report.startswith(f"MMU fault: 0x{UNMAPPED:X} | queue at doorbell")
    pci_dev.recover()
    assert add_one_works(pci_dev, kit)


def test_float16_round_is_half_to_even_as_numpy(dev) -> None:
    """A regression: a 16-bit comparison in the VOP3 encoding read its inline constant (0.5) as f32 bits, whose low
    half is 0, so round()'s halfway test compared with 0 and every fraction rounded away from zero."""
    values = np.array([-2.5, -1.5, -1.25, -0.5, 0.5, 0.75, 1.5, 2.5, 3.25], np.float16)
    result = tensor(values).round().numpy()
    np.testing.assert_array_equal(result, np.round(values))
    assert np.signbit(result).tolist() == np.signbit(np.round(values)).tolist()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_zero_quotient_has_the_sign_of_the_division(dev, dtype) -> None:
    """V_DIV_FIXUP gives the quotient the sign of n xor d (the ISA's pseudocode): -0 / 6 and 0 / -6 are -0 (a
    regression: the emulator kept the refined quotient's +0, so hardswish(-3) and sinh(-0) were +0)."""
    n = np.array([-0.0, 0.0, 0.0, -0.0, -3.0, 3.0], dtype)
    d = np.array([6.0, -6.0, 6.0, -6.0, 6.0, 7.0], dtype)
    result = (tensor(n) / tensor(d)).numpy()
    np.testing.assert_array_equal(result, n / d)
    assert np.signbit(result).tolist() == np.signbit(n / d).tolist()


def test_sin_of_large_arguments_is_accurate_and_keeps_the_sign_of_zero(dev) -> None:
    """A regression: the hardware's sine takes x / 2pi rounded to float32, which for |x| ~ 1e4 is off by 1e-4 of a
    turn (errors of 7e-5); the renderer reduces x by whole turns first, in two float32 parts of 2pi."""
    x = np.concatenate([np.linspace(-1e4, 1e4, 57), [0.0, -0.0, 3.0, -2.5]]).astype(np.float32)
    result = tensor(x).sin().numpy()
    np.testing.assert_allclose(result, np.sin(x.astype(np.float64)), rtol=0, atol=1e-6)
    assert np.signbit(result[57:59]).tolist() == [False, True]
