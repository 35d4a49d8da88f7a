"""The threads behind the CPU device: one engine thread per queue kind, and a pool of core threads.

An engine executes submitted command lists in order, like the command processor of a GPU: on its own thread, or
on a host thread that waits for their results and would otherwise sleep until woken (see CommandEngine). The
calls of a kernel launch (one per `core_id`; the C renderer cuts big kernels into a few calls per core) are
handed out one at a time to whichever thread is free, the launching thread included: on a machine shared with
other processes a thread that is not running does not hold back calls another thread could make, and a launch
ends when its last call returns, not when every core thread has reported back. Which thread makes a call changes
nothing in its result. ctypes releases the GIL for the duration of each C call, so the calls really run in
parallel. The calls themselves are made from C (tg.hcq.devices.cpu_calls): consecutive single-call launches of a
list in one C call; consecutive launches among which some are split (a TinyJit replay) in one C call per thread, all
threads together (NativeRun); a lone split launch's core_ids taken from atomic counters. While a list runs, a core
thread that finished its calls spins briefly for the list's next launch instead of sleeping. All threads are
daemons and start on first use, so an idle process starts none.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C functions under signal: see deferred_interrupt
import array
import collections
import contextlib
import ctypes
import itertools
import operator
import os
import queue
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tg.hcq.commands import (
    Command,
    CopyCommand,
    ExecCommand,
    MemoryBarrierCommand,
    PollBitCommand,
    SignalCommand,
    TimestampCommand,
    WaitCommand,
    WriteCommand,
)
from tg.hcq.devices.cpu_calls import CORE_SPIN_NS, WAIT_SPIN_NS, KernelRecord, NativeCalls
from tg.hcq.signal import load_signal_value, notify_memory_changed, sleep_until, store_signal_value
from tg.hcq.symbolic import concrete

KernelCall = Callable[[int, int], None]  # runs core_ids in [start, end)

# deferred_interrupt swaps the SIGINT handler twice per synchronize: the `signal` module's wrappers turn numbers and
# handlers into enums on the way (about 10 us a swap pair), the C functions underneath take and give plain values
SIGINT = int(signal.SIGINT)

# A launch whose first chunk ran faster than this is run whole on the launching thread from then on: handing a chunk
# to another core thread (a queue put, a wake-up, a queue get) costs tens of microseconds, and more when the
# machine is loaded, so splitting a tiny kernel (a norm, a residual add) makes it slower. A serial run that takes
# SERIAL_RECHECK times longer is split again (the kernel was not small after all, e.g. the first run was cached).
SERIAL_BELOW_S = 25e-6
SERIAL_RECHECK = 8

# A run of launches with split ones (a TinyJit replay) goes on every core or on the launching thread alone, whichever
# of the two took less time over its last RECENT_RUNS runs; every TRY_OTHER_EVERY runs the other way is timed again.
# On every core a thread that another process holds while it makes a call holds back the others until it is back (a
# scheduler time slice, milliseconds). SmolLM2-135M's decode step on 2 cores, the two ways alternated run by run in
# one process (medians of 40 each, float16 KV cache), took as long on both cores as on one at position 0 and 1.07x
# and 1.12x as long at positions 1000 and 4000 at load 6.5; at load 2 both cores took 0.72x as long at position 0.
RECENT_RUNS = 3
TRY_OTHER_EVERY = 16


class Launch:
    """The calls of one launch, taken one at a time by whichever thread is free; `done` is set when every call
    returned. A thread that comes late (another process held its core) finds no call left and goes back to sleep:
    the launch does not wait for it."""

    def __init__(self, run: KernelCall, total: int) -> None:
        self.run = run
        self.total = total
        self._take_next = itertools.count().__next__  # atomic under the GIL: each i is taken exactly once
        self._count_finished = itertools.count(1).__next__
        self.done = threading.Event()
        self.error: BaseException | None = None  # the first call that failed

    def wait(self) -> None:
        self.done.wait()

    def take_calls(self) -> None:
        for i in iter(self._take_next, None):
            if i >= self.total:
                return
            try:
                self.run(i, i + 1)
            except BaseException as error:  # raised on the launching thread once every call returned
                self.error = self.error or error
            if self._count_finished() == self.total:
                self.done.set()


class NativeLaunch:
    """A launch whose calls C makes (see tg.hcq.devices.cpu_calls): the threads that help take core_ids from shared
    atomic counters, one ctypes call per thread instead of one per core_id; the same contract as `Launch`.

    No Event per launch (creating one costs microseconds): the thread that returns the last call sets the pool's
    `finished` event, and a launching thread that has to sleep re-checks its own counters after every wake-up (a
    late set from an earlier launch only wakes it for nothing)."""

    def __init__(self, native: NativeCalls, kernel: KernelRecord, total: int, finished: threading.Event) -> None:
        self.native = native
        self.kernel = kernel
        self.total = total
        self.counters = (ctypes.c_int64 * 2)()  # next core_id to take, calls returned (each launch its own)
        self.finished = finished
        self.error: BaseException | None = None

    def take_calls(self) -> None:
        try:
            finished_last = self.native.take_calls(self.kernel, self.total, self.counters)
        except BaseException as error:  # (ctypes could not make the call: no core_id was taken, others take them)
            self.error = self.error or error
            return
        if finished_last:
            self.finished.set()

    def _all_returned(self) -> bool:
        return self.counters[1] >= self.total

    def wait(self) -> None:
        # the other threads' last calls usually end within microseconds: spin for them (in C, without the GIL)
        # rather than sleep on the event and be woken. (After a failed ctypes call the calls may never all be
        # taken: the error is raised at once instead; the device records it.)
        if self.error is not None or self.native.wait_finished(self.counters, self.total, WAIT_SPIN_NS):
            return
        while True:
            self.finished.clear()
            if self._all_returned():  # (checked after the clear: a set for this launch comes after its last call)
                return
            self.finished.wait()


class NativeRun:
    """Consecutive launches that C runs on every thread of the pool at once (tg_run_together in
    tg.hcq.devices.cpu_calls): the threads take each split launch's core_ids and wait for its last call before the
    next launch, all in one C call per thread, so a launch costs a few atomic operations instead of a hand-off to
    the core threads. A thread that comes late starts at the first launch not yet finished; the launching thread's
    call returns when every launch did, so there is nothing left to wait for."""

    def __init__(self, native: NativeCalls, calls: array.array, threads: int) -> None:
        self.native = native
        self.calls = calls  # (KernelRecord address, calls) pairs, see CommandEngine._native_launches
        self.count = len(calls) // 2
        self.total = threads
        self.state = (ctypes.c_int64 * (1 + 2 * self.count))()  # the C run's counters, zeroed
        self.error: BaseException | None = None

    def take_calls(self) -> None:
        try:
            self.native.run_together(
                self.calls.buffer_info()[0], self.count, ctypes.addressof(self.state), WAIT_SPIN_NS
            )
        except BaseException as error:  # (ctypes could not make the call: the other threads make every call)
            self.error = self.error or error

    def wait(self) -> None:
        pass  # the launching thread's take_calls returned after the last launch finished


AnyLaunch = Launch | NativeLaunch | NativeRun


class RunChoice:
    """Whether the next run of one replayed list of launches goes on every core (True) or on the launching thread
    alone (False): each way is timed at first, then the one whose recent runs took less time (median), and now and
    then the other again (see RECENT_RUNS)."""

    def __init__(self) -> None:
        self.recent: dict[bool, collections.deque[float]] = {
            together: collections.deque(maxlen=RECENT_RUNS) for together in (True, False)
        }
        self.runs = 0

    def together(self) -> bool:
        self.runs += 1
        unmeasured = [together for together, times in self.recent.items() if len(times) < 2]
        if unmeasured:
            return unmeasured[0]
        faster = min(self.recent, key=lambda together: statistics.median(self.recent[together]))
        return faster if self.runs % TRY_OTHER_EVERY else not faster

    def record(self, together: bool, seconds: float) -> None:
        self.recent[together].append(seconds)


class CorePool:
    """`count` cores: the calling thread plus `count - 1` daemon threads, started lazily."""

    def __init__(self, count: int, name: str) -> None:
        self.count = max(1, count)
        self.name = name
        self._inboxes: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()
        self.native: NativeCalls | None = None  # set by the engine once its C call library is loaded
        self._posted = ctypes.c_int64(0)  # split launches posted so far: spinning core threads watch it
        self._list_running = ctypes.c_int64(0)  # 1 while an engine runs a command list: core threads may spin
        self.spin_pickups = 0  # launches a core thread took while spinning, without a wake-up (tests, profiles)
        self.wakeups = 0  # launches a core thread took after sleeping on its inbox
        self.finished = threading.Event()  # set when a thread returned the last call of a NativeLaunch

    def _start(self) -> None:
        with self._lock:
            while len(self._inboxes) < self.count - 1:
                inbox: queue.SimpleQueue = queue.SimpleQueue()
                self._inboxes.append(inbox)
                name = f"{self.name}-core{len(self._inboxes)}"
                threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        batch_scheduling()
        while True:
            launch: AnyLaunch | None = inbox.get()
            self.wakeups += 1
            while launch is not None:
                launch.take_calls()
                launch = self._next_launch_without_sleeping(inbox)

    def _next_launch_without_sleeping(self, inbox: queue.SimpleQueue) -> AnyLaunch | None:
        """The next launch posted to `inbox` within CORE_SPIN_NS, watched by spinning in C (without the GIL) on the
        posted counter: the launches of a command list come microseconds apart, and a thread asleep on the queue
        would need a wake-up for each. None once the spin ran out (the thread then sleeps on the queue; the queue,
        not the counter, decides which launch it gets, so nothing posted is missed)."""
        native = self.native
        while native is not None and CORE_SPIN_NS > 0:
            seen = self._posted.value
            try:
                launch = inbox.get_nowait()
            except queue.Empty:
                posted, running = ctypes.addressof(self._posted), ctypes.addressof(self._list_running)
                if not native.wait_changed(posted, seen, running, CORE_SPIN_NS):
                    return None
                continue
            self.spin_pickups += 1
            return launch
        return None

    def set_list_running(self, running: bool) -> None:
        """Whether an engine runs a command list now: only then may core threads spin for its next launch."""
        self._list_running.value = running

    def run(self, run: KernelCall, total: int, program: Any = None) -> None:
        """Call run(i, i + 1) for every i in [0, total), each i on the next free thread (this one included); return
        when every call returned.

        `program` (any object that takes attributes) remembers how long its launches take: a small one runs in
        one call on this thread (see SERIAL_BELOW_S)."""
        if not self._ran_whole(lambda: run(0, total), total, program):
            self._run_split(Launch(run, total), program)

    def run_native(self, native: NativeCalls, kernel: KernelRecord, total: int, program: Any = None) -> None:
        """`run` for a launch whose calls C makes (see NativeLaunch)."""
        if not self._ran_whole(lambda: native.run_whole(kernel, total), total, program):
            self._run_split(NativeLaunch(native, kernel, total, self.finished), program)

    def run_together(self, native: NativeCalls, calls: array.array) -> None:
        """Run consecutive launches ((KernelRecord address, calls) pairs) on every core at once (see NativeRun)."""
        self._run_split(NativeRun(native, calls, self.count), None)

    def _ran_whole(self, run_all: Callable[[], None], total: int, program: Any) -> bool:
        """Make every call with `run_all` on this thread when the launch is not split (one call, one core, or a
        program whose split launches were fast); whether it did."""
        threads = min(self.count, total)
        if threads > 1 and program is not None and getattr(program, "run_serially", False):
            start = time.perf_counter()
            run_all()
            if time.perf_counter() - start > SERIAL_BELOW_S * SERIAL_RECHECK:
                program.run_serially = False
            return True
        if threads <= 1:
            if total > 0:
                run_all()
            return True
        return False

    def _run_split(self, launch: AnyLaunch, program: Any) -> None:
        """Hand `launch` to the core threads and take its calls here too; return when every call returned."""
        threads = min(self.count, launch.total)
        if len(self._inboxes) < threads - 1:
            self._start()
        for i in range(1, threads):
            self._inboxes[i - 1].put(launch)
        self._posted.value += 1  # (after the puts: a thread that sees the change finds the launch in its inbox)
        start = time.perf_counter()
        launch.take_calls()
        # this thread's share of the calls stands for a chunk: a launch whose whole run took less than
        # SERIAL_BELOW_S per thread gains nothing from the hand-offs
        if program is not None and time.perf_counter() - start < SERIAL_BELOW_S:
            program.run_serially = True
        launch.wait()
        if launch.error is not None:
            raise launch.error


def kernel_runner(function: Any, args_addr: int, num_bufs: int, num_vals: int) -> KernelCall:
    """Read the kernel arguments from memory (u64 addresses, then int32 values) and bind them for calls."""
    buf_addrs = (ctypes.c_uint64 * num_bufs).from_address(args_addr) if num_bufs else ()
    values = (ctypes.c_int32 * num_vals).from_address(args_addr + 8 * num_bufs) if num_vals else ()
    fixed = [ctypes.c_void_p(a) for a in buf_addrs] + [ctypes.c_int32(v) for v in values]

    def run(start: int, end: int) -> None:
        for core_id in range(start, end):
            function(*fixed, ctypes.c_int32(core_id))

    return run


class CommandEngine:
    """Executes submitted command lists in submission order, one command at a time.

    Its daemon thread runs the lists in the background, so the host can go on building the next kernel. A host
    thread that waits for the results runs the pending lists itself (`run_pending_until`): waking the engine thread,
    and later the waiting thread, costs hundreds of microseconds each on a loaded machine, while the waiting thread is
    already running and has nothing else to do. Whoever holds the executor role runs the lists, so the order stays
    the submission order whichever thread runs them. A waiting host thread never blocks inside a list: at a wait
    that does not hold yet it gives the rest of the list back to the engine thread and waits as before.
    """

    def __init__(
        self,
        name: str,
        cores: CorePool | None,
        on_error: Callable[[BaseException], None],
        native: Callable[[], NativeCalls | None] | None = None,
    ) -> None:
        self.name = name
        self.cores = cores
        self.on_error = on_error
        self.load_native = native  # loads the C call library on the first launch (None: calls through ctypes)
        self.native: NativeCalls | None = None
        self.native_runs = 0  # C runs of consecutive launches (tg_run_serial, tg_run_together), for tests and profiles
        self.native_run_launches = 0  # the launches those runs made
        self.together_runs = 0  # runs of those on every core (tg_run_together), for tests and profiles
        self._pending: collections.deque[tuple[Sequence[Command], int]] = collections.deque()  # (list, next index)
        self._executing = False  # the executor role: held by the one thread that runs lists now
        self._lock = threading.Lock()
        self._wake: queue.SimpleQueue = queue.SimpleQueue()  # a token: look at _pending again
        self._wake_posted = False  # a token is on its way: a second one would only wake the thread for nothing
        self._thread: threading.Thread | None = None
        self.busy = False  # executing a command that makes progress by itself (not a wait)

    def submit(self, commands: Sequence[Command]) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                    self._thread.start()
        with self._lock:
            self._pending.append((commands, 0))
        self._wake_engine_thread()

    def _wake_engine_thread(self) -> None:
        with self._lock:
            posted, self._wake_posted = self._wake_posted, True
        if not posted:
            self._wake.put(None)

    def _serve(self) -> None:
        batch_scheduling()
        while True:
            self._wake.get()
            with self._lock:
                self._wake_posted = False
            self._run_pending(until=None)

    def run_pending_until(self, done: Callable[[], bool]) -> bool:
        """Run pending lists on the calling thread until `done()` holds, nothing is pending, another thread holds the
        executor role, or a list waits for something that has not happened yet; what is left stays for the engine
        thread. Ctrl-C is held back while a command runs (a kernel launch stopped half way would leave its output
        half written) and delivered once the command completed; the rest of the list goes to the engine thread."""
        if not self._pending or self._executing:  # (read without the lock: a quick look, the lock decides)
            return False
        with deferred_interrupt() as interrupted:
            return self._run_pending(until=done, interrupted=interrupted)

    def _run_pending(self, until: Callable[[], bool] | None, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Run lists while this thread can take the executor role; `until` is None on the engine thread. Returns
        whether this thread ran any command. Core threads may spin for the next launch from the first list taken
        until the last one is done (lists queued back to back keep them spinning)."""
        helping = until is not None
        ran = took_a_list = False
        try:
            while True:
                with self._lock:
                    if self._executing or not self._pending or (until is not None and until()):
                        left_over = helping and bool(self._pending) and not self._executing
                        break
                    self._executing = True
                    commands, index = self._pending.popleft()
                if self.cores is not None and not took_a_list:
                    self.cores.set_list_running(True)
                took_a_list = True
                stopped_at = self._run_list(commands, index, helping, interrupted)
                ran = ran or stopped_at != index
                with self._lock:
                    if stopped_at is not None:
                        self._pending.appendleft((commands, stopped_at))
                    self._executing = False
                if stopped_at is not None:
                    left_over = True
                    break
        finally:
            if self.cores is not None and took_a_list:
                self.cores.set_list_running(False)
        if left_over:
            self._wake_engine_thread()  # it may have found the role taken and gone back to sleep
        return ran

    def _run_list(
        self, commands: Sequence[Command], start: int, helping: bool, interrupted: Callable[[], bool]
    ) -> int | None:
        """Execute commands[start:]. A helping host thread stops (returning the index it stopped at) before a wait
        that does not hold yet and after an interrupt. A command's error is recorded on the device and the list
        goes on, so its signals still fire."""
        index = start
        while index < len(commands):
            command = commands[index]
            if helping and (interrupted() or not _holds_now(command)):
                return index
            run: list[int] = []
            self.busy = not isinstance(command, (WaitCommand, PollBitCommand))
            try:
                run, split = self._native_launches(commands, index)
                if len(run) > 2:
                    assert isinstance(command, ExecCommand)  # (a run starts at a launch)
                    self._run_native_launches(run, split, command)
                else:
                    self.execute(command)
            except BaseException as error:
                self.on_error(error)
            finally:
                self.busy = False
            index += max(1, len(run) // 2)
        return None

    def _native_launches(self, commands: Sequence[Command], start: int) -> tuple[list[int], bool]:
        """The consecutive launches from `start` that C can call, as a flat list of (KernelRecord address, calls)
        pairs, the layout of tg_run_serial's and tg_run_together's arrays (empty when commands[start] is not such a
        launch), and whether one of them is split across cores."""
        native, cores = self._native_calls(), self.cores
        run: list[int] = []
        split = False
        if native is None or cores is None:
            return run, split
        first = commands[start]
        if type(first) is not ExecCommand:
            return run, split
        known = getattr(first.args_state, "native_run", None)
        if known is not None and _found_at(known.commands, commands, start):
            return known.run, True
        for command in itertools.islice(commands, start, None):
            if type(command) is not ExecCommand:
                break
            prepared = self._native_record(native, command)
            if prepared is None:
                break
            total = _calls(command)
            split = split or (total > 1 and cores.count > 1)
            run += (prepared[1], total)
        if split and len(run) > 2:  # a replay: it submits the same commands again (new ones when a launch size changed)
            first.args_state.native_run = FoundRun(tuple(commands[start : start + len(run) // 2]), run)
        return run, split

    def _run_native_launches(self, run: list[int], split: bool, first: ExecCommand) -> None:
        """One C call for consecutive launches (from `first` on): no ctypes call and no Python objects per launch.
        Launches split across cores are run by every core thread at once (tg_run_together) or all here, as the
        list's RunChoice (kept with the first launch's arguments, which a replay reuses) picks; others here
        (tg_run_serial)."""
        assert self.native is not None and self.cores is not None  # (_native_launches found the launches with them)
        calls = array.array("q", run)  # (an int64 array is built far faster than ctypes structures)
        if not split:
            self.native.run_serial(calls.buffer_info()[0], len(run) // 2)
        else:
            state = first.args_state
            choice: RunChoice = getattr(state, "run_choice", None) or RunChoice()
            state.run_choice = choice
            together, start = choice.together(), time.perf_counter()
            if together:
                self.cores.run_together(self.native, calls)
            else:
                self.native.run_serial(calls.buffer_info()[0], len(run) // 2)
            choice.record(together, time.perf_counter() - start)
            self.together_runs += together
        self.native_runs += 1
        self.native_run_launches += len(run) // 2

    def _native_calls(self) -> NativeCalls | None:
        """The C call library, loaded on first use; None on a copy engine or where it could not be built."""
        if self.load_native is not None and self.cores is not None:
            self.native, self.load_native = self.load_native(), None
            self.cores.native = self.native
        return self.native

    @staticmethod
    def _native_record(native: NativeCalls, command: ExecCommand) -> tuple[KernelRecord, int] | None:
        """The C call record of `command`'s kernel and its address, made once per argument state; None when its
        kernel has too many arguments for the library's switch (it is then called through ctypes)."""
        state = command.args_state
        prepared: tuple[KernelRecord, int] | bool | None = getattr(state, "device_record", None)
        if prepared is None:
            function = getattr(command.program, "function", None)  # (a broken command fails in execute, as before)
            if function is None:
                return None
            record = native.record(function, concrete(command.args_addr), len(state.bufs), len(state.vals))
            prepared = state.device_record = (record, ctypes.addressof(record)) if record is not None else False
        return prepared if isinstance(prepared, tuple) else None  # (False: C cannot call it)

    def execute(self, command: Command) -> None:
        """Carry out one resolved command (its symbolic fields were replaced by values at submit)."""
        if isinstance(command, WaitCommand):
            self._wait(concrete(command.value_addr), concrete(command.value))
        elif isinstance(command, SignalCommand):
            store_signal_value(concrete(command.value_addr), concrete(command.value))
        elif isinstance(command, TimestampCommand):
            ctypes.c_uint64.from_address(concrete(command.timestamp_addr)).value = time.monotonic_ns()
        elif isinstance(command, ExecCommand):
            self._exec(command)
        elif isinstance(command, CopyCommand):
            ctypes.memmove(concrete(command.dest_addr), concrete(command.src_addr), concrete(command.size))
        elif isinstance(command, WriteCommand):
            word = ctypes.c_uint64 if command.b64 else ctypes.c_uint32
            word.from_address(concrete(command.addr)).value = concrete(command.value)
            notify_memory_changed()
        elif isinstance(command, PollBitCommand):
            self._poll_bit(concrete(command.addr), concrete(command.value), command.mask)
        elif isinstance(command, MemoryBarrierCommand):
            pass  # host and CPU kernels share coherent memory; the queue hand-off already orders them
        else:
            raise TypeError(f"{self.name} cannot execute {command!r}")

    @staticmethod
    def _wait(value_addr: int, target: int) -> None:
        # Hardware waits forever; so do we, sleeping between looks at the value.
        while load_signal_value(value_addr) < target:
            sleep_until(lambda: load_signal_value(value_addr) >= target, 1.0)

    @staticmethod
    def _poll_bit(addr: int, value: int, mask: int) -> None:
        def matches() -> bool:
            return ctypes.c_uint32.from_address(addr).value & mask == value

        while not matches():
            sleep_until(matches, 1.0)

    def _exec(self, command: ExecCommand) -> None:
        if self.cores is None:
            raise RuntimeError(f"{self.name} is a copy engine and cannot run programs")
        program = command.program
        total = _calls(command)
        native = self._native_calls()
        prepared = None if native is None else self._native_record(native, command)
        if native is not None and prepared is not None:
            self.cores.run_native(native, prepared[0], total, program)
            return
        state = command.args_state
        run = kernel_runner(program.function, concrete(command.args_addr), len(state.bufs), len(state.vals))
        self.cores.run(run, total, program)


@dataclass(frozen=True)
class FoundRun:
    """A run of launches with split ones, as _native_launches found it: kept with its first launch's arguments, so
    that a replay that submits the same (resolved, immutable) commands again skips the work of finding it."""

    commands: tuple[Command, ...]
    run: list[int]


def _found_at(run_commands: tuple[Command, ...], commands: Sequence[Command], start: int) -> bool:
    """Whether `commands` holds these very command objects from `start` on."""
    end = start + len(run_commands)
    return end <= len(commands) and all(map(operator.is_, run_commands, itertools.islice(commands, start, end)))


def _calls(command: ExecCommand) -> int:
    """How many core_ids a resolved launch calls."""
    gx, gy, gz = command.global_size
    if type(gx) is int and type(gy) is int and type(gz) is int:  # (every resolved launch: checked inline)
        return gx * gy * gz
    return concrete(gx) * concrete(gy) * concrete(gz)


def _holds_now(command: Command) -> bool:
    """Whether a wait or poll command would pass at once (every other command can always run)."""
    if isinstance(command, WaitCommand):
        return load_signal_value(concrete(command.value_addr)) >= concrete(command.value)
    if isinstance(command, PollBitCommand):
        return ctypes.c_uint32.from_address(concrete(command.addr)).value & command.mask == concrete(command.value)
    return True


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[Callable[[], bool]]:
    """Hold SIGINT back for the block, which may ask whether one arrived; the signal is raised again after the
    block, so the handler that was installed (KeyboardInterrupt by default) sees it. Outside the main thread, or
    when the installed handler was not set from Python, nothing is held back."""
    if threading.current_thread() is not threading.main_thread() or _signal.getsignal(SIGINT) is None:
        yield lambda: False
        return
    received: list[int] = []
    previous = _signal.signal(SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield lambda: bool(received)
    finally:
        _signal.signal(SIGINT, previous)
    if received:
        signal.raise_signal(signal.SIGINT)


def batch_scheduling() -> None:
    """Ask Linux to schedule the calling thread as batch work (SCHED_BATCH): woken, it does not preempt the thread
    that woke it, so handing calls to a core thread cannot push the launching thread off its core."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:  # not allowed here: the thread keeps the normal policy
            pass
