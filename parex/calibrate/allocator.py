"""What the host's memory allocator costs a step of the emulated mesh (`parex calibrate`).

XLA:CPU gives each call of a compiled step one block for all its temporaries (the saved
activations included: `memory_analysis().temp_size_in_bytes`) and frees it when the call ends.
glibc's malloc serves a block above its mmap threshold by a fresh `mmap` and unmaps it on `free`,
so every call faults the block's 4 KiB pages in again, one by one, and the kernel zeroes each.
The threshold adapts to the blocks freed, up to DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit
systems (mallopt(3), M_MMAP_THRESHOLD); below it a block comes from a thread's arena and faults
in only when free() had trimmed that arena's top (some devices' blocks on some calls). A
thread's arena cannot hold a block over 64 MiB either, so larger blocks are always mapped.

Measured on this machine (tiny, 8 emulated devices, `ru_minflt` over steps): a step's minor
faults are its devices' temporaries exactly when they exceed 32 MiB (data=8: 8 × 34.6 MiB,
tensor=8: 8 × 66.3 MiB per step); below (data=2,seq=4,cp=ring: 24.2 MiB) whole blocks of 0-5
of the 8 devices per call, 0.1-0.46 of them on average over runs, left unpriced; perf puts
10-15 % of such a step's CPU time in the kernel's fault, zeroing and unmapping code
(docs/results/2026-12-emulated-step.md).

`page_fault_rate` times it: bytes per second that freshly mapped memory is written, less the
same writes into a block already mapped, with one thread per core at once (the cores the eight
devices share), per emulated device. numpy asks for transparent huge pages on large arrays
(`madvise`); XLA does not, so the probe switches that off to fault 4 KiB pages as a step does.
"""

from __future__ import annotations

import os
import platform
import statistics
import threading
import time

import numpy as np

GLIBC_MMAP_THRESHOLD_MAX = 32 * 2**20  # bytes, 64-bit glibc (mallopt(3))
PROBE_BYTES = 64 * 2**20  # above the threshold, so each allocation is a fresh mapping
ROUNDS = 3


def mmap_threshold_bytes() -> float:
    """The block size above which this process's allocator maps every call's temporaries
    afresh: glibc's ceiling; 0 where the C library is not glibc (not modelled there)."""
    return float(GLIBC_MMAP_THRESHOLD_MAX) if platform.libc_ver()[0] == "glibc" else 0.0


def _huge_pages(enabled: bool) -> bool:
    """Set numpy's transparent-huge-page advice for large arrays; return the previous setting."""
    core = getattr(np, "_core", None) or np.core  # numpy 2 moved it
    setter = getattr(core.multiarray, "_set_madvise_hugepage", None)
    return bool(setter(enabled)) if setter is not None else False


def _write_seconds(threads: int, fresh: bool, repeats: int = 3) -> float:
    """Seconds for `threads` threads at once to each write PROBE_BYTES `repeats` times, into a
    newly allocated block each time (`fresh`) or into one block kept mapped."""
    n = PROBE_BYTES // 4
    source = np.ones(n, np.float32)

    def work():
        kept = None if fresh else np.empty(n, np.float32)
        for _ in range(repeats):
            out = np.empty(n, np.float32) if fresh else kept
            np.multiply(source, 2.0, out=out)  # releases the GIL: the threads run at once
            del out

    pool = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def page_fault_rate(devices: int) -> float:
    """Bytes per second per emulated device that fresh 4 KiB pages are faulted in, zeroed and
    unmapped with every core busy (module docstring): the median over rounds of the fresh and
    the kept writes, alternated."""
    threads = max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                         else os.cpu_count() or 1, devices))
    before = _huge_pages(False)
    try:
        extra = []
        for _ in range(ROUNDS):
            fresh, kept = _write_seconds(threads, True), _write_seconds(threads, False)
            extra.append(fresh - kept)
    finally:
        _huge_pages(before)
    seconds = max(statistics.median(extra), 1e-9)
    return threads * 4 * PROBE_BYTES / seconds / devices  # the machine's rate, shared


__all__ = ["mmap_threshold_bytes", "page_fault_rate"]
