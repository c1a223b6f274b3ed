"""The Explorer's time-to-train panel shows `parex predict --tokens`'s numbers for the setup on
screen, and follows its controls."""

import pytest

from parex.explorer.widget import PANELS, Explorer
from parex.predict.goodput import Reliability, of_prediction


def test_time_to_train_panel_draws_the_predictors_run():
    explorer = Explorer(model="llama2-7b", n_devices=64, hardware="h100-sxm")
    explorer.set(tensor=8)
    explorer.show("time to train")
    assert "time to train" in PANELS
    t = explorer.time_to_train
    same = of_prediction(explorer.prediction, explorer.setting.model, explorer.setting.cluster,
                         tokens=20 * explorer.setting.model.n_params, reliability=Reliability())
    assert t.wall_s == pytest.approx(same.wall_s) and t.goodput == pytest.approx(same.goodput)
    text = explorer.time_view.value
    for words in ("goodput", "interruptions", "Daly's optimum", "MWh"):
        assert words in text
    # a worse fleet (a notebook redraws the open panel at once; here show() does):  more interruptions and less goodput
    explorer.time_controls["failures"].value = "meta-rsc1"
    worse = explorer.show("time to train").time_to_train
    assert worse.interruptions > t.interruptions and worse.goodput < t.goodput
    explorer.time_controls["restart"].value = 60.0
    assert explorer.show("time to train").time_to_train.goodput < worse.goodput
