"""Megatron sequence parallelism with explicit collectives, and the long-sequence study.

Under sp=on the compiled step must show what a GPU run does: each tensor-parallel all-reduce of an
activation becomes a reduce-scatter into the sequence-split region plus an all-gather out of it
(the CPU compiler, left to itself, keeps all-reduces)."""

import jax
import pandas as pd
import pytest

from parex.model import transformer as gpt
from parex.charts.sequence import long_sequence_chart, sequence_long
from parex.cli.main import main
from parex.config import ModelConfig, TrainConfig, model_preset
from parex.executor.data import Batches
from parex.layout import Axis, Layout, LayoutError
from parex.measure.compiled import compile_layout, compiled_stats
from parex.measure import relative_error
from parex.executor.mesh import make_mesh
from parex.executor.step import TrainStep, reference_loss_and_grads
from parex.studies.sequence import long_sequence_study, study_table, wire_bytes
from parex.validation import validate

TENSOR = (Axis.TENSOR.value,)
TRAIN = TrainConfig(global_batch=8)


def step_stats(text, model=None):
    layout = Layout.parse(text)
    model = model or model_preset("tiny")
    step, compiled, _ = compile_layout(model, TRAIN, layout, jax.devices()[:layout.n_devices])
    return compiled_stats(compiled, step)


def moves_activation(c, kind, nbytes) -> bool:
    """`kind` on the tensor axis moving a whole (B, T, D) activation (XLA may fuse a loss scalar
    or two into one of the all-reduces)."""
    return c.kind == kind and c.axes == TENSOR and 0 <= c.bytes - nbytes < 64


def activation_ops(stats, kind, nbytes):
    """Count of `kind` collectives on the tensor axis that move a whole (B, T, D) activation."""
    return sum(c.count for c in stats["collectives"] if moves_activation(c, kind, nbytes))


def check_sp_collectives(t):
    model = model_preset("tiny")
    activation = TRAIN.global_batch * model.seq_len * model.hidden * 4  # float32 (B, T, D)
    tp, sp = step_stats(f"tensor={t}"), step_stats(f"tensor={t},sp=on")
    all_reduces = activation_ops(tp, "all-reduce", activation)
    assert all_reduces >= 4 * model.layers  # forward and backward, attention and MLP
    assert activation_ops(sp, "all-reduce", activation) == 0
    assert not [c for c in sp["collectives"] if c.kind == "all-reduce" and c.axes == TENSOR
                and c.bytes >= activation]
    # 4 per block, the embedding's output and the head's input (Megatron's count: 4L + 2)
    assert activation_ops(sp, "reduce-scatter", activation) == all_reduces == 4 * model.layers + 2
    # + the backward's re-gathers of the two column-parallel inputs per block, which SP saves
    # sequence-split (the head's input is used at once by its backward: XLA gathers it once)
    regathers = 2 * model.layers
    assert activation_ops(sp, "all-gather", activation) == all_reduces + regathers
    # a ring all-reduce is a reduce-scatter then an all-gather: the same bytes on the wire,
    # plus the re-gathers' (t − 1)/t · S each
    def moved(stats):
        return wire_bytes([c for c in stats["collectives"] if any(
            moves_activation(c, kind, activation) for kind in ("all-reduce", "reduce-scatter",
                                                                "all-gather"))])

    extra = regathers * (t - 1) / t * activation
    assert moved(sp) == pytest.approx(moved(tp) + extra, rel=1e-4) and moved(tp) > 0
    assert sp["matmul_flops_per_device"] == tp["matmul_flops_per_device"]  # nothing recomputed
    temp = [s["memory_bytes_per_device"]["temp"] for s in (tp, sp)]
    assert temp[1] < temp[0], temp  # the LayerNorm regions hold T/t


def test_sp_turns_each_activation_all_reduce_into_reduce_scatter_and_all_gather():
    check_sp_collectives(4)


@pytest.mark.slow
@pytest.mark.parametrize("t", [2, 8])
def test_sp_collectives_at_other_tensor_sizes(t):
    check_sp_collectives(t)


# --- what SP saves for the backward ------------------------------------------------------------

def test_fsdp_under_sp_gathers_weights_inside_its_regions_and_keeps_none():
    """A weight-heavy model (8 layers, D = 512, T = 16): under fsdp the weights of SP's manual
    regions come in sharded and are all-gathered inside them, again in the backward, so no
    gathered weight is kept from the forward for the backward (it used to double the temp
    memory). Their gradients leave by explicit reduce-scatters, and no matmul is recomputed."""
    heavy = ModelConfig("heavy", layers=8, hidden=512, heads=8, vocab=256, seq_len=16)
    plain, sp = step_stats("fsdp=2,tensor=4", heavy), step_stats("fsdp=2,tensor=4,sp=on", heavy)
    temp = [s["memory_bytes_per_device"]["temp"] for s in (plain, sp)]
    assert temp[1] <= temp[0], temp
    assert sp["matmul_flops_per_device"] == plain["matmul_flops_per_device"]

    def per_layer(stats, kind):  # collectives over fsdp of one layer's weights, by size
        return {c.bytes: c.count for c in stats["collectives"]
                if c.kind == kind and c.axes == (Axis.FSDP.value,) and c.count % heavy.layers == 0
                and c.bytes >= 4 * heavy.hidden ** 2 / 4}

    gathers = per_layer(sp, "all-gather")
    assert gathers and all(n == 2 * heavy.layers * (1 + (b == 4 * 512 * 2048 // 4))
                           for b, n in gathers.items())  # W_in is one matrix, SwiGLU would be 2
    assert gathers == per_layer(plain, "all-gather")  # forward and backward, as plain FSDP
    assert sum(b * n for b, n in per_layer(sp, "reduce-scatter").items()) == (
        sum(b * n for b, n in gathers.items()) / 2)  # each layer's weight gradients, once


# --- parity --------------------------------------------------------------------------------------

def check_parity(name, text, tolerance=1e-5, remat="none"):
    model, train = model_preset(name), TRAIN.replace(remat=remat)
    params = gpt.init_params(model, jax.random.key(0))
    batch = Batches("corpus", train.global_batch, model.seq_len, model.vocab)[0]
    ref_loss, ref_grads = reference_loss_and_grads(model, train, params, batch)
    layout = Layout.parse(text)
    loss, grads = TrainStep(model, train, layout, make_mesh(layout)).jitted_loss_and_grads()(
        params, batch)
    assert abs(float(loss) - float(ref_loss)) <= tolerance * abs(float(ref_loss)), text
    assert relative_error(grads, ref_grads) <= tolerance, text


@pytest.mark.parametrize("name, text", [("tiny-llama", "tensor=4,sp=on"),
                                        ("tiny", "seq=2,tensor=2,data=2,cp=ring,sp=on")])
def test_sp_matches_single_device(name, text):
    check_parity(name, text)


@pytest.mark.slow
@pytest.mark.parametrize("name, text", [("tiny", "tensor=8,sp=on"),
                                        ("tiny", "fsdp=2,tensor=4,sp=on,zero=1"),
                                        ("tiny-llama", "data=2,tensor=2,sp=on,microbatches=2")])
def test_more_sp_layouts_match_single_device(name, text):
    check_parity(name, text)


@pytest.mark.slow
@pytest.mark.parametrize("name, text, remat", [
    ("tiny", "fsdp=2,tensor=4,sp=on", "none"), ("tiny", "fsdp=2,tensor=4,sp=on", "selective"),
    ("tiny", "fsdp=2,tensor=4,sp=on", "full"), ("tiny-llama", "fsdp=2,tensor=4,sp=on", "full"),
    ("tiny", "data=2,tensor=4,sp=on,zero=3", "none"),
    ("tiny-llama", "data=2,tensor=4,sp=on,zero=3", "selective"),
    ("tiny", "data=2,fsdp=2,tensor=2,sp=on,microbatches=2", "none"),
    ("tiny", "seq=2,tensor=2,fsdp=2,cp=ring,sp=on", "full"),
    ("tiny-llama", "seq=2,tensor=2,fsdp=2,cp=ring,sp=on", "none"),
    ("tiny", "seq=2,tensor=4,cp=ulysses,sp=on", "selective")])
def test_sp_with_gathered_weights_and_remat_matches_single_device(name, text, remat):
    """fsdp and ZeRO-3 weights gathered inside SP's regions (again in the backward), with
    data, microbatches, ring and Ulysses context parallelism, and every remat policy."""
    check_parity(name, text, remat=remat)


def test_sp_with_seq_needs_the_sequence_divisible_by_both_axes():
    model = model_preset("tiny").replace(seq_len=36)  # 36 % (2·2) == 0 but 36 % (2·4) != 0
    with pytest.raises(LayoutError, match="seq × tensor = 8"):
        validate(Layout.parse("seq=2,tensor=4,sp=on,cp=ulysses"), model, TRAIN, 8)


# --- the long-sequence study ---------------------------------------------------------------------

@pytest.mark.slow  # compiles a ring step per length (10 s; ring steps: test_context.py)
def test_seqstudy_command_prints_table_and_writes_csv_and_chart(tmp_path, capsys):
    csv, svg = tmp_path / "seq.csv", tmp_path / "seq.svg"
    assert main(["seqstudy", "--lengths", "128,256", "--modes", "ring", "--devices", "2",
                 "--csv", str(csv), "--chart", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "seq=2,cp=ring" in out and "permute" in out
    df = pd.read_csv(csv).set_index("seq_len")
    # K/V blocks are (1, T/2, H, Dh): the ring's bytes grow exactly with T, activations with it
    permute = df["comm_collective_permute_bytes"]
    assert permute[128] > 0 and permute[256] == 2 * permute[128]
    assert df["memory_temp_bytes"][256] > df["memory_temp_bytes"][128]
    assert svg.read_text().startswith("<svg")


def test_seqstudy_rejects_unknown_modes_and_bad_lengths_before_compiling():
    with pytest.raises(ValueError, match="unknown study mode"):
        long_sequence_study(model_preset("tiny"), [256], ["ring", "stripes"], n=2)
    with pytest.raises(LayoutError, match="2·seq = 8"):  # 100 tokens cannot make 8 chunks
        long_sequence_study(model_preset("tiny"), [100], ["ring"], n=4)


@pytest.mark.slow
def test_long_sequence_study_memory_and_communication(tmp_path):
    """At T = 1024 on 4 devices every split holds less than tp, which holds less than one device;
    Ulysses' all-to-all and the ring's permutes grow linearly with T."""
    df = long_sequence_study(model_preset("tiny"), [256, 1024], n=4)
    temp = df.set_index(["seq_len", "mode"])["memory_temp_bytes"]
    for T in (256, 1024):
        assert temp[T, "single"] > temp[T, "tp"] > temp[T, "tp+sp"]
    assert max(temp[1024, "ring"], temp[1024, "ulysses"]) < temp[1024, "tp"]
    comm = df.set_index(["mode", "seq_len"])
    assert comm.loc[("ring", 1024), "comm_collective_permute_bytes"] == (
        4 * comm.loc[("ring", 256), "comm_collective_permute_bytes"])
    assert comm.loc[("ulysses", 1024), "comm_all_to_all_bytes"] == (
        4 * comm.loc[("ulysses", 256), "comm_all_to_all_bytes"])
    assert "tensor=4,sp=on" in study_table(df)
    chart = long_sequence_chart(df, ("memory_temp_bytes", "memory_total_bytes"))
    assert len(chart.to_dict()["hconcat"]) == 2
    assert set(sequence_long(df)["mode"]) == {"single", "tp", "tp+sp", "ring", "ulysses"}
    chart.save(str(tmp_path / "study.png"))
    assert (tmp_path / "study.png").stat().st_size > 0


def test_the_gathered_sequence_is_laid_out_once():
    """SP's all-gather over T and its reduce-scatter (sharding.gather_along, scatter_along) move
    T's pieces along a leading axis: gathered along T in place, XLA:CPU laid the result out
    T-major and 10 fusions per step of tiny tensor=8,sp=on read it transposed; none now."""
    from parex.measure.hlo import transposing_reads

    layout, model = Layout.parse("tensor=8,sp=on"), model_preset("tiny")
    _, compiled, _ = compile_layout(model, TRAIN, layout, jax.devices()[:layout.n_devices])
    residual = f"{TRAIN.global_batch},{model.seq_len},{model.hidden}"
    assert transposing_reads(compiled.as_text(), residual) == 0
