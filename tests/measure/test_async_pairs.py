"""Which collectives a compiled module overlaps (parex.measure.async_pairs): on a GPU-style
module written from XLA's documented syntax, and on the emulated CPU mesh's own compiled step,
whose collectives are synchronous, as the xla-cpu convention prices them."""

import jax
import pytest

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.measure.async_pairs import async_pairs, overlap_summary, synchronous_collectives
from parex.predict import predict

# a scheduled GPU module: an all-gather whose start is placed before an unrelated GEMM (XLA's
# latency-hiding scheduler), a reduce-scatter wrapped in async-start/-done with a fusion inside,
# an all-reduce pair with nothing between, and an async-start around a non-collective
OVERLAPPED = """HloModule jit_step, is_scheduled=true

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.1 = f32[] add(f32[] %x, f32[] %y)
}

%async_rs (param_0: f32[64,64]) -> f32[16,64] {
  %param_0 = f32[64,64]{1,0} parameter(0)
  ROOT %reduce-scatter.1 = f32[16,64]{1,0} reduce-scatter(f32[64,64]{1,0} %param_0), channel_id=4, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, to_apply=%add
}

%async_copy (param_0: f32[8]) -> f32[8] {
  %param_0 = f32[8]{0} parameter(0)
  ROOT %copy.9 = f32[8]{0} copy(f32[8]{0} %param_0)
}

%fused_mul (param_0: f32[64,64]) -> f32[64,64] {
  %param_0 = f32[64,64]{1,0} parameter(0)
  ROOT %multiply.1 = f32[64,64]{1,0} multiply(f32[64,64]{1,0} %param_0, f32[64,64]{1,0} %param_0)
}

ENTRY %main (p0: f32[16,32], p1: f32[32,64], p2: f32[64,64], p3: f32[8]) -> f32[16,64] {
  %p0 = f32[16,32]{1,0} parameter(0)
  %p1 = f32[32,64]{1,0} parameter(1)
  %p2 = f32[64,64]{1,0} parameter(2)
  %p3 = f32[8]{0} parameter(3)
  %all-gather-start = (f32[16,32]{1,0}, f32[64,32]{1,0}) all-gather-start(f32[16,32]{1,0} %p0), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  %custom-call.1 = (f32[64,64]{1,0}, s8[4194304]{0}) custom-call(f32[64,64]{1,0} %p2, f32[64,64]{1,0} %p2), custom_call_target="__cublas$gemm"
  %all-gather-done = f32[64,32]{1,0} all-gather-done((f32[16,32]{1,0}, f32[64,32]{1,0}) %all-gather-start)
  %reduce-scatter-start = ((f32[64,64]{1,0}), f32[16,64]{1,0}) async-start(f32[64,64]{1,0} %p2), calls=%async_rs
  %fusion.1 = f32[64,64]{1,0} fusion(f32[64,64]{1,0} %p2), kind=kLoop, calls=%fused_mul
  %fusion.2 = f32[64,64]{1,0} fusion(f32[64,64]{1,0} %fusion.1), kind=kLoop, calls=%fused_mul
  %reduce-scatter-done = f32[16,64]{1,0} async-done(((f32[64,64]{1,0}), f32[16,64]{1,0}) %reduce-scatter-start), calls=%async_rs
  %all-reduce-start = f32[16,64]{1,0} all-reduce-start(f32[16,64]{1,0} %reduce-scatter-done), channel_id=5, replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  %all-reduce-done = f32[16,64]{1,0} all-reduce-done(f32[16,64]{1,0} %all-reduce-start)
  %copy-start = ((f32[8]{0}), f32[8]{0}) async-start(f32[8]{0} %p3), calls=%async_copy
  %copy-done = f32[8]{0} async-done(((f32[8]{0}), f32[8]{0}) %copy-start), calls=%async_copy
  ROOT %out = f32[16,64]{1,0} copy(f32[16,64]{1,0} %all-reduce-done)
}
"""


def test_compute_between_a_start_and_its_done_is_overlap():
    pairs = {p.start: p for p in async_pairs(OVERLAPPED)}
    assert set(pairs) == {"all-gather-start", "reduce-scatter-start", "all-reduce-start"}
    assert pairs["all-gather-start"].kind == "all-gather"
    assert pairs["all-gather-start"].compute_between == 1  # the cuBLAS GEMM
    assert pairs["reduce-scatter-start"].kind == "reduce-scatter"  # read off the wrapped op
    assert pairs["reduce-scatter-start"].compute_between == 2  # two fusions
    assert not pairs["all-reduce-start"].overlapped  # nothing scheduled inside it
    assert overlap_summary(OVERLAPPED) == {"pairs": 3, "overlapped": 2, "synchronous": 0}


def test_the_emulated_mesh_runs_its_collectives_synchronously_as_xla_cpu_prices_them():
    """parex's compiled step on the CPU mesh (tensor and sequence parallelism: gathers and
    scatters every block) holds no async pair: XLA's CPU backend runs each collective as one
    instruction, so the xla-cpu convention overlaps nothing and exposes every collective."""
    from parex.measure.compiled import compile_layout

    model, train = model_preset("tiny"), TrainConfig(global_batch=4, steps=1)
    layout = Layout(data=2, tensor=4, sp=True)
    _, compiled, _ = compile_layout(model, train, layout, jax.devices()[:8])
    summary = overlap_summary(compiled.as_text())
    assert summary["pairs"] == 0 and summary["synchronous"] > 0
    p = predict(model, train, layout, "cpu-local")
    assert p.overlaps is None  # nothing hides behind compute on the emulated mesh
    assert p.step_time_s["exposed_comm"] == pytest.approx(sum(c["seconds"]
                                                              for c in p.collectives))


def test_synchronous_collectives_leave_out_the_wrapped_ones():
    assert synchronous_collectives(OVERLAPPED) == 0
    plain = OVERLAPPED.replace("all-reduce-start(", "all-reduce(").replace(
        "  %all-reduce-done = f32[16,64]{1,0} all-reduce-done(f32[16,64]{1,0} %all-reduce-start)\n",
        "")
    assert synchronous_collectives(plain) == 1
    assert len(async_pairs(plain)) == 2


@pytest.mark.parametrize("text", ["", "HloModule empty\n"])
def test_a_module_without_collectives(text):
    assert overlap_summary(text) == {"pairs": 0, "overlapped": 0, "synchronous": 0}
