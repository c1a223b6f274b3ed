"""Does parex's machinery cost anything? Its single-device train step against a minimal hand-written
JAX step of the same GPT, same parameters, same batch and the same optax AdamW, alternated in one process.

    python benchmarks/overhead.py                 # tiny and small models on the CPU
    python benchmarks/overhead.py --model gpt2-medium --dtype bfloat16 --batch 8 --seq 1024   # a GPU

Prints per-model medians, the ratio parex / hand-written (target <= 1.05) and tokens/s; on a GPU also
the MFU of the step (model FLOPs from parex.model.transformer.flops_per_token over the chip's bf16 peak).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import jax
import jax.numpy as jnp
import optax

import parex
from parex.model import transformer as gpt
from parex.executor.data import Batches
from parex.executor.step import make_optimizer

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "B200": 2.25e15}


# --- the hand-written reference: plain JAX, no parex ------------------------------------------

def _layer_norm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias


def _block(x, p):
    B, T, D = x.shape
    h = _layer_norm(x, p["norm1"]["scale"], p["norm1"]["bias"])
    qkv = jnp.einsum("btd,dkgh->btkgh", h, p["attn"]["wqkv"]) + p["attn"]["bqkv"]
    q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]  # (B, T, H, Dh)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e30)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1).astype(v.dtype), v)
    x = x + jnp.einsum("bqhd,hdm->bqm", o, p["attn"]["wo"]) + p["attn"]["bo"]
    h = _layer_norm(x, p["norm2"]["scale"], p["norm2"]["bias"])
    u = jax.nn.gelu(h @ p["mlp"]["w_in"] + p["mlp"]["b_in"])
    return x + u @ p["mlp"]["w_out"] + p["mlp"]["b_out"]


def hand_loss(params, batch, dtype):
    p = jax.tree.map(lambda a: a.astype(dtype), params)
    tokens = batch["inputs"]
    x = p["tokens"][tokens] + p["positions"][: tokens.shape[1]]
    x = jax.lax.scan(lambda h, layer: (_block(h, layer), None), x, p["blocks"])[0]
    x = _layer_norm(x, p["final_norm"]["scale"], p["final_norm"]["bias"])
    logits = (x @ p["unembed"]).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, batch["targets"][..., None], -1).mean()


def hand_step_fn(optimizer, dtype):
    def step(state, batch):
        loss, grads = jax.value_and_grad(hand_loss)(state["params"], batch, dtype)
        updates, opt = optimizer.update(grads, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "opt": opt}, loss

    return jax.jit(step, donate_argnums=0)


# --- alternated timing ----------------------------------------------------------------------

def compare(name: str, batch: int, seq: int, dtype: str, rounds: int, steps: int) -> dict:
    model = parex.model_preset(name).replace(dtype=dtype)
    train = parex.TrainConfig(global_batch=batch, seq_len=seq, steps=rounds * steps)
    layout = parex.Layout()
    step = parex.TrainStep(model, train, layout, parex.make_mesh(layout))
    parex_step = step.jitted_step()
    hand_step = hand_step_fn(make_optimizer(train, model), jnp.dtype(dtype))
    data = Batches("synthetic", batch, seq, model.vocab)
    batches = [jax.device_put(data[i]) for i in range(steps)]
    params = step.init_state()["params"]
    same = (jax.jit(hand_loss, static_argnums=2)(params, batches[0], jnp.dtype(dtype)),
            jax.jit(lambda p, b: gpt.loss_fn(p, b, model))(params, batches[0]))
    assert abs(float(same[0]) - float(same[1])) < 1e-3 * float(same[1]), "not the same model"
    states = {"parex": step.init_state(), "hand": step.init_state()}
    fns = {"parex": parex_step, "hand": hand_step}
    for key in fns:  # compile and warm up
        states[key], loss = fns[key](states[key], batches[0])
        jax.block_until_ready(loss)
    times = {"parex": [], "hand": []}
    for _ in range(rounds):
        for key in ("parex", "hand"):
            for b in batches:
                start = time.perf_counter()
                states[key], loss = fns[key](states[key], b)
                jax.block_until_ready(loss)
                times[key].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = batch * seq
    result = {"model": name, "dtype": dtype, "parex_s": med["parex"], "hand_s": med["hand"],
              "ratio": med["parex"] / med["hand"], "tokens_per_s": tokens / med["parex"]}
    kind = jax.devices()[0].device_kind
    peak = next((v for k, v in PEAK_BF16.items() if k in kind), None)
    if jax.devices()[0].platform == "gpu" and peak:
        result["mfu"] = gpt.flops_per_token(model, seq) * tokens / med["parex"] / peak
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="*", default=["tiny", "small"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    print(f"device: {jax.devices()[0].device_kind} · batch {args.batch} × {args.seq} · "
          f"{args.rounds} alternated rounds of {args.steps} steps each")
    print(f"{'model':<12} {'dtype':<9} {'parex ms':>9} {'hand ms':>9} {'ratio':>7} "
          f"{'tokens/s':>10} {'MFU':>6}")
    for name in args.model:
        r = compare(name, args.batch, args.seq, args.dtype, args.rounds, args.steps)
        mfu = f"{r['mfu']:.1%}" if "mfu" in r else "-"
        print(f"{r['model']:<12} {r['dtype']:<9} {r['parex_s'] * 1e3:>9.2f} {r['hand_s'] * 1e3:>9.2f} "
              f"{r['ratio']:>7.3f} {r['tokens_per_s']:>10,.0f} {mfu:>6}")
    print("ratio = parex median / hand-written median (target <= 1.05)")


if __name__ == "__main__":
    main()
