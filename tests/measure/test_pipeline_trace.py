"""The per-device trace bubble (parex.measure.trace): the parser on a hand-built trace, then
compiled p = 2 pipelines traced (slow)."""

import gzip
import json

import pytest

from parex.measure.trace import device_table, load_trace, summarize


def _op(tid, ts, dur, name, run="r1", device="0"):
    return {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur, "name": name,
            "args": {"hlo_op": name, "device_ordinal": device, "run_id": run}}


def _plain(tid, ts, dur, name):  # no tags: inherits its ancestor's, or is no device's
    return {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur, "name": name}


def _run(run, t0):
    """Device 0 on threads 1 and 2 (µs):  fusion [0,40) · ppermute [40,100) holding a Rendezvous
    [42,90) · while [100,180) holding fusion [105,150) · and on thread 2 fusion [120,160).
    Device 1 on thread 3: ppermute [0,150) holding a Rendezvous [1,140) · fusion [150,200)."""
    return [
        _plain(1, t0 - 5, 190, "ThunkExecutor::Execute"),
        _op(1, t0, 40, "fusion.1", run), _op(1, t0 + 40, 60, "ppermute.1", run),
        _plain(1, t0 + 42, 48, "Rendezvous"), _plain(1, t0 + 43, 46, "Wait: pending_threads=1/2"),
        _op(1, t0 + 100, 80, "while.1", run), _op(1, t0 + 105, 45, "fusion.2", run),
        _op(2, t0 + 120, 40, "fusion.3", run),
        _op(3, t0, 150, "ppermute.1", run, "1"), _plain(3, t0 + 1, 139, "Rendezvous"),
        _op(3, t0 + 150, 50, "fusion.1", run, "1"),
    ]


TRACE = {"traceEvents": [
    {"ph": "M", "pid": 1, "tid": 9, "name": "thread_name", "args": {"name": "python"}},
    _plain(9, 0, 5000, "$python run"),  # the python thread: no device's
    *_run("r1", 0), *_run("r2", 1000)]}


def test_trace_table_splits_each_device_step_into_compute_wait_and_other():
    table = device_table(TRACE)
    assert list(zip(table.run, table.device)) == [("r1", 0), ("r1", 1), ("r2", 0), ("r2", 1)]
    first = table.iloc[0]  # step [0,180); wait = the ppermute; compute = ops ∪ waits − wait
    assert first.step_s == pytest.approx(180e-6)
    assert first.wait_s == pytest.approx(60e-6)
    assert first.rendezvous_s == pytest.approx(48e-6)
    assert first.compute_s == pytest.approx((100 + 55 - 60) * 1e-6)  # [0,100) ∪ [105,160)
    assert first.other_s == pytest.approx(25e-6)  # [100,105) and [160,180)
    assert first.bubble == pytest.approx(60 / 180)
    second = table.iloc[1]
    assert (second.step_s, second.wait_s, second.compute_s) == pytest.approx(
        (200e-6, 150e-6, 50e-6))
    summary = summarize(table)
    assert summary["runs"] == 2
    assert summary["bubble"] == pytest.approx((60 / 180 + 150 / 200) / 2)
    assert summary["bubble_max"] == pytest.approx(0.75)


@pytest.mark.parametrize("name", ["all_gather.3", "reduce_scatter.5", "psum_invariant.8",
                                  "all_gather_invariant.2", "all-reduce.1"])
def test_every_spelling_xla_gives_a_collective_counts_as_waiting(name):
    # a collective thunk [0,60) with no Rendezvous traced in it, then a fusion [60,100)
    trace = {"traceEvents": [_op(1, 0, 60, name), _op(1, 60, 40, "fusion.1")]}
    row = device_table(trace).iloc[0]
    assert (row.wait_s, row.compute_s) == pytest.approx((60e-6, 40e-6))


def test_load_trace_reads_the_profilers_file_and_names_the_fix_when_absent(tmp_path):
    with pytest.raises(FileNotFoundError, match="jax.profiler.trace"):
        load_trace(tmp_path)
    run_dir = tmp_path / "plugins" / "profile" / "2026_01_01"
    run_dir.mkdir(parents=True)
    with gzip.open(run_dir / "host.trace.json.gz", "wt") as f:
        json.dump(TRACE, f)
    assert load_trace(tmp_path) == TRACE
    with pytest.raises(ValueError, match="device_ordinal"):
        device_table({"traceEvents": [_plain(9, 0, 5, "python")]})


@pytest.mark.slow
def test_traced_p2_steps_split_into_compute_wait_and_other_and_wait_at_least_the_table():
    """p = 2 on two of the emulated devices, m = 8, 1F1B and ZB-H1 each traced over 3 steps
    (~25 s of compile each): every device waits in collectives for part of its step, the parts
    add up to the step, the traced step is the timed one, and neither waits less than its
    table's fill and drain ((p−1)/(m+p−1) = 0.11 for 1F1B, 0.04 for ZB-H1). Whether ZB-H1 waits
    less than 1F1B is not asserted: on the loaded 2 cores it did in 4 of 5 runs (README)."""
    import jax

    from parex.config import TrainConfig, model_preset
    from parex.layout import Layout
    from parex.measure.trace import trace_steps
    from parex.studies.pipeline import _timer, table_bubbles

    model = model_preset("tiny").replace(layers=2)
    train = TrainConfig(global_batch=8, seq_len=64)
    for schedule in ("1f1b", "zbh1"):
        run = _timer(model, train, Layout(stage=2, schedule=schedule, microbatches=8),
                     jax.devices()[:2])
        timed = sorted(run() for _ in range(3))[1]
        t = trace_steps(run, repeats=3)
        assert t["runs"] == 3
        assert 0 < t["rendezvous_s"] <= t["wait_s"] < t["step_s"], t
        assert 0 < t["compute_s"] < t["step_s"] and t["other_s"] >= 0, t
        assert t["compute_s"] + t["wait_s"] + t["other_s"] == pytest.approx(t["step_s"])
        assert timed / 2 < t["step_s"] < 2 * timed, (t, timed)  # a noisy machine: a factor 2
        assert t["bubble"] >= table_bubbles(schedule, 2, 8)[0], (schedule, t)
