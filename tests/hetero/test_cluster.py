"""Clusters as data: the new hardware profiles, cluster files, links, the same-peak reference,
and the one cluster type (parex.nodes) the predictor and the planner share."""

import dataclasses
import math

import pytest

from parex.cluster import (cluster_from_dict, gbps_per_device, homogeneous, known_clusters,
                           load_hetero_cluster, reference_cluster)
from parex.config import TrainConfig, model_preset
from parex.errors import InputError
from parex.hardware import load_chip
from parex.layout import Layout
from parex.predict import predict

NEW_CHIPS = ("rtx-3080ti", "rtx-3090", "rtx-4090", "l40s", "a100-pcie-80gb", "h100-pcie")


@pytest.mark.parametrize("name", NEW_CHIPS)
def test_new_profiles_load_with_sources_in_the_common_schema(name):
    chip = load_chip(name)
    assert chip.name == name and len(chip.sources) >= 3
    assert set(chip.efficiency_sources) == {"matmul_efficiency", "network_efficiency",
                                            "step_efficiency", "flash_attention"}
    assert 5e13 < chip.peak("bfloat16") < 1e15
    assert chip.peak("float32") == chip.peak("tf32") < chip.peak("bfloat16")
    assert 1e10 <= chip.hbm_bytes <= 8e10 and 8e11 < chip.hbm_bandwidth < 2.1e12
    assert chip.intra_node.bandwidth > chip.inter_node.bandwidth > 0
    assert chip.scaleup_domain == chip.devices_per_node == 8


def test_profiles_carry_the_datasheet_numbers():
    # dense bf16 with fp32 accumulate; memory bandwidth; memory size (GB = 1e9 bytes)
    expected = {"rtx-3080ti": (68.2e12, 912e9, 12e9), "rtx-3090": (71e12, 936e9, 24e9),
                "rtx-4090": (165.2e12, 1008e9, 24e9), "l40s": (362e12, 864e9, 48e9),
                "a100-pcie-80gb": (312e12, 1935e9, 80e9), "h100-pcie": (756e12, 2000e9, 80e9)}
    for name, (peak, bandwidth, memory) in expected.items():
        chip = load_chip(name)
        assert (chip.peak("bfloat16"), chip.hbm_bandwidth, chip.hbm_bytes) == (peak, bandwidth,
                                                                                 memory)
    # the one measured matmul efficiency among them: A100 PCIe 252.9 of 312 TFLOP/s (Bekman)
    assert load_chip("a100-pcie-80gb").matmul_efficiency == round(252.9 / 312, 4)


def test_cluster_files_load_and_count_devices_and_peak():
    assert {"het-48", "hexiscale-mix", "a100-pcie-x4"} <= set(known_clusters())
    het = load_hetero_cluster("het-48")
    assert het.n_devices == 48 and [g.chip.name for g in het.groups] == [
        "rtx-4090", "rtx-3090", "a100-pcie-80gb"]
    assert math.isclose(het.peak(), 16 * (165.2e12 + 71e12 + 312e12))
    mix = load_hetero_cluster("data/clusters/hexiscale-mix.toml")  # a path works too
    assert mix.n_devices == 32 and len(mix.groups) == 4 and mix.inter_group_gbps == 10
    assert load_hetero_cluster("a100-pcie-x4").groups[0].nodes == 4


def test_per_node_speeds_become_per_device_links():
    het = load_hetero_cluster("het-48")
    g4090, g3090, a100 = het.groups
    assert gbps_per_device(100, 8) == 100e9 / 8 / 8
    assert g4090.inter_node.bandwidth == 100e9 / 8 / 8
    assert g4090.chip_profile().inter_node == g4090.inter_node
    assert g4090.chip_profile().intra_node == load_chip("rtx-4090").intra_node  # PCIe 4.0
    between = het.between_groups(g4090, a100)
    assert between.bandwidth == 10e9 / 8 / 8  # the 10 Gb/s between groups, per device
    # without a faster inter-group link, traffic runs at the slower group's own
    slow = cluster_from_dict({"groups": [{"chip": "rtx-4090", "inter_node_gbps": 1},
                                         {"chip": "a100-pcie-80gb"}]})
    assert slow.between_groups(*slow.groups).bandwidth == 1e9 / 8 / 8


def test_a_slower_link_inside_the_node_is_per_device():
    # HexiScale's GeForce servers: 2 GB/s between GPUs (the authors' machine file), 16 Gb/s
    testbed = load_hetero_cluster("hexiscale-56-with-a100")
    g3090, g4090_x4, g4090, a100 = testbed.groups
    assert g3090.chip_profile().intra_node.bandwidth == 2e9
    assert g4090_x4.chip_profile().intra_node.bandwidth == 20e9
    assert g4090.intra_node.bandwidth == 2e9 and g4090.chip_profile().inter_node == g4090.inter_node
    assert a100.chip_profile().intra_node == load_chip("a100-80gb").intra_node  # NVLink 3
    with pytest.raises(InputError, match="intra_node_gbps=0; use a positive speed in Gb/s per "
                                         "device"):
        cluster_from_dict({"groups": [{"chip": "rtx-4090", "intra_node_gbps": 0}]})


def test_a_one_group_cluster_is_the_homogeneous_predictors_cluster():
    model, train = model_preset("llama2-7b"), TrainConfig(global_batch=32, seq_len=2048)
    layout = Layout(data=2, tensor=4, stage=2, schedule="1f1b", microbatches=8)
    one = homogeneous("a100-80gb", 2)
    assert one.n_devices == 16 and one.groups[0].chip_profile() == load_chip("a100-80gb")
    by_file = predict(model, train, layout, one.groups[0].as_cluster())
    by_name = predict(model, train, layout, "a100-80gb")
    assert by_file.step_time_s == by_name.step_time_s


def test_bad_cluster_files_name_the_problem_and_the_fix():
    with pytest.raises(ValueError, match="no \\[\\[groups\\]\\]"):
        cluster_from_dict({"name": "empty"})
    with pytest.raises(ValueError, match="unknown key"):
        cluster_from_dict({"groups": [{"chip": "rtx-4090"}], "speed": 3})
    with pytest.raises(ValueError, match="needs `chip`"):
        cluster_from_dict({"groups": [{"nodes": 2}]})
    with pytest.raises(ValueError, match="unknown hardware 'rtx-5090'"):
        cluster_from_dict({"groups": [{"chip": "rtx-5090"}]})
    with pytest.raises(ValueError, match="nodes=0"):
        cluster_from_dict({"groups": [{"chip": "rtx-4090", "nodes": 0}]})
    with pytest.raises(ValueError, match="inter_group_gbps"):
        cluster_from_dict({"groups": [{"chip": "rtx-4090"}], "inter_group_gbps": -1})
    with pytest.raises(ValueError, match="devices=20"):
        cluster_from_dict({"groups": [{"chip": "rtx-4090", "nodes": 2, "devices": 20}]})
    with pytest.raises(ValueError, match="no cluster file"):
        load_hetero_cluster("no-such-cluster")
    twice = cluster_from_dict({"groups": [{"chip": "rtx-4090"}, {"chip": "rtx-4090"}]})
    assert [g.name for g in twice.groups] == ["rtx-4090", "rtx-4090-2"]
    with pytest.raises(ValueError, match="has no group 'h100'"):
        twice.group("h100")


def test_the_reference_cluster_has_about_the_same_peak_on_the_best_network():
    het = load_hetero_cluster("het-48")
    ref = reference_cluster(het)
    assert len(ref.groups) == 1 and ref.groups[0].chip.name == "a100-pcie-80gb"
    # 16 × (165.2 + 71 + 312) TFLOP/s = 8,771 = 28.1 A100s: 28, the last node half full
    assert ref.n_devices == 28 and ref.groups[0].nodes == 4
    assert abs(ref.peak() / het.peak() - 1) < 312e12 / het.peak()
    assert ref.groups[0].inter_node_gbps == 100  # het-48's fastest link between nodes
    h100 = reference_cluster(het, "h100-sxm")
    assert h100.n_devices == round(het.peak() / 989e12)


def test_malformed_cluster_files_are_input_errors_with_the_nearest_key(tmp_path):
    from parex.errors import InputError

    bad = tmp_path / "bad.toml"
    bad.write_text('[[groups]\nchip = "a100-80gb"\n')
    with pytest.raises(InputError, match="cluster file .*bad.toml: .*at line 1"):
        load_hetero_cluster(bad)
    with pytest.raises(InputError, match="unknown key 'devices_per_nod'; did you mean "
                                         "'devices_per_node'"):
        cluster_from_dict({"groups": [{"chip": "a100-80gb", "devices_per_nod": 4}]})
    with pytest.raises(InputError, match="did you mean 'inter_group_gbps'"):
        cluster_from_dict({"groups": [{"chip": "a100-80gb"}], "intergroup_gbps": 4})
    with pytest.raises(InputError, match="inter_node_gbps='fast'"):  # not a TypeError
        cluster_from_dict({"groups": [{"chip": "a100-80gb", "inter_node_gbps": "fast"}]})
    with pytest.raises(InputError, match="write each group as a \\[\\[groups\\]\\] table"):
        cluster_from_dict({"groups": 3})
    with pytest.raises(InputError, match="did you mean 'het-48'"):
        load_hetero_cluster("het_48")
    with pytest.raises(InputError, match="has no group 'rtx-4900'; did you mean 'rtx-4090'"):
        load_hetero_cluster("het-48").group("rtx-4900")


def test_one_cluster_type_for_the_predictor_and_the_planner():
    from parex import hardware
    from parex.cluster import Cluster, HeteroCluster

    assert hardware.Cluster is Cluster is HeteroCluster
    two = hardware.load_cluster("a100-80gb", 2)
    assert isinstance(two, Cluster) and len(two.groups) == 1
    assert (two.name, two.nodes, two.n_devices) == ("a100-80gb×2", 2, 16)
    assert two.chip == load_chip("a100-80gb") and two == homogeneous("a100-80gb", 2)
    # another chip on the same nodes, as from_run and the explorer swap it in
    faster = dataclasses.replace(two, chip=dataclasses.replace(two.chip, step_efficiency=0.9))
    assert faster.nodes == 2 and faster.chip.step_efficiency == 0.9
    het = load_hetero_cluster("het-48")
    with pytest.raises(ValueError, match="3 groups"):
        het.chip


def test_machine_cluster_files_carry_their_network():
    frontier = load_hetero_cluster("frontier")
    assert frontier.n_devices == 9408 * 8 and frontier.network.name == "frontier"
    assert frontier.chip.network.library == "rccl"
    llama = load_hetero_cluster("llama3-24k")
    # the cluster's network replaces the chip profile's own (an H100's is a DGX SuperPOD's)
    assert load_chip("h100-sxm").network.name == "dgx-h100-superpod"
    assert llama.chip.network.name == "meta-llama3-24k"
    assert llama.chip.network.tiers[-1].oversubscription == 7.0
    for name in ("perlmutter", "alps", "dgx-h100-superpod", "tpu-v5p-pod"):
        assert load_hetero_cluster(name).network.name == name
    with pytest.raises(ValueError, match="unknown network"):
        cluster_from_dict({"network": "frontierr", "groups": [{"chip": "frontier"}]})
