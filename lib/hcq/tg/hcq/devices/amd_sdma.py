"""SDMA 6.0 encoders for the AMD copy queue: pure functions returning dwords, and the ring-wrap rule.

SDMA packets go straight into the ring (no indirect buffer), and an SDMA engine cannot follow a packet across the
end of its ring: a submission that does not fit before the end is preceded by zeros up to the end (a zero dword is
a one-dword NOP) and starts again at the beginning (`ring_placement`).
"""

from __future__ import annotations

from tg.drivers.amd import packets as p
from tg.hcq.devices.amd_pm4 import U32, hi32, lo32

POLL_INTERVAL = 4
POLL_RETRY_COUNT = 0xFFF


def copy(dest: int, src: int, size: int, max_copy_size: int = p.SDMA_MAX_COPY_SIZE) -> list[int]:
    """COPY LINEAR packets moving `size` bytes from `src` to `dest`, one per chunk of at most `max_copy_size` bytes
    (0x40000000 on SDMA IP >= 5, 0x400000 before): header, count (bytes - 1), parameter 0, src lo/hi, dst lo/hi."""
    words: list[int] = []
    for offset in range(0, size, max_copy_size):
        chunk = min(max_copy_size, size - offset)
        words += [
            p.sdma_header(p.SDMA.COPY, p.SDMA_SUBOP_COPY_LINEAR),
            (chunk - 1) & p.SDMA_COPY_COUNT_MASK,
            0,
            lo32(src + offset),
            hi32(src + offset),
            lo32(dest + offset),
            hi32(dest + offset),
        ]
    return words


def poll_regmem(address: int, value: int, mask: int = U32, func: p.CompareFunction = p.CompareFunction.GE) -> list[int]:
    """Halt until `(u32 at address & mask) func value` (memory poll), re-checking every 4 clocks, 0xfff retries."""
    header = p.sdma_header(p.SDMA.POLL_REGMEM) | p.SDMA_POLL_REGMEM_MEM_POLL
    header |= (func & p.SDMA_POLL_REGMEM_FUNC_MASK) << p.SDMA_POLL_REGMEM_FUNC_SHIFT
    retry = (POLL_RETRY_COUNT & p.SDMA_POLL_REGMEM_RETRY_COUNT_MASK) << p.SDMA_POLL_REGMEM_RETRY_COUNT_SHIFT
    return [header, lo32(address), hi32(address), value & U32, mask & U32, POLL_INTERVAL | retry]


def wait(address: int, value: int) -> list[int]:
    """Halt until the u32 signal value at `address` is >= value."""
    return poll_regmem(address, value)


def fence(address: int, value: int) -> list[int]:
    """Write the u32 `value` at `address` once the packets before it completed (uncached memory type, gfx10+)."""
    header = p.sdma_header(p.SDMA.FENCE) | (p.SDMA_FENCE_MTYPE_UC << p.SDMA_FENCE_MTYPE_SHIFT)
    return [header, lo32(address), hi32(address), value & U32]


def trap(context: int = 0) -> list[int]:
    """Raise an interrupt (wakes a host waiting in the driver)."""
    return [p.sdma_header(p.SDMA.TRAP), context & p.SDMA_TRAP_INT_CONTEXT_MASK]


def signal(address: int, value: int) -> list[int]:
    """Set a signal: FENCE with the value, then TRAP so a sleeping host wakes."""
    return fence(address, value) + trap()


def timestamp(address: int) -> list[int]:
    """The 64-bit global GPU clock (100 ticks/us) at `address`."""
    return [p.sdma_header(p.SDMA.TIMESTAMP, p.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL), lo32(address), hi32(address)]


def write(address: int, *words: int) -> list[int]:
    """WRITE LINEAR: store `words` (u32 each) at `address`."""
    if not words:
        raise ValueError("an SDMA write needs at least one dword")
    header = p.sdma_header(p.SDMA.WRITE, p.SDMA_SUBOP_WRITE_LINEAR)
    return [header, lo32(address), hi32(address), (len(words) - 1) & p.SDMA_WRITE_COUNT_MASK, *(w & U32 for w in words)]


def nop() -> list[int]:
    """What a memory barrier is on the copy queue: SDMA reads memory directly, there is no cache to invalidate."""
    return [p.sdma_header(p.SDMA.NOP)]


def ring_placement(put: int, size: int, ring_size: int) -> tuple[int, int]:
    """Where a submission of `size` bytes goes in a ring of `ring_size` bytes whose write pointer is `put` (bytes,
    ever increasing): (bytes of zeros to write at the ring's tail first, the write pointer the packets start at).
    Packets must be contiguous, so one that would cross the end of the ring starts again at its beginning."""
    if size > ring_size:
        raise ValueError(f"an SDMA submission of {size} bytes does not fit in a ring of {ring_size} bytes")
    tail = ring_size - put % ring_size
    if size <= tail:
        return 0, put
    return tail, put + tail
