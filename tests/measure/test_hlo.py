"""The HLO collective parser on hand-written modules covering XLA's replica-group syntaxes."""

import pytest

from parex.measure.hlo import (HloError, device_groups, matmul_flops, parse_collectives,
    shape_bytes, spanned_axes)

AXES = ("stage", "data", "fsdp", "seq", "tensor")
MESH = (1, 2, 1, 1, 4)  # data=2, tensor=4: device id = 4·data + tensor

MODULE = """HloModule jit_step

%add (x: f32[], y: f32[]) -> f32[] {
  ROOT %r = f32[] add(%x, %y)
}

%body (p: (s32[], f32[8,16])) -> (s32[], f32[8,16]) {
  %ar = f32[8,16]{1,0} all-reduce(%v), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add
  %rs = f32[2,16]{1,0} reduce-scatter(%ar), channel_id=2, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}, to_apply=%add
}

%cond (p: (s32[], f32[8,16])) -> pred[] {
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[8,16]) -> f32[8,16] {
  %w = (s32[], f32[8,16]) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"6"}}
  %ag = bf16[4,32]{1,0} all-gather(%x), channel_id=3, replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1'}, dimensions={0}
  %cp = f32[10]{0} collective-permute(%y), channel_id=4, source_target_pairs={{0,4},{4,0}}
  %t2 = (f32[3]{0}, f32[5]{0}) all-reduce(%a1, %a2), channel_id=5, replica_groups=[4,2]<=[2,4]T(1,0), to_apply=%add
}
"""


def test_shape_bytes_handles_tuples_and_dtypes():
    assert shape_bytes("f32[8,16]{1,0}") == 512
    assert shape_bytes("(f32[3]{0}, bf16[5]{0})") == 22
    assert shape_bytes("f32[]") == 4


def test_replica_group_syntaxes():
    assert device_groups("replica_groups=[2,4]<=[8], x", 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert device_groups("replica_groups=[4,2]<=[2,4]T(1,0), x", 8) == [[0, 4], [1, 5], [2, 6],
                                                                         [3, 7]]
    assert device_groups("replica_groups={{0,2},{1,3}}, x", 4) == [[0, 2], [1, 3]]
    assert device_groups("replica_groups={}, x", 4) == [[0, 1, 2, 3]]
    mesh = "replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, x"
    assert device_groups(mesh, 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    permuted = ("replica_groups=mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], "
                "device_ids=([2,2,2]T(1,0,2)) {'axis_1'}, x")
    # devices in mesh order: 0,1,4,5,2,3,6,7 -> axis_1 pairs the two halves
    assert device_groups(permuted, 8) == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_spanned_axes_reads_mesh_coordinates():
    assert spanned_axes([[0, 4], [1, 5]], MESH, AXES) == ("data",)
    assert spanned_axes([[0, 1, 2, 3]], MESH, AXES) == ("tensor",)
    assert spanned_axes([list(range(8))], MESH, AXES) == ("data", "tensor")


def test_parse_collectives_counts_loop_trips_and_bytes():
    found = {(c.kind, c.axes): c for c in parse_collectives(MODULE, MESH, AXES)}
    ar = found[("all-reduce", ("tensor",))]
    assert (ar.count, ar.bytes, ar.group_size) == (6, 512, 4)  # inside a 6-trip loop
    rs = found[("reduce-scatter", ("data",))]
    assert (rs.count, rs.bytes) == (6, 128 * 2)  # unscattered input = output × group size
    ag = found[("all-gather", ("tensor",))]
    assert (ag.count, ag.bytes, ag.group_size) == (1, 256, 4)
    cp = found[("collective-permute", ("data",))]
    assert (cp.count, cp.bytes) == (1, 40)
    tup = found[("all-reduce", ("data",))]
    assert (tup.bytes, tup.group_size) == (32, 2)


SWITCH = """HloModule jit_pipeline

%idle (p: f32[8]) -> f32[8] {
  ROOT %z = f32[8]{0} copy(%p)
}

%fwd (p: f32[8]) -> f32[8] {
  ROOT %f = f32[8]{0} all-reduce(%p), channel_id=1, replica_groups=[2,4]<=[8], to_apply=%add
}

%bwd (p: f32[8]) -> f32[8] {
  %b1 = f32[8]{0} all-reduce(%p), channel_id=2, replica_groups=[2,4]<=[8], to_apply=%add
  ROOT %b2 = f32[8]{0} all-reduce(%b1), channel_id=3, replica_groups=[2,4]<=[8], to_apply=%add
}

%tick (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %c = f32[8]{0} conditional(%i, %x, %x, %x), branch_computations={%idle, %fwd, %bwd}
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %w = (s32[], f32[8]) while(%t), condition=%cond, body=%tick, backend_config={"known_trip_count":{"n":"10"}}
}
"""


def test_switch_branches_count_on_the_ticks_that_take_them():
    def count(shares=None):
        (ar,) = parse_collectives(SWITCH, MESH, AXES, shares)
        return ar.count

    assert count() == 30  # every branch as if taken on all 10 ticks: an upper bound
    assert count((0.2, 0.4, 0.4)) == 4 * 1 + 4 * 2  # 4 forward ticks, 4 backward ticks
    assert count((0.5, 0.5)) == 30  # shares for another conditional's branch count: ignored


def test_a_loop_without_a_known_trip_count_is_an_error_not_one_trip():
    unknown = MODULE.replace(', backend_config={"known_trip_count":{"n":"6"}}', "")
    with pytest.raises(HloError, match="computation 'main' has no known_trip_count"):
        parse_collectives(unknown, MESH, AXES)
    with pytest.raises(HloError, match="no known_trip_count"):
        matmul_flops(unknown)


@pytest.mark.parametrize("groups", [
    "replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1':(1)2}",  # sub-axis groups
    "channel_id=9",  # no groups at all
])
def test_unreadable_groups_are_an_error_not_zero_bytes(groups):
    module = MODULE.replace("replica_groups={{0,4},{1,5},{2,6},{3,7}}", groups)
    with pytest.raises(HloError, match="cannot read the device groups of a reduce-scatter in "
                                       "computation 'body'"):
        parse_collectives(module, MESH, AXES)
