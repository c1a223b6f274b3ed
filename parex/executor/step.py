"""The sharded training step: loss, gradients, AdamW, and the shardings a Layout implies.

`TrainStep` is built from (model, train config, layout, mesh) and derives every sharding from the
Layout's rules, in this order: parameters, gradients (ZeRO-2 reduce-scatters them), optimizer state
(ZeRO-1), the batch. The jitted step donates the state so that it is updated in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..model import transformer as gpt
from ..config import ModelConfig, TrainConfig
from ..layout import Axis, Layout, grads_split_over_seq, is_dims, num_microbatches
from ..model.moe.routing import rebalance
from ..parallel.tensor3d import mesh_ops
from ..precision import precision
from ..setting import resolve_run
from ..validation import check_layout
from . import fp8
from .data import batch_shapes


def make_optimizer(train: TrainConfig, model: ModelConfig, clip: bool = True,
                   dims=None) -> optax.GradientTransformation:
    """Clip by global norm, then AdamW with linear warm-up and cosine decay; weight matrices (every
    parameter with an embed dim) decay, biases and norm scales do not. `clip=False` leaves the
    clipping to the caller (`clip_by_global_norm`) and keeps the same state tree."""
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, train.learning_rate, train.warmup_steps, max(train.steps, train.warmup_steps + 1),
        end_value=train.learning_rate * train.min_lr_ratio)
    decay_mask = jax.tree.map(lambda d: "embed" in d or "expert_embed" in d,
                              dims or gpt.param_dims(model),
                              is_leaf=is_dims)  # `dims`: another tree's (parallel.local)
    clipping = optax.clip_by_global_norm(train.grad_clip) if clip else optax.identity()
    return optax.chain(clipping,
                       optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=train.weight_decay,
                                   mask=decay_mask))


def clip_by_global_norm(grads, max_norm: float):
    """grads scaled by min(1, max_norm / ‖grads‖), as optax.clip_by_global_norm, on whatever
    sharding they have (a sharded tree's norm is local sums of squares and one scalar psum)."""
    norm = optax.tree.norm(grads)
    scale = jnp.where(norm < max_norm, 1.0, max_norm / norm)
    return jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)


def accumulates_per_replica(layout: Layout) -> bool:
    """Whether gradient accumulation runs with `data` manual, reducing over it once per step:
    replicated parameters (no fsdp, ZeRO < 3) and no nested shard_map (sp, seq), which Shardy
    cannot place inside a manual `data` axis, and no expert axis, whose dispatch would be a
    nested shard_map there (parallel.nested: its backward runs the forward's all-to-alls
    again). Otherwise XLA reduces once per microbatch."""
    return (layout.data > 1 and layout.fsdp == 1 and layout.zero < 3 and not layout.sp
            and layout.seq == 1 and layout.expert == 1)


@dataclass
class TrainStep:
    """Everything needed to run one layout: shardings, optimizer, and jitted functions."""

    model: ModelConfig
    train: TrainConfig
    layout: Layout
    mesh: Mesh
    optimizer: optax.GradientTransformation = field(init=False)

    def __post_init__(self):
        # an entry point of every execution: what the caller left out is filled once, by the
        # platform's regime (parex.setting.resolve_run), and the rest reads the Setting
        platform = self.mesh.devices.flat[0].platform
        self.setting = resolve_run(self.model, self.train, self.layout, platform)
        self.model, self.train, self.layout = (self.setting.model, self.setting.train,
                                               self.setting.layout)
        check_layout(self.layout, self.model, self.train, self.mesh.size)
        self.optimizer = make_optimizer(self.train, self.model,
                                        clip=not self.grads_sharded_over_seq)
        self.microbatches = num_microbatches(self.layout, self.train)
        self.attention = self.setting.attention
        self.precision = self.setting.precision  # FP8 recipes: parex.model.fp8, executor.fp8
        self.ops = mesh_ops(self.layout, self.mesh).with_kernel(self.attention).with_precision(
            self.precision)  # tensor3d too
        self.seq_len = self.train.seq_len or self.model.seq_len
        self.local = None  # schedule=local: its own state and step (parex.parallel.local)
        if self.layout.schedule == "local":
            from ..parallel import local

            self.local = local.LocalPipeline(self, make_optimizer(
                self.train, self.model, clip=False, dims=local.stage_dims(self.model,
                                                                          self.layout)))

    # --- shardings ------------------------------------------------------------------------------
    def sharding(self, dims, kind: str = "act") -> NamedSharding:
        return self.ops.sharding(dims, kind)

    def state_shardings(self, kind: str):
        """Sharding of a params-shaped tree of model state of `kind` ("param", "grad", "opt"),
        as it is stored between steps (Layout.storage_spec)."""
        return jax.tree.map(
            lambda dims: NamedSharding(self.mesh, self.layout.storage_spec(dims, kind)),
            gpt.param_dims(self.model), is_leaf=is_dims)

    def constrain(self, x, dims):
        return self.ops.constrain(x, dims)

    # --- context parallelism: gradients held sharded over seq in the backward -------------------
    # Every seq device holds the whole gradient of the (replicated) parameters. Left to XLA, the
    # backward all-reduces each layer's weight gradient over seq into a whole, replicated
    # accumulator: a floor of one model's gradients (plus each layer's unreduced and reduced
    # gradient) under the activations, so ring attention's 1/s activations left the step's temp
    # at 0.67x from seq=2 to seq=8 on a K/V-heavy model. Constrained split over seq along their
    # embed dim, the blocks' weight gradients are still all-reduced per layer, but each device
    # keeps only its 1/s slice (ZeRO-2 over the CP group, as Megatron's distributed optimizer
    # shards over DP x CP) and reduces only that over data; the global norm is taken on the
    # slices (optax's clip would read a whole copy), and they are all-gathered whole for the
    # update, when the activations are gone: one all-gather of them over seq per step.

    @property
    def grads_sharded_over_seq(self) -> bool:
        """parex.layout.grads_split_over_seq of this step's layout and model."""
        ly = self.layout
        return bool(grads_split_over_seq(ly.cp == "ring", ly.seq, ly.stage, ly.sp, ly.fsdp,
                                         ly.zero, self.model.hidden))

    def backward_grad_shardings(self):
        """The gradients' sharding, the blocks' weight matrices' embed dim split over seq (the
        embedding, head and D-sized weights are left as they were: a few percent, whose
        reductions XLA lays out in ways of its own)."""
        def spec(dims):
            entries = list(self.layout.spec(dims, "grad"))
            if "embed" in dims and "layers" in dims:
                entries[dims.index("embed")] = Axis.SEQ.value
            return NamedSharding(self.mesh, PartitionSpec(*entries))

        return jax.tree.map(spec, gpt.param_dims(self.model), is_leaf=is_dims)

    def _hold_grads(self, grads):
        """Gradients as the backward keeps them: split over seq where grads_sharded_over_seq."""
        if not self.grads_sharded_over_seq:
            return grads
        return jax.lax.with_sharding_constraint(grads, self.backward_grad_shardings())

    @property
    def batch_sharding(self) -> NamedSharding:
        return self.sharding(("batch", None))

    def train_state_shardings(self):
        if self.local is not None:
            return self.local.state_shardings()
        replicated = NamedSharding(self.mesh, PartitionSpec())
        opt_shape = jax.eval_shape(self.optimizer.init, gpt.param_shapes(self.model))
        opt = optax.tree_map_params(self.optimizer, lambda _, s: s, opt_shape,
                                    self.state_shardings("opt"),
                                    transform_non_params=lambda _: replicated)
        return {"params": self.state_shardings("param"), "opt": opt} | self._with_fp8(
            lambda: fp8.state_shardings(self.model, self.precision, self.mesh))

    def _with_fp8(self, make) -> dict:
        """{"fp8": make()} where the precision keeps state (delayed scaling), else {}."""
        return {"fp8": make()} if self.precision.delayed else {}

    # --- the blocks' storage order ------------------------------------------------------------
    @property
    def block_order(self):
        """The order the train state stores the stacked blocks in: a pipeline with v > 1 even
        chunks per stage keeps each stage's chunks in its own rows, so that the step regroups
        them without communication (parallel.timetable.storage_order); None: the model's order."""
        from ..parallel.timetable import storage_order
        from ..parallel.schedules import VEE

        ly = self.layout
        if ly.stage == 1:
            return None
        return storage_order(self.model.layers, ly.stage, ly.virtual_stages,
                             ly.schedule in VEE, ly.layers_per_stage)

    def to_storage(self, params):
        """Parameters in the model's layer order -> the train state's (`block_order`)."""
        order = self.block_order
        return params if order is None else params | {"blocks": jax.tree.map(
            lambda w: w[order], params["blocks"])}

    def natural_params(self, params):
        """The train state's parameters (or gradients) -> the model's layer order."""
        order = self.block_order
        if order is None:
            return params
        back = np.argsort(order)
        return params | {"blocks": jax.tree.map(lambda w: w[back], params["blocks"])}

    # --- functions ------------------------------------------------------------------------------
    def init_state(self, seed: int | None = None):
        """Parameters and optimizer state, created directly in their shardings (the blocks in
        `block_order`: the same values as the model's, stored per stage)."""
        key = jax.random.key(self.train.seed if seed is None else seed)
        if self.local is not None:
            return self.local.init_state(key)

        def init(key):
            params = self.to_storage(gpt.init_params(self.model, key))
            return {"params": params, "opt": self.optimizer.init(params)} | self._with_fp8(
                lambda: fp8.init_state(self.model, self.precision))

        return jax.jit(init, out_shardings=self.train_state_shardings())(key)

    def _loss(self, params, batch, ops=None, fp8_state=None):
        return gpt.loss_fn(params, batch, self.model, ops or self.ops, self.train.remat,
                           fp8_state)

    def fp8_loss_and_grads(self, params, fp8_state, batch):
        """(loss, gradients, the next delayed-scaling state): the state's cotangent is its
        histories rolled with this step's amaxes (parex.model.fp8)."""
        loss, (grads, new_state) = jax.value_and_grad(self._loss, argnums=(0, 3))(
            params, batch, self.ops, fp8_state)
        return loss, self._hold_grads(grads), new_state

    def _loss_and_nothing(self, params, batch, ops):
        return self._loss(params, batch, ops), ()

    def _loss_and_load(self, params, batch, ops):
        """The loss and each layer's expert load (L, E): what the auxiliary-loss-free balancing
        moves the router's bias with (parex.model.moe.routing.rebalance)."""
        return gpt.loss_and_router_load(params, batch, self.model, ops, self.train.remat)

    def loss_and_grads(self, params, batch):
        """Mean loss and gradient over the global batch, accumulated over m microbatches;
        parameters and gradients in the train state's order (`block_order`)."""
        if self.local is not None:
            self.local.refuse("loss_and_grads")
        if self.layout.stage > 1:  # the schedule table decides the order of microbatches
            from ..parallel.pipeline import pipeline_loss_and_grads

            return pipeline_loss_and_grads(self, params, batch)
        loss, grads, _ = self._loss_grads_and_aux(params, batch, self._loss_and_nothing)
        return loss, grads

    def _loss_grads_and_aux(self, params, batch, loss_fn):
        """(mean loss, mean gradient, the sum of loss_fn's aux) over the m microbatches:
        loss_fn(params, batch, ops) -> (loss, aux)."""
        if self.microbatches == 1:
            (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch,
                                                                           self.ops)
            return loss, self._hold_grads(grads), aux
        if accumulates_per_replica(self.layout):
            return self._accumulate_per_replica(params, batch, loss_fn)
        return self._accumulate(params, batch, self.ops, loss_fn)

    def _accumulate(self, params, batch, ops, loss_fn, varying: tuple = ()):
        """(the m microbatches' mean loss and gradient, the sum of loss_fn's aux), in a scan
        (`varying`: the manual axes the carried sums vary over)."""
        m = self.microbatches
        grad = jax.value_and_grad(loss_fn, has_aux=True)

        def accumulate(carry, micro):
            (loss, aux), grads = grad(params, micro, ops)
            return jax.tree.map(jnp.add, carry, (loss, self._hold_grads(grads), aux)), None

        micro = jax.tree.map(lambda x: x[0], self._microbatches(batch, ops))
        aux = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                           jax.eval_shape(lambda p, b: loss_fn(p, b, ops), params, micro)[1])
        loss = jnp.zeros((), jnp.float32)  # the gradients' zeros vary as the params do
        if varying:
            loss, aux = jax.tree.map(lambda a: jax.lax.pcast(a, varying, to="varying"),
                                     (loss, aux))
        zeros = self._hold_grads(jax.tree.map(jnp.zeros_like, params))
        (loss, grads, aux), _ = jax.lax.scan(accumulate, (loss, zeros, aux),
                                             self._microbatches(batch, ops))
        return loss / m, jax.tree.map(lambda g: g / m, grads), aux

    def _microbatches(self, batch, ops):
        """(B, T) -> (m, B/m, T); microbatch i takes rows i, i+m, ... so that every data shard
        keeps contributing to every microbatch."""
        m = self.microbatches

        def split(x):
            x = x.reshape(x.shape[0] // m, m, *x.shape[1:]).swapaxes(0, 1)
            return ops.constrain(x, (None, "batch", None))

        return jax.tree.map(split, batch)

    def _accumulate_per_replica(self, params, batch, loss_fn):
        """Gradient accumulation with `data` manual: each data replica sums its microbatches'
        gradients locally and the replicas are summed once, after the loop. (Left to XLA, the
        replicated gradients would be all-reduced inside the loop, once per microbatch.)"""
        data, replicas = Axis.DATA.value, self.layout.data

        def per_replica(params, batch):
            # varying over data, so that the gradients are not summed over it inside the loop
            params = jax.tree.map(lambda a: jax.lax.pcast(a, (data,), to="varying"), params)
            loss, grads, aux = self._accumulate(params, batch,
                                                self.ops.inside(manual_data=True), loss_fn,
                                                (data,))
            loss, grads = jax.tree.map(lambda x: jax.lax.psum(x, data) / replicas,
                                       (loss, grads))
            return loss, grads, jax.tree.map(lambda x: jax.lax.psum(x, data), aux)

        rows = PartitionSpec(data)
        return jax.shard_map(per_replica, mesh=self.mesh, axis_names={data},
                             in_specs=(PartitionSpec(), {"inputs": rows, "targets": rows}),
                             out_specs=PartitionSpec())(params, batch)

    # --- a mixture of experts balanced without a loss (DeepSeek-V3, parex.model.moe.routing) ---------
    @property
    def rebalances(self) -> bool:
        """Whether the step moves the router's bias after the update (ModelConfig.bias_rate)."""
        return self.model.moe and self.model.bias_rate > 0

    def _rebalanced(self, params, load):
        """params with every block's router bias moved toward balance (routing.rebalance)."""
        mlp = params["blocks"]["mlp"]
        bias = rebalance(mlp["router_bias"], load, self.model.bias_rate)
        return params | {"blocks": params["blocks"] | {"mlp": mlp | {"router_bias": bias}}}

    def _step(self, state, batch):
        if self.local is not None:
            return self.local.step(state, batch)
        fp8_state = state.get("fp8")
        if self.rebalances:
            loss, grads, load = self._loss_grads_and_aux(state["params"], batch,
                                                         self._loss_and_load)
        elif fp8_state is not None:
            loss, grads, fp8_state = self.fp8_loss_and_grads(state["params"], fp8_state, batch)
        else:
            loss, grads = self.loss_and_grads(state["params"], batch)
        if self.grads_sharded_over_seq:  # clipped on the slices: no whole copy for the norm
            grads = clip_by_global_norm(grads, self.train.grad_clip)
        grads = jax.lax.with_sharding_constraint(grads, self.state_shardings("grad"))
        updates, opt = self.optimizer.update(grads, state["opt"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        if self.rebalances:
            params = self._rebalanced(params, load)
        return {"params": params, "opt": opt} | self._with_fp8(lambda: fp8_state), loss

    def jitted_step(self):
        """The train step, state donated: (state, batch) -> (state, loss)."""
        shardings = self.train_state_shardings()
        batch = {"inputs": self.batch_sharding, "targets": self.batch_sharding}
        return jax.jit(self._step, in_shardings=(shardings, batch),
                       out_shardings=(shardings, NamedSharding(self.mesh, PartitionSpec())),
                       donate_argnums=0)

    def jitted_loss_and_grads(self):
        """(params, batch) -> (loss, grads), both trees in the model's layer order (what the
        parity tests compare; the train step itself works in `block_order`)."""
        def run(params, batch):
            if self.precision.delayed:  # from the first step's state (scale 1)
                fresh = fp8.init_state(self.model, self.precision)
                loss, grads, _ = self.fp8_loss_and_grads(self.to_storage(params), fresh, batch)
            else:
                loss, grads = self.loss_and_grads(self.to_storage(params), batch)
            return loss, self.natural_params(grads)

        batch = {"inputs": self.batch_sharding, "targets": self.batch_sharding}
        return jax.jit(run, in_shardings=(self.state_shardings("param"), batch))

    def abstract_batch(self):
        return {k: jax.ShapeDtypeStruct(shape, dtype, sharding=self.batch_sharding)
                for k, (shape, dtype) in batch_shapes(self.model, self.train.global_batch,
                                                      self.seq_len).items()}

    def lower(self):
        """Lower the step for abstract inputs (no arrays are created)."""
        state = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                             jax.eval_shape(self.init_state), self.train_state_shardings())
        return self.jitted_step().lower(state, self.abstract_batch())


def reference_loss_and_grads(model: ModelConfig, train: TrainConfig, params, batch):
    """The single-device reference every layout must reproduce (no mesh, no constraints; the
    remat policy changes what is stored, never a value); under an FP8 precision the same
    recipe on one device (delayed scaling from its first step's state)."""
    recipe = precision(train.precision or "fp32")
    fn = partial(gpt.loss_fn, cfg=model, remat=train.remat or "none",
                 ops=gpt.Ops().with_precision(recipe),
                 fp8_state=fp8.init_state(model, recipe))
    return jax.jit(jax.value_and_grad(fn))(params, batch)
