"""Communication overlaps as part of the stack (parex.stacks, parex.predict.overlap): the
bucketed, chunked and paired formulas, a Megatron-Core-style run with its three overlaps and a
mixture's expert all-to-all, what each leaves exposed, and the inputs that are refused."""

import numpy as np
import pytest

from parex.cli.main import main
from parex.config import TrainConfig, model_preset
from parex.errors import InputError
from parex.layout import Layout
from parex.predict import overlap, predict, predict_batch
from parex.predict.explain import breakdown, explain_text
from parex.predict.shapes import Grid
from parex.setting import resolve
from parex.stacks import STACKS, parse_overlaps

# a Megatron-Core-style run: TP 8 with sequence parallelism, the distributed optimizer (ZeRO-1)
MODEL, TRAIN = model_preset("llama3-8b"), TrainConfig(global_batch=64, seq_len=4096)
LAYOUT = Layout(data=4, tensor=8, sp=True, zero=1)


def run(**keywords):
    return predict(MODEL, TRAIN, LAYOUT, "h100-sxm", **keywords)


def test_bucketed_leaves_one_bucket_or_what_the_window_cannot_hold():
    t, n = np.array([1.0, 1.0]), np.array([4, 4])
    window = np.array([10.0, 0.4])
    # a long window hides all but the last bucket; a short one leaves t - w (n - 1) / n
    assert overlap.bucketed(t, window, n) == pytest.approx([0.25, 1.0 - 0.4 * 3 / 4])
    assert overlap.bucketed(np.array([0.0]), window[:1], n[:1]) == [0.0]


def test_chunked_leaves_the_pipeline_fill_and_slows_the_gemm_by_its_sm_share():
    exposed, slowed = overlap.chunked(np.array([1.0]), np.array([2.0]), np.array([8.0]), 0.25)
    assert exposed == pytest.approx(1 / 8)  # one chunk: the fill
    assert slowed == pytest.approx(0.25 * 7 / 8)  # the GEMM beside the other seven chunks
    # communication longer than its GEMM: the excess waits too
    exposed, slowed = overlap.chunked(np.array([3.0]), np.array([1.0]), np.array([4.0]), 0.0)
    assert exposed == pytest.approx(3 / 4 + 2 * 3 / 4) and slowed == 0


def test_each_overlap_of_a_megatron_core_style_run_leaves_its_remainder():
    plain, nemo = run(stack="megatron-core"), run(stack="nemo")
    assert set(nemo.overlaps) == {"tp-comm", "grad-reduce", "param-gather", "links"}
    for name, part in nemo.overlaps.items():
        if name == "links":  # the busiest link, waited for only where it is busier than the step
            assert part["comm"] > 0 and part["exposed"] == 0
            continue
        assert 0 < part["exposed"] < part["comm"], name
    # Megatron-Core's defaults overlap neither: both exposed in full; SP's gathers and
    # scatters stay in the sp family, on the critical path
    for name in ("grad-reduce", "param-gather"):
        assert plain.overlaps[name]["exposed"] == pytest.approx(plain.overlaps[name]["comm"])
    assert "tp-comm" not in plain.overlaps
    # the same collectives, only priced differently
    assert nemo.comm_bytes_per_device == pytest.approx(plain.comm_bytes_per_device)
    assert nemo.step_time_s["compute"] == pytest.approx(plain.step_time_s["compute"])
    saved = sum(p["comm"] - p["exposed"] - p["contention"] for name, p in nemo.overlaps.items()
                if name != "links")
    assert plain.step_time_s["total"] - nemo.step_time_s["total"] == pytest.approx(saved,
                                                                                   rel=0.05)


def test_chunks_the_fill_and_the_contention_follow_the_implementation():
    te, torch = run(stack="nemo"), run(stack="nemo", overlaps="async-tp,grad-reduce")
    assert te.overlaps["tp-comm"]["comm"] == pytest.approx(torch.overlaps["tp-comm"]["comm"])
    # TE's pipelined reduce-scatters use 16 of the H100's 132 SMs; PyTorch's copy engines none
    assert te.overlaps["tp-comm"]["contention"] > 0 == torch.overlaps["tp-comm"]["contention"]
    # TE scatters in 4 splits, async TP in t = 8 chunks: a smaller fill
    assert torch.overlaps["tp-comm"]["exposed"] < te.overlaps["tp-comm"]["exposed"]
    sp = {c["name"]: c["count"] for c in te.collectives}
    assert sp["sp-chunked"] == 4 * MODEL.layers and sp["sp-chunked-rs"] == 2 * MODEL.layers


def test_tp_comm_needs_sequence_parallelism():
    layout = Layout(data=4, tensor=8, zero=1)
    p = predict(MODEL, TRAIN, layout, "h100-sxm", stack="nemo")
    assert "tp-comm" not in (p.overlaps or {})
    assert not any(c["name"].startswith("sp-chunked") for c in p.collectives)


def test_batch_columns_equal_the_single_prediction_under_a_stack():
    layouts = [LAYOUT, Layout(data=8, tensor=4, sp=True, zero=1), Layout(data=32, zero=1)]
    cols = predict_batch(MODEL, TRAIN, layouts, "h100-sxm", stack="nemo")
    for i, layout in enumerate(layouts):
        p = predict(MODEL, TRAIN, layout, "h100-sxm", stack="nemo")
        assert cols["step_time_s"][i] == pytest.approx(p.step_time_s["total"])
        assert cols[overlap.column("grad-reduce", "exposed")][i] == pytest.approx(
            p.overlaps["grad-reduce"]["exposed"])


def test_stacks_and_overlap_lists_are_checked():
    assert set(STACKS) >= {"parex", "megatron-core", "nemo", "torchtitan", "maxtext"}
    assert parse_overlaps("none") == ()
    with pytest.raises(InputError, match="overlap 'tp-com'"):
        parse_overlaps("tp-com")
    with pytest.raises(InputError, match="name one of them"):
        parse_overlaps("tp-comm,async-tp")
    with pytest.raises(InputError, match="stack"):
        run(stack="deepspeed")
    with pytest.raises(InputError, match="overlaps nothing"):
        run(stack="nemo", convention="xla-cpu")


def test_cli_reports_each_overlap_and_explains_it(capsys):
    args = ["predict", "--model", "llama3-8b", "--layout", "data=4,tensor=8,sp=on,zero=1",
            "--hardware", "h100-sxm", "--global-batch", "64", "--seq", "4096"]
    assert main(args + ["--stack", "megatron-core", "--overlap",
                        "tp-comm,grad-reduce,param-gather", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "stack megatron-core" in out and "overlaps tp-comm, grad-reduce, param-gather" in out
    for name in ("tp-comm", "grad-reduce", "param-gather"):
        assert any(f" {name} " in line and "exposed" in line
                   for line in out.splitlines()), name
    assert "ring chunks" in out and "bucketed behind the backward" in out
    assert main(args + ["--overlap", "bogus"]) == 2
    assert "unknown overlap 'bogus'" in capsys.readouterr().err.lower()


def test_parex_stack_is_the_gpu_conventions_own_program():
    """Without a stack the gpu convention's flags stand: the `parex` stack names the same."""
    from parex.predict.comm import CONVENTIONS

    flags = STACKS["parex"].flags()
    assert flags == {k: getattr(CONVENTIONS["gpu"], k) for k in flags}
    assert resolve(MODEL, TRAIN, LAYOUT, "h100-sxm").overlap_names == ("grad-reduce",)
    default, parex = run(), run(stack="parex")
    assert default.step_time_s == parex.step_time_s and default.overlaps == parex.overlaps


# a mixture of experts whose expert group spans nodes: the dispatch all-to-all crosses NICs
MOE = model_preset("mixtral-8x7b")
MOE_TRAIN = TrainConfig(global_batch=64, seq_len=4096)
MOE_LAYOUT = Layout(expert=8, tensor=2, sp=True, stage=4, virtual_stages=2,
                    schedule="interleaved", zero=1, microbatches=8)


def test_paired_hides_the_all_to_all_behind_the_other_microbatchs_compute():
    # 4 stages, 2 chunks each, 8 microbatches: (4 - 1) + (2 - 1)·4 = 7 warm-up chunks of 16
    # run alone; the other 9/16 beside compute, of which a long window hides all
    grid = Grid.from_layouts([MOE_LAYOUT], MOE_TRAIN, MOE)
    t = np.array([2.0])
    assert overlap.paired(t, np.array([10.0]), grid) == pytest.approx(7 / 16 * 2.0)
    # a short window leaves the excess too
    assert overlap.paired(t, np.array([0.5]), grid) == pytest.approx(
        7 / 16 * 2.0 + 9 / 16 * 1.5)
    # without a pipeline only the first forward and the last backward run alone
    flat = Grid.from_layouts([Layout(expert=8, microbatches=8)], MOE_TRAIN, MOE)
    assert overlap.paired(t, np.array([10.0]), flat) == pytest.approx(2.0 / 8)


def test_moe_a2a_prices_only_the_expert_all_to_alls_and_only_when_named():
    on = predict(MOE, MOE_TRAIN, MOE_LAYOUT, "h100-sxm", stack="nemo",
                 overlaps=STACKS["nemo"].overlaps + ("moe-a2a",))
    off = predict(MOE, MOE_TRAIN, MOE_LAYOUT, "h100-sxm", stack="nemo")
    part, whole = on.overlaps["moe-a2a"], off.overlaps["moe-a2a"]
    assert whole["exposed"] == pytest.approx(whole["comm"]) and whole["comm"] > 0
    assert 0 < part["exposed"] < part["comm"] == pytest.approx(whole["comm"])
    # the same collectives and compute, the difference is what the overlap hides
    assert on.comm_bytes_per_device == pytest.approx(off.comm_bytes_per_device)
    assert on.step_time_s["compute"] == pytest.approx(off.step_time_s["compute"])
    assert off.step_time_s["total"] - on.step_time_s["total"] == pytest.approx(
        whole["exposed"] - part["exposed"], rel=1e-6)
    # a dense model has nothing to hide: no row in the report
    assert "moe-a2a" not in run(stack="nemo", overlaps=STACKS["nemo"].overlaps + ("moe-a2a",)
                                ).overlaps
    assert parse_overlaps("tp-comm,moe-a2a") == ("tp-comm", "moe-a2a")


@pytest.mark.parametrize("overlaps, how", [
    ("grad-reduce", "moe-a2a .* not overlapped"),
    ("grad-reduce,moe-a2a", "moe-a2a .* beside another microbatch's compute")])
def test_cli_explains_the_expert_all_to_all_on_or_off(capsys, overlaps, how):
    """Every mixture of experts with expert parallelism on an accelerator reports its
    all-to-all's line, overlapped or not."""
    import re

    args = ["predict", "--model", "mixtral-8x7b", "--layout", "expert=8,tensor=2,sp=on,zero=1",
            "--hardware", "h100-sxm", "--global-batch", "64", "--seq", "4096",
            "--stack", "nemo", "--overlap", overlaps, "--explain"]
    assert main(args) == 0
    assert re.search(how, capsys.readouterr().out)


def test_collectives_that_share_the_nics_take_turns_on_them():
    # the 70B over 16 nodes, fsdp across them and TP inside each: every fsdp collective's ring
    # has one member per node, so a device's NIC share carries (g - 1)/g of each op's bytes
    # (the TP collectives stay on NVLink); by hand, the busiest link's seconds are
    model, layout = model_preset("llama3-70b"), Layout(fsdp=16, tensor=8, sp=True)
    small = predict(model, TrainConfig(global_batch=16, seq_len=4096), layout, "h100-sxm")
    nic = 50e9 * 0.8  # 400 Gb/s per GPU at the profile's network efficiency
    moved = sum(c["count"] * c["bytes_per_op"] for c in small.collectives if c["axes"] == ["fsdp"])
    assert {tuple(c["axes"]) for c in small.collectives} == {("fsdp",), ("tensor",)}
    links = small.overlaps["links"]
    assert links["comm"] == pytest.approx(moved * 15 / 16 / nic, rel=1e-6)
    # the gathers hide behind the compute and the reduce-scatter behind the backward, each on
    # its own, but the NICs carry them all: the step lasts as long as they are busy
    assert links["exposed"] > 0
    assert small.step_time_s["total"] == pytest.approx(links["comm"], rel=1e-9)
    explained = breakdown(model, TrainConfig(global_batch=16, seq_len=4096), layout, "h100-sxm")
    # (explain prices it without the stragglers, as its communication: a little more wait)
    assert links["exposed"] <= explained["parts"]["saturation"] <= explained["parts"][
        "communication"]
    assert "waiting for the busiest network link" in explain_text(explained)
    # eight times the tokens: the compute outlasts the NICs and nothing waits for them
    large = predict(model, TrainConfig(global_batch=128, seq_len=4096), layout, "h100-sxm")
    assert large.overlaps["links"]["exposed"] == 0
    assert large.overlaps["links"]["comm"] < large.step_time_s["total"]
