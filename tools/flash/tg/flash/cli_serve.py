"""`tg-flash serve`: expose the board chosen by the global options to `--transport remote` clients."""

from __future__ import annotations

import typer

from tg.drivers import navi31_regs as regs
from tg.drivers.remote import BUSY_WAIT, IDLE_TIMEOUT, REQUEST_TIMEOUT, ServedDevice, make_server
from tg.drivers.transport import Transport, open_board
from tg.flash.console import failures

# The controller registers the flash driver saves and restores; reading them has no side effect, so the
# server can note them before a client's first write and put them back when the client is gone. ROM_SW_CNTL
# is idle at 0, which is also what the driver leaves in it: writing that back stops, never starts, the engine.
RESTORABLE = frozenset(
    (regs.BAR, offset)
    for offset in (
        regs.ROM_CNTL,
        regs.PAGE_MIRROR_CNTL,
        regs.ROM_INDEX,
        regs.ROM_SW_CNTL,
        regs.GPIO_PAD_MASK,
        regs.GPIO_PAD_A,
        regs.GPIO_PAD_EN,
    )
)


def serve(
    ctx: typer.Context,
    listen: str = typer.Option(
        "127.0.0.1:6667", "--listen", help="HOST:PORT (port 0: any free) or unix:PATH (a 0600 Unix socket)."
    ),
    token: str | None = typer.Option(
        None, "--token", envvar="TG_FLASH_SERVE_TOKEN", help="Auth token clients must send (required over TCP)."
    ),
    idle_timeout: float = typer.Option(IDLE_TIMEOUT, "--idle-timeout", help="Drop a client silent this long (s)."),
    request_timeout: float = typer.Option(
        REQUEST_TIMEOUT, "--request-timeout", help="Drop a client slower than this to send one request (s)."
    ),
    busy_wait: float = typer.Option(
        BUSY_WAIT, "--busy-wait", help="How long a client waits for the board while another uses it (s)."
    ),
) -> None:
    """Serve this machine's board (or a simulated one) over the remote-PCI protocol until Ctrl-C.

    The client runs the whole flash driver, so every safety rule applies there; the server only moves
    register reads and writes, for one client at a time, and puts back the controller registers a client
    left changed when it disconnects."""
    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        if cli.options.transport is Transport.REMOTE:
            raise ValueError("serve exposes a local or simulated board; --transport remote makes no sense here")
        for name, value in (("--idle-timeout", idle_timeout), ("--request-timeout", request_timeout)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds")
        cli.options.check()
        connection = open_board(cli.options.request(writes=True))  # clients may flash
        try:
            device = ServedDevice(connection.description, regs.VENDOR_AMD, regs.NAVI31_DEVICE_IDS[0])
            device.bars[regs.BAR] = connection.mmio
            device.restorable = RESTORABLE
            limits = {"idle_timeout": idle_timeout, "request_timeout": request_timeout, "busy_wait": busy_wait}
            with make_server([device], listen, token, **limits) as server:  # type: ignore[attr-defined]
                cli.reporter.line(f"serving {connection.description} on {server.address}")
                try:
                    server.serve_forever(poll_interval=0.1)
                except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: a connected client's registers go back first
                    if not server.disconnect_clients():
                        cli.reporter.error("a client's registers could not be restored in time")
                    cli.reporter.line("stopped")
        finally:
            connection.close()
