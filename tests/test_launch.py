"""`parex launch`: local processes joined through jax.distributed form one mesh, and their runs
equal the one-process run; failures stop every process with a message instead of hanging.

Multi-process runs are slow (each process imports JAX and compiles on the shared cores): one
short one is in the default suite, the parity of every layout kind is marked slow.
"""

import json
import os
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.launch import launch_local
from parex.layout import Layout
from parex.entry import measure

PYTHON = sys.executable
ENV = os.environ | {"PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}


def launched(argv: list[str], processes: int, devices: int, timeout_s: float = 600) -> dict:
    """Run `parex launch ... -- argv --json` in subprocesses; return process 0's JSON."""
    cmd = [PYTHON, "-m", "parex.cli", "launch", "--processes", str(processes),
           "--devices-per-process", str(devices), "--timeout", str(timeout_s - 30),
           "--init-timeout", "120", "--", *argv, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def single(text: str, steps: int, seq: int, n: int):
    model, train = model_preset("tiny"), TrainConfig(seq_len=seq, steps=steps)
    return measure(model, train, Layout.parse(text), devices=jax.devices()[:n])


def test_two_processes_run_as_one_mesh():
    """2 processes × 1 device, data=2, against data=2 on two devices of this process."""
    out = launched(["run", "--layout", "data=2", "--steps", "2", "--seq", "32"], 2, 1)
    ref = single("data=2", 2, 32, 2)
    assert out["n_devices"] == 2
    np.testing.assert_allclose(out["losses"], ref.losses, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("text", [
    "data=8", "fsdp=8", "data=2,tensor=4", "data=2,stage=4,schedule=1f1b,microbatches=4",
    "replica=2,data=4,inner_steps=2", "replica=2,fsdp=2,tensor=2,inner_steps=2,outer_dtype=int8"])
def test_two_processes_of_four_devices_equal_one_of_eight(text):
    out = launched(["run", "--layout", text, "--steps", "4", "--seq", "64"], 2, 4)
    ref = single(text, 4, 64, 8)
    np.testing.assert_allclose(out["losses"], ref.losses, rtol=1e-6)
    assert out["comm_bytes_per_device"] == ref.comm_bytes_per_device
    if ref.diloco:
        assert (out["diloco"]["cross_replica_bytes_per_step"]
                == ref.diloco["cross_replica_bytes_per_step"])


# --- failures ------------------------------------------------------------------------------------

def test_a_port_in_use_is_refused_before_anything_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} on 127.0.0.1 is in use.*--port"):
            launch_local(["run"], 2, 1, port=port)


DIES = ("import os, sys, time\n"
        "if os.environ['PAREX_PROCESS_ID'] == '1':\n"
        "    sys.stderr.write('boom: process 1 fails\\n'); sys.exit(3)\n"
        "time.sleep(120)\n")


def test_a_dying_process_stops_the_others(capfd):
    start = time.monotonic()
    code = launch_local([], 2, 1, program=[PYTHON, "-c", DIES])
    assert code == 3 and time.monotonic() - start < 30  # process 0 was stopped, not waited for
    err = capfd.readouterr().err
    assert "process 1 of 2 exited with code 3; stopped the other processes" in err
    assert "boom: process 1 fails" in err


NEVER_JOINS = ("import os, sys\n"
               "if os.environ['PAREX_PROCESS_ID'] == '1':\n"
               "    sys.exit(0)\n"  # leaves without joining
               "from parex.cli.child import child_main\n"
               "sys.exit(child_main(['run', '--steps', '1']))\n")


@pytest.mark.slow
def test_initialize_times_out_when_a_process_never_joins(capfd):
    start = time.monotonic()
    code = launch_local([], 2, 1, program=[PYTHON, "-c", NEVER_JOINS], init_timeout_s=5,
                        timeout_s=120)
    assert code not in (0, 124) and time.monotonic() - start < 100
    assert "process 0 of 2 exited" in capfd.readouterr().err


def test_launch_cluster_outside_a_cluster_is_one_line_and_exit_2():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    result = subprocess.run([PYTHON, "-m", "parex.cli", "launch", "--cluster", "--", "run",
                             "--layout", "dp"], capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no cluster to join" in lines[0] and "srun" in lines[0]


# --- under SLURM (a faked srun environment) ------------------------------------------------------

SRUN = {"SLURM_JOB_ID": "4321", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "8", "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1", "SLURM_STEP_NODELIST": "gpu[003-004]",
        "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}


def test_slurm_process_reads_the_step_and_shares_the_gpus():
    from parex.launch import first_host, slurm_process

    assert first_host("gpu[003-004,9],cpu1") == "gpu003" and first_host("n1,n2") == "n1"
    p = slurm_process(SRUN | {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    assert (p.processes, p.index, p.local_device_ids) == (8, 5, (2, 3))  # 8 GPUs, 4 tasks
    host, port = p.coordinator.split(":")
    assert host == "gpu003" and 61440 <= int(port) <= 65535
    other_step = slurm_process(SRUN | {"SLURM_STEP_ID": "1"})
    assert other_step.coordinator != p.coordinator  # two steps of one job never share a port
    bound = SRUN | {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_GPUS_PER_TASK": "2"}
    assert slurm_process(bound).local_device_ids is None  # SLURM gave each task its own
    assert slurm_process(SRUN, port=7000).coordinator == "gpu003:7000"
    assert slurm_process(SRUN | {"JAX_COORDINATOR_ADDRESS": "head:1234"}).coordinator == (
        "head:1234")


@pytest.mark.parametrize("change, message", [
    ({"SLURM_JOB_ID": None}, "no SLURM job here"),
    ({"SLURM_STEP_ID": None}, "srun parex launch --slurm"),
    ({"SLURM_PROCID": "8"}, "SLURM_PROCID=8 is outside SLURM_NTASKS=8"),
    ({"SLURM_NTASKS": "x"}, "SLURM_NTASKS='x'"),
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"}, "6 GPUs visible to each of 4(x2) tasks"),
])
def test_slurm_pitfalls_are_one_line_and_exit_2(monkeypatch, capsys, change, message):
    from parex.cli.main import main

    for name in [k for k in os.environ if k.startswith(("SLURM_", "JAX_COORD"))]:
        monkeypatch.delenv(name)
    for name, value in (SRUN | change).items():
        if value is not None:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr("parex.launch.join", lambda *a: pytest.fail("joined"))
    assert main(["launch", "--slurm", "--", "run", "--layout", "dp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_launch_flags_a_cluster_sets_are_refused(capsys):
    from parex.cli.main import main

    assert main(["launch", "--slurm", "--processes", "4", "--", "run"]) == 2
    assert "--processes: the cluster starts the processes" in capsys.readouterr().err
    assert main(["launch", "--slurm", "--cluster", "--", "run"]) == 2


@pytest.mark.slow
def test_two_processes_under_a_faked_srun_run_as_one_mesh(tmp_path):
    """What `srun --ntasks 2 parex launch --slurm` starts: two processes that read only
    SLURM's variables (localhost as the node list), data=2 equal to the one-process run."""
    cmd = [PYTHON, "-m", "parex.cli", "launch", "--slurm", "--devices-per-process", "1",
           "--init-timeout", "120", "--", "run", "--layout", "data=2", "--steps", "2", "--seq",
           "32", "--json"]
    env = {k: v for k, v in ENV.items() if not k.startswith(("SLURM_", "OMPI_"))}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env | {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0",
                                         "SLURM_NTASKS": "2", "SLURM_PROCID": str(i),
                                         "SLURM_LOCALID": str(i), "SLURM_STEP_NODELIST":
                                         "localhost", "SLURM_STEP_TASKS_PER_NODE": "2"})
             for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    out = json.loads(outs[0][0])
    assert out["n_devices"] == 2 and outs[1][0] == ""  # only process 0 prints
    np.testing.assert_allclose(out["losses"], single("data=2", 2, 32, 2).losses, rtol=1e-6)
