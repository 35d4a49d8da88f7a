"""The tg runtime: devices, buffers, programs, hardware command queues and signals.

Importing this package opens no device, starts no thread and runs no compiler.
"""

from tg.codegen import Variable  # the IR's symbolic integer, re-exported: queue templates use it
from tg.hcq.allocator import Allocator, BufferSpec, LRUAllocator
from tg.hcq.buffer import Buffer
from tg.hcq.compiled import HCQCompiled
from tg.hcq.device import Compiled, Device, DeviceSpec, UnknownDeviceError, parse_device
from tg.hcq.memory import BumpAllocator, HCQBuffer, HostMemory
from tg.hcq.profile import ProfileRangeEvent, hcq_profile, profile_events
from tg.hcq.program import CLikeArgsState, HCQArgsState, HCQProgram
from tg.hcq.queue import HWQueue
from tg.hcq.signal import HCQSignal, SignalPool
from tg.hcq.symbolic import sint

__all__ = [
    "Allocator",
    "Buffer",
    "BufferSpec",
    "BumpAllocator",
    "CLikeArgsState",
    "Compiled",
    "Device",
    "DeviceSpec",
    "HCQArgsState",
    "HCQBuffer",
    "HCQCompiled",
    "HCQProgram",
    "HCQSignal",
    "HWQueue",
    "HostMemory",
    "LRUAllocator",
    "ProfileRangeEvent",
    "SignalPool",
    "UnknownDeviceError",
    "Variable",
    "hcq_profile",
    "parse_device",
    "profile_events",
    "sint",
]
