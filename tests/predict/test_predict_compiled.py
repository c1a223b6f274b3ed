"""Predictions against the compiled step on the emulated mesh (convention "xla-cpu"): argument
memory exactly, total memory within 10 %, FLOPs within 5 % of XLA's cost analysis, collective
bytes per kind equal (up to a few fused loss scalars)."""

import jax
import pytest

from parex.config import TrainConfig, model_preset
from parex.record import KINDS, bytes_by_kind
from parex.layout import Layout
from parex.measure.compiled import compile_layout, compiled_stats
from parex.predict import predict

FAST = [("tiny", "data=8", "none", None), ("tiny", "tensor=8,sp=on", "none", None),
        ("tiny", "data=2,tensor=4", "none", None), ("tiny", "data=2,tensor=4,sp=on", "none", None)]
SLOW = [("tiny", "data=8,zero=1", "none", None), ("tiny", "data=8,zero=2", "none", None),
        ("tiny", "data=8,zero=2", "none", 1),  # 2 microbatches, accumulated per data replica
        ("tiny", "fsdp=8", "full", None), ("tiny", "tensor=8", "selective", None),
        ("tiny", "data=4,tensor=2,zero=1", "none", 1), ("tiny-llama", "data=2,tensor=4", "none",
                                                        None),
        ("tiny-llama", "fsdp=8", "selective", 1), ("tiny", "data=4,stage=2,schedule=1f1b,"
                                                   "microbatches=2", "none", None),
        ("tiny", "data=2,stage=4,microbatches=4", "none", None),
        ("tiny", "data=4,seq=2,cp=ring", "none", None),
        ("tiny", "data=4,seq=2,cp=ulysses", "none", None),
        ("tiny-llama", "data=2,tensor=4,sp=on,zero=2", "none", None),
        ("tiny", "fsdp=2,tensor=4,sp=on", "none", None), ("tiny", "fsdp=2,tensor=4,sp=on", "full",
                                                         None),
        # fsdp and ZeRO-3 under SP: weights gathered inside SP's regions, gradients
        # reduce-scattered there, the shard summed over the data replicas
        ("tiny", "data=2,fsdp=2,tensor=2,sp=on", "none", None),
        ("tiny", "data=2,tensor=4,sp=on,zero=3", "selective", None),
        ("tiny-llama", "fsdp=2,tensor=4,sp=on", "selective", None),
        # SP with context parallelism: XLA sums the weights of SP's regions over data and seq
        # at once, and the D-sized weights over seq and tensor
        ("tiny", "seq=2,tensor=2,fsdp=2,cp=ring,sp=on", "none", None),
        ("tiny", "data=2,seq=2,tensor=2,cp=ulysses,sp=on", "full", None),  # one gradient copy
        ("tiny", "data=2,seq=4,cp=ring", "full", None),
        # ring's step holds the blocks' weight gradients split over seq (each slice reduced
        # over data, per microbatch) and gathers them for the update, beside ZeRO-1's gather
        ("tiny", "data=2,seq=4,cp=ring,zero=1", "none", None),
        ("tiny", "data=2,seq=4,cp=ring,microbatches=2", "none", None),
        ("tiny-llama", "data=2,seq=4,cp=ring", "selective", None),  # GQA; attention recomputed
        ("tiny", "data=2,seq=2,tensor=2,cp=ulysses", "full", None),
        # the busiest stage (the last) of a pipeline, each branch of the tick switch counted on
        # the ticks that take it: plain, tensor and sequence parallel inside stages
        ("tiny", "data=2,tensor=2,stage=2,schedule=1f1b,microbatches=4", "none", None),
        ("tiny-llama", "data=2,tensor=2,stage=2,schedule=gpipe,microbatches=2", "none", None),
        ("tiny", "data=2,stage=4,schedule=zbh1,microbatches=4", "none", None),
        ("tiny", "data=2,tensor=2,sp=on,stage=2,schedule=zbh1,microbatches=2", "none", None),
        ("tiny-llama", "data=2,tensor=2,sp=on,stage=2,schedule=1f1b,microbatches=2", "none",
         None)]


def compare(model_name, spec, remat, microbatch):
    """`model_name`: a preset's name, or a ModelConfig."""
    model = model_preset(model_name) if isinstance(model_name, str) else model_name
    train = TrainConfig(global_batch=16, remat=remat, microbatch=microbatch)
    layout = Layout.parse(spec)
    step, compiled, _ = compile_layout(model, train, layout, jax.devices()[:layout.n_devices])
    measured = compiled_stats(compiled, step)
    p = predict(model, train, layout, "cpu-local", convention="xla-cpu")
    return p, measured


def check(p, measured, pipeline=False):
    mem, pmem = measured["memory_bytes_per_device"], p.memory_bytes_per_device
    assert pmem["argument"] == mem["argument"]  # parameters + optimizer state + batch, exactly
    assert pmem["total"] / mem["total"] == pytest.approx(1.0, abs=0.10)
    if not pipeline:  # XLA counts a tick loop's switch branches in a way parex does not model
        assert p.flops_per_device / measured["flops_per_device"] == pytest.approx(1.0, abs=0.05)
    else:  # the busiest stage's matmuls, the head's share included
        assert p.hardware_flops_per_device / measured["matmul_flops_per_device"] == \
            pytest.approx(1.0, abs=0.02)
    # equal, up to the few loss scalars XLA reduces beside (or fused into) the gradients (a
    # pipeline also sums its loss and counters over the stages)
    assert_every_kind(p, measured, scalars=128 if pipeline else 64)


@pytest.mark.parametrize("model_name, spec, remat, microbatch", FAST)
def test_prediction_matches_the_compiled_step(model_name, spec, remat, microbatch):
    check(*compare(model_name, spec, remat, microbatch))


@pytest.mark.slow
@pytest.mark.parametrize("model_name, spec, remat, microbatch", SLOW)
def test_prediction_matches_more_compiled_steps(model_name, spec, remat, microbatch):
    check(*compare(model_name, spec, remat, microbatch), pipeline="stage" in spec)


# the shapes other frameworks' configurations name (issue 45): Gemma's head width (8 heads of
# 32 beside hidden 128), GPT-J's parallel block (SP's gathers of its one input shared by both
# branches), tied embeddings (the table reduced and, under fsdp, gathered once more by XLA),
# a sliding window (the naive kernel computes the masked scores too)
HEAD_DIM = model_preset("tiny-llama").replace(name="head-dim", head_dim=32)
PARALLEL = model_preset("tiny").replace(name="parallel", parallel_block=True)
TIED = model_preset("tiny").replace(name="tied", tied_embeddings=True)
WINDOW = model_preset("tiny-llama").replace(name="window", sliding_window=24)
SHAPES_FAST = [(PARALLEL, "fsdp=2,tensor=4,sp=on", "none", None)]
SHAPES_SLOW = [(HEAD_DIM, "data=2,tensor=4", "none", None),
               (HEAD_DIM, "data=2,tensor=4,sp=on", "none", None),
               (HEAD_DIM, "data=2,seq=2,cp=ulysses,tensor=2", "none", None),
               (HEAD_DIM, "data=4,seq=2,cp=ring", "none", None),
               (HEAD_DIM, "fsdp=8", "none", None),
               (PARALLEL, "data=2,tensor=4", "none", None), (PARALLEL, "data=8", "full", None),
               (TIED, "data=8", "none", None), (TIED, "fsdp=8", "none", None),
               (TIED, "data=2,tensor=4,sp=on", "none", None),
               (TIED, "data=4,tensor=2,zero=1", "none", None),
               (WINDOW, "data=8", "none", None),
               (WINDOW, "data=2,seq=2,cp=ulysses,tensor=2", "none", None),
               (model_preset("tiny").replace(name="window-gpt", sliding_window=40),
                "data=2,tensor=4", "selective", None)]


@pytest.mark.parametrize("model, spec, remat, microbatch", SHAPES_FAST,
                         ids=lambda x: getattr(x, "name", x))
def test_the_shapes_configurations_name_match_the_compiled_step(model, spec, remat, microbatch):
    check(*compare(model, spec, remat, microbatch))


@pytest.mark.slow
@pytest.mark.parametrize("model, spec, remat, microbatch", SHAPES_SLOW,
                         ids=lambda x: getattr(x, "name", x))
def test_more_shapes_match_the_compiled_step(model, spec, remat, microbatch):
    check(*compare(model, spec, remat, microbatch))


# pipelines whose memory predict.stash got wrong before (a split backward under full remat: 0.61x;
# 1F1B at p = 2 with one microbatch: 1.25x), memory only
PIPELINE_MEMORY = [("tiny", "data=4,stage=2,schedule=zbh1,microbatches=2", "full"),
                   pytest.param("tiny", "data=4,stage=2,schedule=1f1b,microbatches=1", "none",
                                marks=pytest.mark.slow)]


@pytest.mark.parametrize("model_name, spec, remat", PIPELINE_MEMORY)
def test_pipeline_memory_matches_the_compiled_step(model_name, spec, remat):
    from parex.measure.compiled import memory_stats

    model, layout = model_preset(model_name), Layout.parse(spec)
    train = TrainConfig(global_batch=16, remat=remat)
    _, compiled, _ = compile_layout(model, train, layout, jax.devices()[:layout.n_devices])
    mem = memory_stats(compiled)
    pmem = predict(model, train, layout, "cpu-local").memory_bytes_per_device
    assert pmem["argument"] == mem["argument"]
    assert pmem["total"] / mem["total"] == pytest.approx(1.0, abs=0.10)


# ring attention inside pipeline stages: its hops are all-to-alls of s copies there, and the
# nested attention's backward runs the ring's forward again. Checked: every kind's bytes (the
# seq axis stays with XLA there: it reduces each backward's chunk gradients over seq and
# gathers the embedding's cotangent, comm.seq-embedding), total memory within 10 %.
RING_IN_STAGES = [
    pytest.param("tiny", "data=2,seq=2,cp=ring,stage=2,schedule=1f1b,microbatches=2", "none",
                 marks=pytest.mark.slow),
    pytest.param("tiny", "seq=4,cp=ring,stage=2,schedule=zbh1,microbatches=2", "none",
                 marks=pytest.mark.slow),
    pytest.param("tiny", "data=2,seq=2,cp=ring,stage=2,schedule=1f1b,microbatches=4", "full",
                 marks=pytest.mark.slow),
    pytest.param("tiny-llama", "data=2,seq=2,cp=ring,stage=2,schedule=gpipe,microbatches=2",
                 "selective", marks=pytest.mark.slow),
    pytest.param("small", "data=2,seq=2,cp=ring,stage=2,schedule=1f1b,microbatches=2", "none",
                 marks=pytest.mark.slow),
    # virtual stages: chunks stored per stage (TrainStep.block_order), regrouped by a reshape
    pytest.param("tiny", "data=2,seq=2,cp=ring,stage=2,schedule=zbv,virtual=2,microbatches=2",
                 "none", marks=pytest.mark.slow),
    pytest.param("tiny", "data=2,seq=2,cp=ring,stage=2,schedule=interleaved,virtual=2,"
                 "microbatches=2", "selective", marks=pytest.mark.slow)]


@pytest.mark.parametrize("model_name, spec, remat", RING_IN_STAGES)
def test_ring_inside_stages_matches_the_compiled_step(model_name, spec, remat):
    p, measured = compare(model_name, spec, remat, None)
    mem, pmem = measured["memory_bytes_per_device"], p.memory_bytes_per_device
    assert pmem["argument"] == mem["argument"]
    assert pmem["total"] / mem["total"] == pytest.approx(1.0, abs=0.10)
    ring = [c for c in p.collectives if c["name"] == "cp-ring"]
    assert ring and {c["kind"] for c in ring} == {"all-to-all"}
    assert_every_kind(p, measured)
    gpu = predict(model_preset(model_name), TrainConfig(global_batch=16, remat=remat),
                  Layout.parse(spec), "cpu-local", convention="gpu")  # the ideal program
    assert {c["kind"] for c in gpu.collectives if c["name"] == "cp-ring"} == {"collective-permute"}


# Ulysses inside stages, every kind: the position rows XLA leaves with each seq device (T/s of
# them; with data replicas it moves them by an all-to-all and a permute instead of gathering
# the table, comm.cp-positions), GQA's smaller K and V, full remat's one more all-to-all, and
# ZB-V's head beside the embedding on stage 0 (comm.seq-head); ZB-V without seq too.
@pytest.mark.slow
@pytest.mark.parametrize("model_name, spec, remat", [
    ("tiny", "seq=4,cp=ulysses,stage=2,schedule=1f1b,microbatches=2", "none"),
    ("small", "data=2,seq=2,cp=ulysses,stage=2,schedule=zbh1,microbatches=2", "none"),
    ("tiny", "data=2,seq=2,cp=ulysses,stage=2,schedule=1f1b,microbatches=2", "full"),
    ("tiny-llama", "seq=4,cp=ulysses,stage=2,schedule=zbv,virtual=2,microbatches=4", "none"),
    ("tiny-llama", "data=2,seq=2,cp=ulysses,stage=2,schedule=1f1b,microbatches=4", "full"),
    ("tiny", "data=2,stage=2,schedule=zbv,virtual=2,microbatches=2", "none")])
def test_ulysses_and_zbv_inside_stages_match_the_compiled_step(model_name, spec, remat):
    assert_every_kind(*compare(model_name, spec, remat, None))


# uneven chunks (stages of different layer counts) are gathered into padded chunks every step:
# an all-reduce over stage and a permute of the gradients (comm.stage-regroup)
@pytest.mark.slow
@pytest.mark.parametrize("model_name, spec", [
    ("tiny", "data=4,stage=2,partition=3:1,microbatches=4"),
    ("small", "data=2,stage=2,schedule=interleaved,virtual=2,partition=2:1:2:1,microbatches=2"),
    ("small", "data=2,tensor=2,stage=2,partition=4:2,microbatches=2")])
def test_uneven_chunks_regroup_as_predicted(model_name, spec):
    p, measured = compare(model_name, spec, "none", None)
    assert {c["kind"] for c in p.collectives if c["name"] == "stage-regroup"} == {
        "all-reduce", "collective-permute"}
    assert_every_kind(p, measured)


def assert_every_kind(p, measured, scalars=128):
    """Predicted bytes of every collective kind equal the compiled step's, up to `scalars`."""
    kinds = bytes_by_kind(measured["collectives"])
    for kind in KINDS:
        assert p.comm_bytes_per_device[kind] == pytest.approx(kinds[kind], rel=1e-5,
                                                              abs=scalars), kind


# fsdp inside pipeline stages, run by hand (parallel.fsdp_stage): each op gathers its chunk and
# each backward op reduce-scatters the chunk's gradients (comm._fsdp_in_stages)
@pytest.mark.slow
@pytest.mark.parametrize("model_name, spec, remat", [
    ("tiny", "fsdp=2,stage=2,microbatches=2", "none"),
    ("tiny", "fsdp=2,data=2,stage=2,schedule=zbh1,microbatches=4", "none"),
    ("tiny", "fsdp=2,tensor=2,stage=2,schedule=1f1b,microbatches=2", "none"),
    ("tiny-llama", "fsdp=2,data=2,stage=2,microbatches=2", "none"),
    ("tiny", "fsdp=4,stage=2,schedule=zbv,virtual=2,microbatches=4", "none"),
    # full remat: the gathered chunk and its unscattered gradients are most of the temp
    # (memory.gathered_chunk_bytes; without them 0.78 and 0.68 of the compiled total)
    ("tiny-llama", "fsdp=2,data=2,stage=2,microbatches=2", "full"),
    ("tiny", "fsdp=4,stage=2,schedule=1f1b,microbatches=4", "full"),
    ("tiny", "fsdp=2,data=2,stage=2,schedule=zbh1,microbatches=4", "full")])
def test_fsdp_inside_stages_matches_the_compiled_step(model_name, spec, remat):
    p, measured = compare(model_name, spec, remat, None)
    assert {c["kind"] for c in p.collectives if c["name"] == "grad-reduce"} >= {"reduce-scatter"}
    check(p, measured, pipeline=True)
