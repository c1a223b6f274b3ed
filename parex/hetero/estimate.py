"""The search's fast estimate of many candidate plans at once, in numpy.

A candidate is a list of pipelines, each a tuple of Units (structure.py). For a remat policy and
every microbatch size at once this
    1. gives every pipeline's stages their blocks (split.layer_split: the smallest bottleneck
       within each device's memory, with the 1F1B in-flight count of its position), or checks
       the blocks it is given,
    2. times each pipeline in closed form (one microbatch through every stage, the critical
       path's hops counted from the 1F1B table, then m − 1 more at the slowest stage's or
       link's pace) and spreads the microbatches over the pipelines (split.batch_split: all
       finish together), or takes the shares it is given,
    2b. under the ZeRO stage between pipelines (sharding.py): each device's state shard in
       the memory of step 1, ZeRO-3's per-microbatch collectives in the times of step 2,
    3. gives a lower bound on the step (slowest pipeline + optimizer update), to which
       `finish` adds the exposed gradient reduction across pipelines block by block (each
       block's participants placed on their nodes and groups, dp.levels), less the slack a
       stage has while the last backward travels on to the first stage.
The search finishes candidates in order of their bound and stops once the bound passes the best
steps found (branch and bound); the exact predictor (predict.predict_plan) re-times the best.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cluster import HeteroCluster
from ..predict import memory
from ..setting import Setting
from .costs import unit_costs
from .dp import exposed_reduction, levels
from .links import hierarchical_seconds, hop_seconds
from .plan import Stage
from .predict import device_cap
from .sharding import (gathers_per_microbatch, per_element, reduces_at_end, shards,
                       working_bytes_per_element)
from .split import batch_split, layer_split
from .timing import hops_on_path

FIELDS = ("block_s", "tp_block_s", "head_s", "tp_first_s", "tp_last_s", "passes",
          "block_act_bytes", "working_bytes", "logits_bytes", "block_elements", "first_elements",
          "last_elements", "opt_s_per_element")
F = {name: i for i, name in enumerate(FIELDS)}
MAX_T = 64  # tensor degrees below this (codes: group · MAX_T + t)


def index_codes(cluster: HeteroCluster, candidates) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of every stage (group · MAX_T + t) and boundary ((group a, group b, same
    node), t_a, t_b) of candidates of pipelines of Units, padded with −1: (C, P, S) and
    (C, P, S − 1). They depend on the candidates only, not on the remat or the costs."""
    C, G = len(candidates), len(cluster.groups)
    P = max(len(pipes) for pipes in candidates)
    S = max(len(p) for pipes in candidates for p in pipes)
    units = np.full((C, P, S), -1, np.int64)
    hops = np.full((C, P, max(S - 1, 1)), -1, np.int64)
    per_node = [g.devices_per_node for g in cluster.groups]
    for c, pipes in enumerate(candidates):
        for i, pipe in enumerate(pipes):
            g = [u.group for u in pipe]
            t = [u.tensor for u in pipe]
            node = [u.first // per_node[u.group] for u in pipe]
            units[c, i, :len(pipe)] = [a * MAX_T + b for a, b in zip(g, t)]
            for j in range(len(pipe) - 1):
                same = int(g[j] == g[j + 1] and node[j] == node[j + 1])
                pair = (g[j] * G + g[j + 1]) * 2 + same
                hops[c, i, j] = (pair * MAX_T + t[j]) * MAX_T + t[j + 1]
    return units, hops


@dataclass
class Estimate:
    """One candidate at one microbatch size: a bound on its step, then (after `finish`) the
    estimated step, with what rebuilds its plan."""

    bound_s: float
    label: object  # what the candidate came from (a Structure, or an even split's key)
    pipes: list  # per pipeline, its Units
    remat: str
    microbatch: int
    counts: np.ndarray  # (P, S) blocks per stage (padded with 0)
    m: np.ndarray  # (P,) microbatches per pipeline
    t_b: np.ndarray  # (P, S) backward seconds per microbatch, per stage
    elements: dict  # (P, S) per-device parameters of blocks / first / last extras
    zero: int = 0  # the ZeRO stage between pipelines it was estimated under
    step_s: float = float("nan")

    @property
    def layers(self) -> list[list[int]]:
        """Per pipeline, blocks per stage."""
        return [self.counts[i, :len(p)].tolist() for i, p in enumerate(self.pipes)]

    @property
    def microbatches(self) -> list[int]:
        return self.m.tolist()


def on_path_line(p: int) -> tuple[float, float]:
    """(hops on the 1F1B critical path for m = 1, growth per extra microbatch)."""
    if p <= 1:
        return 0.0, 0.0
    far = max(4 * p, 16)
    one = hops_on_path(p, 1)
    return one, (hops_on_path(p, far) - one) / (far - 1)


class Estimator:
    """Estimates candidates of one cluster, model and remat (costs cached across them)."""

    def __init__(self, cluster: HeteroCluster, setting: Setting, global_batch: int,
                 microbatch_sizes, memory_fraction: float = 1.0,
                 memory_cap: float | None = None, zero: int = 0):
        self.cluster, self.setting, self.B, self.zero = cluster, setting, global_batch, zero
        self.recipe = memory.recipe(setting.recipe)
        self.sizes = list(microbatch_sizes)
        self.caps = [device_cap(g.chip.hbm_bytes, memory_fraction, memory_cap)
                     for g in cluster.groups]
        self.chips = [g.chip_profile() for g in cluster.groups]
        self.grad = memory.recipe(setting.recipe).grad_bytes
        self.send = [b * setting.seq_len * setting.model.hidden * setting.act_bytes
                     for b in self.sizes]
        self._costs, self._hops, self._reduce, self._path = {}, {}, {}, {}

    # --- cached pieces ------------------------------------------------------------------
    def costs(self, g: int, t: int) -> np.ndarray:
        """unit_costs of group g at tensor degree t: (FIELDS, microbatch sizes)."""
        per = [unit_costs(self.setting, self.chips[g], [t], b) for b in self.sizes]
        return np.array([[c[f][0] for c in per] for f in FIELDS])

    def path(self, p: int) -> tuple[float, float]:
        if p not in self._path:
            self._path[p] = on_path_line(p)
        return self._path[p]

    # --- many candidates at once --------------------------------------------------------
    def _rows(self, codes: np.ndarray, cache: dict, make, width: tuple) -> np.ndarray:
        """Rows of a table for integer codes (−1: padding, zeros), built once per code."""
        unique, inverse = np.unique(codes, return_inverse=True)
        table = np.zeros((len(unique),) + width)
        for n, code in enumerate(unique.tolist()):
            if code >= 0:
                if code not in cache:
                    cache[code] = make(code)
                table[n] = cache[code]
        return table[inverse.reshape(codes.shape)]

    def arrays(self, candidates, codes=None):
        """Stacked costs (C, P, S, FIELDS, K), valid (C, P, S), caps and hops (C, P, S − 1, K),
        gathered from per-(group, tensor) and per-boundary tables (`index_codes`)."""
        units, hop_codes = index_codes(self.cluster, candidates) if codes is None else codes
        K, G = len(self.sizes), len(self.cluster.groups)
        grid = self._rows(units, self._costs,
                          lambda c: self.costs(c // MAX_T, c % MAX_T), (len(FIELDS), K))
        grid[units < 0, F["passes"]] = 1.0
        caps = np.array(self.caps + [1.0])
        cap = caps[np.where(units < 0, G, units // MAX_T)]
        hops = self._rows(hop_codes, self._hops, self._hop_of_code, (K,))
        return grid, units >= 0, cap, hops

    def _hop_of_code(self, code: int) -> np.ndarray:
        G = len(self.cluster.groups)
        pair, ta, tb = code // (MAX_T * MAX_T), code // MAX_T % MAX_T, code % MAX_T
        ga, gb, same = pair // 2 // G, pair // 2 % G, pair % 2
        groups = self.cluster.groups
        a = Stage(groups[ga].name, 0, ta, 1)
        first_b = 0 if same else groups[gb].devices_per_node  # on another node when not same
        if ga != gb or groups[gb].n_devices <= first_b:
            first_b = 0
        b = Stage(groups[gb].name, first_b, tb, 1)
        return np.array([hop_seconds(self.cluster, a, b, s) for s in self.send])

    def estimate(self, candidates, labels, layers=None, microbatches=None, codes=None
                 ) -> list[Estimate]:
        """Bounded Estimates of every candidate at every microbatch size that fits and
        divides the batch. `layers` (per candidate, per pipeline, per stage) and
        `microbatches` (per candidate, per pipeline, for each size: a dict) fix the splits;
        `codes` are index_codes(candidates), when already at hand."""
        codes = index_codes(self.cluster, candidates) if codes is None else codes
        units = codes[0]
        grid, valid, cap, hops = self.arrays(candidates, codes)
        C, P, S, _, K = grid.shape
        L = self.setting.model.layers
        g = {name: grid[:, :, :, i] for name, i in F.items()}  # each (C, P, S, K)
        length = valid.sum(axis=2)  # (C, P)
        pos = np.arange(S)[None, None, :, None]
        first = (pos == 0) * 1.0
        last = (pos == (length - 1)[:, :, None, None]) * 1.0
        flight = np.maximum(length[:, :, None, None] - pos, 1)
        pipes = (length > 0).sum(axis=1)[:, None, None, None]  # (C, 1, 1, 1)
        shard = self._shard_seconds(candidates, grid, length)  # ZeRO-3's, per microbatch
        cost = g["block_s"] + g["tp_block_s"] + shard["block"]
        extra = (first * (g["tp_first_s"] + shard["first"])
                 + last * (g["head_s"] + g["tp_last_s"] + shard["last"]))
        state = per_element(self.recipe, self.zero, pipes)  # bytes per parameter held
        per_block = state * g["block_elements"] + g["block_act_bytes"] * flight
        fixed = (first * state * g["first_elements"] + g["working_bytes"]
                 + working_bytes_per_element(self.recipe, self.zero) * g["block_elements"]
                 + last * (state * g["last_elements"] + g["logits_bytes"]))
        counts, ok = self._split(cost, extra, per_block, fixed, cap, valid, L, layers, units)
        busy = np.where(valid[..., None], counts * cost + extra, 0.0)  # (C, P, S, K)
        starts, pace = self._lines(busy, hops, length)
        real = length > 0
        t_b = busy * (1 - 1 / g["passes"])
        elements = {"block": g["block_elements"], "first": g["first_elements"],
                    "last": g["last_elements"]}
        opt = ((counts * g["block_elements"] + first * g["first_elements"]
                + last * g["last_elements"]) * g["opt_s_per_element"]
               / shards(self.zero, "opt", pipes)).max(axis=(1, 2))
        out = []
        for k, b in enumerate(self.sizes):
            total = self.B // b
            keep = ok[:, k] & (self.B % b == 0) & (real.sum(1) <= total)
            if microbatches is not None:
                keep &= np.array([b in given for given in microbatches])
            rows = np.nonzero(keep)[0]
            if not len(rows):
                continue
            f = np.where(real[rows], starts[rows, :, k], -np.inf)
            if microbatches is None:
                m, finish = batch_split(f, pace[rows, :, k], np.full(len(rows), total))
            else:
                m = np.ones((len(rows), P), np.int64)
                for n, r in enumerate(rows):
                    m[n, :len(microbatches[r][b])] = microbatches[r][b]
                finish = np.where(real[rows], f + (m - 1) * pace[rows, :, k], -np.inf)
            bounds = finish.max(axis=1) + opt[rows, k]
            for n, r in enumerate(rows):
                np_ = len(candidates[r])
                # copies, so that an Estimate does not keep the chunk's arrays alive
                out.append(Estimate(float(bounds[n]), labels[r], candidates[r],
                                    self.setting.train.remat, b, counts[r, :np_, :, k].copy(),
                                    m[n, :np_].copy(), t_b[r, :np_, :, k].copy(),
                                    {key: v[r, :np_, :, k].copy()
                                     for key, v in elements.items()}, self.zero))
        return out

    def _shard_seconds(self, candidates, grid, length) -> dict:
        """ZeRO-3's collectives per microbatch (sharding.gathers_per_microbatch), per block and
        of the first/last extras, (C, P, S, 1) each. A block at stage j of pipeline i is taken
        to sit at stage j of every pipeline (the last where one is shorter): the exact
        predictor (dp.shard_passes) follows every block to its holders."""
        C, P, S = length.shape[0], grid.shape[1], grid.shape[2]
        out = {kind: np.zeros((C, P, S, 1)) for kind in ("block", "first", "last")}
        ops = gathers_per_microbatch(self.recipe, self.zero)
        if not (ops["forward"] or ops["backward"]):
            return out
        ops = ops["forward"] + ops["backward"]
        groups = self.cluster.groups
        for c, pipes in enumerate(candidates):
            if len(pipes) == 1:
                continue
            place = [[(groups[u.group].name, groups[u.group].node_of(u.first)) for u in p]
                     for p in pipes]
            for i, pipe in enumerate(pipes):
                for j in range(len(pipe)):
                    at = [min(j, len(p) - 1) for p in pipes]
                    members = tuple(sorted(place[k][a] for k, a in enumerate(at)))
                    for kind in ("block",) + (("first",) if j == 0 else ()) + (
                            ("last",) if j == len(pipe) - 1 else ()):
                        n = max(grid[c, k, a, F[f"{kind}_elements"], 0]
                                for k, a in enumerate(at))
                        out[kind][c, i, j, 0] = sum(self.collective(op, members, per * n)
                                                    for op, per in ops)
        return out

    def _split(self, cost, extra, per_block, fixed, cap, valid, L, layers, units):
        """Blocks per stage (C, P, S, K) and whether every pipeline fits (C, K)."""
        C, P, S, K = cost.shape
        if layers is None:
            # a pipeline's split depends only on its stages' (group, tensor) in order: solve
            # each distinct real pipeline once, for every microbatch size
            keys = units.reshape(C * P, S)
            _, pick, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
            pick = pick[valid.reshape(C * P, S)[pick].any(axis=1)]
            n = len(pick)

            def rows(a):  # (C, P, S, K) -> (distinct pipelines · K, S)
                flat = np.broadcast_to(a, (C, P, S, K)).reshape(C * P, S, K)[pick]
                return np.moveaxis(flat, 2, 1).reshape(n * K, S)

            v = np.repeat(valid.reshape(C * P, S)[pick], K, axis=0)
            capr = np.repeat(cap.reshape(C * P, S)[pick], K, axis=0)
            solved, fits, _ = layer_split(rows(cost), rows(extra), rows(per_block),
                                          rows(fixed), capr, v, L)
            lookup = np.full(inverse.max() + 1, -1)
            lookup[inverse.ravel()[pick]] = np.arange(n)
            index = lookup[inverse.ravel()]  # (C·P,): distinct row, −1 for padding
            counts = np.zeros((C * P, K, S), np.int64)
            ok = np.ones((C * P, K), bool)
            have = index >= 0
            counts[have] = solved.reshape(n, K, S)[index[have]]
            ok[have] = fits.reshape(n, K)[index[have]]
            counts = np.moveaxis(counts.reshape(C, P, K, S), 2, 3)
            return counts, ok.reshape(C, P, K).all(axis=1)
        counts = np.zeros((C, P, S, K), np.int64)
        for c, per_pipe in enumerate(layers):
            for i, n in enumerate(per_pipe):
                counts[c, i, :len(n)] = np.asarray(n)[:, None]
        need = fixed + counts * per_block
        ok = (np.where(valid[..., None], need <= cap[..., None], True)).all(axis=(1, 2))
        return counts, ok

    def _lines(self, busy, hops, length):
        """Each pipeline's time as first + (m − 1)·pace: (C, P, K) each."""
        C, P, S, K = busy.shape
        one = np.zeros((C, P))
        slope = np.zeros((C, P))
        for p in np.unique(length):
            a, s = self.path(int(p))
            one[length == p], slope[length == p] = a, s
        pos = np.arange(hops.shape[2])[None, None, :, None]
        h = np.where(pos < (length - 1)[:, :, None, None], hops, 0.0)
        mean = h.sum(axis=2) / np.maximum(length - 1, 1)[:, :, None]
        worst = h.max(axis=2)
        starts = busy.sum(axis=2) + one[..., None] * mean
        pace = np.maximum(busy.max(axis=2), worst) + slope[..., None] * mean
        return starts, pace

    # --- the gradient reduction ---------------------------------------------------------
    def allreduce(self, members: tuple, nbytes: float) -> float:
        return self.collective("all-reduce", members, nbytes)

    def collective(self, kind: str, members: tuple, nbytes: float) -> float:
        key = (kind, members, nbytes)
        if key not in self._reduce:
            self._reduce[key] = hierarchical_seconds(kind, levels(self.cluster, members),
                                                     nbytes, self.chips[0])
        return self._reduce[key]

    def finish(self, e: Estimate) -> float:
        """e.step_s: its bound plus the exposed gradient reduction across pipelines."""
        e.step_s = e.bound_s + self.reduction(e)
        return e.step_s

    def reduction(self, e: Estimate) -> float:
        """Exposed seconds of e's gradient reduction across pipelines (dp.exposed_reduction;
        none under ZeRO-3, which reduce-scatters every microbatch's gradients)."""
        if not reduces_at_end(self.zero):
            return 0.0
        return exposed_reduction(self.cluster, e.pipes, e.layers, e.elements, e.t_b,
                                 self.grad, self.allreduce)

__all__ = ["Estimate", "Estimator", "FIELDS", "index_codes", "on_path_line"]
