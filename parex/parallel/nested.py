"""A shard_map inside another shard_map's manual region (a sequence-parallel matmul or ring
attention inside a pipeline stage): an explicit backward, and layer loops without lax.scan.

JAX 0.10 differentiates a shard_map by transposing it into another shard_map; nested inside a
region where outer axes are already manual (the pipeline's `stage`), that transpose lowers to
operand shardings that mix the outer manual axes into a dimension's sharding, which Shardy's
verifier rejects. So the nested op gets a `custom_vjp` whose backward is a shard_map of its own,
written forwards: it receives the op's inputs, runs the local function's vjp on each device's
blocks and returns the input cotangents. The local forward is re-run there; what the backward does
not need of it (a matmul's output, a reduce-scatter's result) is dead code, so for sequence
parallelism only the all-gather is repeated — Megatron's re-gather of the sequence-sharded input.

A second trap: differentiating a lax.scan hoists its loop-invariant work out of the loop by partially
evaluating the body, and the partial evaluation of a nested shard_map hits the same sharding bug.
So layers whose ops nest shard_maps are looped in Python (`layer_loop`), not scanned.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def nested_shard_map(fn, *, mesh, in_specs, out_specs, axis_names):
    """jax.shard_map(fn, ...) for use inside an enclosing shard_map (module docstring)."""
    forward = jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                            axis_names=axis_names)

    def local_backward(*args_and_cotangent):
        *args, cotangent = args_and_cotangent
        return jax.vjp(fn, *args)[1](cotangent)

    backward = jax.shard_map(local_backward, mesh=mesh, in_specs=(*in_specs, out_specs),
                             out_specs=tuple(in_specs), axis_names=axis_names)

    @jax.custom_vjp
    def run(*args):
        return forward(*args)

    def run_forward(*args):
        return forward(*args), args

    def run_backward(args, cotangent):
        return backward(*args, cotangent)

    run.defvjp(run_forward, run_backward)
    return run


def layer_loop(body, carry, xs, *, unroll: bool):
    """lax.scan(body, carry, xs), or the same loop unrolled in Python (ys stacked alike)."""
    if not unroll:
        return jax.lax.scan(body, carry, xs)
    n = jax.tree.leaves(xs)[0].shape[0]
    ys = []
    for i in range(n):
        carry, y = body(carry, jax.tree.map(lambda a: a[i], xs))
        ys.append(y)
    return carry, jax.tree.map(lambda *a: jnp.stack(a), *ys) if ys[0] is not None else None


__all__ = ["layer_loop", "nested_shard_map"]
