"""BEAM on a device: time candidate kernels for tg.codegen.opt.search, and remember the winners.

    result = search_opts(ast, "CPU", width=4)     # BeamResult(opts, seconds, cached)

Candidates are rendered here (equal sources are compiled and timed once), compile on `BEAM_WORKERS` threads, each
driving its own compiler process, then run on scratch buffers made from the kernel's PARAMs in a child process
(tg.hcq.engine.beam_timer), so a search never touches a program's real inputs. A candidate is dropped (cost inf)
when it fails to compile, takes longer than BEAM_TIMEOUT_SEC to compile (not waited for), renders the same source
as one already seen, or is slower than 3x the best so far; only one within 1.5x of the best is timed twice more,
and one that runs past its deadline is killed with its child process (a spare takes over). The winner is then timed
against the hand-coded opts in turns (`confirm`), and the faster median wins.

BEAM_TIME_BUDGET (seconds, default 60; 0: none) bounds one kernel's search: the rounds get SEARCH_SHARE of it, and
when it is spent the search ends with the best so far (BeamResult.out_of_time; a DEBUG>=1 line says so).

Winners are kept in an sqlite table in the cache directory, keyed by (kernel key, width, device, renderer,
compiler identity: binary, version, flags, CPU model). A hit replays the opts with no timing;
IGNORE_BEAM_CACHE=1 searches again. `export_cache`/`import_cache` move results between machines of the same kind.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import statistics
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from tg.codegen.cache_db import open_db
from tg.codegen.flags import CACHELEVEL, DEBUG, IGNORE_BEAM_CACHE, cache_dir
from tg.codegen.opt import KernelOptError, KernelOptimizer, hand_coded_optimizations
from tg.codegen.opt.opts import Opt, OptOps
from tg.codegen.opt.search import Candidate, SearchRound, beam_search
from tg.codegen.pipeline import CodegenFlags, ProgramSource, for_renderer, kernel_to_program, with_opts
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.ops import UOp
from tg.hcq.device import Device
from tg.hcq.engine.beam_timer import CandidateTimer
from tg.hcq.engine.programs import renderer_for
from tg.hcq.flags import BEAM_TIME_BUDGET, BEAM_TIMEOUT_SEC, BEAM_WORKERS

SEARCH_SHARE = 0.9  # of BEAM_TIME_BUDGET for the rounds: the rest for a chunk that runs long and confirm's turns
CONFIRM_ROUNDS = 3  # the winner and the hand-coded opts are timed this many times in turns before one is chosen
BEAM_SCHEMA = 1
TABLE = f"beam_v{BEAM_SCHEMA}"


class BeamCacheError(Exception):
    """A cache file that cannot be imported (wrong format, another machine kind)."""


@dataclass(frozen=True)
class BeamResult:
    opts: tuple[Opt, ...]
    seconds: float
    cached: bool
    out_of_time: bool = False  # the search ended at BEAM_TIME_BUDGET with the best found so far


# ---------------------------------------------------------------------------------------------------- the cache


def _database() -> sqlite3.Connection:
    columns = (
        "kernel TEXT, width INTEGER, device TEXT, renderer TEXT, compiler TEXT, opts TEXT NOT NULL, seconds REAL,"
        " PRIMARY KEY (kernel, width, device, renderer, compiler)"
    )
    return open_db(os.path.join(cache_dir(), "beam.db"), [f"{TABLE} ({columns})"])


def _identity(device_name: str) -> tuple[str, str, str]:
    """(device, renderer, compiler identity) of a device: the part of the cache key that is the machine."""
    device = Device[device_name]
    return device.device, type(renderer_for(device)).__name__, device.compiler.identity()


def _encode_opts(opts: tuple[Opt, ...]) -> str:
    return json.dumps([[opt.op.name, opt.axis, _plain(opt.arg)] for opt in opts])


def _plain(arg: Any) -> Any:
    """An Opt's arg as JSON: tuples become lists, an AxisType its qualified name."""
    if isinstance(arg, tuple):
        return [_plain(a) for a in arg]
    if isinstance(arg, AxisType):
        return f"AxisType.{arg.name}"
    return arg


def _from_plain(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_from_plain(v) for v in value)
    if isinstance(value, str) and value.startswith("AxisType."):
        return AxisType[value.removeprefix("AxisType.")]
    return value


def _decode_opts(text: str) -> tuple[Opt, ...]:
    return tuple(Opt(OptOps[op], axis, _from_plain(arg)) for op, axis, arg in json.loads(text))


def cached_opts(ast: UOp, device_name: str, width: int) -> BeamResult | None:
    if CACHELEVEL.value == 0:
        return None
    conn = _database()
    try:
        row = conn.execute(
            f"SELECT opts, seconds FROM {TABLE} WHERE kernel=? AND width=? AND device=? AND renderer=? AND compiler=?",
            (ast.key.hex(), width, *_identity(device_name)),
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else BeamResult(_decode_opts(row[0]), row[1], cached=True)


def store_opts(ast: UOp, device_name: str, width: int, result: BeamResult) -> None:
    if CACHELEVEL.value == 0:
        return
    conn = _database()
    try:
        with conn:
            conn.execute(
                f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ast.key.hex(), width, *_identity(device_name), _encode_opts(result.opts), result.seconds),
            )
    finally:
        conn.close()


def export_cache(path: str) -> int:
    """Write every cached result to `path` (JSON lines, one header line). Returns how many."""
    conn = _database()
    try:
        rows = conn.execute(f"SELECT kernel, width, device, renderer, compiler, opts, seconds FROM {TABLE}").fetchall()
    finally:
        conn.close()
    with open(path + ".tmp", "w") as out:
        out.write(json.dumps({"format": "tg-beam-cache", "schema": BEAM_SCHEMA}) + "\n")
        for row in rows:
            keys = ("kernel", "width", "device", "renderer", "compiler", "opts", "seconds")
            out.write(json.dumps(dict(zip(keys, row, strict=True))) + "\n")
    os.replace(path + ".tmp", path)
    return len(rows)


def import_cache(path: str, device_name: str = "CPU") -> tuple[int, int]:
    """Add the results in `path` made on a machine like this one. Returns (imported, refused); entries for another
    compiler or CPU model are refused (their opts were timed on different hardware or code)."""
    with open(path) as source:
        try:
            header = json.loads(source.readline())
            entries = [json.loads(line) for line in source if line.strip()]
        except json.JSONDecodeError as error:
            raise BeamCacheError(f"{path} is not a tg-beam cache export ({error})") from None
    if not isinstance(header, dict) or header.get("format") != "tg-beam-cache":
        raise BeamCacheError(f"{path} is not a tg-beam cache export")
    if header.get("schema") != BEAM_SCHEMA:
        raise BeamCacheError(f"{path} has cache schema {header.get('schema')}, this tg reads schema {BEAM_SCHEMA}")
    _, _, local_compiler = _identity(device_name)
    accepted = [e for e in entries if e["compiler"] == local_compiler]
    conn = _database()
    try:
        with conn:
            conn.executemany(
                f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(e["kernel"], e["width"], e["device"], e["renderer"], e["compiler"], e["opts"], e["seconds"])
                 for e in accepted],
            )  # fmt: skip
    finally:
        conn.close()
    return len(accepted), len(entries) - len(accepted)


# ---------------------------------------------------------------------------------------------------- timing


def _render(device_name: str, ast: UOp, flags: CodegenFlags) -> ProgramSource | None:
    """The candidate's source (None: the opts cannot be rendered). Rendering is Python, so it runs here, before
    the compile threads: two opt lists that render the same source are then compiled once."""
    try:
        return kernel_to_program(ast, renderer_for(Device[device_name]), flags)
    except Exception:
        return None


def _compile_source(device_name: str, src: str) -> bytes:
    """One candidate's binary (runs in a compile thread; the compiler is a separate process)."""
    return Device[device_name].compiler.compile(src)


_pool: ThreadPoolExecutor | None = None


def _workers() -> ThreadPoolExecutor | None:
    """Compile threads, kept for the life of the process. Each hands its candidate's source to the C compiler, a
    separate process, so BEAM_WORKERS compiles run at once; threads rather than Python processes because a user's
    script needs no main guard and no cache connection crosses a fork."""
    global _pool
    if int(BEAM_WORKERS) <= 0:
        return None
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=int(BEAM_WORKERS), thread_name_prefix="beam-compile")
    return _pool


def _compile_sources(device_name: str, sources: list[str]) -> list[bytes | None]:
    """The binary of every source (None: failed, or took longer than BEAM_TIMEOUT_SEC since its compile started;
    such a compile is not waited for, its thread finishes it in the background)."""
    pool = _workers()
    if pool is None:
        return [_binary_or_none(device_name, src, started=None) for src in sources]
    started: dict[int, float] = {}
    futures = [pool.submit(_binary_or_none, device_name, src, started, i) for i, src in enumerate(sources)]
    limit = float(BEAM_TIMEOUT_SEC.value)
    pending = dict(zip(futures, range(len(futures)), strict=True))
    last_progress = time.monotonic()
    dropped: set[Future[bytes | None]] = set()
    while pending:
        done, _ = wait(pending, timeout=min(limit, 0.5), return_when=FIRST_COMPLETED)
        now = time.monotonic()
        for future in done:
            del pending[future]
            last_progress = now
        for future, index in list(pending.items()):
            overdue = index in started and now - started[index] > limit
            if overdue or now - last_progress > limit:  # stuck, or waiting behind workers that are stuck
                del pending[future]
                dropped.add(future)  # its result is never read, even if it comes later
    return [None if f in dropped else f.result() for f in futures]


def _binary_or_none(device_name: str, src: str, started: dict[int, float] | None, index: int = 0) -> bytes | None:
    if started is not None:
        started[index] = time.monotonic()
    try:
        return _compile_source(device_name, src)
    except Exception:
        return None


def _compile_all(device_name: str, asts: list[UOp], flags: CodegenFlags) -> list[tuple[ProgramSource, bytes] | None]:
    """Source and binary of every kernel (None: failed to render or compile); equal sources compile once."""
    sources = [_render(device_name, ast, flags) for ast in asts]
    unique = list(dict.fromkeys(s.src for s in sources if s is not None))
    binaries = dict(zip(unique, _compile_sources(device_name, unique), strict=True))
    return [None if s is None or binaries[s.src] is None else (s, binaries[s.src]) for s in sources]  # type: ignore[misc]


def device_cost(
    original: UOp, device_name: str, flags: CodegenFlags, timer: CandidateTimer
) -> Callable[[list[Candidate]], list[float]]:
    """The cost function BEAM uses on a device: seconds per launch, timed by `timer` (inf: dropped). A program
    whose source equals one already rendered is dropped before it is compiled (another opt list that renders the
    same kernel: PADTO to a size the axis has, a SWAP of two equal loops)."""
    best = math.inf
    seen: set[str] = set()

    def cost(candidates: list[Candidate]) -> list[float]:
        nonlocal best
        sources = [_render(device_name, with_opts(original, c.opts), flags) for c in candidates]
        fresh: dict[str, ProgramSource] = {}
        for source in sources:
            if source is not None and source.src not in seen:
                fresh.setdefault(source.src, source)
        seen.update(fresh)
        timer.prepare()  # a spare timing process starts while the compiler runs
        binaries = dict(zip(fresh, _compile_sources(device_name, list(fresh)), strict=True))
        results = []
        for source in sources:
            binary = binaries.pop(source.src, None) if source is not None else None  # a repeat: already popped
            if source is None or binary is None:
                results.append(math.inf)
                continue
            seconds = timer.time(source, binary, best)
            best = min(best, seconds)
            results.append(seconds)
        return results

    return cost


def _heuristic_seeds(ast: UOp, flags: CodegenFlags) -> list[tuple[Opt, ...]]:
    """The hand-coded opts as a starting point: the search then refines them, and is never slower than them.
    (None for a kernel that asks for opts of its own: they are where the search starts.)"""
    info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
    if info.opts_to_apply or info.applied_opts:
        return []
    try:
        optimizer = KernelOptimizer(ast, flags.has_local, flags.core_groups)
        return [tuple(hand_coded_optimizations(optimizer, flags.max_lanes))]
    except KernelOptError:
        return []


def confirm(
    ast: UOp,
    device_name: str,
    flags: CodegenFlags,
    timer: CandidateTimer,
    found: tuple[Opt, ...],
    rivals: list[tuple[Opt, ...]],
    seconds: float,
    until: float = math.inf,
) -> tuple[tuple[Opt, ...], float]:
    """The search's winner timed against `rivals` (the hand-coded opts) in turns, CONFIRM_ROUNDS times (fewer, at
    least one, once time.monotonic() passes `until`): on a loaded machine one lucky timing must not make a slower
    kernel the winner. Returns the opts with the lowest median."""
    contenders = list(dict.fromkeys([found, *rivals]))
    if len(contenders) == 1:
        return found, seconds
    compiled = _compile_all(device_name, [with_opts(ast, opts) for opts in contenders], flags)
    samples: dict[tuple[Opt, ...], list[float]] = {opts: [] for opts in contenders}
    for turn in range(CONFIRM_ROUNDS):
        if turn and time.monotonic() > until:
            break
        for opts, program in zip(contenders, compiled, strict=True):
            if program is not None:
                samples[opts].append(timer.time(program[0], program[1], math.inf))
    medians = {opts: statistics.median(times) for opts, times in samples.items() if times}
    if not medians:
        return found, seconds
    best = min(medians, key=lambda opts: medians[opts])
    return best, medians[best]


def search_opts(
    ast: UOp,
    device_name: str,
    width: int,
    ignore_cache: bool | None = None,
    flags: CodegenFlags | None = None,
    on_round: Callable[[SearchRound], None] | None = None,
) -> BeamResult:
    """The best opts for kernel `ast` on `device_name` with a beam of `width`, from the cache or by searching."""
    device_name = Device.canonicalize(device_name)
    ignore = bool(IGNORE_BEAM_CACHE) if ignore_cache is None else ignore_cache
    if not ignore:
        hit = cached_opts(ast, device_name, width)
        if hit is not None:
            return hit
    flags = for_renderer(CodegenFlags.from_environment() if flags is None else flags, renderer_for(Device[device_name]))
    budget = float(BEAM_TIME_BUDGET.value) or None
    start = time.monotonic()
    until = start + budget if budget is not None else math.inf
    rounds: list[SearchRound] = []

    def report(round_: SearchRound) -> None:
        rounds.append(round_)
        if on_round is not None:
            on_round(round_)

    timer = CandidateTimer(ast, device_name)
    seeds = _heuristic_seeds(ast, flags)
    try:
        opts, seconds = beam_search(
            ast, width, device_cost(ast, device_name, flags, timer), on_round=report, has_local=flags.has_local,
            core_groups=flags.core_groups, seeds=seeds, chunk=max(4, 2 * int(BEAM_WORKERS)),
            time_budget=None if budget is None else SEARCH_SHARE * budget - (time.monotonic() - start),
        )  # fmt: skip
        opts, seconds = confirm(ast, device_name, flags, timer, opts, seeds, seconds, until)
    finally:
        timer.close()
    out_of_time = bool(rounds) and rounds[-1].out_of_time
    result = BeamResult(opts, seconds, cached=False, out_of_time=out_of_time)
    if DEBUG >= 1:
        print(_summary(ast, width, result, rounds, time.monotonic() - start))
    store_opts(ast, device_name, width, result)
    return result


def _summary(ast: UOp, width: int, result: BeamResult, rounds: list[SearchRound], elapsed: float) -> str:
    """The DEBUG=1 line of a finished search: how long, how far, and whether the time budget cut it short."""
    name = ast.arg.name if isinstance(ast.arg, KernelInfo) else "kernel"
    timed = sum(r.timed for r in rounds)
    line = f"BEAM {width} {name}: {elapsed:.1f} s, {len(rounds)} rounds, {timed} candidates timed, "
    line += f"{result.seconds * 1e6:.1f} us with {list(result.opts)}"
    if result.out_of_time:
        line += f"; time budget of {float(BEAM_TIME_BUDGET.value):g} s spent (BEAM_TIME_BUDGET): the best so far"
    return line
