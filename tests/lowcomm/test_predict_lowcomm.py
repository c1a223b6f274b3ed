"""The WAN predictor (parex.lowcomm.predict): its formulas, the H crossover, DiLoCo layouts in
`parex.predict.predict`, and its per-device bytes against the compiled outer programs."""

import math

import jax
import pytest

from parex.config import TrainConfig, model_preset
from parex.hardware import Link
from parex.measure.hlo import parse_collectives
from parex.layout import Layout, LayoutError
from parex.executor.mesh import make_mesh
from parex.lowcomm.diloco import DiLoCo
from parex import predict
from parex.predict import predict_batch
from parex.lowcomm.predict import allreduce_seconds, h_crossover, wan_link, wan_rows

WAN = Link(bandwidth=1e8, latency=0.01)  # 0.8 Gb/s, 10 ms
N, R = 1_000_000_000, 4  # 1B parameters, 4 replicas


def _rows(t_inner=2.0, H=100, **kw):
    return {r["method"]: r for r in wan_rows(t_inner, N, R, H, WAN, **kw)}


def test_ring_all_reduce_over_the_wan():
    S = 4e9
    assert allreduce_seconds(S, R, WAN) == pytest.approx(2 * 3 / 4 * S / 1e8 + 2 * 3 * 0.01)
    assert allreduce_seconds(S, 1, WAN) == 0.0


def test_step_times_and_bandwidth_follow_the_formulas():
    rows, t, H = _rows(), 2.0, 100
    t_sync = allreduce_seconds(4 * N, R, WAN)  # f32 pseudo-gradients
    assert rows["sync-dp"]["step_time_s"] == pytest.approx(t + t_sync)  # f32 gradients too
    assert rows["diloco"]["exposed_wan_s"] == pytest.approx(t_sync / H)
    assert rows["overlap"]["exposed_wan_s"] == pytest.approx(max(0, t_sync - H * t) / H)
    wire = 2 * (R - 1) / R * 4 * N
    assert rows["diloco"]["avg_bandwidth"] == pytest.approx(wire / (H * t))  # B_avg
    assert rows["diloco"]["peak_bandwidth"] == pytest.approx(wire / t)  # vanilla peak
    assert rows["overlap"]["peak_bandwidth"] == pytest.approx(rows["overlap"]["avg_bandwidth"])
    streaming = _rows(fragments=4)["streaming"]
    assert streaming["peak_bandwidth"] == pytest.approx(wire / t / 4)
    assert streaming["exposed_wan_s"] == pytest.approx(t_sync / H)  # same average as vanilla


def test_quantised_exchange_divides_the_wan_time():
    f32, int8 = _rows()["diloco"], _rows(outer_dtype="int8")["diloco"]
    ratio = int8["wan_bytes_per_step"] / f32["wan_bytes_per_step"]
    assert ratio == pytest.approx((1 + 4 / 256) / 4)  # one byte, and a float32 scale per 256


def test_h_crossover_is_where_the_wan_stops_being_the_bottleneck():
    t = 2.0
    t_sync = allreduce_seconds(4 * N, R, WAN)
    h = h_crossover(t_sync, t)
    assert h == math.ceil(t_sync / t)
    at, below = _rows(t, h), _rows(t, h - 1)
    assert at["overlap"]["exposed_wan_s"] == 0 < below["overlap"]["exposed_wan_s"]
    assert at["diloco"]["exposed_wan_s"] <= t < below["diloco"]["exposed_wan_s"]
    assert at["diloco"]["h_crossover"] == h


def test_predict_takes_diloco_layouts():
    model, train = model_preset("llama2-7b"), TrainConfig(global_batch=64, seq_len=4096)
    layout = Layout.parse("replica=2,fsdp=8,inner_steps=100")
    p = predict(model, train, layout, "h100-sxm", wan=wan_link(1.0, 10.0))
    inner = predict(model, train.replace(global_batch=32), Layout(fsdp=8), "h100-sxm")
    block = p.diloco
    assert block["inner_step_s"] == pytest.approx(inner.step_time_s["total"])
    assert p.step_time_s["total"] == pytest.approx(block["inner_step_s"] + block["exposed_wan_s"])
    assert block["cross_replica_bytes_per_step"] == pytest.approx(4 * model.n_params / 8 / 100)
    assert p.n_devices == 16 and p.tokens_per_step == 64 * 4096
    assert block["sync_dp_step_s"] > p.step_time_s["total"]


def test_predict_checks_diloco_layouts_and_predict_batch_refuses_them():
    model, train = model_preset("tiny"), TrainConfig()
    with pytest.raises(LayoutError, match="inner_steps=0"):
        predict(model, train, Layout.parse("replica=2,data=4,inner_steps=0"), "h100-sxm")
    with pytest.raises(ValueError, match="one at a time"):
        predict_batch(model, train, [Layout.parse("replica=2,data=4,inner_steps=4")], "h100-sxm")


@pytest.mark.parametrize("dtype", [pytest.param("f32", marks=pytest.mark.slow), "int8"])
def test_predicted_bytes_per_device_match_the_compiled_outer_program(dtype):
    """Replicas of data=2: each device exchanges its half of θ (the exchange is split over the
    copies), in the all-reduced buffer (f32) or all-to-all + all-gather (int8) convention."""
    model, train = model_preset("tiny"), TrainConfig(global_batch=8, seq_len=32)
    layout = Layout.parse(f"replica=2,data=2,inner_steps=10,outer_dtype={dtype}")
    dl = DiLoCo(model, train, layout, make_mesh(layout, jax.devices()[:4]))
    compiled = dl.lower_outer(0).compile()
    cols = parse_collectives(compiled.as_text(), dl.mesh.devices.shape, dl.mesh.axis_names)
    measured = sum(c.total_bytes for c in cols if c.axes == ("replica",)) / layout.inner_steps
    predicted = predict(model, train, layout, "cpu-local").diloco["cross_replica_bytes_per_step"]
    assert predicted == pytest.approx(measured, rel=0.01)  # the padding to equal pieces


def test_parex_lowcomm_prints_every_method_and_the_crossover(capsys):
    from parex.cli.main import main

    assert main(["lowcomm", "--model", "llama2-7b", "--hardware", "h100-sxm", "--layout",
                 "replica=2,fsdp=8,inner_steps=100", "--global-batch", "64", "--seq", "4096",
                 "--wan-gbps", "1"]) == 0
    out = capsys.readouterr().out
    for method in ("sync-dp", "diloco", "streaming", "overlap"):
        assert f"\n{method} " in out
    assert "the WAN stops being the bottleneck from H =" in out


def test_parex_predict_reads_the_diloco_keys(capsys):
    from parex.cli.main import main

    assert main(["predict", "--model", "llama2-7b", "--hardware", "h100-sxm", "--layout",
                 "replica=4,fsdp=8,inner_steps=500,outer_dtype=int8", "--global-batch", "256",
                 "--seq", "4096", "--wan-gbps", "10"]) == 0
    out = capsys.readouterr().out
    assert "4 replicas · H = 500 inner steps" in out and "WAN 10 Gb/s" in out
    assert main(["lowcomm", "--layout", "fsdp=8"]) == 2  # not DiLoCo: the fix is named
    assert "add replica=R and inner_steps=H" in capsys.readouterr().err
