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

SLURM (`parex launch --slurm`, under srun): parex reads the step's environment itself and
passes every value explicitly: process index SLURM_PROCID of SLURM_NTASKS, the coordinator on
the step's first node (SLURM_STEP_NODELIST) at a port derived from the job and step ids (two
steps of one job do not collide; JAX_COORDINATOR_ADDRESS or --port overrides), and each task's
share of its node's GPUs (SLURM_LOCALID) when SLURM did not bind GPUs to tasks. Run in the batch
script without srun, or with GPUs that cannot be shared evenly, it stops with one line.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from .errors import InputError

ENV = {"coordinator": "PAREX_COORDINATOR", "processes": "PAREX_NUM_PROCESSES",
       "index": "PAREX_PROCESS_ID", "devices": "PAREX_LOCAL_DEVICES",
       "timeout": "PAREX_INIT_TIMEOUT"}


# --- inside each process -------------------------------------------------------------------------

def join(coordinator: str | None = None, processes: int | None = None,
         index: int | None = None, local_devices: int | None = None,
         timeout_s: float = 60.0, local_device_ids=None) -> int:
    """Join the other processes (all arguments None: read them from the cluster's environment)
    and start the backend; returns this process's index. Must run before JAX uses a backend.
    `local_devices`: emulated CPU devices; `local_device_ids`: the accelerators this process
    uses (None: all it sees)."""
    import jax

    if local_devices:
        jax.config.update("jax_num_cpu_devices", local_devices)
    kwargs = {"initialization_timeout": int(timeout_s)}
    if coordinator is not None:
        kwargs |= {"coordinator_address": coordinator, "num_processes": processes,
                   "process_id": index}
    if local_device_ids is not None:
        kwargs["local_device_ids"] = list(local_device_ids)
    try:
        jax.distributed.initialize(**kwargs)
    except ValueError as err:  # jax found no coordinator in the environment
        if coordinator is not None:
            raise
        raise InputError(f"no cluster to join ({err}): run `parex launch --cluster` under "
                         f"srun or mpirun, which set the process environment, or leave out "
                         f"--cluster to start local processes") from None
    jax.devices()  # start the backend now: later device requests only check the global count
    sys.stdout.flush()
    if jax.process_index() != 0:
        sys.stdout = open(os.devnull, "w")  # only process 0 prints
    else:
        sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # native code (gloo) writes notes to file descriptor 1: send them to stderr
    return jax.process_index()


def join_from_env() -> int:
    """`join` with the settings the local launcher passes in the environment."""
    get = os.environ.get
    return join(get(ENV["coordinator"]), int(get(ENV["processes"])), int(get(ENV["index"])),
                int(get(ENV["devices"])), float(get(ENV["timeout"], "60")))


# --- under SLURM: srun started this process -----------------------------------------------------

@dataclass(frozen=True)
class SlurmProcess:
    """This process's place in a SLURM job step, as `jax.distributed.initialize` needs it."""

    coordinator: str  # host:port of process 0 (the step's first node)
    processes: int  # SLURM_NTASKS
    index: int  # SLURM_PROCID
    local_device_ids: tuple[int, ...] | None  # this task's GPUs, None: all it sees


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: 'gpu[003-004,9],cpu1' -> 'gpu003'."""
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?([^,]*)", nodelist.strip())
    prefix, ranges, suffix = match.groups() if match else ("", None, "")
    first = re.split(r"[,-]", ranges)[0] if ranges else ""
    return prefix + first + suffix


def _whole(env: dict, name: str) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        raise InputError(f"{name}={env.get(name)!r}: parex launch --slurm needs SLURM's task "
                         f"variables; start it with srun (inside sbatch or salloc)") from None


def _device_ids(env: dict, local_id: int) -> tuple[int, ...] | None:
    """This task's share of its node's GPUs when SLURM left every task seeing all of them
    (no --gpus-per-task binding); None when the task sees only its own, or no GPUs."""
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "1")
    tasks = int(re.match(r"\d+", per_node).group())
    if len(visible) <= 1 or tasks == 1 or env.get("SLURM_GPUS_PER_TASK"):
        return None  # one task per node, or SLURM bound each task to its GPUs
    if "," in per_node or len(visible) % tasks:
        raise InputError(f"{len(visible)} GPUs visible to each of {per_node} tasks per node: "
                         f"ask srun for --gpus-per-task (each task its own GPUs), or one task "
                         f"per node")
    share = len(visible) // tasks
    return tuple(range(local_id * share, (local_id + 1) * share))


def slurm_process(env=None, port: int | None = None) -> SlurmProcess:
    """This process's SlurmProcess from SLURM's environment (srun's); the known pitfalls are
    refused with one line: not started by srun, an index outside the step, GPUs shared."""
    env = dict(os.environ if env is None else env)
    if "SLURM_JOB_ID" not in env:
        raise InputError("--slurm: no SLURM job here (SLURM_JOB_ID is unset): run "
                         "it with srun inside sbatch or salloc, or leave out --slurm")
    if "SLURM_STEP_ID" not in env:  # the batch script itself: one process, the others never come
        raise InputError("--slurm: this is the batch script, not a job step: "
                         "start it with `srun parex launch --slurm -- ...` (one process per task)")
    count, index = _whole(env, "SLURM_NTASKS"), _whole(env, "SLURM_PROCID")
    if not 0 <= index < count:
        raise InputError(f"SLURM_PROCID={index} is outside SLURM_NTASKS={count}: a heterogeneous "
                         f"job or a step with its own --ntasks; launch one srun step per run")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get(
        "SLURM_NODELIST", "")
    host = env.get("JAX_COORDINATOR_ADDRESS")
    if not host:
        if not nodelist:
            raise InputError("no SLURM node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): set "
                             "JAX_COORDINATOR_ADDRESS=host:port to name process 0's host")
        # one port per job step: two steps of one job on a node must not share a coordinator
        step = _whole(env, "SLURM_JOB_ID") * 1000 + _whole(env, "SLURM_STEP_ID")
        host = f"{first_host(nodelist)}:{port or COORDINATOR_PORTS[0] + step % 4096}"
    return SlurmProcess(host, count, index, _device_ids(env, _whole(env, "SLURM_LOCALID")))


COORDINATOR_PORTS = (61440, 65535)  # the ephemeral range's top 4096 ports, as jax's own default


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
