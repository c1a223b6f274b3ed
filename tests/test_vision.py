"""The vision transformer (parex.model.vision, ModelConfig(image=...)): its read-in and read-out,
attention that is not causal, its synthetic images, its FLOPs and what validation refuses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from parex.config import ModelConfig, TrainConfig, model_preset, ppll_vit
from parex.errors import InputError
from parex.executor.data import IMAGE_NOISE, Images, batch_shapes, batches_for
from parex.layout import Layout, LayoutError
from parex.model import transformer as gpt
from parex.model.vision import patchify
from parex.setting import resolve
from parex.validation import validate

VIT = ModelConfig("vit-test", layers=2, hidden=32, heads=2, vocab=5, image=8, patch=4)


def test_a_vit_is_patches_and_a_class_token():
    assert (VIT.patches, VIT.seq_len, VIT.patch_dim) == (4, 5, 48)
    assert VIT.vision and not VIT.causal and not model_preset("tiny").vision
    params = gpt.init_params(VIT, jax.random.key(0))
    assert sum(x.size for x in jax.tree.leaves(params)) == VIT.n_params
    assert params["patch_embed"].shape == (48, 32) and "tokens" not in params
    assert ppll_vit().seq_len == 65  # CIFAR-10's 32×32 in 4×4 patches, and the class token


def test_patchify_cuts_rows_of_patches_each_flattened():
    images = np.arange(2 * 8 * 8 * 3, dtype=np.float32).reshape(2, 8, 8, 3)
    patches = patchify(images, 4)
    assert patches.shape == (2, 4, 48)
    np.testing.assert_array_equal(patches[1, 1], images[1, :4, 4:].ravel())  # top right
    np.testing.assert_array_equal(patches[0, 2], images[0, 4:, :4].ravel())  # bottom left


def test_the_class_token_sees_every_patch():
    """Not causal: the logits, read from position 0, change with the last patch; a causal
    model's position 0 would see only itself."""
    params = gpt.init_params(VIT, jax.random.key(1))
    batch = Images(VIT, 2)[0]
    logits = gpt.forward(params, batch["inputs"], VIT)
    moved = batch["inputs"].copy()
    moved[:, -1] += 1.0
    assert logits.shape == (2, 1, VIT.vocab)
    assert not np.allclose(logits, gpt.forward(params, moved, VIT))


def test_synthetic_images_are_deterministic_labelled_and_separable():
    data = batches_for(VIT, "corpus", 64, VIT.seq_len, seed=3)
    a, b = data[7], data[7]
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert a["inputs"].shape == (64, 4, 48) and a["inputs"].dtype == np.float32
    assert a["targets"].shape == (64, 1) and set(np.unique(a["targets"])) <= set(range(5))
    shapes = batch_shapes(VIT, 64, VIT.seq_len)
    assert {k: s for k, (s, _) in shapes.items()} == {k: v.shape for k, v in a.items()}
    # the nearest prototype names the class: noise σ = IMAGE_NOISE against unit-variance classes
    prototypes = patchify(data.prototypes, VIT.patch).reshape(5, -1)
    flat = a["inputs"].reshape(64, -1)
    nearest = np.argmin(((flat[:, None] - prototypes[None]) ** 2).sum(-1), axis=1)
    assert IMAGE_NOISE < 1 and np.mean(nearest == a["targets"][:, 0]) > 0.95


def test_a_vit_learns_its_images_on_one_device():
    train = TrainConfig(global_batch=32, learning_rate=3e-3)
    params = gpt.init_params(VIT, jax.random.key(0))
    data = Images(VIT, train.global_batch)
    loss_and_grad = jax.jit(jax.value_and_grad(lambda p, b: gpt.loss_fn(p, b, VIT)))
    first = float(loss_and_grad(params, data[0])[0])
    for i in range(30):  # plain SGD: the data is easy
        _, g = loss_and_grad(params, data[i])
        params = jax.tree.map(lambda p, g: p - 0.1 * g, params, g)
    last = np.mean([float(loss_and_grad(params, data[100 + i])[0]) for i in range(4)])
    assert first > 1.4 and last < 0.5 * first


def test_flops_per_token_counts_the_head_once_per_image_and_the_patch_map_per_patch():
    """A ViT's head: 6·D·V per image, so per token / T; its patch map 6·P²C·D on each of the N
    patches (not on the class token), so per token · N/T."""
    T, D, N = VIT.seq_len, VIT.hidden, VIT.patches
    more_classes = VIT.replace(vocab=VIT.vocab + 10)
    assert gpt.flops_per_token(more_classes) - gpt.flops_per_token(VIT) == pytest.approx(
        6 * D * 10 / T)
    one_more_channel = VIT.replace(channels=4)  # P²C grows by P² = 16
    assert gpt.flops_per_token(one_more_channel) - gpt.flops_per_token(VIT) == pytest.approx(
        6 * 16 * D * N / T)


@pytest.mark.parametrize("config, words", [
    (dict(image=10, patch=4), "divisible by the patch"),
    (dict(image=8, family="llama"), "GPT's dense blocks"),
    (dict(image=8, experts=4), "GPT's dense blocks")])
def test_bad_vits_get_one_line(config, words):
    with pytest.raises(InputError, match=words):
        ModelConfig(**config)


@pytest.mark.parametrize("text, train, words", [
    ("seq=2,cp=ring", TrainConfig(global_batch=8), "set seq=1 and sp=off"),
    ("tensor=2,sp=on", TrainConfig(global_batch=8), "set seq=1 and sp=off"),
    ("data=2", TrainConfig(global_batch=8, seq_len=3), "leave seq_len unset"),
    ("data=2", TrainConfig(global_batch=8, attention="flash"), "use attention=naive"),
    ("tensor=1x2x2", TrainConfig(global_batch=8), r"use tensor=4 \(Megatron's split\)")])
def test_layouts_that_split_a_vits_sequence_are_refused(text, train, words):
    model = VIT.replace(vocab=4)
    layout = Layout.parse(text)
    with pytest.raises(LayoutError, match=words):
        validate(layout, model, train, layout.n_devices)


def test_a_vit_resolves_to_the_kernel_that_runs_it():
    """Not causal: the naive kernel on an accelerator too (the blockwise one is causal only)."""
    setting = resolve(ppll_vit(), TrainConfig(global_batch=128), Layout(data=8), "a100-80gb")
    assert setting.train.attention == "naive"
    gpt2 = resolve(model_preset("gpt2-small"), TrainConfig(), Layout(data=8), "a100-80gb")
    assert gpt2.train.attention == "flash"
