"""BEAM's timing process: candidates run in a child process, so one that runs too long is killed, not waited for.

    timer = CandidateTimer(ast, "CPU", {"n": 16})  # starts `python -m tg.hcq.engine.beam_timer` on first use
    seconds = timer.time(source, binary, best)   # inf: slower than EARLY_STOP_FACTOR x best, or killed
    timer.close()

A kernel running on CPU threads cannot be interrupted, so the parent waits for the child's answer only until the
deadline (`deadline`: the longest a candidate the child would still answer for can take, at least MIN_DEADLINE_SEC;
BEAM_RUN_TIMEOUT_SEC while nothing was timed yet); past it, the child is killed and a fresh one starts for the next
candidate. The child makes its own scratch buffers from the kernel's PARAMs, so a search never touches a
program's real inputs. It is started as a module (not by multiprocessing), so a user's script is never re-run.

Protocol on the child's stdin/stdout: pickled messages, each preceded by its length (8 bytes, little endian).
The parent sends (ast, device, var_vals) once and the child answers "ready" once its device and buffers exist; then
the parent sends (name, binary, global_size, variables, best) per candidate (a kernel of symbolic size launches with
its variables set to var_vals) and the child answers with the candidate's seconds per launch:
inf when its first timed launch is slower than EARLY_STOP_FACTOR x best; that launch alone when it is slower than
RETIME_FACTOR x best (clearly not the best: more launches would only cost time); else the fastest of TIMED_LAUNCHES.
"""

from __future__ import annotations

import math
import os
import pickle
import select
import struct
import subprocess
import sys
from typing import IO, Any

from tg.codegen.pipeline import ProgramSource
from tg.codegen.uop.ops import UOp
from tg.hcq.flags import BEAM_RUN_TIMEOUT_SEC

EARLY_STOP_FACTOR = 3.0  # a candidate slower than this times the best so far is dropped
MIN_DEADLINE_SEC = 0.25  # never kill sooner: the answer also waits for process scheduling on a loaded machine
RETIME_FACTOR = 1.5  # only a candidate whose first launch is within this times the best is timed again
TIMED_LAUNCHES = 3  # the first decides early stop; two more only for a candidate within RETIME_FACTOR


def deadline(best: float) -> float:
    """Seconds the parent waits for a candidate's answer when the best so far is `best`: its first launch at
    EARLY_STOP_FACTOR x best, or three at RETIME_FACTOR x best, whichever is longer, doubled for scheduling noise."""
    if math.isinf(best):
        return float(BEAM_RUN_TIMEOUT_SEC.value)
    longest = max(EARLY_STOP_FACTOR, TIMED_LAUNCHES * RETIME_FACTOR) * best
    return max(2 * longest, MIN_DEADLINE_SEC)


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the other side of the BEAM timer closed its pipe")
        data += chunk
    return data


def _receive(stream: IO[bytes]) -> Any:
    (size,) = struct.unpack("<Q", _read_exactly(stream, 8))
    return pickle.loads(_read_exactly(stream, size))


class CandidateTimer:
    """Times compiled candidates of one kernel in a child process (see the module docstring).

    A killed child is replaced by a spare that `prepare` started earlier (the caller starts it while the compiler
    runs, so its 0.3 s start-up is neither waited for nor timed with a candidate)."""

    def __init__(self, ast: UOp, device_name: str, var_vals: dict[str, int] | None = None) -> None:
        self.ast = ast
        self.device_name = device_name
        self.var_vals = dict(var_vals or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.spare: subprocess.Popen[bytes] | None = None
        self.killed = 0  # candidates that ran past their deadline

    def _start(self) -> subprocess.Popen[bytes]:
        """A new child, told its kernel; it answers "ready" once its buffers exist (not waited for here)."""
        command = [sys.executable, "-m", "tg.hcq.engine.beam_timer"]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert process.stdin is not None
        _send(process.stdin, (self.ast, self.device_name, self.var_vals))
        return process

    def prepare(self) -> None:
        """Start the spare child now if there is none (call it before work that is not timed)."""
        if self.spare is None:
            self.spare = self._start()

    def _child(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            self.process, self.spare = self.spare or self._start(), None
            assert self.process.stdout is not None
            _receive(self.process.stdout)  # ready: the deadlines below are for the candidates, not the start
        return self.process

    def time(self, source: ProgramSource, binary: bytes, best: float) -> float:
        """Seconds per launch of the candidate, or inf when it is dropped (slow, killed, or failed to run)."""
        child = self._child()
        assert child.stdin is not None and child.stdout is not None
        try:
            _send(child.stdin, (source.name, binary, source.global_size, source.variables, best))
        except BrokenPipeError:
            self._end_child()
            return math.inf
        ready, _, _ = select.select([child.stdout], [], [], deadline(best))
        if not ready:
            self.killed += 1
            self._end_child()  # it may be running for minutes: kill it, the next candidate gets a fresh child
            return math.inf
        try:
            return float(_receive(child.stdout))
        except (EOFError, pickle.UnpicklingError, struct.error):
            self._end_child()  # the child died running the candidate
            return math.inf

    def _end_child(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def close(self) -> None:
        self._end_child()
        if self.spare is not None:
            self.spare.kill()
            self.spare.wait()
            self.spare = None


def _serve(inbox: IO[bytes], outbox: IO[bytes]) -> None:
    from tg.hcq.device import Device
    from tg.hcq.engine.programs import CompiledProgram
    from tg.hcq.engine.timing import scratch_buffers, time_program

    ast, device_name, var_vals = _receive(inbox)
    device = Device[device_name]
    buffers = scratch_buffers(ast, device_name)
    _send(outbox, "ready")
    while True:
        try:
            name, binary, global_size, variables, best = _receive(inbox)
        except EOFError:
            return
        try:
            source = ProgramSource(name, "", global_size, (), (), 0, 0, variables)
            program = CompiledProgram(device_name, source, device.runtime(name, binary))
            seconds = time_program(program, buffers, repeats=1, var_vals=var_vals)
            if seconds <= RETIME_FACTOR * best:
                seconds = min(seconds, time_program(program, buffers, TIMED_LAUNCHES - 1, var_vals))
            elif seconds > EARLY_STOP_FACTOR * best:
                seconds = math.inf
        except Exception:
            seconds = math.inf
        _send(outbox, seconds)


if __name__ == "__main__":
    stdout = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # anything a kernel or import prints must not corrupt the protocol
    _serve(sys.stdin.buffer, stdout)
