"""The check the tools make before joining a Ray cluster at --ray-address: an address where nothing listens is one
error line at once (Ray itself would wait for it for ever); no Ray is needed for it."""

from __future__ import annotations

import socket

import pytest

from tg.env.ray_address import ClusterUnreachable, check_reachable


def test_an_address_that_accepts_connections_passes() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_reachable(f"127.0.0.1:{port}")
        check_reachable(f"ray://127.0.0.1:{port}")  # Ray Client's form


def test_an_address_where_nothing_listens_is_one_line_naming_it() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once the socket is closed
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", f"[::1]:{port}"):
        with pytest.raises(ClusterUnreachable) as caught:
            check_reachable(address)
        assert str(caught.value).startswith(f"cannot reach the Ray cluster at {address}: ")
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("address", [None, "", "auto", "local"])
def test_addresses_without_a_port_are_left_to_ray(address: str | None) -> None:
    check_reachable(address)  # Ray answers these itself at once (a new cluster, or the one running here)
