"""`tg-flash wp status|disable`: show and clear the flash chip's block protection (as flashrom's
`--wp-status` and `--wp-disable` do)."""

from __future__ import annotations

import typer

from tg.flash.board import open_flash
from tg.flash.console import failures
from tg.flash.protect import disable_protection, read_protection

wp_app = typer.Typer(help="Show or clear the flash chip's write protection (BP bits, CMP).", no_args_is_help=True)


@wp_app.command()
def status(ctx: typer.Context) -> None:
    """Decode SR1/SR2: the block-protect bits, CMP, SRP and the protected range."""
    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        cli.options.check()
        with open_flash(cli.options) as chip:
            protection = read_protection(chip)
        text = f"{protection.describe_bits()}\nprotected range: {protection.describe_range()}"
        payload = {
            "sr1": protection.sr1,
            "sr2": protection.sr2,
            "bp": protection.bp,
            "cmp": protection.cmp,
            "protected": [protection.start, protection.end] if protection.any else None,
        }
        cli.reporter.result(text, payload)


@wp_app.command()
def disable(ctx: typer.Context, yes: bool = typer.Option(False, "--yes", help="Really write SR1/SR2.")) -> None:
    """Clear BP0-BP4 and CMP so the whole array can be written (SRP, QE and lock bits are kept)."""
    cli = ctx.obj
    with failures(cli.reporter, cli.debug):
        if not yes:
            raise ValueError("refusing to write the status registers without --yes")
        cli.options.check()
        with open_flash(cli.options, writes=True) as chip:
            before, after = disable_protection(chip)
        if before == after:
            text = f"nothing to clear: {before.describe_bits()}"
        else:
            text = f"cleared write protection: {before.describe_bits()} -> SR1=0x{after.sr1:02x} SR2=0x{after.sr2:02x}"
        cli.reporter.result(text, {"before": [before.sr1, before.sr2], "after": [after.sr1, after.sr2]})
