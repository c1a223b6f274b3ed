"""Checks that a (model, train config, layout, device count) can run, before anything compiles.

Each check raises LayoutError with the problem and a fix. They are cheap integer tests, so a planner can
call them for thousands of layouts.
"""

from __future__ import annotations

from .config import DTYPES, FAMILIES, REMAT_POLICIES, ModelConfig, TrainConfig
from .layout import CP_MODES, OUTER_DTYPES, Layout, LayoutError


def check_layout(layout: Layout, model: ModelConfig, train: TrainConfig, n_devices: int) -> None:
    _check_replica(layout, model, train, n_devices)  # first: its device-count message is sharper
    _check_axes(layout, n_devices)
    _check_model(model, train)
    _check_tensor(layout, model, train)
    _check_state_sharding(layout, model)
    _check_batch(layout, train)
    _check_pipeline(layout, model, train)
    _check_context(layout, model, train)


def _fail(message: str):
    raise LayoutError(message)


def _check_axes(layout: Layout, n_devices: int) -> None:
    for axis, size in layout.axis_sizes().items():
        if size < 1:
            _fail(f"mesh axis {axis.value}={size}: every axis size must be at least 1")
    if layout.n_devices != n_devices:
        sizes = " × ".join(f"{a.value}={s}" for a, s in layout.axis_sizes().items() if s > 1)
        _fail(f"the mesh {sizes or 'single'} uses {layout.n_devices} devices but {n_devices} are "
              f"available: change the axis sizes so that their product is {n_devices}, or run on "
              f"{layout.n_devices} devices (--devices {layout.n_devices})")
    if layout.zero not in (0, 1, 2, 3):
        _fail(f"zero={layout.zero}: the ZeRO stage is 0, 1 (optimizer state), 2 (+ gradients) "
              f"or 3 (+ parameters)")
    if layout.microbatches < 1:
        _fail(f"microbatches={layout.microbatches}: use at least 1")


def _check_model(model: ModelConfig, train: TrainConfig) -> None:
    if model.family not in FAMILIES:
        _fail(f"unknown model family {model.family!r}; use one of {', '.join(FAMILIES)}")
    if model.dtype not in DTYPES:
        _fail(f"unknown dtype {model.dtype!r}; use one of {', '.join(DTYPES)}")
    if train.remat not in REMAT_POLICIES:
        _fail(f"unknown remat policy {train.remat!r}; use one of {', '.join(REMAT_POLICIES)}")
    if model.hidden % model.heads:
        _fail(f"hidden={model.hidden} is not divisible by heads={model.heads}: pick a hidden size "
              f"that is a multiple of the head count")
    if model.heads % model.kv_heads:
        _fail(f"heads={model.heads} is not a multiple of kv_heads={model.kv_heads}: grouped-query "
              f"attention shares each KV head among heads/kv_heads query heads")
    if model.family == "llama" and model.head_dim % 2:
        _fail(f"head_dim={model.head_dim} is odd; rotary embeddings rotate pairs of features")
    seq = train.seq_len or model.seq_len
    if not 1 <= seq <= model.seq_len:
        _fail(f"sequence length {seq} must be between 1 and the model's seq_len={model.seq_len}")


def _check_tensor(layout: Layout, model: ModelConfig, train: TrainConfig) -> None:
    t = layout.tensor
    for name, size in (("heads", model.heads), ("kv_heads", model.kv_heads),
                       ("ffn", model.ffn), ("vocab", model.vocab)):
        if size % t:
            _fail(f"{name}={size} is not divisible by tensor={t}: Megatron tensor parallelism "
                  f"splits {name} across the tensor axis; choose tensor from the divisors of "
                  f"{size}")
    if layout.sp and t == 1:
        _fail("sp=on needs tensor > 1: sequence parallelism splits the LayerNorm regions over the "
              "tensor axis; set tensor=2 or more, or sp=off")
    seq = train.seq_len or model.seq_len
    if layout.sp and seq % t:
        _fail(f"sequence length {seq} is not divisible by tensor={t}, which sp=on requires; "
              f"pick a sequence length that is a multiple of {t}")


def _check_state_sharding(layout: Layout, model: ModelConfig) -> None:
    # The embed dim of every weight is what ZeRO / FSDP split (W_in[D_fsdp, F]).
    n = layout.shard_count("embed", "opt")
    if model.hidden % n:
        axes = "fsdp" if layout.zero == 0 else "data × fsdp"
        _fail(f"hidden={model.hidden} is not divisible by the {n} shards of {axes} that "
              f"FSDP/ZeRO cut each weight into; choose sizes whose product divides {model.hidden}")
    # the embedding and head are split over the stages too (Layout.spec)
    if model.hidden % (n * layout.stage):
        _fail(f"hidden={model.hidden} is not divisible by the {n * layout.stage} shards that "
              f"the embedding and head are cut into over the pipeline's stage={layout.stage} "
              f"(and fsdp/ZeRO) axes; choose sizes whose product divides {model.hidden}")


def _check_batch(layout: Layout, train: TrainConfig) -> None:
    dp, B, m = layout.data_parallel, train.global_batch, layout.microbatches
    if B % dp:
        _fail(f"global batch {B} is not divisible by the {dp} data-parallel replicas "
              f"(data × fsdp): use a global batch that is a multiple of {dp}")
    if B % (dp * m):
        _fail(f"global batch {B} is too small or uneven for {m} microbatches on {dp} replicas: "
              f"it must be a multiple of data × fsdp × microbatches = {dp * m}; raise the batch to "
              f"{dp * m * max(1, -(-B // (dp * m)))} or lower microbatches")
    b = train.microbatch
    if b is not None:
        if b < 1 or (B // dp) % b:
            _fail(f"microbatch={b} must divide the {B // dp} sequences each of the {dp} replicas "
                  f"gets per step")
        if m > 1 and m != B // dp // b:
            _fail(f"microbatches={m} and microbatch={b} disagree: {B}/({dp}·{b}) = "
                  f"{B // dp // b} microbatches; set only one of them")


def _check_pipeline(layout: Layout, model: ModelConfig, train: TrainConfig) -> None:
    from .parallel.schedules import check_schedule  # pure Python, no JAX

    p, v, L, parts = layout.stage, layout.virtual_stages, model.layers, layout.layers_per_stage
    if p == 1:
        if layout.schedule != "gpipe" or v != 1 or parts:
            _fail("schedule, virtual and partition apply to pipelines: set stage=2 or more, or "
                  "leave them at their defaults")
        return
    if layout.cp == "ring":
        _fail("ring attention (cp=ring) cannot run inside pipeline stages: each stage takes its "
              "own branch of the tick switch, and XLA's CPU runtime pairs a collective-permute "
              "run by some stages with another stage's (wrong results, or an abort); use "
              "cp=ulysses inside stages, or stage=1 for ring attention")
    try:
        check_schedule(layout.schedule, p, num_microbatches(layout, train), v)
    except ValueError as error:
        raise LayoutError(str(error)) from None
    if L % p:
        _fail(f"layers={L} is not a multiple of stage={p}: parex stores the stacked layers' "
              f"parameters and optimizer state split evenly over the stage axis (a partition "
              f"only sets which stage computes which layers); choose stage from the divisors "
              f"of {L}")
    if parts is None and p * v > L:
        _fail(f"stage × virtual = {p * v} pipeline chunks but the model has only layers={L}: "
              f"lower virtual to at most {L // p}")
    if parts is None and L % (p * v):
        even = [d for d in range(1, L + 1) if L % d == 0]
        _fail(f"layers={L} do not split evenly into stage × virtual = {p * v} pipeline chunks: "
              f"choose stage × virtual from {even}, or give the layers per chunk explicitly, "
              f"e.g. partition={_example_partition(L, p * v)}")
    if parts is not None:
        if len(parts) != p * v:
            _fail(f"partition={':'.join(map(str, parts))} has {len(parts)} entries but the "
                  f"pipeline has {p * v} chunks (stage={p} × virtual={v}): give one layer count "
                  f"per chunk, e.g. partition={_example_partition(L, p * v)}")
        if min(parts) < 1 or sum(parts) != L:
            _fail(f"partition={':'.join(map(str, parts))} must give every chunk at least one "
                  f"layer and sum to the model's layers={L} (it sums to {sum(parts)}), "
                  f"e.g. partition={_example_partition(L, len(parts))}")


def _example_partition(layers: int, chunks: int) -> str:
    """An as-even-as-possible split of `layers` into `chunks`, as a partition string."""
    base, extra = divmod(layers, chunks)
    return ":".join(str(base + (i < extra)) for i in range(chunks))


def _check_context(layout: Layout, model: ModelConfig, train: TrainConfig) -> None:
    s, cp = layout.seq, layout.cp
    if cp not in CP_MODES:
        _fail(f"unknown context-parallel mode cp={cp!r}; use one of {', '.join(CP_MODES)}")
    if s > 1 and cp == "none":
        _fail(f"seq={s} splits the sequence but cp=none says nothing about how attention crosses "
              f"the shards: set cp=ring (keys and values passed around the ring) or cp=ulysses "
              f"(all-to-all between sequence and head shards), or seq=1")
    if s == 1 and cp != "none":
        _fail(f"cp={cp} needs a sequence split: set seq=2 or more (and shrink another axis to "
              f"keep the device count), or cp=none")
    if s > 1:
        _check_context_sizes(layout, model, train.seq_len or model.seq_len)


def _check_context_sizes(layout: Layout, model: ModelConfig, T: int) -> None:
    s, t = layout.seq, layout.tensor
    chunks = 2 * s if layout.cp == "ring" else s
    if T % chunks:
        why = ("the zig-zag split of ring attention cuts it into 2·seq" if layout.cp == "ring"
               else "Ulysses cuts it into seq")
        _fail(f"sequence length {T} is not divisible by {chunks}: {why} = {chunks} equal chunks; "
              f"use a multiple of {chunks}, e.g. {max(chunks, T // chunks * chunks)}")
    if layout.sp and T % (s * t):
        _fail(f"sequence length {T} is not divisible by seq × tensor = {s * t}, which sp=on with "
              f"seq={s} requires (the residual stream is split over both); use a multiple of "
              f"{s * t}")
    if layout.cp == "ulysses":
        for name, n in (("heads", model.heads), ("kv_heads", model.kv_heads)):
            if n % (s * t):
                _fail(f"{name}={n} is not divisible by tensor × seq = {t} × {s}: Ulysses gives "
                      f"each device whole heads after its all-to-all; choose seq from the "
                      f"divisors of {name}/tensor = {n // t}, or use cp=ring")


def num_microbatches(layout: Layout, train: TrainConfig) -> int:
    """m: the Layout's count, or the one implied by TrainConfig.microbatch."""
    if layout.microbatches > 1 or train.microbatch is None:
        return layout.microbatches
    return train.global_batch // layout.data_parallel // train.microbatch


# --- DiLoCo: the replica axis (parex.parallel.diloco) --------------------------------------------

def _check_replica(layout: Layout, model: ModelConfig, train: TrainConfig, n_devices: int) -> None:
    """The replica axis and the DiLoCo keys; then each replica's inner layout on its share of
    the devices and of the batch, with every other check."""
    from .parallel.rounds import DILOCO_FIELDS, inner_layout

    R, H, P = layout.replica, layout.inner_steps, layout.fragments
    if not layout.diloco:
        changed = [k for k in DILOCO_FIELDS if getattr(layout, k) != getattr(Layout(), k)]
        if changed:
            _fail(f"{', '.join(changed)} only mean something for DiLoCo: set replica=2 or more "
                  f"(and inner_steps=H), or leave {', '.join(changed)} at the default")
        return
    if R < 1:
        _fail(f"replica={R}: use at least 1 replica")
    if n_devices % R:
        divisors = [d for d in range(1, n_devices + 1) if n_devices % d == 0]
        _fail(f"replica={R} does not divide the {n_devices} devices: every replica runs the same "
              f"inner mesh on n/R devices; choose replica from {divisors}")
    if H < 1:
        _fail(f"inner_steps={H}: each replica takes at least one inner step between "
              f"synchronisations; use inner_steps=1 or more (DiLoCo uses tens to hundreds)")
    _check_outer(layout)
    _check_fragments(layout, model)
    B, inner = train.global_batch, inner_layout(layout)
    unit = R * inner.data_parallel * inner.microbatches
    if B % unit:
        _fail(f"global batch {B} does not split evenly over replica × data × fsdp × microbatches "
              f"= {unit}: each replica takes B/R sequences; use a global batch that is a "
              f"multiple of {unit}")
    check_layout(inner, model, train.replace(global_batch=B // R), n_devices // R)


def _check_outer(layout: Layout) -> None:
    if layout.outer_dtype not in OUTER_DTYPES:
        _fail(f"outer_dtype={layout.outer_dtype!r}: the pseudo-gradients are exchanged as one of "
              f"{', '.join(OUTER_DTYPES)}")
    if not layout.outer_lr > 0:
        _fail(f"outer_lr={layout.outer_lr}: the outer learning rate must be positive "
              f"(DiLoCo uses 0.7)")
    if not 0 <= layout.outer_momentum < 1:
        _fail(f"outer_momentum={layout.outer_momentum}: Nesterov momentum lies in [0, 1) "
              f"(DiLoCo uses 0.9)")


def _check_fragments(layout: Layout, model: ModelConfig) -> None:
    P, H, L, p = layout.fragments, layout.inner_steps, model.layers, layout.stage
    if P < 1:
        _fail(f"fragments={P}: use 1 (all parameters at once) or more (streaming)")
    if L % P:
        divisors = [d for d in range(1, L + 1) if L % d == 0]
        _fail(f"fragments={P} does not divide the model's layers={L}: each fragment holds "
              f"every P-th layer; choose fragments from {divisors}")
    if p > 1 and (L // p) % P:
        _fail(f"fragments={P} does not divide the {L // p} layers of each of the stage={p} "
              f"pipeline stages: a strided fragment takes the same share of every stage; "
              f"choose fragments from the divisors of {L // p}")
    if H % P:
        _fail(f"inner_steps={H} is not a multiple of fragments={P}: the fragments synchronise "
              f"H/P steps apart; use inner_steps={P * max(1, -(-H // P))}")
