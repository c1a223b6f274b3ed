"""`parex launch`: a parex command in several processes that form one mesh (parex.launch)."""

from __future__ import annotations

import argparse

from ..errors import InputError
from ..launch import join, launch_local

# --- parex launch ----------------------------------------------------------------------------

def cmd_launch(args) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise InputError("parex launch needs a command after --, e.g. "
                         "parex launch --processes 2 --devices-per-process 4 -- run --layout dp")
    if args.cluster:  # this process is one of those the cluster started
        join(timeout_s=args.init_timeout)
        return args.run(command)  # parex's own main, handed over by it
    return launch_local(command, args.processes, args.devices_per_process, port=args.port,
                        init_timeout_s=args.init_timeout, timeout_s=args.timeout)


def add_launch(sub) -> None:
    p = sub.add_parser("launch", help="run a parex command in several processes that form one "
                                      "mesh (jax.distributed)")
    p.add_argument("--processes", type=int, default=2, help="local processes (default 2)")
    p.add_argument("--devices-per-process", type=int, default=4,
                   help="emulated CPU devices in each process (default 4)")
    p.add_argument("--port", type=int, default=None,
                   help="coordinator port on 127.0.0.1 (default: a free one)")
    p.add_argument("--init-timeout", type=float, default=60.0,
                   help="seconds a process waits for the others to join (default 60)")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop every process after this many seconds (default: none)")
    p.add_argument("--cluster", action="store_true",
                   help="join a real cluster's processes (SLURM, MPI, TPU environment) instead "
                        "of starting local ones")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the parex command to run, after --: run, sweep, compare, ...")
    p.set_defaults(func=cmd_launch)
