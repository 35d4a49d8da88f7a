"""The Tensor's door to the engine in tg.hcq: it builds graphs, the engine realizes them.

realize(*nodes), buffer_from_bytes(data, dtype, device), buffer_over(memory), buffer_at_address(address, size,
dtype, device), read_bytes(node), GlobalCounters

A graph over sharded tensors (MULTI nodes, tg.tensor.multi) is lowered to graphs per device here, so the engine
only ever sees single-device graphs; a sharded result comes back as a MULTI over the realized shards.
"""

from tg.codegen import Ops, UOp
from tg.hcq.engine import GlobalCounters, buffer_at_address, buffer_from_bytes, buffer_over, read_bytes
from tg.hcq.engine import realize as realize_on_devices
from tg.tensor.multi import lower, multi_node, needs_lowering


def realize(*nodes: UOp) -> tuple[UOp, ...]:
    """Schedule and run everything `nodes` need; for each node, an equivalent node over realized memory."""
    if not needs_lowering(nodes):
        return realize_on_devices(*nodes)
    lowered = lower(nodes)
    flat = [shard for node in lowered for shard in (node.src if node.op is Ops.MULTI else (node,))]
    realized = iter(realize_on_devices(*flat))
    results = []
    for node in lowered:
        if node.op is Ops.MULTI:
            results.append(multi_node([next(realized) for _ in node.src], node.arg))
        else:
            results.append(next(realized))
    return tuple(results)


__all__ = ["GlobalCounters", "buffer_at_address", "buffer_from_bytes", "buffer_over", "read_bytes", "realize"]
