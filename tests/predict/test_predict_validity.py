"""One rule for what is valid: predict_batch and parex.validation accept and reject the same
layouts, predict_batch equals predict() row by row, every valid layout is predicted (executable
or not), and the schedule-table cache works past eviction."""

import random

import numpy as np
import pytest

from parex.config import ModelConfig, TrainConfig, model_preset
from parex.layout import CP_MODES, Layout, LayoutError
from parex.parallel.schedules import SCHEDULES
from parex.predict import predict, predict_batch, schedule_stats
from parex.validation.checks import check_valid, executable_reason
from parex.validation import validate

MODELS = [model_preset("tiny"), model_preset("tiny-llama"),
          ModelConfig("odd", layers=6, hidden=96, heads=12, kv_heads=4, ffn=384, vocab=300,
                      seq_len=96),
          ModelConfig("llama-126", family="llama", layers=126, hidden=256, heads=16, kv_heads=8,
                      ffn=512, vocab=512, seq_len=256)]
SIZES = (1, 1, 1, 2, 2, 4, 8, 3, 16, 0)


def _partition(rng: random.Random, layers: int, chunks: int):
    """Mostly a partition that covers the layers, sometimes one that does not."""
    if chunks < 1 or rng.random() < 0.2:
        return tuple(rng.randint(0, 4) for _ in range(rng.randint(1, 6)))
    cuts = sorted(rng.sample(range(1, layers), min(chunks - 1, layers - 1))) if layers > 1 else []
    parts = [b - a for a, b in zip([0] + cuts, cuts + [layers])]
    return tuple(parts + [1] * (chunks - len(parts)))


def random_layout(rng: random.Random, layers: int, train: TrainConfig) -> Layout:
    """Two thirds plausible layouts (small powers of two, modes that fit them), a third anything
    at all: sizes 0 and 3, unknown modes, ZeRO 4, partitions that miss the layers."""
    if rng.random() < 2 / 3:
        axes = {a: rng.choice((1, 1, 2, 4)) for a in ("data", "fsdp", "tensor", "seq")}
        stage, virtual = rng.choice((1, 2, 2, 4)), rng.choice((1, 1, 2))
        cp = rng.choice(("ring", "ulysses")) if axes["seq"] > 1 else "none"
        schedule = rng.choice(SCHEDULES) if stage > 1 else "gpipe"
        virtual = virtual if schedule in ("interleaved", "bfs") else 1
        m = 1 if train.microbatch and rng.random() < 0.8 else rng.choice((1, 2, 4, 8))
        zero, sp = rng.choice((0, 1, 2, 3)), axes["tensor"] > 1 and rng.random() < 0.4
    else:
        axes = {a: rng.choice(SIZES) for a in ("data", "fsdp", "tensor", "seq")}
        stage, virtual = rng.choice((1, 1, 2, 2, 4, 3, 8, 16)), rng.choice((1, 1, 2, 3, 4, 0))
        cp = (rng.choice(("ring", "ulysses", "ring", "none")) if axes["seq"] > 1
              else rng.choice(("none",) * 8 + ("ring", "stripe")))
        schedule = rng.choice(SCHEDULES + ("zigzag",)) if stage > 1 or rng.random() < 0.05 \
            else "gpipe"
        virtual = virtual if stage > 1 or rng.random() < 0.05 else 1
        m, zero = rng.choice((1, 1, 2, 3, 4, 8, 16, 0)), rng.choice((0, 0, 1, 2, 3, 4))
        sp = rng.random() < 0.3
    partition = None
    if stage > 1 and rng.random() < 0.4:
        partition = _partition(rng, layers, stage * max(virtual, 1))
    return Layout(**axes, stage=stage, zero=zero, sp=sp, cp=cp, schedule=schedule,
                  virtual_stages=virtual, microbatches=m, layers_per_stage=partition)


def random_train(rng: random.Random) -> TrainConfig:
    return TrainConfig(global_batch=rng.choice((8, 16, 48, 64, 256, 256)),
                       microbatch=rng.choice((None,) * 5 + (1, 2, 3, 4)),
                       seq_len=rng.choice((None, None, 64, 96, 100, 24)),
                       remat=rng.choice(("none", "selective", "full")))


def _verdicts(layout, model, train) -> tuple[bool, bool]:
    try:
        check_valid(layout, model, train)
    except LayoutError:
        return False, False
    return True, executable_reason(layout, model, train) is None


def agreement(n_layouts: int, seed: int, per_group: int, compare_rows: int) -> dict:
    """Draw n_layouts random layouts in groups sharing a (model, train config); return counts."""
    rng = random.Random(seed)
    counts = dict.fromkeys(("layouts", "valid", "executable", "compared"), 0)
    while counts["layouts"] < n_layouts:
        model, train = rng.choice(MODELS), random_train(rng)
        hardware = rng.choice(("a100-80gb", "h100-sxm", "cpu-local"))
        layouts = [random_layout(rng, model.layers, train) for _ in range(per_group)]
        try:
            out = predict_batch(model, train, layouts, hardware)
        except LayoutError:  # no layout is valid for this (model, train): none may pass alone
            assert not any(_verdicts(layout, model, train)[0] for layout in layouts)
            counts["layouts"] += len(layouts)
            continue
        valid_rows = []
        for i, layout in enumerate(layouts):
            valid, executable = _verdicts(layout, model, train)
            assert (bool(out["valid"][i]), bool(out["executable"][i])) == (valid, executable), (
                layout, model.name, train)
            if valid:
                valid_rows.append(i)
        counts["layouts"] += len(layouts)
        counts["valid"] += len(valid_rows)
        counts["executable"] += int(out["executable"].sum())
        for i in rng.sample(valid_rows, min(compare_rows, len(valid_rows))):
            _assert_row_equal(out, i, predict(model, train, layouts[i], hardware))
            counts["compared"] += 1
    return counts


def _assert_row_equal(out: dict, i: int, one) -> None:
    row = one.to_row()
    for key, value in row.items():
        if key not in out or isinstance(value, str):
            continue
        assert out[key][i] == pytest.approx(value, rel=1e-9, abs=1e-300), (one.layout, key)
    assert bool(out["executable"][i]) == one.executable


def test_batch_and_validation_agree_on_random_layouts():
    counts = agreement(4000, seed=1, per_group=200, compare_rows=8)
    assert counts["valid"] > 200 and counts["executable"] < counts["valid"]  # both kinds drawn
    assert counts["compared"] >= 100


@pytest.mark.slow
def test_batch_and_validation_agree_on_100k_random_layouts():
    counts = agreement(100_000, seed=7, per_group=1000, compare_rows=10 ** 6)
    print(counts)
    assert counts["layouts"] >= 100_000 and counts["compared"] == counts["valid"] > 5000


# --- layouts the executor cannot run are predicted --------------------------------------------

LLAMA3_405B = model_preset("llama3-405b").replace(dtype="bfloat16")
TRAIN_405B = TrainConfig(global_batch=2048, seq_len=8192, remat="full")


@pytest.mark.parametrize("text, limit", [
    ("data=8,tensor=8,stage=16,sp=on,schedule=1f1b,microbatches=16,partition=7:8*14:7",
     "not a multiple of stage=16"),  # Megatron TP + SP + PP, Llama 3's uneven first/last stage
    ("data=4,tensor=8,seq=2,cp=ring,stage=16,schedule=interleaved,virtual=2,microbatches=16,"
     "partition=3:4*30:3", "not a multiple of stage=16"),  # Llama 3's TP + CP + PP + DP
    ("data=64,tensor=8,stage=16,schedule=bfs,virtual=2,microbatches=16,partition=3:4*30:3",
     "not a multiple of stage=16"),
    ("data=64,tensor=8,stage=16,schedule=zbh1,microbatches=32,partition=7:8*14:7",
     "not a multiple of stage=16")])
def test_llama3_layouts_are_predicted_and_flagged_not_executable(text, limit):
    layout = Layout.parse(text)
    p = predict(LLAMA3_405B, TRAIN_405B, layout, "h100-sxm")
    assert not p.executable and limit in p.executable_reason
    assert "nearest layout that runs is" in p.executable_reason
    assert p.step_time_s["total"] > 0 and p.step_time_s["bubble"] > 0
    assert 0.05 < p.mfu < 0.7
    with pytest.raises(LayoutError, match=limit):  # measuring it is refused before compiling
        validate(layout, LLAMA3_405B, TRAIN_405B, layout.n_devices)


def test_the_busiest_stage_sets_the_time_of_an_uneven_partition():
    even = Layout.parse("data=64,tensor=8,stage=16,schedule=1f1b,microbatches=32")
    model = LLAMA3_405B.replace(layers=128)
    uneven = even.replace(layers_per_stage=(7,) + (8,) * 14 + (9,))
    t_even = predict(model, TRAIN_405B, even, "h100-sxm").step_time_s["compute"]
    t_uneven = predict(model, TRAIN_405B, uneven, "h100-sxm").step_time_s["compute"]
    assert t_uneven > t_even * 1.05  # the 9-layer stage is slower than 8 by about 1/8


def test_executable_layouts_say_so():
    p = predict(model_preset("tiny"), TrainConfig(global_batch=16),
                Layout.parse("data=2,stage=4,schedule=1f1b,microbatches=8"), "a100-80gb")
    assert p.executable and p.executable_reason == "" and p.to_row()["executable"] is True


# --- the schedule-table cache ---------------------------------------------------------------------

def test_schedule_cache_works_past_eviction(monkeypatch):
    model, train = model_preset("tiny"), TrainConfig(global_batch=64)
    layouts = [Layout(data=2, stage=4, schedule=s, microbatches=m, virtual_stages=v)
               for s, v in (("1f1b", 1), ("gpipe", 1), ("bfs", 1), ("zbh1", 1))
               for m in (1, 2, 4, 8)]
    expected = predict_batch(model, train, layouts, "a100-80gb")["step_time_s"]
    monkeypatch.setattr(schedule_stats, "_LIMIT", 3)
    for order in (layouts, layouts[::-1], layouts[5:] + layouts[:5]):
        got = predict_batch(model, train, order, "a100-80gb")["step_time_s"]
        np.testing.assert_allclose(got, expected[[layouts.index(l) for l in order]], rtol=1e-12)
        one = predict(model, train, order[0], "a100-80gb").step_time_s["total"]
        assert one == pytest.approx(got[0], rel=1e-12)
    assert len(schedule_stats._TABLES) <= len(layouts)


def test_codes_of_every_mode_and_schedule_are_validated():
    model, train = model_preset("tiny"), TrainConfig(global_batch=16, remat="none")  # resolved
    for cp in CP_MODES + ("stripe",):
        layout = Layout(data=4, seq=2, cp=cp)
        assert bool(predict_batch(model, train, [layout], "a100-80gb")["valid"][0]) == (
            _verdicts(layout, model, train)[0])
