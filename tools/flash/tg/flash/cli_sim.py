"""`tg-flash sim ...`: create and inspect simulated board state for `--transport sim --sim-state PATH`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import typer

from tg.flash.console import failures, parse_int, read_input
from tg.flash.outputs import check_output, write_output

sim_app = typer.Typer(help="Create and inspect simulated Navi31 board state.", no_args_is_help=True)


def _pairs(values: list[str], what: str) -> dict[int, int]:
    pairs = {}
    for value in values:
        key, sep, rest = value.partition(":")
        if not sep:
            raise typer.BadParameter(f"{what} takes KEY:VALUE, not {value!r}")
        pairs[parse_int(key)] = parse_int(rest)
    return pairs


@sim_app.command()
def init(
    ctx: typer.Context,
    path: Path = typer.Argument(..., help="State file to create."),
    force: bool = typer.Option(False, "--force", help="Replace PATH if it already exists."),
    image: Path | None = typer.Option(None, "--image", help="2 MiB flash contents (default: the synthetic IFWI)."),
    ifwi_seed: int = typer.Option(0, "--ifwi-seed", parser=parse_int, help="Seed of the synthetic IFWI."),
    cmp: bool = typer.Option(False, "--cmp", help="Power on with SR2.CMP set (whole array protected)."),
    sr1: int = typer.Option(0, "--sr1", parser=parse_int, help="Initial SR1 (BP0-BP4 in bits 2-6)."),
    gated: bool = typer.Option(False, "--gated", help="ROM_SW engine gated (never completes)."),
    status_stuck: bool = typer.Option(False, "--status-stuck", help="ROM_SW_STATUS ignores clears."),
    wel_never_sets: bool = typer.Option(False, "--wel-never-sets", help="The chip ignores WREN."),
    busy_forever: bool = typer.Option(False, "--busy-forever", help="The chip never leaves BUSY."),
    stuck_bit: list[str] = typer.Option([], "--stuck-bit", help="ADDR:BITS stuck at 1 (repeatable)."),
    psp_error: list[str] = typer.Option([], "--psp-error", help="CMD:CODE the PSP answers (repeatable)."),
    psp_gated: bool = typer.Option(False, "--psp-gated", help="A booted SOS: transfer type answers 0x0A."),
    psp_not_ready: bool = typer.Option(False, "--psp-not-ready", help="The PSP never hands the mailbox back."),
    aperture: str = typer.Option("raw", "--aperture", help="ROM aperture: raw|unavailable|mirrored."),
    jedec_rotation: int = typer.Option(0, "--jedec-rotation", help="Rotate the RDID capture by N bytes."),
    trace: bool = typer.Option(False, "--trace", help="Append every session's register accesses to PATH.trace."),
    via: str = typer.Option("usb", "--via", help="usb: behind a simulated ASM24 bridge (default); pci: direct BAR."),
    link_down: bool = typer.Option(False, "--link-down", help="USB bridge: the PCIe link never comes up."),
    usb_stall: list[int] = typer.Option([], "--usb-stall", parser=parse_int, help="Stall control transfer N once."),
    tlp_timeout: list[int] = typer.Option(
        [], "--tlp-timeout", parser=parse_int, help="Non-posted TLP N reports a bridge timeout (retried)."
    ),
) -> None:
    """Create a simulated board (healthy unless fault options say otherwise)."""
    from tg.drivers.sim.faults import Faults
    from tg.drivers.sim.state import new_state, save_state, trace_path

    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        if aperture not in ("raw", "unavailable", "mirrored"):
            raise typer.BadParameter("choose raw, unavailable or mirrored", param_hint="--aperture")
        if via not in ("usb", "pci"):
            raise typer.BadParameter("choose usb or pci", param_hint="--via")
        faults = Faults(
            gated=gated,
            status_stuck=status_stuck,
            wel_never_sets=wel_never_sets,
            busy_forever=busy_forever,
            stuck_bits=_pairs(stuck_bit, "--stuck-bit"),
            psp_errors=_pairs(psp_error, "--psp-error"),
            psp_gated=psp_gated,
            psp_not_ready=psp_not_ready,
            aperture=aperture,
            usb_link_down=link_down,
            usb_stall_at=list(usb_stall),
            usb_tlp_timeout_at=list(tlp_timeout),
        )
        flash = read_input(image) if image is not None else None
        check_output(path, force)
        state = new_state(flash, ifwi_seed=ifwi_seed, cmp=cmp, faults=faults)
        state.sr1, state.jedec_rotation, state.trace, state.via = sr1 & 0xFC, jedec_rotation, trace, via
        save_state(state, path)
        trace_path(path).unlink(missing_ok=True)
        cli.reporter.result(f"created simulated Navi31 board {path} (via {via})", {"path": str(path), "via": via})


@sim_app.command()
def show(ctx: typer.Context, path: Path = typer.Argument(..., help="State file.")) -> None:
    """Print the simulated board's chip status, controller registers, faults and PSP position."""
    from tg.drivers.sim.state import load_state

    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        state = load_state(path)
        board = state.board()
        registers = board.controller_registers()
        payload = {
            "flash_sha256": hashlib.sha256(state.flash).hexdigest(),
            "sr1": state.sr1,
            "sr2": state.sr2,
            "sr3": state.sr3,
            "registers": registers,
            "faults": state.faults.to_json(),
            "psp_position": state.psp.position,
            "psp_states": len(state.psp.states),
            "sessions": state.sessions,
            "via": state.via,
        }
        lines = [
            f"flash sha256={payload['flash_sha256']}",
            f"SR1/SR2/SR3: {state.sr1:02x}/{state.sr2:02x}/{state.sr3:02x}",
            *(f"{name}=0x{value:08x}" for name, value in registers.items()),
            f"PSP transfer state {state.psp.position}/{len(state.psp.states)}",
            f"sessions: {state.sessions}",
            f"reached via: {state.via}",
        ]
        cli.reporter.result("\n".join(lines), payload)


@sim_app.command()
def ifwi(
    ctx: typer.Context,
    path: Path = typer.Argument(..., help="State file."),
    output: Path = typer.Argument(..., help="Where to write the IFWI the simulated PSP expects."),
    force: bool = typer.Option(False, "--force", help="Replace OUTPUT if it already exists."),
) -> None:
    """Write the synthetic IFWI that the simulated PSP compares streamed items with."""
    from tg.drivers.sim.state import load_state

    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        check_output(output, force)
        write_output(output, load_state(path).ifwi, force)
        cli.reporter.result(f"wrote {output}", {"path": str(output)})
