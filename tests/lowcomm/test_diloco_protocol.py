"""The DiLoCo figure's protocol at reduced length (parex.figures.lowcomm): a synchronous warm-up,
then from that checkpoint sync DP, one worker alone and DiLoCo's 8 workers on the same tokens,
each worker's batch at about the model's gradient noise scale (the paper's scaling). What holds
on the mesh after 3 outer rounds: the bytes are exactly 1/H of sync DP's, DiLoCo beats the one
worker, and it keeps up with sync DP on the same compute; the figure's full-length rows are
scored against the paired seed spread."""

import pytest

from parex.figures import lowcomm as fig

pytestmark = pytest.mark.slow

H, WARM, STEPS = 10, 30, 30  # 3 outer rounds after 30 synchronous steps


@pytest.fixture(scope="module")
def gaps():
    runs = fig.diloco_runs(h=H)[:3]  # sync DP, one worker, DiLoCo
    frame, _ = fig.diloco_study(runs, STEPS, WARM, eval_every=STEPS)
    return frame.set_index("run")


def test_diloco_sends_one_h_th_of_sync_dps_bytes(gaps):
    ratio = gaps.loc["sync DP", "cross_replica_bytes"] / gaps.loc[
        f"DiLoCo H={H}", "cross_replica_bytes"]
    assert ratio == pytest.approx(H, rel=0.05)


def test_diloco_beats_one_worker_and_keeps_up_with_sync_dp(gaps):
    run, sync, one = (gaps.loc[k, "eval_loss"] for k in (f"DiLoCo H={H}", "sync DP",
                                                          "one worker"))
    assert run < one
    # the paper's "as well as fully synchronous": within the 5 % the gallery takes as
    # negligible (dilocox-mechanisms); the 2-sequence workers of the first protocol were 5 %
    # behind after 25 steps and growing (docs/results/2026-12-diloco-protocol.md)
    assert run / sync < 1.05
