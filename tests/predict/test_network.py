"""The network as data (parex.network) and collectives as the libraries run them on it
(parex.predict.collectives, through alpha_beta.collective_seconds), checked by hand."""

import dataclasses

import numpy as np
import pytest

from parex.errors import InputError
from parex.hardware import load_chip
from parex.network import MACHINE, known_networks, load_network, network_from_table, tiers_of
from parex.predict import collectives
from parex.predict.alpha_beta import collective_seconds, torus_dims
from parex.predict.collectives import NCCL, RCCL, US

S = 1e9  # bytes: bandwidth-bound


def seconds(kind, g, stride, nbytes, chip):
    return float(collective_seconds(kind, np.array([g]), np.array([stride]), nbytes, chip)[0])


def test_every_network_file_loads_with_sources():
    assert {"frontier", "perlmutter", "alps", "dgx-h100-superpod", "tpu-v5p-pod",
            "meta-llama3-24k"} <= set(known_networks())
    for name in known_networks():
        net = load_network(name)
        assert net.sources and net.description and net.library in ("nccl", "rccl", "ici")


def test_frontier_tiers_from_the_profile_and_the_dragonfly():
    chip = load_chip("frontier")
    tiers = tiers_of(chip, chip.network)
    assert [t.span for t in tiers] == [8, 1024, MACHINE]
    # the node's 4 x 25 GB/s NICs shared by 8 GCDs, then the global links' 1.753 taper
    assert tiers[1].bandwidth == 12.5e9 and tiers[1].efficiency == 0.98
    assert tiers[2].bandwidth == pytest.approx(12.5e9 / 1.753)
    assert tiers[0].link == "nvlink" and tiers[1].link == tiers[2].link == "net"


def test_a_profile_without_a_network_file_is_one_full_bisection_switch():
    chip = load_chip("mi300x")
    assert chip.network is None
    tiers = tiers_of(chip, None)
    assert [t.span for t in tiers] == [chip.scaleup_domain, MACHINE]
    assert tiers[1].bandwidth == chip.inter_node.bandwidth


def test_bad_network_tables_name_the_problem():
    with pytest.raises(InputError, match="unknown key 'spann'"):
        network_from_table({"tiers": [{"spann": 4}]})
    with pytest.raises(InputError, match="must grow"):
        network_from_table({"tiers": [{"span": 64}, {"span": 16}]})
    with pytest.raises(InputError, match="oversubscription"):
        network_from_table({"tiers": [{"span": 64, "oversubscription": 0.5}]})
    with pytest.raises(InputError, match="unknown library"):
        network_from_table({"library": "mpi"})


def test_placement_counts_members_fans_and_ring_hops():
    chip = load_chip("frontier")
    tiers = tiers_of(chip, chip.network)
    # 64 ranks at stride 8: one per node, 128 nodes per group -> all in one group
    at = collectives.placement(np.array([64.0]), np.array([8.0]), tiers)
    assert [float(m[0]) for m in at.members] == [1, 64, 64]
    assert [float(f[0]) for f in at.fan] == [1, 64, 1]
    assert [float(h[0]) for h in at.hops] == [0, 64, 0]
    # 4,096 ranks at stride 8 span 32 groups of 128: 32 hops of the ring cross groups
    at = collectives.placement(np.array([4096.0]), np.array([8.0]), tiers)
    assert [float(f[0]) for f in at.fan] == [1, 128, 32]
    assert [float(h[0]) for h in at.hops] == [0, 4096 - 32, 32]


def test_a_per_node_dispatch_share_by_hand():
    """DeepSeek-V3's 256 experts, top-8, over 64 ranks on eight H800 nodes (32 experts each): a
    remote node gets a token with p = 1 − C(224, 8)/C(256, 8), and of the 7 of 8 copies an
    all-to-all sends off the node, 7·p go: a share 8p/8. Within one node the share is 1."""
    chip = load_chip("h800")
    tiers = tiers_of(chip, chip.network)
    at = collectives.placement(np.array([64.0, 8.0]), np.array([1.0, 1.0]), tiers)
    missed = np.prod([(224 - i) / (256 - i) for i in range(8)])
    share = collectives.per_node_share((256, 8), at)
    assert share[0] == pytest.approx(1 - missed) and 0.6 < share[0] < 0.7
    assert share[1] == 1.0
    plain, deduped = (collectives.volumes("all-to-all", at, r) for r in (None, (256, 8)))
    assert deduped[0][0] == plain[0][0]
    assert sum(v[0] for v in deduped[1:]) == pytest.approx(share[0] * 7 / 8)


def test_ring_inside_a_node_by_hand():
    """NCCL's Simple ring over 8 A100s: 2·7/8·S at the NVLink rate, base latency 8.4 µs and 2
    steps per rank at NVLink's 3.4 µs."""
    chip = load_chip("a100-80gb")
    bw = 300e9 * chip.network_efficiency
    want = 2 * 7 / 8 * S / bw + (8.4 + 2 * 8 * 3.4) * US
    assert seconds("all-reduce", 8, 1, S, chip) == pytest.approx(want)


def test_a_flat_ring_across_nodes_runs_at_its_slowest_tier():
    """32 GPUs on 4 nodes: the NICs carry 2·3/4·S/8 per GPU at 25 GB/s, more time than the
    NVLink part; every ring step at the network's 14 µs, and NCCL's multi-node plateau."""
    chip = load_chip("a100-80gb")
    nic = 25e9 * chip.network_efficiency
    ring = 2 * 3 / 4 * S / 8 / nic + 1.4 * (8.4 + 2 * 32 * 14.0) * US
    got = seconds("all-reduce", 32, 1, S, chip)
    assert got == pytest.approx(ring, rel=1e-9) or got < ring  # a tree may beat it
    inside = seconds("all-reduce", 8, 1, S, chip)
    assert got > inside


def test_the_tree_wins_small_messages_and_the_ring_large_ones():
    chip = load_chip("a100-80gb")
    # 8 bytes on 8 GPUs: LL tree, base 6.8 µs + 2·7 chain steps of 0.6 µs (the LL ring: 6.6 +
    # 2·8·0.6)
    assert seconds("all-reduce", 8, 1, 8.0, chip) == pytest.approx(
        (6.8 + 2 * 7 * 0.6) * US + 2 * 7 / 8 * 8 / (300e9 * 0.8) / (1 / 3.8), rel=1e-6)
    # latency grows with the group: a 1 kB all-reduce over 1,024 nodes costs more than over 8
    small = [seconds("all-reduce", g, 8, 1e3, chip) for g in (8, 64, 1024)]
    assert small[0] < small[1] < small[2]


def test_nvls_reduces_inside_the_switch_on_h100():
    chip = load_chip("h100-sxm")
    assert chip.network.nvls_busbw == 475e9
    nvls = 2 * 7 / 8 * S / 475e9 + 25 * US
    assert seconds("all-reduce", 8, 1, S, chip) == pytest.approx(nvls)
    plain = dataclasses.replace(chip, network=dataclasses.replace(chip.network, nvls_busbw=0.0))
    assert seconds("all-reduce", 8, 1, S, plain) > nvls


def test_congestion_when_every_ring_crosses_an_oversubscribed_tier():
    """Llama 3's cluster: 1:7 above a pod of 3,072 GPUs. A data-parallel group of 8 at stride
    3,072 (one member per pod) all-gathers at 1/7 of its NIC share; inside one pod at full
    (every byte leaving a node passes its NIC, whichever tier it then crosses)."""
    from parex.cluster import load_hetero_cluster

    chip = load_hetero_cluster("llama3-24k").chip
    across = seconds("all-gather", 8, 3072, S, chip)
    inside = seconds("all-gather", 8, 8, S, chip)
    nic = 50e9 * chip.network_efficiency
    assert inside == pytest.approx(7 / 8 * S / nic, rel=0.01)
    assert across == pytest.approx(7 / 8 * S / (nic / 7), rel=0.01)


def test_rccl_on_frontier_pays_its_measured_step_latency():
    chip = load_chip("frontier")
    assert chip.network.library == "rccl" and chip.network.net_step_latency == 23.5 * US
    # a ring all-gather of 16 nodes: 128 ranks, every step at the measured 23.5 µs (LL's base
    # latency, 20.5 µs, the smallest) whatever the protocol
    t = seconds("all-gather", 128, 1, 1e3, chip)
    assert t >= (20.5 + 128 * 23.5) * US * 0.999
    assert RCCL.protocols == ("LL", "Simple") and "LL128" in NCCL.protocols


def test_permutes_run_on_the_tier_the_next_rank_is_behind():
    chip = load_chip("a100-80gb")
    inside = seconds("collective-permute", 4, 1, S, chip)
    across = seconds("collective-permute", 4, 8, S, chip)
    assert inside == pytest.approx(S / (300e9 * 0.8) + chip.intra_node.latency)
    assert across == pytest.approx(S / (25e9 * 0.8) + chip.inter_node.latency)


def test_a_tpu_group_uses_one_ring_per_torus_dimension():
    assert list(torus_dims((16, 20, 28), np.array([8, 64, 4096]), np.array([1, 1, 1]))) == [
        1, 2, 3]
    chip = load_chip("tpu-v5p")
    one_dim = seconds("all-gather", 16, 1, S, chip)
    two_dims = seconds("all-gather", 16 * 20, 1, S, chip)
    assert two_dims < one_dim  # twice the links for (about) the same bytes per chip


def test_single_ranks_cost_nothing():
    chip = load_chip("h100-sxm")
    for kind in ("all-reduce", "all-gather", "all-to-all", "collective-permute"):
        assert seconds(kind, 1, 1, S, chip) == 0.0


def unconfigured_frontier():
    """The Frontier profile on its network under an unconfigured launch (data/networks/)."""
    return dataclasses.replace(load_chip("frontier"),
                               network=load_network("frontier-unconfigured"))


def test_rccl_stalls_below_its_measured_chunk_under_an_unconfigured_launch():
    chip = unconfigured_frontier()
    net = chip.network
    assert net.stall_chunk == 384 * 1024 and dict(net.stall)[256] == pytest.approx(0.1469)
    stall = {n: t for n, t in net.stall}
    # 256 ranks on 32 nodes: a 128 KiB chunk per rank stalls (the mean measured at 256 ranks
    # on top of the α-β time), a 1 MiB chunk does not
    small, large = 256 * 128 * 1024, 256 * 1024 * 1024
    plain = dataclasses.replace(chip, network=dataclasses.replace(net, stall=(), stall_chunk=0))
    for kind, passes in (("all-gather", 1), ("reduce-scatter", 1), ("all-reduce", 2)):
        assert seconds(kind, 256, 1, small, chip) == pytest.approx(
            seconds(kind, 256, 1, small, plain) + passes * stall[256])
        assert seconds(kind, 256, 1, large, chip) == seconds(kind, 256, 1, large, plain)
    # inside one node (8 GCDs) nothing stalls; beyond the sizes measured the last one holds;
    # between them the stall is interpolated in log2 of the ring size
    assert seconds("all-gather", 8, 1, 8 * 1024, chip) == seconds("all-gather", 8, 1, 8 * 1024,
                                                                   plain)
    beyond = seconds("all-gather", 4096, 1, 4096 * 1024, chip)
    assert beyond - seconds("all-gather", 4096, 1, 4096 * 1024, plain) == pytest.approx(
        stall[1024])
    mid = seconds("all-gather", 362, 1, 362 * 1024, chip) - seconds(
        "all-gather", 362, 1, 362 * 1024, plain)
    assert stall[256] < mid < stall[512]
    # NCCL on Perlmutter's Slingshot never stalled in the same study: no stall table
    assert load_chip("perlmutter").network.stall == ()


def test_frontiers_default_is_the_configured_launch_and_does_not_stall():
    chip, unconfigured = load_chip("frontier"), unconfigured_frontier()
    assert chip.network.launch.startswith("configured") and chip.network.stall == ()
    assert unconfigured.network.launch.startswith("unconfigured")
    # 128 KiB per rank on 256 GCDs: the configured launch runs it in its α-β time (campaign 3
    # measured 0.3-1.3× of it), the unconfigured one adds its mean stall, 147 ms
    small = 256 * 128 * 1024
    configured_s = seconds("all-gather", 256, 1, small, chip)
    assert configured_s < 256 * 2 * 23.5 * US
    assert seconds("all-gather", 256, 1, small, unconfigured) > configured_s + 0.1469


def test_a_network_file_for_another_launch_keeps_the_fabric_it_extends(tmp_path):
    base, other = load_network("frontier"), load_network("frontier-unconfigured")
    assert other.tiers == base.tiers and other.library == base.library
    assert (other.intra_step_latency, other.intra_efficiency) == (
        base.intra_step_latency, base.intra_efficiency)
    assert set(base.sources) < set(other.sources)
    assert (other.net_step_latency, other.nic_efficiency) == (30.9 * US, 0.93)
    (tmp_path / "a.toml").write_text('extends = "b"\n')
    (tmp_path / "b.toml").write_text('extends = "a"\n')
    with pytest.raises(InputError, match="without a cycle"):
        load_network("a", tmp_path)
    (tmp_path / "c.toml").write_text('extends = "nowhere"\n')
    with pytest.raises(InputError, match="nowhere"):
        load_network("c", tmp_path)


def test_bad_stall_tables_name_the_problem():
    with pytest.raises(InputError, match="stall_chunk_kib with stall_ranks"):
        network_from_table({"stall_chunk_kib": 384, "stall_ranks": [16, 32], "stall_ms": [1.0]})
    with pytest.raises(InputError, match="stall_chunk_kib with stall_ranks"):
        network_from_table({"stall_ranks": [16], "stall_ms": [1.0]})
    with pytest.raises(InputError, match="stall_chunk_kib with stall_ranks"):
        network_from_table({"stall_chunk_kib": 384, "stall_ranks": [32, 16],
                            "stall_ms": [1.0, 2.0]})


def test_frontiers_two_launches_are_what_the_fit_gives_on_their_own_jobs():
    """The network files record benchmarks/fit_collectives.py's fit of each launch's jobs
    (as written: 0.1 µs, 0.01, 0.1 ms), so the data and the fit cannot drift apart."""
    import importlib.util
    from pathlib import Path

    from parex.predict.references import read_reference

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fit_collectives.py"
    spec = importlib.util.spec_from_file_location("fit_collectives", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    frame = read_reference("collectives_pccl")
    for name, configured in (("frontier", True), ("frontier-unconfigured", False)):
        net, rows = load_network(name), fit.launch(frame, configured)
        alpha, bandwidth = fit.fit(fit.fitted_rows(rows, "frontier")[0])
        assert net.net_step_latency == pytest.approx(round(alpha * 1e6, 1) * US)
        assert net.nic_efficiency == round(bandwidth / 100e9, 2)
    stalls = fit.stalls(fit.launch(frame, False), "frontier")
    assert load_network("frontier-unconfigured").stall == tuple(
        (n, pytest.approx(round(s * 1e3, 1) * 1e-3)) for n, s in stalls)
    # the configured launch's small chunks, after each job's first size, run in their α-β
    # time: within 10 ms of it at every ring size, where the unconfigured stall 18-156 ms
    configured = fit.launch(frame, True)
    after_setup = fit.stalls(configured[~fit.first_sizes(configured)], "frontier")
    assert len(after_setup) == 7 and all(abs(s) < 0.010 for _, s in after_setup)
