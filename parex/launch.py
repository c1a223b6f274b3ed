"""Multi-process runs on JAX's own multi-controller runtime (`jax.distributed`), nothing else.

    parex launch --processes 2 --devices-per-process 4 -- run --layout data=8 --steps 5
    srun --ntasks-per-node=1 parex launch --cluster -- run --layout replica=4,data=8,...

Local: N processes on this machine, each with D emulated CPU devices, join through
`jax.distributed.initialize("127.0.0.1:PORT", N, i)` and see one mesh of N·D devices (CPU
collectives over gloo). Process 0 prints; the others' output is dropped unless they fail. If a
process dies, the launcher stops the others and says which one and why; a process that cannot
reach the others gives up after --init-timeout seconds.

Cluster: one process per host, started by the cluster (SLURM's srun, mpirun, or a TPU VM's
runtime); `jax.distributed.initialize()` reads the coordinator, process count and index from the
environment (SLURM_*, OMPI_*, the TPU metadata), so nothing else needs installing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

from .errors import InputError

ENV = {"coordinator": "PAREX_COORDINATOR", "processes": "PAREX_NUM_PROCESSES",
       "index": "PAREX_PROCESS_ID", "devices": "PAREX_LOCAL_DEVICES",
       "timeout": "PAREX_INIT_TIMEOUT"}


# --- inside each process -------------------------------------------------------------------------

def join(coordinator: str | None = None, processes: int | None = None,
         index: int | None = None, local_devices: int | None = None,
         timeout_s: float = 60.0) -> int:
    """Join the other processes (all arguments None: read them from the cluster's environment)
    and start the backend; returns this process's index. Must run before JAX uses a backend."""
    import jax

    if local_devices:
        jax.config.update("jax_num_cpu_devices", local_devices)
    kwargs = {"initialization_timeout": int(timeout_s)}
    if coordinator is not None:
        kwargs |= {"coordinator_address": coordinator, "num_processes": processes,
                   "process_id": index}
    jax.distributed.initialize(**kwargs)
    jax.devices()  # start the backend now: later device requests only check the global count
    if jax.process_index() != 0:
        sys.stdout = open(os.devnull, "w")  # only process 0 prints
    else:  # native code (gloo) writes notes to file descriptor 1: send them to stderr
        sys.stdout.flush()
        sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
    return jax.process_index()


def join_from_env() -> int:
    """`join` with the settings the local launcher passes in the environment."""
    get = os.environ.get
    return join(get(ENV["coordinator"]), int(get(ENV["processes"])), int(get(ENV["index"])),
                int(get(ENV["devices"])), float(get(ENV["timeout"], "60")))


# --- the launcher ----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port(port: int) -> None:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise InputError(f"port {port} on 127.0.0.1 is in use: pick another with --port, or "
                             f"leave --port out to use a free one") from None


def launch_local(argv: list[str], processes: int, devices_per_process: int, *,
                 port: int | None = None, init_timeout_s: float = 60.0,
                 timeout_s: float | None = None, program: list[str] | None = None,
                 stdout=None) -> int:
    """Run `program + argv` (default: `python -m parex.cli.child` + a parex command) in
    `processes` local processes that form one mesh. Returns the first non-zero exit code, or 0;
    a failed or timed-out process stops the others."""
    if processes < 1 or devices_per_process < 1:
        raise InputError(f"--processes {processes} --devices-per-process {devices_per_process}: "
                         f"both must be at least 1")
    if port is None:
        port = free_port()
    else:
        check_port(port)
    program = program or [sys.executable, "-m", "parex.cli.child"]
    children, logs = [], []
    for i in range(processes):
        env = os.environ | {ENV["coordinator"]: f"127.0.0.1:{port}",
                            ENV["processes"]: str(processes), ENV["index"]: str(i),
                            ENV["devices"]: str(devices_per_process),
                            ENV["timeout"]: str(init_timeout_s)}
        env.setdefault("JAX_PLATFORMS", "cpu")
        # process 0 prints to this terminal; the others' errors are kept for a failure report
        log = None if i == 0 else tempfile.TemporaryFile()
        out = stdout if i == 0 else subprocess.DEVNULL
        children.append(subprocess.Popen(program + argv, env=env, stdout=out, stderr=log))
        logs.append(log)
    try:
        return _watch(children, logs, timeout_s)
    finally:
        _stop(children)
        for log in logs[1:]:
            log.close()


def _watch(children, logs, timeout_s) -> int:
    start = time.monotonic()
    while True:
        codes = [c.poll() for c in children]
        failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            i = failed[0]
            print(f"parex launch: process {i} of {len(children)} exited with code {codes[i]}; "
                  f"stopped the other processes. Its last output:\n{_tail(logs[i])}",
                  file=sys.stderr)
            return codes[i]
        if all(code == 0 for code in codes):
            return 0
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            running = [i for i, code in enumerate(codes) if code is None]
            print(f"parex launch: processes {running} still running after {timeout_s:g} s "
                  f"(--timeout); stopped them", file=sys.stderr)
            return 124
        time.sleep(0.1)


def _stop(children, grace_s: float = 5.0) -> None:
    """Terminate the children still running, then kill those that ignore it."""
    for c in children:
        if c.poll() is None:
            c.terminate()
    deadline = time.monotonic() + grace_s
    for c in children:
        try:
            c.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()


def _tail(log, lines: int = 15) -> str:
    if log is None:
        return "    (above)"
    log.seek(0)
    text = log.read().decode(errors="replace").strip().splitlines()
    return "\n".join("    " + line for line in text[-lines:]) or "    (nothing)"
