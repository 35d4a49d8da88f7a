"""`tg-flash fw ...`: the PSP firmware path (early mailbox) and the raw ROM aperture dump."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from tg.drivers import navi31_regs as regs
from tg.flash.aperture import check_raw_dump, read_aperture, sha256
from tg.flash.board import open_mmio
from tg.flash.console import failures, parse_int, read_input
from tg.flash.errors import FlashError
from tg.flash.ifwi import ROM_ITEM_COUNT, check_ifwi_size, resolve_ifwi_item
from tg.flash.outputs import check_output, write_output
from tg.flash.psp import ERROR_GATED, GET_TRANSFER_TYPE, PSPMailbox

fw_app = typer.Typer(
    help="The PSP firmware path: probe, raw aperture dump, early IFWI streaming.", no_args_is_help=True
)

DISABLED = "firmware writes are disabled: stock reflash validation failed; use `tg-flash flash` (ROM_SW) for recovery"


@fw_app.command()
def probe(ctx: typer.Context) -> None:
    """Ask the PSP for its boot partition, FB state, SPI model and transfer type (read-only)."""
    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        cli.options.check()
        with open_mmio(cli.options) as mmio:
            replies = PSPMailbox(mmio).probe()
        lines = [f"{r.name}: error=0x{r.error:02x} response=0x{r.response:08x}" for r in replies]
        gated = any(r.command == GET_TRANSFER_TYPE and r.error == ERROR_GATED for r in replies)
        if gated:
            typer.echo("update commands gated: reset card and do not initialize AMDev/SOS", err=True)
        payload = {"replies": {r.name: {"error": r.error, "response": r.response} for r in replies}, "gated": gated}
        cli.reporter.result("\n".join(lines), payload)


@fw_app.command("dump")
def fw_dump(
    ctx: typer.Context,
    output: Path = typer.Argument(..., help="File for the raw 2 MiB dump."),
    force: bool = typer.Option(False, "--force", help="Replace OUTPUT if it already exists."),
) -> None:
    """Dump the flash through the ROM_INDEX/ROM_DATA aperture; refuses anything but a raw 2 MiB image."""
    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        check_output(output, force)
        cli.options.check()
        started = time.monotonic()
        with open_mmio(cli.options) as mmio:
            data = read_aperture(mmio, on_page=lambda done: cli.reporter.line(f"0x{done:06x}/0x{regs.FLASH_SIZE:06x}"))
        check_raw_dump(data)  # only after the registers are restored, and before any file is written
        write_output(output, data, force)
        seconds = time.monotonic() - started
        digest = sha256(data)
        text = f"dumped 0x{len(data):x} bytes in {seconds:.1f}s sha256={digest}"
        cli.reporter.result(text, {"path": str(output), "size": len(data), "sha256": digest})


@fw_app.command("ifwi-all")
def ifwi_all(
    ctx: typer.Context,
    ifwi: Path = typer.Argument(..., help="The 2 MiB IFWI image to stream."),
    yes: bool = typer.Option(False, "--yes", help="Really stream; the PSP rewrites the flash."),
) -> None:
    """Stream every item the early PSP firmware asks for, until it reports the terminal phase."""
    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        if not yes:
            raise ValueError("refusing to stream without --yes")
        image = read_input(ifwi)
        check_ifwi_size(image)
        cli.options.check()
        with open_mmio(cli.options, writes=True) as mmio:
            mailbox = PSPMailbox(mmio, log=cli.reporter.line)
            steps = stream_all_items(mailbox, image, cli.reporter.line)
        cli.reporter.result(f"IFWI stream finished after {len(steps)} items", {"items": steps})


def stream_all_items(mailbox: PSPMailbox, image: bytes, log) -> list[int]:
    current = mailbox.transfer_type()
    streamed = []
    for step in range(1, ROM_ITEM_COUNT + 1):
        item, phase = current & 0xFF, current >> 8
        log(f"IFWI step {step}: state=0x{current:x} item=0x{item:02x} phase={phase}")
        located = resolve_ifwi_item(image, item)
        log(f"resolved requested item 0x{item:02x}: offset=0x{located.offset:x} size=0x{located.size:x}")
        mailbox.stream(image[located.offset : located.offset + located.size], item, transfer_type=current)
        streamed.append(item)
        # AMDVBFlash tests the high byte of the state belonging to the item just streamed.
        if phase == 2:
            log(f"IFWI stream complete after terminal state 0x{current:x}; hard power cycle required")
            return streamed
        current = mailbox.transfer_type()
    raise FlashError(f"IFWI stream did not reach terminal phase after {ROM_ITEM_COUNT} items (state=0x{current:x})")


def _refuse(yes: bool, what: str) -> None:
    if not yes:
        raise ValueError(f"refusing to {what} without --yes")
    raise FlashError(DISABLED)


@fw_app.command()
def stream(
    ctx: typer.Context,
    item_type: int = typer.Argument(..., parser=parse_int, help="Item type."),
    image: Path = typer.Argument(..., help="Payload."),
    yes: bool = typer.Option(False, "--yes"),
) -> None:
    """Disabled: stream one item (always refuses)."""
    with failures(ctx.obj.reporter, ctx.obj.debug):
        _refuse(yes, "stream")


@fw_app.command("ifwi-step")
def ifwi_step(ctx: typer.Context, ifwi: Path = typer.Argument(...), yes: bool = typer.Option(False, "--yes")) -> None:
    """Disabled: stream the one item the firmware asks for next (always refuses)."""
    with failures(ctx.obj.reporter, ctx.obj.debug):
        _refuse(yes, "stream")


@fw_app.command("live-flash")
def live_flash(ctx: typer.Context, ifwi: Path = typer.Argument(...), yes: bool = typer.Option(False, "--yes")) -> None:
    """Disabled: hand a staged IFWI to a running PSP v13 (always refuses)."""
    with failures(ctx.obj.reporter, ctx.obj.debug):
        _refuse(yes, "flash")
