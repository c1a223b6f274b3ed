"""Running a heterogeneous plan on the emulated mesh: every stage its own jitted program on its
own sub-mesh (parex.hetero.mpmd), loss and gradients equal to the single-device reference."""

import jax
import pytest

from parex.model import transformer as gpt
from parex.cluster import cluster_from_dict
from parex.config import ModelConfig, TrainConfig, model_preset
from parex.executor.data import Batches
from parex.hetero.plan import HeteroPlan, PlanError
from parex.layout import LayoutError
from parex.measure import relative_error
from parex.hetero.mpmd import MpmdRunner, device_map
from parex.executor.step import reference_loss_and_grads

TOLERANCE = 1e-5
TOY = cluster_from_dict({"name": "toy", "groups": [
    {"chip": "a100-80gb", "devices_per_node": 4, "name": "fast"},
    {"chip": "rtx-3090", "devices_per_node": 4, "name": "slow"}]})


def check_parity(model: ModelConfig, plan_text: str, batch_size: int, remat: str = "none",
                 attention: str | None = None):
    train = TrainConfig(global_batch=batch_size, remat=remat, attention=attention)
    params = gpt.init_params(model, jax.random.key(0))
    batch = Batches("corpus", batch_size, model.seq_len, model.vocab)[0]
    ref_loss, ref_grads = reference_loss_and_grads(model, train, params, batch)
    runner = MpmdRunner(model, train, HeteroPlan.parse(plan_text), TOY)
    loss, grads = runner.loss_and_grads(params, batch)
    assert abs(float(loss) - float(ref_loss)) <= TOLERANCE * abs(float(ref_loss))
    error = relative_error(grads, ref_grads)
    assert error <= TOLERANCE, f"gradient relative error {error:.2e}"
    return runner, error


@pytest.mark.slow  # a minute of compiles on 2 cores
def test_uneven_layers_batches_and_tensor_degrees_match_the_reference():
    # pipeline 1: 6 sequences in 3 microbatches, 3 blocks on 2 devices (t2) then 1 on one;
    # pipeline 2: 2 sequences in one microbatch, the whole model on 2 devices of the other group
    micro = ModelConfig("micro", layers=4, hidden=64, heads=4, vocab=256, seq_len=32)
    runner, _ = check_parity(micro, "batch=6 micro=3: fast[0:2] t2 L3 > slow[0:1] t1 L1; "
                                    "batch=2 micro=1: slow[2:4] t2 L4", 8)
    first = runner.programs[0][0]
    assert first.mesh.devices.size == 2 and runner.programs[0][1].mesh.devices.size == 1
    assert set(first.mesh.devices.flat) == {jax.devices()[0], jax.devices()[1]}
    assert set(runner.programs[1][0].mesh.devices.flat) == {jax.devices()[6], jax.devices()[7]}


@pytest.mark.slow
def test_stages_run_the_flash_kernel_when_asked():
    model = model_preset("tiny-llama").replace(seq_len=64)
    runner, _ = check_parity(model, "batch=4 micro=2: fast[0:2] t2 L2 > slow[0:1] t1 L2", 4,
                             attention="flash")
    assert runner.attention == "flash"


@pytest.mark.slow
def test_two_pipelines_of_a_llama_with_tensor_four_and_full_remat_match_the_reference():
    model = model_preset("tiny-llama").replace(seq_len=64)  # GQA, RoPE, SwiGLU
    check_parity(model, "batch=4 micro=2: fast[0:4] t4 L1 > slow[0:1] t1 L3; "
                        "batch=3 micro=3: slow[1:3] t2 L2 > slow[3:4] t1 L2", 7, remat="full")


def test_bad_plans_and_too_few_devices_fail_before_compiling():
    micro = ModelConfig("micro", layers=4, hidden=64, heads=4, vocab=256, seq_len=32)
    with pytest.raises(PlanError, match="global batch is 8"):
        MpmdRunner(micro, TrainConfig(global_batch=8),
                   HeteroPlan.parse("batch=6 micro=3: fast[0:2] L4"), TOY)
    with pytest.raises(LayoutError, match="zero=1 between pipelines: .* drop 'zero=1'"):
        MpmdRunner(micro, TrainConfig(global_batch=8), HeteroPlan.parse(
            "batch=4 micro=2: fast[0:2] L4; batch=4 micro=2: fast[2:4] L4; zero=1"), TOY)
    big = cluster_from_dict({"groups": [{"chip": "rtx-4090", "nodes": 2}]})
    with pytest.raises(LayoutError, match="16 devices but JAX sees 8"):
        device_map(big)
