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
from parex.measure import measure

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
