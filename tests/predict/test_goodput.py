"""Time to train with failures (parex.predict.goodput), `parex predict --tokens`, `parex plan
--objective time-to-train` and the llama3-goodput figure."""

import json
import math

import numpy as np
import pytest

from parex.cli.main import main
from parex.predict.goodput import (BOARD_POWER_W, FAILURE_RATES, Reliability, daly_interval,
                                   goodput, time_to_train)

LLAMA3 = ["predict", "--model", "llama3-405b", "--hardware", "h100-sxm", "--nodes", "2048",
          "--layout", "data=128,tensor=8,stage=16,schedule=1f1b,microbatches=16,"
          "partition=7:8:8:8:8:8:8:8:8:8:8:8:8:8:8:7", "--global-batch", "2048", "--seq", "8192"]


def test_daly_interval_is_youngs_for_short_saves_and_maximises_goodput():
    delta, mttf = 10.0, 3600.0 * 5
    tau = float(daly_interval(delta, mttf))
    assert tau == pytest.approx(math.sqrt(2 * delta * mttf), rel=0.03)
    best = goodput(tau, delta, 600.0, mttf)
    for other in (0.5 * tau, 0.8 * tau, 1.25 * tau, 2 * tau):
        assert goodput(other, delta, 600.0, mttf) < best


def test_goodput_tends_to_the_first_order_losses():
    """τ/(τ+δ) − τ/2M − R/M when τ, δ and R are small against M (Young's accounting: the
    saves' share, half an interval of work lost per failure, the restart)."""
    tau, delta, restart, mttf = 300.0, 3.0, 60.0, 1e6
    first_order = tau / (tau + delta) - tau / (2 * mttf) - restart / mttf
    assert float(goodput(tau, delta, restart, mttf)) == pytest.approx(first_order, abs=1e-5)
    assert float(goodput(tau, 0.0, 0.0, 1e12)) == pytest.approx(1.0, abs=1e-6)


def test_time_to_train_accounts_interruptions_energy_and_cost():
    rel = Reliability.named("meta-rsc1", storage_bandwidth=1e11, restart_s=300)
    t = time_to_train(2.0, 1_000_000, 64, 8, 1e12, "h100-sxm", tokens=1e11,
                      reliability=rel, price_per_gpu_hour=3.0)
    assert t.steps == 100_000 and t.tokens == 1e11
    assert t.mttf_s == pytest.approx(86_400 / (FAILURE_RATES["meta-rsc1"] * 8))
    assert t.save_s == t.restore_s == pytest.approx(10.0)
    assert t.wall_s == pytest.approx(100_000 * 2.0 / t.goodput)
    assert t.interruptions == pytest.approx(t.wall_s / t.mttf_s)
    assert t.gpu_hours == pytest.approx(64 * t.wall_s / 3600)
    assert t.energy_kwh == pytest.approx(BOARD_POWER_W["h100-sxm"][0] * t.gpu_hours / 1000)
    assert t.cost == pytest.approx(3.0 * t.gpu_hours)
    # more nodes, more failures: the same run's goodput falls
    wider = time_to_train(2.0, 1_000_000, 512, 8, 1e12, "h100-sxm", tokens=1e11,
                          reliability=rel)
    assert wider.goodput < t.goodput and wider.interruptions > t.interruptions


def test_a_chip_without_a_power_figure_says_so():
    t = time_to_train(1.0, 1000, 8, 8, 1e9, "cpu-reference", steps=10)
    assert t.energy_kwh is None and "no board power on record" in t.power_source


def test_predict_llama3_reports_days_goodput_interruptions_and_energy(capsys):
    """The issue's check: 54 days of this job's interruptions within 25 % of Llama 3's 466, with
    rates from Meta's cluster study (not from the Llama 3 paper)."""
    assert main([*LLAMA3, "--tokens", "15.6e12", "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["time_to_train"]
    assert t["days"] > 0 and 0 < t["goodput"] < 1 and t["energy_kwh"] > 0
    assert t["reliability"]["failures_source"] == "meta-rsc"
    in_54_days = t["interruptions"] / t["days"] * 54
    assert in_54_days == pytest.approx(466, rel=0.25)
    assert main([*LLAMA3, "--tokens", "15.6e12", "--price", "2"]) == 0
    text = capsys.readouterr().out
    for words in ("time to train", "goodput", "interruptions expected", "MWh at 700 W",
                  "(Daly)", "cost"):
        assert words in text


@pytest.mark.parametrize("args, message", [
    (["--tokens", "1e9", "--steps", "10"], "give --tokens or --steps, not both"),
    (["--price", "2"], "--price needs the run's length"),
    (["--tokens", "1e9", "--failures", "often"], "--failures 'often': give one of"),
    (["--tokens", "-5"], "argument --tokens: must be above 0, not -5"),
])
def test_bad_run_options_are_one_line_errors(capsys, args, message):
    assert main(["predict", "--model", "gpt2-small", "--hardware", "h100-sxm", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


PLAN = ["plan", "--model", "gpt2-small", "--hardware", "h100-sxm", "--nodes", "8",
        "--global-batch", "512", "--remat", "none", "--top", "1", "--objective", "time-to-train",
        "--tokens", "1e10", "--json"]


def test_plan_time_to_train_ranks_the_cluster_and_its_halves(capsys):
    assert main(PLAN) == 0
    out = json.loads(capsys.readouterr().out)
    sizes = out["time_to_train"]["sizes"]
    assert sorted(s["nodes"] for s in sizes) == [1, 2, 4, 8]
    walls = [s["wall_s"] for s in sizes]
    assert walls == sorted(walls)
    pick = out["time_to_train"]["objective_time_pick"]
    assert pick["nodes"] == 8 and pick["layout"] == out["top"][0]["layout"]
    # at this rate of failures the whole cluster still trains fastest
    assert not out["time_to_train"]["differs_from_time"] and sizes[0]["nodes"] == 8


def test_plan_time_to_train_picks_a_smaller_job_when_failures_dominate(capsys):
    """At 50 failures per node-day an 8-node job is interrupted every 3.6 minutes, under its
    10-minute restart: fewer nodes lose less to failures than they lose in speed."""
    assert main([*PLAN, "--failures", "50000"]) == 0
    ttt = json.loads(capsys.readouterr().out)["time_to_train"]
    assert ttt["differs_from_time"] and ttt["sizes"][0]["nodes"] < 8
    assert ttt["sizes"][0]["goodput"] > ttt["objective_time_pick"]["goodput"]
    assert main(PLAN[:-1] + ["--failures", "50000"]) == 0
    assert "time-to-train picks" in capsys.readouterr().out


def test_tokens_without_the_time_to_train_objective_is_refused(capsys):
    assert main(["plan", "--model", "gpt2-small", "--hardware", "h100-sxm", "--tokens",
                 "1e9"]) == 2
    assert "--objective time-to-train" in capsys.readouterr().err


def test_llama3_goodput_figure_scores_the_held_out_counts():
    from parex.figures import compute

    rows = {r.quantity: r for r in compute("llama3-goodput").rows}
    everything = rows["interruptions in 54 days on 2048 nodes, all"]
    assert everything.paper == 466
    assert everything.parex == pytest.approx(FAILURE_RATES["meta-rsc"] * 2048 * 54)
    ettr = rows["effective training time (fraction; the paper: above 90 %)"]
    assert 0 < ettr.parex < 1
    assert np.isclose(rows["RSC-1 MTTF of a 16,384-GPU job (hours)"].parex, 1.8, rtol=0.01)
