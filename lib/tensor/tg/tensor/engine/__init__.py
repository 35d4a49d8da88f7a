"""The Tensor's door to the engine in tg.hcq: it builds graphs, the engine realizes them.

realize(*nodes), buffer_from_bytes(data, dtype, device), buffer_over(memory), buffer_at_address(address, size,
dtype, device), read_bytes(node), GlobalCounters
"""

from tg.hcq.engine import GlobalCounters, buffer_at_address, buffer_from_bytes, buffer_over, read_bytes, realize

__all__ = ["GlobalCounters", "buffer_at_address", "buffer_from_bytes", "buffer_over", "read_bytes", "realize"]
