"""`parex launch`: a parex command in several processes that form one mesh (parex.launch)."""

from __future__ import annotations

import argparse

from ..errors import InputError
from ..launch import join, launch_local, slurm_process

# --- parex launch ----------------------------------------------------------------------------

def cmd_launch(args) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise InputError("parex launch needs a command after --, e.g. "
                         "parex launch --processes 2 --devices-per-process 4 -- run --layout dp")
    if args.cluster and args.slurm:
        raise InputError("--cluster lets JAX read the environment, --slurm reads SLURM's "
                         "itself: give one of them")
    if args.cluster or args.slurm:  # this process is one of those the cluster started
        refuse_local_flags(args)
        if args.slurm:
            p = slurm_process(port=args.port)
            join(p.coordinator, p.processes, p.index, args.devices_per_process,
                 args.init_timeout, p.local_device_ids)
        else:
            join(timeout_s=args.init_timeout, local_devices=args.devices_per_process)
        return args.run(command)  # parex's own main, handed over by it
    processes = 2 if args.processes is None else args.processes
    devices = 4 if args.devices_per_process is None else args.devices_per_process
    return launch_local(command, processes, devices, port=args.port,
                        init_timeout_s=args.init_timeout, timeout_s=args.timeout)


def refuse_local_flags(args) -> None:
    """The cluster starts the processes: a process count or a launcher timeout is refused."""
    given = [flag for flag, value in (("--processes", args.processes),
                                      ("--timeout", args.timeout)) if value is not None]
    if not args.slurm and args.port is not None:
        given.append("--port")
    if given:
        raise InputError(f"{' '.join(given)}: the cluster starts the processes (srun "
                         f"--ntasks, its --time); drop {' '.join(given)}")


def add_launch(sub) -> None:
    p = sub.add_parser("launch", help="run a parex command in several processes that form one "
                                      "mesh (jax.distributed)")
    p.add_argument("--processes", type=int, default=None, help="local processes (default 2)")
    p.add_argument("--devices-per-process", type=int, default=None,
                   help="emulated CPU devices in each process (default 4; on a cluster: its "
                        "accelerators)")
    p.add_argument("--port", type=int, default=None,
                   help="coordinator port (default: a free one on 127.0.0.1; --slurm: one "
                        "derived from the job and step ids)")
    p.add_argument("--init-timeout", type=float, default=60.0,
                   help="seconds a process waits for the others to join (default 60)")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop every process after this many seconds (default: none)")
    p.add_argument("--cluster", action="store_true",
                   help="join a real cluster's processes (SLURM, MPI, TPU environment) instead "
                        "of starting local ones")
    p.add_argument("--slurm", action="store_true",
                   help="under srun: read SLURM's task variables (SLURM_PROCID, SLURM_NTASKS, "
                        "the node list, SLURM_LOCALID) and join the step's processes")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the parex command to run, after --: run, sweep, compare, ...")
    p.set_defaults(func=cmd_launch)
