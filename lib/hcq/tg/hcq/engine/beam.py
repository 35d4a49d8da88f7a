"""BEAM on a device: time candidate kernels for tg.codegen.opt.search, and remember the winners.

    result = search_opts(ast, "CPU", width=4)     # BeamResult(opts, seconds, cached)

Candidates are rendered here (equal sources are compiled and timed once), compile on `BEAM_WORKERS` threads, each
driving its own compiler process, then run on scratch buffers made from the kernel's PARAMs in a child process
(tg.hcq.engine.beam_timer), so a search never touches a program's real inputs. A candidate is dropped (cost inf)
when it fails to compile, takes longer than BEAM_TIMEOUT_SEC to compile (not waited for), renders the same source
as one already seen, or is slower than 3x the best so far; only one within 1.5x of the best is timed twice more,
and one that runs past its deadline is killed with its child process (a spare takes over). The winner is then timed
against the hand-coded opts in turns (`confirm`): it replaces them only when its median is faster by more than the
spread of those repeats (BeamResult.spread), else the hand-coded opts are kept.

BEAM_TIME_BUDGET (seconds, default 60; 0: none) bounds one kernel's search: the rounds get SEARCH_SHARE of it, and
when it is spent the search ends with the best so far (BeamResult.out_of_time; a DEBUG>=1 line says so).

Winners are kept in an sqlite table in the cache directory, keyed by (kernel key, width, device, renderer,
compiler identity: binary, version, flags, CPU model, codegen version: tg.codegen.serial.codegen_version). A hit
replays the opts with no timing, after checking that they still apply to the kernel: an entry whose opts do not
(a hand-edited or foreign entry) is dropped with a `warning:` line on stderr and the kernel is searched again.
IGNORE_BEAM_CACHE=1 searches again. `export_cache`/`import_cache` move results between machines of the same kind;
an import refuses entries whose opts are not well-formed (`opt_problem`).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import statistics
import sys
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
from tg.codegen.serial import codegen_version
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.ops import UOp
from tg.hcq.device import Device
from tg.hcq.engine.beam_timer import CandidateTimer
from tg.hcq.engine.programs import renderer_for
from tg.hcq.flags import BEAM_TIME_BUDGET, BEAM_TIMEOUT_SEC, BEAM_WORKERS

SEARCH_SHARE = 0.9  # of BEAM_TIME_BUDGET for the rounds: the rest for a chunk that runs long and confirm's turns
CONFIRM_ROUNDS = 3  # the winner and the hand-coded opts are timed this many times in turns before one is chosen
BEAM_SCHEMA = 2
TABLE = f"beam_v{BEAM_SCHEMA}"


class BeamCacheError(Exception):
    """A cache file that cannot be imported (wrong format, another machine kind)."""


@dataclass(frozen=True)
class BeamResult:
    opts: tuple[Opt, ...]
    seconds: float
    cached: bool
    out_of_time: bool = False  # the search ended at BEAM_TIME_BUDGET with the best found so far
    spread: float = 0.0  # seconds between the fastest and slowest of a contender's interleaved repeats (confirm)
    hand_coded_seconds: float | None = None  # the median of the hand-coded opts in those repeats


# ---------------------------------------------------------------------------------------------------- the cache


def _database() -> sqlite3.Connection:
    columns = (
        "kernel TEXT, width INTEGER, device TEXT, renderer TEXT, compiler TEXT, codegen TEXT, opts TEXT NOT NULL,"
        " seconds REAL, PRIMARY KEY (kernel, width, device, renderer, compiler, codegen)"
    )
    return open_db(os.path.join(cache_dir(), "beam.db"), [f"{TABLE} ({columns})"])


def _identity(device_name: str) -> tuple[str, str, str, str]:
    """(device, renderer, compiler identity, codegen version): the part of the cache key that is the machine and
    the code that makes kernels (opts found by another codegen may not apply, or not be the fastest, any more)."""
    device = Device[device_name]
    return device.device, type(renderer_for(device)).__name__, device.compiler.identity(), codegen_version()


KEY_WHERE = "kernel=? AND width=? AND device=? AND renderer=? AND compiler=? AND codegen=?"


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
    """The opts stored as `text`; BeamCacheError when it is not a list of well-formed opts."""
    try:
        opts = tuple(Opt(OptOps[op], axis, _from_plain(arg)) for op, axis, arg in json.loads(text))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise BeamCacheError(f"opts {text!r} cannot be read ({type(error).__name__}: {error})") from None
    for opt in opts:
        problem = opt_problem(opt)
        if problem is not None:
            raise BeamCacheError(f"{opt!r}: {problem}")
    return opts


AMOUNT_OPS = (OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.BLOCK,
              OptOps.PADTO, OptOps.SWAP)  # fmt: skip


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def opt_problem(opt: Opt) -> str | None:
    """Why `opt` is not a well-formed Opt (None when it is): the axis and arg types each op takes (see
    tg.codegen.opt.opts). Whether it applies to a kernel is only known with the kernel."""
    if opt.axis is not None and not _is_count(opt.axis):
        return f"axis {opt.axis!r} is not an axis number"
    if opt.op in AMOUNT_OPS:
        if opt.axis is None or not _is_count(opt.arg):
            return f"{opt.op.name} takes an axis and a whole number"
    elif opt.op is OptOps.SPLIT:
        arg = opt.arg
        well_formed = isinstance(arg, tuple) and len(arg) in (2, 3) and _is_count(arg[0])
        if not well_formed or not isinstance(arg[1], AxisType) or (len(arg) == 3 and not isinstance(arg[2], bool)):
            return "SPLIT takes an axis and (amount, AxisType[, top])"
    elif opt.op is OptOps.NOLOCALS and (opt.axis is not None or opt.arg is not None):
        return "NOLOCALS takes no axis and no arg"
    return None


def _apply_problem(ast: UOp, opts: tuple[Opt, ...], flags: CodegenFlags) -> str | None:
    """Why `opts` cannot be applied to kernel `ast` (None when they can)."""
    optimizer = KernelOptimizer(ast, flags.has_local, flags.core_groups)
    try:
        for opt in opts:
            optimizer.apply_opt(opt)
    except Exception as error:  # KernelOptError, or a malformed opt's TypeError: either way the entry is unusable
        return f"{type(error).__name__}: {error}"
    return None


def cached_opts(ast: UOp, device_name: str, width: int, flags: CodegenFlags | None = None) -> BeamResult | None:
    """The cached result for kernel `ast`, None when there is none or its opts no longer apply (then the entry is
    deleted and a `warning:` line printed, so the caller searches again)."""
    if CACHELEVEL.value == 0:
        return None
    key = (ast.key.hex(), width, *_identity(device_name))
    conn = _database()
    try:
        row = conn.execute(f"SELECT opts, seconds FROM {TABLE} WHERE {KEY_WHERE}", key).fetchone()
        if row is None:
            return None
        flags = for_renderer(flags or CodegenFlags.from_environment(), renderer_for(Device[device_name]))
        try:
            opts = _decode_opts(row[0])
            problem = _apply_problem(ast, opts, flags)
        except BeamCacheError as error:
            problem = str(error)
        if problem is None:
            return BeamResult(opts, row[1], cached=True)
        with conn:
            conn.execute(f"DELETE FROM {TABLE} WHERE {KEY_WHERE}", key)
    finally:
        conn.close()
    name = ast.arg.name if isinstance(ast.arg, KernelInfo) else "kernel"
    print(f"warning: the cached BEAM opts for {name} no longer apply ({problem}); dropped, searching again",
          file=sys.stderr)  # fmt: skip
    return None


def store_opts(ast: UOp, device_name: str, width: int, result: BeamResult) -> None:
    if CACHELEVEL.value == 0:
        return
    conn = _database()
    try:
        with conn:
            conn.execute(
                f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (ast.key.hex(), width, *_identity(device_name), _encode_opts(result.opts), result.seconds),
            )
    finally:
        conn.close()


EXPORT_KEYS = ("kernel", "width", "device", "renderer", "compiler", "codegen", "opts", "seconds")


def export_cache(path: str) -> int:
    """Write every cached result to `path` (JSON lines, one header line). Returns how many."""
    conn = _database()
    try:
        rows = conn.execute(f"SELECT {', '.join(EXPORT_KEYS)} FROM {TABLE}").fetchall()
    finally:
        conn.close()
    with open(path + ".tmp", "w") as out:
        out.write(json.dumps({"format": "tg-beam-cache", "schema": BEAM_SCHEMA}) + "\n")
        for row in rows:
            out.write(json.dumps(dict(zip(EXPORT_KEYS, row, strict=True))) + "\n")
    os.replace(path + ".tmp", path)
    return len(rows)


def _entry_problem(entry: Any) -> str | None:
    """Why an exported entry cannot be imported (None when it can)."""
    if not isinstance(entry, dict) or set(entry) != set(EXPORT_KEYS):
        return f"an entry needs exactly the fields {', '.join(EXPORT_KEYS)}"
    if not _is_count(entry["width"]) or not isinstance(entry["seconds"], int | float):
        return "width and seconds must be numbers"
    if not all(isinstance(entry[k], str) for k in ("kernel", "device", "renderer", "compiler", "codegen", "opts")):
        return "kernel, device, renderer, compiler, codegen and opts must be text"
    try:
        _decode_opts(entry["opts"])
    except BeamCacheError as error:
        return f"invalid opts: {error}"
    return None


@dataclass(frozen=True)
class ImportResult:
    imported: int
    other_machine: int  # entries made with another compiler or CPU model
    other_codegen: int  # entries made by another codegen version


def import_cache(path: str, device_name: str = "CPU") -> ImportResult:
    """Add the results in `path` made on a machine like this one by this codegen version. Entries for another
    compiler or CPU model, or another codegen, are refused (their opts were timed on different hardware or code).
    A file with a malformed entry (opts that would fail every program that looked them up) imports nothing: a
    BeamCacheError names its first such line."""
    with open(path) as source:
        try:
            header = json.loads(source.readline())
            entries = [(number, json.loads(line)) for number, line in enumerate(source, start=2) if line.strip()]
        except json.JSONDecodeError as error:
            raise BeamCacheError(f"{path} is not a tg-beam cache export ({error})") from None
    if not isinstance(header, dict) or header.get("format") != "tg-beam-cache":
        raise BeamCacheError(f"{path} is not a tg-beam cache export")
    if header.get("schema") != BEAM_SCHEMA:
        raise BeamCacheError(f"{path} has cache schema {header.get('schema')}, this tg reads schema {BEAM_SCHEMA}")
    _, _, local_compiler, local_codegen = _identity(device_name)
    invalid, accepted, other_machine, other_codegen = [], [], 0, 0
    for number, entry in entries:
        problem = _entry_problem(entry)
        if problem is not None:
            invalid.append(f"line {number}: {problem}")
        elif entry["compiler"] != local_compiler:
            other_machine += 1
        elif entry["codegen"] != local_codegen:
            other_codegen += 1
        else:
            accepted.append(tuple(entry[k] for k in EXPORT_KEYS))
    if invalid:
        raise BeamCacheError(f"{path} {invalid[0]} ({len(invalid)} malformed entries): nothing imported")
    conn = _database()
    try:
        with conn:
            conn.executemany(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)", accepted)
    finally:
        conn.close()
    return ImportResult(len(accepted), other_machine, other_codegen)


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
        opts = hand_coded_optimizations(optimizer, flags.max_lanes, flags.local_threads, flags.l2_bytes, flags.cores)
        return [tuple(opts)]
    except KernelOptError:
        return []


@dataclass(frozen=True)
class Confirmed:
    opts: tuple[Opt, ...]
    seconds: float  # its median over the repeats
    spread: float = 0.0  # the widest range (slowest - fastest) of any contender's repeats: what timing noise is
    hand_coded_seconds: float | None = None  # the best rival's median, when there was a rival


def confirm(
    ast: UOp,
    device_name: str,
    flags: CodegenFlags,
    timer: CandidateTimer,
    found: tuple[Opt, ...],
    rivals: list[tuple[Opt, ...]],
    seconds: float,
    until: float = math.inf,
) -> Confirmed:
    """The search's winner timed against `rivals` (the hand-coded opts) in turns, CONFIRM_ROUNDS times (fewer, at
    least one, once time.monotonic() passes `until`). The winner replaces the best rival only when its median is
    faster by more than the spread of the repeats: on a loaded machine a lucky timing, or a gain smaller than the
    noise, must not replace the built-in opts with a search result."""
    contenders = list(dict.fromkeys([found, *rivals]))
    if len(contenders) == 1:
        return Confirmed(found, seconds)
    compiled = _compile_all(device_name, [with_opts(ast, opts) for opts in contenders], flags)
    samples: dict[tuple[Opt, ...], list[float]] = {opts: [] for opts in contenders}
    for turn in range(CONFIRM_ROUNDS):
        if turn and time.monotonic() > until:
            break
        for opts, program in zip(contenders, compiled, strict=True):
            if program is not None:
                samples[opts].append(timer.time(program[0], program[1], math.inf))
    medians = {opts: statistics.median(times) for opts, times in samples.items() if times and math.isfinite(min(times))}
    if not medians:
        return Confirmed(found, seconds)
    spread = max(max(samples[opts]) - min(samples[opts]) for opts in medians)
    timed_rivals = [opts for opts in contenders[1:] if opts in medians]
    if not timed_rivals:
        return Confirmed(found, medians[found], spread)
    rival = min(timed_rivals, key=lambda opts: medians[opts])
    if found in medians and medians[rival] - medians[found] > spread:
        return Confirmed(found, medians[found], spread, medians[rival])
    return Confirmed(rival, medians[rival], spread, medians[rival])


def search_opts(
    ast: UOp,
    device_name: str,
    width: int,
    ignore_cache: bool | None = None,
    flags: CodegenFlags | None = None,
    on_round: Callable[[SearchRound], None] | None = None,
    var_vals: dict[str, int] | None = None,
) -> BeamResult:
    """The best opts for kernel `ast` on `device_name` with a beam of `width`, from the cache or by searching. A
    kernel of symbolic size is timed with its variables set to `var_vals`; its opts hold for every value (they are
    applied to the symbolic kernel), so they are cached under it."""
    device_name = Device.canonicalize(device_name)
    ignore = bool(IGNORE_BEAM_CACHE) if ignore_cache is None else ignore_cache
    if not ignore:
        hit = cached_opts(ast, device_name, width, flags)
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

    timer = CandidateTimer(ast, device_name, var_vals)
    seeds = _heuristic_seeds(ast, flags)
    try:
        opts, seconds = beam_search(
            ast, width, device_cost(ast, device_name, flags, timer), on_round=report, has_local=flags.has_local,
            core_groups=flags.core_groups, seeds=seeds, chunk=max(4, 2 * int(BEAM_WORKERS)),
            time_budget=None if budget is None else SEARCH_SHARE * budget - (time.monotonic() - start),
        )  # fmt: skip
        confirmed = confirm(ast, device_name, flags, timer, opts, seeds, seconds, until)
    finally:
        timer.close()
    out_of_time = bool(rounds) and rounds[-1].out_of_time
    result = BeamResult(confirmed.opts, confirmed.seconds, cached=False, out_of_time=out_of_time,
                        spread=confirmed.spread, hand_coded_seconds=confirmed.hand_coded_seconds)  # fmt: skip
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
