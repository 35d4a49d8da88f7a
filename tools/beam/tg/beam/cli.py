"""The tg-beam command line: BEAM search for one kernel, kernel export from a program, and the shared cache.

    tg-beam --kernel k.pkl [--beam N] [--device DEV] [--ignore-cache] [--out opt.pkl] [--src] [--verify] [--json]
    tg-beam dump DIR -- CMD...        run CMD, writing one k.pkl per kernel it compiles into DIR
    tg-beam search DIR [--ray]        search every kernel in DIR into the cache, here or on a Ray cluster
    tg-beam cache export FILE | import FILE

Exit codes: 0 success, 1 a failure (bad input, nothing compiles, --verify mismatch), 2 a usage error.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

from tg.env.version import print_version

app = typer.Typer(
    help="BEAM search for the fastest way to run one kernel, and a cache of what was found.",
    add_completion=False,
    invoke_without_command=True,
)
cache_app = typer.Typer(help="Move BEAM results between machines of the same kind.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _print_version(value: bool) -> None:
    print_version("tg-beam", value)


def _default_width() -> int:
    from tg.codegen.flags import BEAM

    return int(BEAM) or 8


@app.callback()
def search(
    ctx: typer.Context,
    kernel: Path | None = typer.Option(None, "--kernel", help="A pickled kernel (k.pkl): AST, (ast, opts), list."),
    beam: int | None = typer.Option(None, "--beam", min=1, help="Beam width (default: BEAM, else 8)."),
    device: str = typer.Option("CPU", "--device", help="Device to time on (e.g. CPU, CPU:LLVM)."),
    ignore_cache: bool = typer.Option(False, "--ignore-cache", help="Search even when a result is cached."),
    out: Path | None = typer.Option(None, "--out", help="Write the kernel with its winning opts (a k.pkl)."),
    show_src: bool = typer.Option(False, "--src", help="Print the winner's source."),
    check: bool = typer.Option(False, "--verify", help="Compare the winner with the unoptimized kernel."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    timing: bool = typer.Option(False, "--timing", help="Re-time the winner with 10 launches."),
    variables: list[str] = typer.Option(
        [], "--var", metavar="NAME=VALUE", help="Time a kernel of symbolic size with this value (repeatable)."
    ),
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),  # fmt: skip
) -> None:
    """Search the fastest opts for each kernel in --kernel k.pkl, or run a subcommand."""
    if ctx.invoked_subcommand is not None:
        return
    if kernel is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    from tg.beam.kernels import BeamError, check_device, load_kernels, parse_var_values
    from tg.codegen.serial import write_file

    try:
        jobs = load_kernels(kernel, parse_var_values(variables))
        device_name = check_device(device)
    except BeamError as error:
        _fail(str(error))
    width = beam or _default_width()
    documents, winners, failed = [], [], False
    for job in jobs:
        document, winner = _search_one(job, device_name, width, ignore_cache, show_src, check, timing, as_json)
        documents.append(document)
        winners.append(winner)
        failed = failed or document.get("verified") is False
    if out is not None:
        write_file(out, winners[0] if len(winners) == 1 else winners, **_machine(device_name))
    if as_json:
        typer.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    if failed:
        raise typer.Exit(1)


def _search_one(job: Any, device: str, width: int, ignore_cache: bool, show_src: bool, check: bool, timing: bool,
                as_json: bool) -> tuple[dict[str, Any], Any]:  # fmt: skip
    """Search one kernel and report it; returns the JSON document and the kernel set to its winning opts."""
    from tg.beam.kernels import verify
    from tg.codegen.pipeline import CodegenFlags, kernel_to_program, with_opts
    from tg.hcq.device import Device
    from tg.hcq.engine import time_kernel
    from tg.hcq.engine.beam import search_opts
    from tg.hcq.engine.programs import renderer_for

    console = Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
    flags = CodegenFlags.from_environment()
    start = with_opts(job.ast, job.preapplied) if job.preapplied else job.ast
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console,
                  disable=not console.is_terminal or as_json) as progress:  # fmt: skip
        task = progress.add_task(f"{job.name}: searching with beam {width}")

        def show(round_: Any) -> None:
            progress.update(task, description=progress_text(job.name, round_))

        result = search_opts(start, device, width, ignore_cache, flags, on_round=show, var_vals=job.var_vals)
    winner = with_opts(job.ast, result.opts)
    seconds = time_kernel(winner, device, flags, 10, var_vals=job.var_vals).seconds if timing else result.seconds
    document = _result_document(job.name, device, width, result, seconds)
    if not as_json:
        _echo_result(job.name, device, width, result, seconds)
    if show_src:
        source = kernel_to_program(winner, renderer_for(Device[device]), flags).src
        document["src"] = source
        if not as_json:
            typer.echo(source)
    if check:
        outcome = verify(job, result.opts, device, flags)
        document["verified"] = outcome.matches
        if not as_json:
            typer.echo(f"verify: {'ok' if outcome.matches else 'MISMATCH'}: {outcome.detail}")
    return document, winner


def _result_document(name: str, device: str, width: int, result: Any, seconds: float) -> dict[str, Any]:
    """One kernel's result (a BeamResult) as --json prints it."""
    return {
        "name": name, "device": device, "beam": width, "cached": result.cached, "time_us": seconds * 1e6,
        "opts": [{"op": o.op.name, "axis": o.axis, "arg": repr(o.arg)} for o in result.opts],
        "out_of_time": result.out_of_time, "spread_us": result.spread * 1e6,
        "hand_coded_us": None if result.hand_coded_seconds is None else result.hand_coded_seconds * 1e6,
    }  # fmt: skip


def _echo_result(name: str, device: str, width: int, result: Any, seconds: float) -> None:
    """One kernel's result as two lines: the time and where it came from, then the opts."""
    from tg.hcq.flags import BEAM_TIME_BUDGET

    where = "cached" if result.cached else "searched"
    if result.out_of_time:
        where += f"; BEAM_TIME_BUDGET={int(BEAM_TIME_BUDGET)} s spent: the best so far"
    if result.hand_coded_seconds is not None:
        where += (f"; hand-coded {result.hand_coded_seconds * 1e6:.1f} us, spread {result.spread * 1e6:.1f} us "
                  "over interleaved repeats")  # fmt: skip
    typer.echo(f"{name}: final time {seconds * 1e6:.1f} us ({where}, beam {width} on {device})")
    typer.echo(f"applied_opts: {list(result.opts)}")


def progress_text(name: str, round_: Any) -> str:
    """The progress line after a round (a tg.codegen.opt.search.SearchRound)."""
    spent = ": time budget spent, ending with the best so far" if round_.out_of_time else ""
    return (f"{name}: round {round_.number} ({round_.seconds:.0f} s): {round_.candidates} candidates, "
            f"{round_.timed} timed, best {round_.best_seconds * 1e6:.1f} us{spent}")  # fmt: skip


def _machine(device_name: str) -> dict[str, str]:
    """What a written k.pkl records besides the codegen version and commit: the device, its compiler, the flags."""
    from tg.codegen.pipeline import CodegenFlags
    from tg.hcq.device import Device

    flags = repr(CodegenFlags.from_environment())
    return {"device": device_name, "compiler": Device[device_name].compiler.identity(), "flags": flags}


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def dump(ctx: typer.Context, folder: Path = typer.Argument(..., help="Where to write the k.pkl files.")) -> None:
    """Run CMD and write one k.pkl per kernel it compiles into FOLDER: tg-beam dump DIR -- CMD..."""
    command = list(ctx.args)
    if not command:
        typer.echo("error: no command given: tg-beam dump DIR -- CMD...", err=True)
        raise typer.Exit(2)
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TG_DUMP_KERNELS=str(folder.resolve()))
    try:
        finished = subprocess.run(command, env=env)
    except FileNotFoundError:
        _fail(f"command not found: {command[0]}")
    count = len(list(folder.glob("*.pkl")))
    typer.echo(f"{count} kernels in {folder}", err=True)
    raise typer.Exit(finished.returncode)


RAY_MISSING = "--ray needs Ray, which is not installed: uv sync --extra cluster (or pip install 'tg-beam[cluster]')"


@app.command("search")
def search_folder(
    folder: Path = typer.Argument(..., help="A folder of k.pkl files (tg-beam dump DIR -- CMD)."),
    beam: int | None = typer.Option(None, "--beam", min=1, help="Beam width (default: BEAM, else 8)."),
    device: str | None = typer.Option(None, "--device", help="Time every kernel on DEV (default: its dump's)."),
    ignore_cache: bool = typer.Option(False, "--ignore-cache", help="Search even when a result is cached."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document (a list, one entry per kernel)."),
    on_ray: bool = typer.Option(False, "--ray", help="One Ray task per kernel (RAY_ADDRESS's cluster, else local)."),
    address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster to use (implies --ray)."),
    retries: int = typer.Option(3, "--retries", min=0, help="With --ray: how often a dead worker's task reruns."),
    resource: str | None = typer.Option(None, "--ray-resource", help="With --ray: a custom resource each task needs."),
) -> None:
    """Search every kernel in FOLDER into the shared BEAM cache, here one by one or on a Ray cluster (--ray)."""
    from tg.beam.batch import Outcome, SearchSettings, plan_folder, search_here
    from tg.beam.kernels import BeamError
    from tg.codegen.pipeline import CodegenFlags

    try:
        plan = plan_folder(folder, device)
    except BeamError as error:
        _fail(str(error))
    width = beam or _default_width()
    settings = SearchSettings(width, CodegenFlags.from_environment(), ignore_cache)
    documents: list[dict[str, Any]] = []

    def show(outcome: Outcome) -> None:
        result, name = outcome.result, outcome.kernel.label
        documents.append(_result_document(name, outcome.kernel.device, width, result, result.seconds))
        if not as_json:
            _echo_result(name, outcome.kernel.device, width, result, result.seconds)

    if on_ray or address is not None:
        cluster = _cluster()
        try:
            report = cluster.search_on_ray(plan, settings, address=address, retries=retries, resource=resource,
                                           on_done=show)  # fmt: skip
        except BeamError as error:  # the cluster does not answer
            _fail(str(error))
    else:
        report = search_here(plan, settings, on_done=show)
    if as_json:
        typer.echo(json.dumps(sorted(documents, key=lambda d: d["name"]), indent=2))
    if report.merged is not None:
        m = report.merged
        typer.echo(f"merged {m.imported} results into the cache, refused {m.other_machine} made with another compiler "
                   f"or CPU model and {m.other_codegen} made by another codegen version", err=True)  # fmt: skip
    for kernel, why in report.failures:
        typer.echo(f"error: {kernel.label}: {why}", err=True)
    if report.failures:
        raise typer.Exit(1)


def _cluster() -> Any:
    """tg.beam.cluster, or one `error:` line saying how to install Ray."""
    try:
        import tg.beam.cluster as cluster
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "ray":
            raise
        _fail(RAY_MISSING)
    return cluster


@cache_app.command("export")
def cache_export(path: Path) -> None:
    """Write every cached BEAM result to PATH."""
    from tg.hcq.engine.beam import export_cache

    typer.echo(f"exported {export_cache(str(path))} results to {path}")


@cache_app.command("import")
def cache_import(path: Path, device: str = typer.Option("CPU", "--device")) -> None:
    """Add the results in PATH that were found with this machine's compiler and CPU model."""
    from tg.hcq.engine.beam import BeamCacheError, import_cache

    if not path.exists():
        _fail(f"{path} does not exist")
    try:
        result = import_cache(str(path), device)
    except BeamCacheError as error:
        _fail(str(error))
    typer.echo(f"imported {result.imported} results, refused {result.other_machine} made with another compiler or "
               f"CPU model and {result.other_codegen} made by another codegen version")  # fmt: skip


def main() -> None:
    app()


if __name__ == "__main__":
    main()
