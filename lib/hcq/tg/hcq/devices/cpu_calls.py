"""Kernel calls made from C: the CPU engine's launch loop, without a ctypes call and Python objects per core_id.

A ctypes call costs about 0.7 us and the Python around each call (building ctypes arguments, handing out core_ids)
several more, while a replayed tiny kernel itself runs in well under a microsecond. This small C library, compiled
once per process (and kept by the compiler's disk cache), does the per-call work instead:

  - `tg_run_whole(kernel, total)` makes every call of one launch on the calling thread;
  - `tg_run_serial(calls, n)` runs n launches one after the other on the calling thread, all calls of each: a run of
    consecutive single-call launches (the norms, residual adds and small elementwise kernels of a decode step)
    costs one ctypes call in all;
  - `tg_run_together(calls, n, state, spin_ns)` runs n launches, some of them split, on every thread that calls it
    with the same state: the threads take each split launch's core_ids from its counter and spin until its last
    call returned before going on (a run of single-call launches is one step that one thread makes), so a TinyJit
    replay of a decode step puts every core to work at the cost of a few atomic operations per launch;
  - `tg_take_calls(kernel, total, counters)` takes a split launch's core_ids one at a time from a shared atomic
    counter and calls the kernel for each; every thread that helps with the launch calls it with the same counters,
    so the hand-out order and the "a late thread finds nothing left" behaviour are those of the Python Launch;
  - `tg_wait_finished(counters, total, spin_ns)` spins briefly for the other threads' last calls (a futex sleep
    and wake-up costs far more than the tail of a short launch);
  - `tg_wait_changed(word, seen, active, spin_ns)` lets a core thread that finished its calls spin briefly for the
    next launch of the command list being run instead of going to sleep at once (see CorePool).

Kernel arguments are read from the argument memory at each call (u64 addresses, then int32 values, as in
`CLikeArgsState`), so arguments patched between submissions (a replay's inputs, symbolic values) take effect. The
kernel is called through a pointer of its exact C type, chosen by a switch on (buffers, values); a launch with
more buffers or values than the switch covers goes through ctypes as before (`KernelRecord` returns None).
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

MAX_BUFS = 32  # the switch's cases cover every (buffers, values) pair up to these counts
MAX_VALS = 8
# How long a launching thread spins for the other threads' last calls before it sleeps, and how long a core thread
# that finished its calls spins for the next launch of the list being run (a decode step's split launches come a few
# microseconds apart, with the single-call kernels between them run in C). Both stay short: on a shared machine a
# spinning thread takes the CPU another thread needs (the SmolLM2 decode step on 2 cores at load 4.5, medians of 40
# in turns: 61.7 ms without the core spin, 62.2 ms with 20 us, 64.1 ms with 100 us; every call through ctypes 66.6).
# When the list ends the core spin stops at once.
WAIT_SPIN_NS = 10_000
CORE_SPIN_NS = 20_000


class KernelRecord(ctypes.Structure):
    """What C needs to call one launch's kernel: its address, its argument memory and the argument counts."""

    _fields_ = [("function", ctypes.c_void_p), ("args", ctypes.c_void_p),
                ("nbufs", ctypes.c_int32), ("nvals", ctypes.c_int32)]  # fmt: skip


def _call_case(nbufs: int, nvals: int) -> str:
    params = ", ".join(["void*"] * nbufs + ["int"] * (nvals + 1))
    args = ", ".join([f"b[{i}]" for i in range(nbufs)] + [f"v[{i}]" for i in range(nvals)] + ["(int)c"])
    return (f"    case {nbufs * (MAX_VALS + 1) + nvals}: "
            f"for (int64_t c = start; c < end; c++) ((void (*)({params}))k->function)({args}); return;")  # fmt: skip


def library_source() -> str:
    """The C source of the call library."""
    cases = "\n".join(_call_case(b, v) for b, v in itertools.product(range(MAX_BUFS + 1), range(MAX_VALS + 1)))
    return f"""#include <stdint.h>
#include <sched.h>
#include <time.h>
typedef struct {{ void *function; const char *args; int32_t nbufs, nvals; }} tg_kernel;
/* one launch of a serial run: a KernelRecord's address and how many core_ids it calls (two int64 from Python) */
typedef struct {{ const tg_kernel *kernel; int64_t total; }} tg_serial_call;

static void tg_call_range(const tg_kernel *k, int64_t start, int64_t end) {{
  void *const *b = (void *const *)k->args;
  const int32_t *v = (const int32_t *)(k->args + 8 * k->nbufs);
  switch (k->nbufs * {MAX_VALS + 1} + k->nvals) {{
{cases}
  }}
}}

void tg_run_whole(const tg_kernel *k, int64_t total) {{ tg_call_range(k, 0, total); }}

void tg_run_serial(const tg_serial_call *calls, int64_t n) {{
  for (int64_t i = 0; i < n; i++) tg_call_range(calls[i].kernel, 0, calls[i].total);
}}

/* counters[0]: the next core_id to take; counters[1]: how many calls returned. 1 when this thread made the last. */
int tg_take_calls(const tg_kernel *k, int64_t total, int64_t *counters) {{
  int finished_last = 0;
  for (;;) {{
    int64_t i = __atomic_fetch_add(&counters[0], 1, __ATOMIC_RELAXED);
    if (i >= total) return finished_last;
    tg_call_range(k, i, i + 1);
    if (__atomic_add_fetch(&counters[1], 1, __ATOMIC_ACQ_REL) == total) finished_last = 1;
  }}
}}

static int64_t tg_now_ns(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}}

static void tg_pause(void) {{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}}

/* A run of n launches made together by every thread that calls this with the same state (the launching thread
   and the core threads), in order: a launch starts once every call of the launch before it returned. It is cut into
   steps: a split launch (total > 1) is a step whose core_ids the threads take one at a time; consecutive single-call
   launches are one step that the thread taking it makes whole. state (zeroed, 1 + 2 * n int64): [0] the end of the
   last step known to be finished (a late thread starts there); [1 + 2 * i], [2 + 2 * i] the calls taken and returned
   of the step starting at launch i. A thread waiting for a step's calls on another thread spins for spin_ns, then
   gives its core away between looks (sched_yield): on a shared machine the thread it waits for may need it. */
static int64_t tg_step_end(const tg_serial_call *calls, int64_t n, int64_t i) {{
  if (calls[i].total > 1) return i + 1;
  while (i < n && calls[i].total <= 1) i++;
  return i;
}}

static void tg_wait_returned(const int64_t *returned, int64_t total, int64_t spin_ns) {{
  int64_t deadline = 0;
  for (;;) {{
    for (int i = 0; i < 64; i++) {{
      if (__atomic_load_n(returned, __ATOMIC_ACQUIRE) >= total) return;
      tg_pause();
    }}
    if (deadline == 0) deadline = tg_now_ns() + spin_ns;
    else if (tg_now_ns() > deadline) sched_yield();
  }}
}}

void tg_run_together(const tg_serial_call *calls, int64_t n, int64_t *state, int64_t spin_ns) {{
  int64_t i = 0;
  while (i < n) {{
    int64_t finished = __atomic_load_n(&state[0], __ATOMIC_ACQUIRE);
    if (finished > i) {{
      i = finished;
      continue;
    }}
    int64_t end = tg_step_end(calls, n, i), total = calls[i].total > 1 ? calls[i].total : 1;
    int64_t *taken = &state[1 + 2 * i], *returned = &state[2 + 2 * i];
    for (int64_t call; (call = __atomic_fetch_add(taken, 1, __ATOMIC_RELAXED)) < total;) {{
      if (calls[i].total > 1) tg_call_range(calls[i].kernel, call, call + 1);
      else for (int64_t j = i; j < end; j++) tg_call_range(calls[j].kernel, 0, calls[j].total);
      __atomic_add_fetch(returned, 1, __ATOMIC_RELEASE);
    }}
    tg_wait_returned(returned, total, spin_ns);
    while (finished < end && !__atomic_compare_exchange_n(&state[0], &finished, end, 0, __ATOMIC_RELEASE,
                                                          __ATOMIC_ACQUIRE)) {{
    }}
    i = end;
  }}
}}

/* Spin until counters[1] (calls returned) reaches total, for at most spin_ns; 1 when it did. */
int tg_wait_finished(const int64_t *counters, int64_t total, int64_t spin_ns) {{
  int64_t deadline = tg_now_ns() + spin_ns;
  do {{
    for (int i = 0; i < 64; i++) {{
      if (__atomic_load_n(&counters[1], __ATOMIC_ACQUIRE) >= total) return 1;
      tg_pause();
    }}
  }} while (tg_now_ns() < deadline);
  return __atomic_load_n(&counters[1], __ATOMIC_ACQUIRE) >= total;
}}

/* Spin until *word differs from seen, for at most spin_ns and only while *active is not 0; 1 when it changed. */
int tg_wait_changed(const int64_t *word, int64_t seen, const int64_t *active, int64_t spin_ns) {{
  int64_t deadline = tg_now_ns() + spin_ns;
  do {{
    for (int i = 0; i < 64; i++) {{
      if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != seen) return 1;
      if (!__atomic_load_n(active, __ATOMIC_ACQUIRE)) return 0;
      tg_pause();
    }}
  }} while (tg_now_ns() < deadline);
  return __atomic_load_n(word, __ATOMIC_ACQUIRE) != seen;
}}
"""


class NativeCalls:
    """The loaded call library, with the typed entry points the CPU engine uses."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._library = library  # (its functions keep it loaded; kept for clarity)
        self.run_whole = library.tg_run_whole
        self.run_whole.argtypes, self.run_whole.restype = [ctypes.POINTER(KernelRecord), ctypes.c_int64], None
        self.run_serial = library.tg_run_serial
        self.run_serial.argtypes, self.run_serial.restype = [ctypes.c_void_p, ctypes.c_int64], None
        self.take_calls = library.tg_take_calls
        self.take_calls.argtypes = [ctypes.POINTER(KernelRecord), ctypes.c_int64, ctypes.c_void_p]
        self.take_calls.restype = ctypes.c_int
        self.wait_finished = library.tg_wait_finished
        self.wait_finished.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        self.wait_finished.restype = ctypes.c_int
        self.run_together = library.tg_run_together
        self.run_together.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
        self.run_together.restype = None
        self.wait_changed = library.tg_wait_changed
        self.wait_changed.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
        self.wait_changed.restype = ctypes.c_int

    @staticmethod
    def record(function: Any, args_addr: int, num_bufs: int, num_vals: int) -> KernelRecord | None:
        """The C record of a launch's kernel, or None when its argument counts are beyond the library's switch."""
        if num_bufs > MAX_BUFS or num_vals > MAX_VALS:
            return None
        address = ctypes.cast(function, ctypes.c_void_p).value
        return KernelRecord(address, args_addr, num_bufs, num_vals)


def load_native_calls(compiler: Any, load: Any) -> NativeCalls | None:
    """Compile and load the call library with `compiler` (a CCompiler) and `load` (bytes -> CDLL); None where
    that fails (no C compiler, a 32-bit platform): the engine then makes every call through ctypes."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:  # the argument memory holds u64 addresses
        return None
    try:
        return NativeCalls(load(compiler.compile(library_source())))
    except Exception:  # noqa: BLE001 -- any failure leaves the ctypes path, which works everywhere
        return None
