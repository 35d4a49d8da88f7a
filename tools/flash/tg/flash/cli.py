"""The tg-flash command line: a thin typer layer over the tg.flash library."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from tg.drivers import navi31_regs as regs
from tg.drivers.transport import Transport, parse_transport
from tg.env.flags import DEBUG
from tg.env.version import print_version
from tg.flash.aperture import sha256
from tg.flash.board import BoardOptions, open_flash
from tg.flash.console import Reporter, failures, parse_int, progress, read_input
from tg.flash.errors import FlashError
from tg.flash.interrupts import termination_as_interrupt
from tg.flash.outputs import check_output, write_output
from tg.flash.program import SectorOutcome, SectorRange, check_image_size, program_image, verify_against
from tg.flash.recovery import FlashLog, FlashProgress, default_log_path

app = typer.Typer(
    help="Read, verify and program the 2 MiB SPI flash of AMD Navi31 boards.",
    no_args_is_help=True,
    add_completion=False,
)


@dataclass(frozen=True)
class CliContext:
    options: BoardOptions
    reporter: Reporter
    debug: bool


def _print_version(value: bool) -> None:
    print_version("tg-flash", value)


@app.callback()
def _options(
    ctx: typer.Context,
    device: int = typer.Option(0, "--device", parser=parse_int, help="Device index for the selected transport."),
    prescale: int = typer.Option(8, "--prescale", parser=parse_int, help="SPI clock prescaler, 0..15."),
    transport: str = typer.Option(
        "auto", "--transport", help="auto|usb|pci|sim|remote (auto: USB, then PCI; never sim)."
    ),
    sim_state: Path | None = typer.Option(None, "--sim-state", help="Simulated board state file (with sim)."),
    remote: str | None = typer.Option(None, "--remote", help="HOST:PORT of a `tg-flash serve` (with remote)."),
    token: str | None = typer.Option(None, "--token", envvar="TG_FLASH_TOKEN", help="Auth token for --remote."),
    json_output: bool = typer.Option(False, "--json", help="Print one machine-readable JSON document."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Read, verify and program the 2 MiB SPI flash of AMD Navi31 boards."""
    if not 0 <= prescale <= 15:
        raise typer.BadParameter("prescale must be 0..15", param_hint="--prescale")
    try:
        chosen = parse_transport(transport)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--transport") from None
    if sim_state is not None and chosen is not Transport.SIM:
        raise typer.BadParameter("--sim-state is only used with --transport sim", param_hint="--sim-state")
    if chosen is Transport.SIM and sim_state is None and ctx.invoked_subcommand != "sim":
        raise typer.BadParameter("--transport sim needs --sim-state PATH (create one with `tg-flash sim init PATH`)")
    if remote is not None and chosen is not Transport.REMOTE:
        raise typer.BadParameter("--remote is only used with --transport remote", param_hint="--remote")
    if chosen is Transport.REMOTE and remote is None:
        raise typer.BadParameter("--transport remote needs --remote HOST:PORT")
    options = BoardOptions(device, prescale, chosen, sim_state, remote, token)
    ctx.obj = CliContext(options, Reporter(json_output), debug or DEBUG >= 1)
    ctx.with_resource(termination_as_interrupt())  # SIGTERM/SIGHUP run the restores and the resume hint too


def _register_groups() -> None:
    from tg.flash.cli_fw import fw_app
    from tg.flash.cli_serve import serve
    from tg.flash.cli_sim import sim_app
    from tg.flash.cli_wp import wp_app

    app.command()(serve)
    app.add_typer(fw_app, name="fw")
    app.add_typer(sim_app, name="sim")
    app.add_typer(wp_app, name="wp")


@app.command()
def info(ctx: typer.Context) -> None:
    """Identify the flash chip: JEDEC ID, status registers and the SFDP header."""
    cli: CliContext = ctx.obj
    with failures(cli.reporter, cli.debug):
        cli.options.check()
        with open_flash(cli.options) as chip:
            sr1, sr2, sr3 = chip.status_registers()
            sfdp = chip.sfdp(24)
            jedec = chip.rdid()  # the seed prints a second RDID, read after the SFDP header
        cmp_state = "set" if sr2 & 0x40 else "clear"
        text = "\n".join(
            [
                f"JEDEC capture: {jedec.hex()} (C8 60 15 detected)",
                f"SR1/SR2/SR3: {sr1:02x}/{sr2:02x}/{sr3:02x}  CMP={cmp_state}",
                f"SFDP capture: {sfdp.hex()}  signature_offset={sfdp.find(b'SFDP')}",
            ]
        )
        payload = {
            "jedec": jedec.hex(),
            "chip": "GD25LQ16E",
            "sr1": sr1,
            "sr2": sr2,
            "sr3": sr3,
            "cmp": bool(sr2 & 0x40),
            "sfdp": sfdp.hex(),
            "signature_offset": sfdp.find(b"SFDP"),
        }
        cli.reporter.result(text, payload)


@app.command()
def read(
    ctx: typer.Context,
    address: int = typer.Argument(..., parser=parse_int, help="Start address (hex accepted)."),
    size: int = typer.Argument(..., parser=parse_int, help="Number of bytes."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write the bytes here instead of hex."),
    force: bool = typer.Option(False, "--force", help="Replace OUTPUT if it already exists."),
) -> None:
    """Read SIZE bytes at ADDRESS; print them as hex or write them to OUTPUT."""
    cli: CliContext = ctx.obj
    with failures(cli.reporter, cli.debug):
        if size < 1:
            raise ValueError("SIZE must be at least 1 byte")
        if address < 0 or address + size > regs.FLASH_SIZE:
            raise ValueError("read outside 2 MiB flash")
        if output is not None:
            check_output(output, force)
        cli.options.check()
        with open_flash(cli.options) as chip:
            data = chip.read(address, size)
        payload = {"address": address, "size": size, "sha256": sha256(data)}
        if output is not None:
            write_output(output, data, force)
            cli.reporter.result(f"wrote {output} sha256={sha256(data)}", {**payload, "path": str(output)})
        else:
            cli.reporter.result(data.hex(), {**payload, "hex": data.hex()})


@app.command()
def dump(
    ctx: typer.Context,
    output: Path = typer.Argument(..., help="File for the 2 MiB flash contents."),
    force: bool = typer.Option(False, "--force", help="Replace OUTPUT if it already exists."),
) -> None:
    """Read the whole 2 MiB flash into OUTPUT (written atomically)."""
    cli: CliContext = ctx.obj
    with failures(cli.reporter, cli.debug):
        check_output(output, force)
        cli.options.check()
        chunks = []
        with open_flash(cli.options) as chip, progress(cli.reporter, "reading", regs.FLASH_SIZE) as bar:
            for address in range(0, regs.FLASH_SIZE, regs.SECTOR_SIZE):
                chunks.append(chip.read(address, regs.SECTOR_SIZE, on_chunk=bar.advance))
                if not address & 0xFFFF:
                    bar.note(f"0x{address + regs.SECTOR_SIZE:06x}/0x{regs.FLASH_SIZE:06x}")
        data = b"".join(chunks)
        write_output(output, data, force)
        digest = sha256(data)
        text = f"wrote {output} sha256={digest}"
        cli.reporter.result(text, {"path": str(output), "size": len(data), "sha256": digest})


@app.command()
def verify(ctx: typer.Context, image: Path = typer.Argument(..., help="2 MiB image to compare with.")) -> None:
    """Compare the flash with IMAGE; exit 1 with the first mismatching offset if they differ."""
    cli: CliContext = ctx.obj
    with failures(cli.reporter, cli.debug):
        data = read_input(image)
        check_image_size(data)
        cli.options.check()
        with open_flash(cli.options) as chip, progress(cli.reporter, "verifying", regs.FLASH_SIZE) as bar:
            mismatch = verify_against(chip, data, on_sector=lambda sector: bar.advance(regs.SECTOR_SIZE))
        if mismatch is not None:
            raise FlashError(f"verify mismatch at {mismatch}")
        cli.reporter.result(
            f"verified 0x{len(data):x} bytes sha256={sha256(data)}", {"size": len(data), "sha256": sha256(data)}
        )


@app.command()
def flash(
    ctx: typer.Context,
    image: Path = typer.Argument(..., help="2 MiB image to program."),
    start_sector: int = typer.Option(0, "--start-sector", parser=parse_int, help="First 4 KiB sector to write."),
    sector_count: int | None = typer.Option(None, "--sector-count", parser=parse_int, help="Sectors to write."),
    clear_cmp: bool = typer.Option(False, "--clear-cmp", help="Clear SR2.CMP (whole-array protection) first."),
    yes: bool = typer.Option(False, "--yes", help="Really write. Without it nothing is touched."),
    log: Path | None = typer.Option(
        None, "--log", help="Per-sector log file (default: $TG_CACHE_DIR/flash/flash-<time>.log)."
    ),
) -> None:
    """Program IMAGE sector by sector: skip sectors that match, erase and program the rest, verify each.

    Every sector line also goes to a log file; if the run stops, the last good sector and the command
    that resumes after it are printed."""
    cli: CliContext = ctx.obj
    with failures(cli.reporter, cli.debug):
        if not yes:
            raise ValueError("refusing to write without --yes")
        data = read_input(image)
        check_image_size(data)
        sectors = SectorRange.parse(start_sector, sector_count)
        cli.options.check()
        run = FlashProgress(cli.options, image, sectors.start, sectors.count, clear_cmp)
        flash_log = FlashLog(log or default_log_path())
        cli.reporter.line(f"log: {flash_log.path}")
        flash_log.line(f"flash {image} sha256={sha256(data)} sectors {sectors.start}..+{sectors.count}")
        try:
            summary = _program_with_progress(
                cli, chip_data=data, sectors=sectors, clear_cmp=clear_cmp, run=run, log=flash_log
            )
        except BaseException as e:
            hint = run.resume_lines()
            for line in hint:  # stderr first: a log on a full disk must not swallow the hint
                typer.echo(line, err=True)
            flash_log.try_lines([f"stopped: {e or type(e).__name__}", *hint])
            raise
        finally:
            flash_log.close()
        text = (
            f"flashed sectors {sectors.start}..{sectors.start + sectors.count - 1}: "
            f"{summary.sectors - summary.skipped} written ({summary.erased} erased, "
            f"{summary.pages_programmed} pages programmed), {summary.skipped} skipped as already matching; "
            f"every written sector verified"
        )
        payload = {
            "start_sector": sectors.start,
            "sector_count": sectors.count,
            "written": summary.sectors - summary.skipped,
            "skipped": summary.skipped,
            "erased": summary.erased,
            "pages_programmed": summary.pages_programmed,
            "cleared_cmp": summary.cleared_cmp,
            "log": str(flash_log.path),
        }
        cli.reporter.result(text, payload)


def _program_with_progress(cli: CliContext, chip_data: bytes, sectors: SectorRange, clear_cmp: bool, run, log):
    total = sectors.count * regs.SECTOR_SIZE
    with open_flash(cli.options, writes=True) as chip, progress(cli.reporter, "flashing", total) as bar:

        def report_sector(outcome: SectorOutcome) -> None:
            bar.advance(regs.SECTOR_SIZE)
            state = "SKIP" if outcome.action == "skipped" else "OK"
            address = outcome.sector * regs.SECTOR_SIZE
            line = f"{state} sector {outcome.sector:03d}/511 @0x{address:05x} elapsed={cli.reporter.elapsed():.1f}s"
            run.sector_done(outcome.sector)  # before the log line: a full disk must not cost a verified sector
            bar.note(line)
            log.line(line)

        def cleared() -> None:
            cli.reporter.line("cleared SR2.CMP")
            log.line("cleared SR2.CMP")

        return program_image(chip, chip_data, sectors, clear_cmp, on_sector=report_sector, on_cleared_cmp=cleared)


_register_groups()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
