"""The Ray cluster address the tools take (--ray-address, else RAY_ADDRESS), checked before Ray is asked to join it.

`ray.init(address=...)` waits for a cluster that does not answer without end (it retries the cluster's control
store every half minute), so a mistyped address would hang tg-beam, tg-replay or tg-llm serve. A plain TCP
connection to the address tells at once. This module does not import Ray: the core stays free of it.
"""

from __future__ import annotations

import socket

PROBE_SECONDS = 5.0  # how long a cluster's control store may take to accept a connection


class ClusterUnreachable(ConnectionError):
    """The address names a host and port where nothing accepts a connection; the message is one line."""


def check_reachable(address: str | None, timeout: float = PROBE_SECONDS) -> None:
    """Raise ClusterUnreachable when `address` ("HOST:PORT", "ray://HOST:PORT" or "[IPv6]:PORT") names a port
    that does not accept a connection within `timeout` seconds. Addresses without a port ("auto", "local") and
    None (a new local cluster) are left to Ray, which answers those at once."""
    if not address:
        return
    host, separator, port = address.removeprefix("ray://").rpartition(":")
    if not separator or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise ClusterUnreachable(f"cannot reach the Ray cluster at {address}: {reason}") from None
