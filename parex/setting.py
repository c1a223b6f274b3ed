"""One run, resolved once: every default filled and the regime decided, at each entry point.

    s = resolve(model, train, layout, "h100-sxm")          # a prediction: the profile's regime
    s = resolve_run(model, train, layout, platform="cpu")   # an execution: the platform's regime
    s.model, s.train, s.layout   # the model in its compute dtype; train with its global batch,
                                 # remat and attention kernel; the layout with its schedule and
                                 # microbatch count
    s.regime, s.recipe, s.convention, s.attention, s.act_bytes
    s.to_json(), s.describe()    # what every output states (Prediction.assumptions)

The entry points (the CLI, parex.predict / parex.measure, TrainStep, the Explorer, the Planner,
the heterogeneous planner) resolve what the user said into a Setting; the engines behind them
(the predictor's columns, the executor, local learning, 3D stages, hetero costs, the Explorer's
explanations) read it and decide nothing. What the defaults are is parex.defaults; this module
is the one place they are applied, and the one place the regime is read off a profile.

Two regimes. *emulated*: this machine's CPU mesh, described by a calibrated profile
(`cpu-local`) or met as the `cpu` platform. *accelerator*: a GPU/TPU profile or platform.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import defaults
from .config import DTYPE_BYTES, DTYPES, ModelConfig, TrainConfig
from .errors import InputError, unknown
from .hardware import Chip, Cluster, load_chip
from .layout import Layout, num_microbatches
from .precision import DTYPE_PRECISION, Precision, check_chip, compute_dtype, precision
from .stacks import OVERLAPS, STACKS, overlap_flags

EMULATED, ACCELERATOR = "emulated", "accelerator"
REGIMES = (EMULATED, ACCELERATOR)
RECIPE_NAMES = ("parex", "mixed", "mixed-fp32-grads", "fsdp2")  # parex.predict.memory.RECIPES
CONVENTION_NAMES = ("gpu", "xla-cpu")  # parex.predict.comm.CONVENTIONS
# the stack's overlaps among parex.predict.comm.Convention's fields (Setting.overlaps)
OVERLAP_FLAGS = ("overlaps_grad_reduce", "overlaps_tp_backward", "axonn_overlaps",
                 "overlaps_tp_comm", "async_tp", "overlaps_param_gather", "overlaps_moe_a2a",
                 "dispatch_per_node", "bucket_params")


def profile_regime(chip: Chip) -> str:
    """A calibrated profile describes this machine's emulated mesh; any other an accelerator."""
    return EMULATED if chip.calibration is not None else ACCELERATOR


def platform_regime(platform: str) -> str:
    """JAX's `cpu` platform is the emulated mesh; `gpu` and `tpu` are accelerators."""
    return EMULATED if platform == "cpu" else ACCELERATOR


def as_cluster(hardware, n_devices: int = 1, nodes: int | None = None) -> Cluster:
    """A Cluster from a Cluster, a Chip or a profile name: `nodes` nodes, or (for a chip or a
    name) enough for `n_devices`."""
    if isinstance(hardware, Cluster):
        return hardware if nodes is None else dataclasses.replace(hardware, nodes=nodes)
    if isinstance(hardware, str):
        hardware = load_chip(hardware)
    if not isinstance(hardware, Chip):
        raise TypeError(f"hardware must be a profile name, a Chip or a Cluster, not {hardware!r}")
    if nodes is not None and nodes < 1:
        raise InputError(f"nodes={nodes}: a cluster has at least one node")
    return Cluster(hardware, nodes or max(1, -(-n_devices // hardware.devices_per_node)))


@dataclass(frozen=True)
class Setting:
    """What one run is, every default filled. `layout` is None for a setting shared by many
    layouts (a plan's rows, a sweep's grid): `with_layout` gives one layout's."""

    model: ModelConfig  # in its compute dtype
    train: TrainConfig  # global_batch, remat and attention filled
    layout: Layout | None  # its pipeline schedule and default microbatch count filled
    regime: str  # EMULATED or ACCELERATOR
    recipe: str  # bytes of model state: parex (float32 all) or mixed (ZeRO's 2 + 2 + 12)
    convention: str  # the program described: gpu (the ideal one) or xla-cpu (the emulated mesh's)
    schedule: str  # the schedule of pipelines that name none
    cluster: Cluster | None = None  # the profile predicted on (None: a run on a platform)
    defaulted: tuple[str, ...] = ()  # the fields the defaults filled, not the caller
    overlaps: tuple[tuple[str, bool], ...] = ()  # the stack's overlaps where they differ from
    # the convention's (parex.predict.comm.Convention's overlaps_* flags), e.g. a published
    # run's (("overlaps_grad_reduce", False),): what its software overlaps
    stack: str | None = None  # the software stack whose overlaps these are (parex.stacks)
    expert_imbalance: float = defaults.EXPERT_IMBALANCE  # a mixture of experts' busiest
    # expert's load over the mean (1.0: balanced); stated for MoE models only

    # --- what engines read ----------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        return self.regime == EMULATED

    @property
    def dtype(self) -> str:
        return self.model.dtype

    @property
    def act_bytes(self) -> int:
        """Bytes of one activation element: the compute dtype's."""
        return DTYPE_BYTES[self.model.dtype]

    @property
    def attention(self) -> str:
        return self.train.attention

    @property
    def precision(self) -> Precision:
        """The matmul recipe (parex.precision): the blocks' projections in FP8 or not (none
        for a dtype without a precision, which validation refuses)."""
        return precision(self.train.precision or "fp32")

    @property
    def flash(self) -> bool:
        return self.train.attention == "flash"

    @property
    def seq_len(self) -> int:
        return self.train.seq_len or self.model.seq_len

    @property
    def microbatch(self) -> int | None:
        """b, sequences per replica per microbatch, of this setting's layout."""
        if self.layout is None:
            return self.train.microbatch
        m = num_microbatches(self.layout, self.train)
        return max(1, self.train.global_batch // (max(1, self.layout.batch_split) * m))

    @property
    def overlap_names(self) -> tuple[str, ...]:
        """The overlaps (parex.stacks names) of the program predicted: the stack's or the given
        list, else parex's own (the gpu convention's flags); none in the emulated mesh's."""
        if self.convention == "xla-cpu":
            return ()
        if not self.overlaps:
            return STACKS["parex"].overlaps
        return tuple(_overlap_names(dict(self.overlaps)))

    def with_layout(self, layout: Layout) -> "Setting":
        """This setting for one layout: its schedule named, and, where the global batch is the
        regime's default too and neither the layout nor the train config sets a microbatch,
        the microbatch count of the regime's default size (parex.defaults.default_microbatch:
        m = B / (b · the replicas that split the batch)). A given batch without a microbatch
        size is trained without accumulation, as torchtitan's and MaxText's batch settings."""
        layout = _scheduled(layout, self.schedule)
        b = defaults.default_microbatch(self.model, self.emulated)
        if (b and "global_batch" in self.defaulted and self.train.microbatch is None
                and layout.microbatches == 1 and not layout.diloco):
            split = max(1, layout.batch_split)
            layout = layout.replace(microbatches=max(1, self.train.global_batch // (split * b)))
        return dataclasses.replace(self, layout=layout)

    def replace(self, **changes) -> "Setting":
        return dataclasses.replace(self, **changes)

    # --- what every output states ---------------------------------------------------------
    def to_json(self) -> dict:
        """The stated setting: every Prediction's `assumptions`, every plan row's."""
        cluster = self.cluster
        return {"hardware": cluster.chip.name if cluster else None,
                "nodes": cluster.nodes if cluster else None,
                "n_devices": (cluster.n_devices if cluster else
                              self.layout.n_devices if self.layout else None),
                "regime": self.regime, "dtype": self.dtype, "recipe": self.recipe,
                "convention": self.convention, "global_batch": self.train.global_batch,
                "seq_len": self.seq_len, "remat": self.train.remat,
                "microbatch": self.microbatch,
                "schedule": (self.layout.schedule if self.layout is not None
                             and self.layout.stage > 1 else self.schedule),
                "attention": self.attention, "precision": self.train.precision,
                "expert_imbalance": self.expert_imbalance if self.model.moe else None} | (
                    {"overlaps": dict(self.overlaps)} if self.overlaps else {}) | (
                    {"stack": self.stack} if self.stack else {})

    def describe(self) -> str:
        return describe(self.to_json())


def describe(stated: dict) -> str:
    """One line for a report's header, from a Setting's to_json (or a record's assumptions)."""
    s = stated
    where = (f"{s['hardware']}×{s['nodes']} ({s['n_devices']} devices)" if s.get("hardware")
             else f"{s.get('n_devices')} devices")
    micro = "" if s.get("microbatch") is None else f" (b={s['microbatch']})"
    return (f"{where} · {s.get('regime', '')} · {s['dtype']} · recipe {s['recipe']} · "
            f"convention {s['convention']} · global batch {s['global_batch']} × "
            f"{s['seq_len']} tokens{micro} · remat {s['remat']} · schedule {s['schedule']}"
            + (f" · attention {s['attention']}" if s.get("attention") else "")
            + (f" · precision {s['precision']}" if s.get("precision") else "")
            + (f" · expert imbalance {s['expert_imbalance']:g}"
               if s.get("expert_imbalance") is not None else "")
            + (f" · stack {s['stack']}" if s.get("stack") else "")
            + (f" · overlaps {', '.join(_overlap_names(s['overlaps'])) or 'none'}"
               if s.get("overlaps") else ""))


def _overlap_names(flags: dict) -> list[str]:
    return [name for name, flag in OVERLAPS.items() if flags.get(flag)]


def resolve(model: ModelConfig, train: TrainConfig, layout: Layout | None = None,
            hardware=defaults.HARDWARE, *, nodes: int | None = None,
            n_devices: int | None = None, dtype: str | None = None, recipe: str | None = None,
            convention: str | None = None, expert_imbalance: float | None = None,
            overlaps=None, stack: str | None = None) -> Setting:
    """The Setting of a prediction on `hardware` (a profile name, a Chip or a Cluster; a
    name or chip gets `nodes` nodes, or enough for the layout, or for `n_devices`): what is
    given, and parex.defaults' choice for the profile's regime for everything that is None.
    `stack` (parex.stacks) names the overlaps a framework runs; `overlaps`, names, replaces
    its list (or, a dict, sets Convention flags directly: a published run's)."""
    n = layout.n_devices if layout is not None else n_devices or 1
    cluster = as_cluster(hardware, n, nodes)
    regime = profile_regime(cluster.chip)
    if convention is not None and not isinstance(convention, str):  # a Convention: its flags
        overlaps = {f: getattr(convention, f) for f in OVERLAP_FLAGS} | (overlaps or {})
    named = stack is not None or (overlaps is not None and not isinstance(overlaps, dict))
    if named:
        overlaps = overlap_flags(stack, overlaps)
    setting = _resolved(model, train, regime, dtype=dtype, recipe=recipe,
                        convention=convention, n_devices=cluster.n_devices,
                        expert_imbalance=expert_imbalance, stack=stack)
    if named and setting.convention == "xla-cpu":
        raise InputError("the xla-cpu convention is the emulated mesh's program, which overlaps "
                         "nothing: drop --stack/--overlap, or use --convention gpu")
    setting = setting.replace(cluster=cluster, stack=stack,
                              overlaps=tuple(sorted((overlaps or {}).items())))
    check_chip(setting.train.precision, cluster.chip)
    return setting if layout is None else setting.with_layout(layout)


def resolve_run(model: ModelConfig, train: TrainConfig, layout: Layout,
                platform: str) -> Setting:
    """The Setting of an execution on JAX's `platform` (cpu: the emulated mesh): the model
    runs in its own dtype, under parex's recipe and the compiled program's convention."""
    regime = platform_regime(platform)
    convention = "xla-cpu" if regime == EMULATED else "gpu"
    setting = _resolved(model, train, regime, dtype=None, recipe="parex",
                        convention=convention, n_devices=layout.n_devices, runs=True)
    return setting.with_layout(layout)


def resolve_regime(model: ModelConfig, train: TrainConfig, regime: str, *,
                   dtype: str | None = None, recipe: str | None = None,
                   convention: str | None = None) -> Setting:
    """A Setting on no one cluster or platform (a heterogeneous plan's stages each run on their
    own chips): the regime's defaults for what is not given; no layout."""
    return _resolved(model, train, regime, dtype=dtype, recipe=recipe, convention=convention,
                     n_devices=1)


def _resolved(model: ModelConfig, train: TrainConfig, regime: str, *, dtype, recipe,
              convention, n_devices: int, expert_imbalance=None, runs: bool = False,
              stack: str | None = None) -> Setting:
    """A Setting without a layout: parex.defaults for every None of the train config and the
    keywords, checked. `runs`: an execution, which runs the model in its own dtype."""
    dtype_given, own = dtype, regime == EMULATED or runs
    dtype, precision_name = _dtype_and_precision(model, train.precision, dtype, own)
    if dtype != model.dtype:  # the model's own is validation's to judge (its "dtype" rule)
        _check(dtype, DTYPES, "dtype")
    model = model if model.dtype == dtype else model.replace(dtype=dtype)
    recipe_given, convention_given = _name(recipe), _name(convention)
    recipe = recipe_given or defaults.default_recipe(regime == EMULATED, dtype, stack)
    convention = convention_given or defaults.default_convention(regime == EMULATED)
    _check(recipe, RECIPE_NAMES, "recipe")
    _check(convention, CONVENTION_NAMES, "convention")
    if recipe != "parex" and dtype == "float32":
        raise InputError(f"recipe '{recipe}' is 16-bit mixed precision (bfloat16 compute): "
                         "with dtype float32 use recipe 'parex' (float32 state), or dtype "
                         "bfloat16")
    local = regime == EMULATED
    seq_len = train.seq_len or model.seq_len
    given = {name: getattr(train, name) for name in ("global_batch", "remat", "attention",
                                                     "precision")}
    attention = train.attention or defaults.default_attention(local, model.causal)
    train = train.replace(precision=precision_name,
        global_batch=train.global_batch or defaults.default_global_batch(model, seq_len,
                                                                          n_devices, local),
        attention=attention, remat=train.remat or defaults.default_remat(model, local,
                                                                         attention))
    said = {"dtype": dtype_given, "recipe": recipe_given, "convention": convention_given}
    return Setting(model, train, None, regime, recipe, convention,
                   defaults.default_schedule(local),
                   expert_imbalance=(defaults.EXPERT_IMBALANCE if expert_imbalance is None
                                     else float(expert_imbalance)),
                   defaulted=tuple(name for name, value in (given | said).items()
                                   if value is None))


def _dtype_and_precision(model: ModelConfig, name: str | None, dtype: str | None,
                         own: bool) -> tuple[str, str | None]:
    """(compute dtype, precision name). No precision named: the dtype's default
    (parex.defaults) and its own precision (fp32, bf16). An FP8 recipe where parex runs the
    model (the emulated mesh, an execution) computes the rest in the model's own dtype (the CLI
    sets it by parex.precision.compute_dtype); elsewhere the precision's compute dtype, or the
    given dtype where the precision allows it."""
    if name is None:
        dtype = dtype or defaults.default_dtype(model, own)
        return dtype, DTYPE_PRECISION.get(dtype)  # None: a dtype validation refuses
    if precision(name).fp8 and own:
        return dtype or model.dtype, name
    return compute_dtype(name, dtype), name


def _scheduled(layout: Layout, default: str) -> Layout:
    """The layout with its pipeline schedule named: its own, or the default (interleaved when
    it has virtual stages, the one default schedule that runs them)."""
    if layout.stage == 1 or layout.schedule is not None:
        return layout
    return layout.replace(schedule="interleaved" if layout.virtual_stages > 1 else default)


def _check(value: str, known, what: str) -> None:
    if value not in known:
        raise InputError(unknown(what, value, known))


def _name(value) -> str | None:
    """A recipe or convention given by name or as its dataclass (which has a `name`)."""
    return value if value is None or isinstance(value, str) else value.name


__all__ = ["ACCELERATOR", "EMULATED", "REGIMES", "Setting", "as_cluster", "describe",
           "platform_regime", "profile_regime", "resolve", "resolve_regime", "resolve_run"]
