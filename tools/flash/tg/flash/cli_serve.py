"""`tg-flash serve`: expose the board chosen by the global options to `--transport remote` clients."""

from __future__ import annotations

import typer

from tg.drivers import navi31_regs as regs
from tg.drivers.remote import RemoteServer, ServedDevice, parse_address
from tg.drivers.transport import Transport, open_board
from tg.flash.console import failures


def serve(
    ctx: typer.Context,
    listen: str = typer.Option("127.0.0.1:6667", "--listen", help="HOST:PORT to listen on (port 0: any free)."),
    token: str | None = typer.Option(
        None, "--token", envvar="TG_FLASH_SERVE_TOKEN", help="Auth token clients must send (required beyond loopback)."
    ),
) -> None:
    """Serve this machine's board (or a simulated one) over the remote-PCI protocol until Ctrl-C.

    The client runs the whole flash driver, so every safety rule applies there; the server only moves
    register reads and writes, for one client at a time."""
    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        if cli.options.transport is Transport.REMOTE:
            raise ValueError("serve exposes a local or simulated board; --transport remote makes no sense here")
        host, port = parse_address(listen)
        cli.options.check()
        connection = open_board(cli.options.request())
        try:
            device = ServedDevice(connection.description, regs.VENDOR_AMD, regs.NAVI31_DEVICE_IDS[0])
            device.bars[regs.BAR] = connection.mmio
            with RemoteServer([device], host, port, token) as server:
                cli.reporter.line(f"serving {connection.description} on {host}:{server.port}")
                try:
                    server.serve_forever(poll_interval=0.1)
                except KeyboardInterrupt:
                    cli.reporter.line("stopped")
        finally:
            connection.close()
