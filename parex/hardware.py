"""Hardware profiles as data: one JSON file per chip in data/hardware/. The cluster the predictor
reads (chips, node counts and the network between them) is the one cluster type of parex.nodes,
re-exported here as `Cluster`, with `load_cluster` (a profile × nodes).

A profile holds one set of numbers per chip with its sources: peak FLOP/s per dtype (and "mxfp8"
where its matmul units take MX block scales), HBM size and bandwidth, the two network levels
(intra-node and inter-node bandwidth, one direction per device, and latency), devices per node,
the size of the fast "scale-up" domain (8 NVLink GPUs, a whole TPU slice on ICI), and the
achievable fractions of peak, each with where it comes from
(`efficiency_sources`): `matmul_efficiency` (the best matmul rate over dense peak, from a
published GEMM benchmark of the chip; `fp8_matmul_efficiency` the same for FP8 where one is
published), `network_efficiency` (collective bus bandwidth over link bandwidth; assumed where no
benchmark of the chip was found) and `step_efficiency` (the fraction of those kernel rates a
training step sustains, fitted once on named published runs: parex.predict.published_runs).

The local CPU gets a profile too (`cpu-local`), written by `parex calibrate` into the user's cache
(one per machine: parex.machine); its `calibration` block holds what was measured on the
emulated mesh: matmul rate against size, per-kind collective α-β costs (every kind: a profile
that lacks one is refused, never costed at 0 s), per-step overhead and how many emulated devices
really run at once.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError, unknown
from .machine import cache_dir, machine_description, profile_path
from .network import Network, load_network
from .nodes import Cluster

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "data" / "hardware"
LOCAL = "cpu-local"  # this machine's profile, kept in the user's cache (parex.machine)
COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                    "collective-permute")  # what a calibration must time (hlo.KINDS)


@dataclass(frozen=True)
class Link:
    """One network level: per-device bandwidth, one direction (B/s), and per-message latency (s)."""

    bandwidth: float
    latency: float
    name: str = ""
    kind: str = ""  # the collective library's latency class: "nvlink" (default), "pci", "net"


@dataclass(frozen=True)
class Calibration:
    """Measured on this machine's emulated mesh by `parex calibrate` (cpu-local only)."""

    matmul_curve: tuple[tuple[float, float], ...] = ()  # (FLOPs per matmul, FLOP/s per device)
    collectives: dict = field(default_factory=dict)  # kind -> {"alpha": s, "beta": s/B, "group": n}
    step_overhead_s: float = 0.0  # fixed cost of one jitted step call (dispatch, synchronisation)
    parallel_devices: float = 1.0  # a step's throughput with all devices busy / one device alone
    elementwise_rate: float = 0.0  # elementwise FLOP/s (as XLA counts them) per device, all busy
    step_efficiency: float = 1.0  # a real step's speed / what the kernel rates above predict
    efficiency_curve: tuple[tuple[float, float], ...] = ()  # (activation bytes a device holds
    #   from forward to backward, step efficiency) of the one- and two-block probes, ascending;
    #   empty (profiles before 2026-12-05): step_efficiency whatever is held
    optimizer_s_per_param: float = 0.0  # clipping + AdamW update, per parameter, all devices busy
    pipeline_tick_s: float = 0.0  # the pipeline executor's fixed cost per tick (switch, rendezvous)
    collective_in_step: float = 1.0  # a collective between matmuls / its chained α + β·S
    attention_factor: float = 1.0  # the naive attention kernel's measured time / its price at
    #   the kernel rates above (predict.time.naive_attention_seconds); 1.0 (profiles before
    #   2026-12-06): priced at those rates
    blockwise_factor: float = 1.0  # the same for attention in c × c blocks, ring attention's
    #   kernel (predict.time.blockwise_seconds)
    page_fault_rate: float = 0.0  # bytes/s per device, all busy, that fresh pages are faulted in
    #   and unmapped (parex.calibrate.allocator); 0 (profiles before 2026-12-05): not modelled
    mmap_threshold_bytes: float = 0.0  # a step's temporaries above it are mapped afresh every
    #   call (glibc's 32 MiB); 0: never
    n_devices: int = 8  # emulated devices the calibration ran on
    cores: int = 1  # CPU cores seen
    machine: str = ""  # parex.machine.fingerprint() of the machine measured
    load_average: float | None = None  # 1-minute load average as the calibration began

    def matmul_rate(self, flops_per_matmul: float) -> float:
        """FLOP/s per device for one matmul of that size: log-linear interpolation of the curve,
        flat beyond its ends."""
        curve = self.matmul_curve
        if not curve:
            return 0.0
        x = math.log(max(flops_per_matmul, 1.0))
        xs = [math.log(f) for f, _ in curve]
        if x <= xs[0]:
            return curve[0][1]
        for (x0, (_, r0)), (x1, (_, r1)) in zip(zip(xs, curve), zip(xs[1:], curve[1:])):
            if x <= x1:
                return r0 + (r1 - r0) * (x - x0) / (x1 - x0)
        return curve[-1][1]


@dataclass(frozen=True)
class Chip:
    """One accelerator's numbers. Bandwidths are bytes/s per device in one direction."""

    name: str  # the profile's key, e.g. "a100-80gb"
    description: str
    peak_flops: dict  # dtype -> dense FLOP/s ("bfloat16", "float32", ..., "mxfp8": block-scaled)
    hbm_bytes: float  # device memory (GB = 1e9 bytes)
    hbm_bandwidth: float  # B/s
    intra_node: Link  # NVLink / ICI / shared memory
    inter_node: Link  # InfiniBand / DCN
    devices_per_node: int  # devices one node (host) holds; a Cluster counts nodes
    scaleup_domain: int  # devices joined by the fast links (8 on HGX, a TPU slice on ICI)
    matmul_efficiency: float  # best achievable matmul rate / dense peak (a GEMM benchmark)
    network_efficiency: float  # achievable fraction of link bandwidth for large collectives
    sources: tuple[str, ...] = ()
    calibration: Calibration | None = None
    step_efficiency: float = 1.0  # a training step's kernels / their best rates (fitted)
    efficiency_sources: dict = field(default_factory=dict)  # efficiency name -> where from
    # the fused attention kernel's rate / dense peak by pass, head dim and sequence length, from
    # a published benchmark of the chip, or {"assumed_from": profile} (predict.accelerator)
    flash_attention: dict = field(default_factory=dict)
    # the network the chip's nodes sit in (data/networks/, parex.network): the collective
    # library and the fabric above the node; None: one full-bisection switch, NCCL
    network: Network | None = None
    # the GEMM library's large tile and the compute units it fills (parex.predict.kernels):
    # {"units": SMs or CUs, "tile": t, "source": ...}; {}: one efficiency for all shapes
    gemm: dict = field(default_factory=dict)
    # relative spread of device speeds (parex.predict.stragglers); None: the published default
    speed_variation: float | None = None
    # best achievable FP8 matmul rate / dense FP8 peak (an FP8 GEMM benchmark); None: none is
    # published for the chip, and its bf16 benchmark's fraction is assumed (fp8_efficiency)
    fp8_matmul_efficiency: float | None = None
    # the best achievable HBM bandwidth / the datasheet's (a published memory benchmark); 1: none
    # is published for the chip, and its step efficiency is the one fitted at the datasheet's
    hbm_efficiency: float = 1.0

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype`; float32 falls back to bfloat16's when not listed (TPUs run
        f32 matmuls through bf16 passes by default)."""
        if dtype in self.peak_flops:
            return float(self.peak_flops[dtype])
        return float(self.peak_flops["bfloat16"])

    def fp8_efficiency(self) -> float:
        """The chip's best FP8 matmul rate over its dense FP8 peak: its published FP8 GEMM
        benchmark's, else the bf16 benchmark's fraction (an assumption, optimistic on the NVIDIA
        chips with both measured: FP8 0.71-0.78 of its peak, bf16 0.73-0.84 of its own, each
        chip's FP8 below its bf16, in Bekman's MAMF table)."""
        return (self.matmul_efficiency if self.fp8_matmul_efficiency is None
                else self.fp8_matmul_efficiency)

    def achievable_bandwidth(self) -> float:
        """The HBM bandwidth a memory-bound kernel reaches (B/s): the datasheet's times the
        chip's published achievable fraction, as matmuls run at its MAMF (predict.accelerator)."""
        return self.hbm_bandwidth * self.hbm_efficiency

    def to_json(self) -> dict:
        out = {"name": self.name, "description": self.description, "peak_flops": self.peak_flops,
               "hbm_bytes": self.hbm_bytes, "hbm_bandwidth": self.hbm_bandwidth,
               "intra_node": vars(self.intra_node), "inter_node": vars(self.inter_node),
               "devices_per_node": self.devices_per_node, "scaleup_domain": self.scaleup_domain,
               "matmul_efficiency": self.matmul_efficiency,
               "network_efficiency": self.network_efficiency,
               "step_efficiency": self.step_efficiency,
               "efficiency_sources": dict(self.efficiency_sources),
               "sources": list(self.sources)}
        if self.flash_attention:
            out["flash_attention"] = dict(self.flash_attention)
        if self.network is not None:
            out["network"] = self.network.name
        if self.gemm:
            out["gemm"] = dict(self.gemm)
        if self.speed_variation is not None:
            out["speed_variation"] = self.speed_variation
        if self.fp8_matmul_efficiency is not None:
            out["fp8_matmul_efficiency"] = self.fp8_matmul_efficiency
        if self.hbm_efficiency != 1.0:
            out["hbm_efficiency"] = self.hbm_efficiency
        if self.calibration:  # a cpu-local profile's measurements
            cal = vars(self.calibration) | {
                key: [list(p) for p in getattr(self.calibration, key)]
                for key in ("matmul_curve", "efficiency_curve")}
            out["calibration"] = cal
        return out


def chip_from_json(data: dict) -> Chip:
    cal = data.get("calibration")
    if cal is not None:
        cal = Calibration(**(cal | {key: tuple(tuple(p) for p in cal.get(key, ()))
                                    for key in ("matmul_curve", "efficiency_curve")}))
        missing = [k for k in COLLECTIVE_KINDS if not cal.collectives.get(k)]
        if "pipeline_tick_s" not in data["calibration"]:  # profiles calibrated before it
            missing.append("the pipeline executor's tick cost")
        if "collective_in_step" not in data["calibration"]:
            missing.append("a collective's cost between matmuls")
        if missing or not cal.matmul_curve:
            what = ", ".join(missing) or "matmul rates"
            raise InputError(f"the calibration of profile {data.get('name')!r} lacks {what}: "
                             f"run `parex calibrate` to measure this machine again")
    return Chip(name=data["name"], description=data.get("description", ""),
                peak_flops=dict(data["peak_flops"]), hbm_bytes=float(data["hbm_bytes"]),
                hbm_bandwidth=float(data["hbm_bandwidth"]),
                intra_node=Link(**data["intra_node"]), inter_node=Link(**data["inter_node"]),
                devices_per_node=int(data["devices_per_node"]),
                scaleup_domain=int(data.get("scaleup_domain", data["devices_per_node"])),
                matmul_efficiency=float(data["matmul_efficiency"]),
                network_efficiency=float(data["network_efficiency"]),
                sources=tuple(data.get("sources", ())), calibration=cal,
                step_efficiency=float(data.get("step_efficiency", 1.0)),
                efficiency_sources=dict(data.get("efficiency_sources", {})),
                flash_attention=dict(data.get("flash_attention", {})),
                network=load_network(data["network"]) if data.get("network") else None,
                gemm=dict(data.get("gemm", {})),
                speed_variation=data.get("speed_variation"),
                fp8_matmul_efficiency=data.get("fp8_matmul_efficiency"),
                hbm_efficiency=float(data.get("hbm_efficiency", 1.0)))


def user_hardware_dir() -> Path:
    """Where the user's own profiles live (`parex calibrate --from-run` writes them): the
    cache of machine profiles, beside this machine's cpu-local-<fingerprint> files."""
    return cache_dir()


def known_hardware(directory: Path = HARDWARE_DIR) -> list[str]:
    """The profiles in `directory`; for the shipped directory, with cpu-local and the user's."""
    names = {p.stem for p in Path(directory).glob("*.json")}
    if Path(directory) == HARDWARE_DIR:
        names |= {LOCAL} | {p.stem for p in user_hardware_dir().glob("*.json")
                            if not p.stem.startswith(f"{LOCAL}-")}
    return sorted(names)


def load_chip(name: str, directory: Path = HARDWARE_DIR) -> Chip:
    """The profile called `name` (case-insensitive); an unknown name lists the known ones.
    `cpu-local` is this machine's calibration from the user's cache (load_local: read, never
    measured here); a name not shipped in data/hardware/ is looked up among the user's own
    profiles (user_hardware_dir), so predict, plan and the Explorer all read them."""
    if name.lower() == LOCAL and Path(directory) == HARDWARE_DIR:
        return load_local()
    path = Path(directory) / f"{name.lower()}.json"
    if not path.exists() and Path(directory) == HARDWARE_DIR:
        path = user_hardware_dir() / f"{name.lower()}.json"
    if not path.exists():
        raise InputError(unknown("hardware", name, known_hardware(directory)))
    return chip_from_json(json.loads(path.read_text()))


def load_local() -> Chip:
    """This machine's cpu-local profile, read from the user's cache (parex.machine). It never
    calibrates: with no current profile it says how to make one."""
    path = profile_path()
    if not profile_is_current(path):
        raise InputError(f"no current cpu-local profile for this machine "
                         f"({machine_description()}) in {cache_dir()}: run `parex calibrate` "
                         f"(or parex.calibrate.ensure_local() from Python)")
    return chip_from_json(json.loads(path.read_text()))


def profile_is_current(path: Path) -> bool:
    """Whether `path` holds a profile with everything this version of parex measures (one
    written before a new measurement was added is calibrated again)."""
    if not path.exists():
        return False
    try:
        chip_from_json(json.loads(path.read_text()))
    except (InputError, ValueError, KeyError, TypeError):
        return False
    return True


def load_cluster(name: str, nodes: int = 1, directory: Path = HARDWARE_DIR) -> Cluster:
    """`nodes` nodes of the profile `name` as the one cluster type (parex.nodes)."""
    if nodes < 1:
        raise InputError(f"nodes={nodes}: a cluster has at least one node")
    return Cluster(load_chip(name, directory), nodes)


def save_chip(chip: Chip, directory: Path | None = HARDWARE_DIR, path: Path | None = None) -> Path:
    """Write the profile as `directory/<name>.json`, or to `path`; atomically (a reader never
    sees half a file)."""
    path = Path(path) if path is not None else Path(directory) / f"{chip.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(chip.to_json(), indent=2) + "\n")
    partial.replace(path)
    return path


__all__ = ["Calibration", "Chip", "Cluster", "HARDWARE_DIR", "LOCAL", "Link", "chip_from_json",
           "known_hardware", "load_chip", "load_cluster", "save_chip"]
