"""The HLO parser on a GPU-style module, written from XLA's documented syntax: asynchronous
collective pairs (all-reduce-start/-done, all-gather-start/-done, collective-permute-start/-done,
a reduce-scatter inside async-start/-done), fusions that call computations, a cuBLAS gemm
custom-call, and a while loop: each pair counted once, each fused dot as often as it runs."""

from parex.measure.hlo import matmul_flops, parse_collectives, tuple_elements

AXES = ("data", "tensor")
MESH = (2, 4)  # device id = 4·data + tensor

GPU_MODULE = """HloModule jit_step, is_scheduled=true

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.1 = f32[] add(f32[] %x, f32[] %y)
}

%fused_dot (param_0: f32[16,32], param_1: f32[32,64]) -> f32[16,64] {
  %param_0 = f32[16,32]{1,0} parameter(0)
  %param_1 = f32[32,64]{1,0} parameter(1)
  ROOT %dot.3 = f32[16,64]{1,0} dot(f32[16,32]{1,0} %param_0, f32[32,64]{1,0} %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%async_rs (param_0: f32[64,64]) -> f32[16,64] {
  %param_0 = f32[64,64]{1,0} parameter(0)
  ROOT %reduce-scatter.1 = f32[16,64]{1,0} reduce-scatter(f32[64,64]{1,0} %param_0), channel_id=4, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, to_apply=%add
}

%body (p: (s32[], f32[16,32], f32[32,64])) -> (s32[], f32[16,32], f32[32,64]) {
  %p = (s32[], f32[16,32]{1,0}, f32[32,64]{1,0}) parameter(0)
  %a = f32[16,32]{1,0} get-tuple-element((s32[], f32[16,32]{1,0}, f32[32,64]{1,0}) %p), index=1
  %b = f32[32,64]{1,0} get-tuple-element((s32[], f32[16,32]{1,0}, f32[32,64]{1,0}) %p), index=2
  %fusion.2 = f32[16,64]{1,0} fusion(f32[16,32]{1,0} %a, f32[32,64]{1,0} %b), kind=kOutput, calls=%fused_dot
  %all-reduce-start.2 = f32[16,64]{1,0} all-reduce-start(f32[16,64]{1,0} %fusion.2), channel_id=5, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add, backend_config={"operation_queue_id":"0","collective_backend_config":{"is_sync":false}}
  %all-reduce-done.2 = f32[16,64]{1,0} all-reduce-done(f32[16,64]{1,0} %all-reduce-start.2)
}

%cond (p: (s32[], f32[16,32], f32[32,64])) -> pred[] {
  %p = (s32[], f32[16,32]{1,0}, f32[32,64]{1,0}) parameter(0)
  ROOT %lt = pred[] compare(s32[] %i, s32[] %n), direction=LT
}

ENTRY %main.42 (p0: f32[16,32], p1: f32[32,64]) -> f32[16,64] {
  %p0 = f32[16,32]{1,0} parameter(0)
  %p1 = f32[32,64]{1,0} parameter(1)
  %all-gather-start = (f32[16,32]{1,0}, f32[64,32]{1,0}) all-gather-start(f32[16,32]{1,0} %p0), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true, backend_config={"operation_queue_id":"0","collective_backend_config":{"is_sync":false}}
  %all-gather-done = f32[64,32]{1,0} all-gather-done((f32[16,32]{1,0}, f32[64,32]{1,0}) %all-gather-start)
  %custom-call.1 = (f32[64,64]{1,0}, s8[4194304]{0}) custom-call(f32[64,32]{1,0} %all-gather-done, f32[32,64]{1,0} %p1), custom_call_target="__cublas$gemm", backend_config={"operation_queue_id":"0","gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"DEFAULT"}}
  %gte = f32[64,64]{1,0} get-tuple-element((f32[64,64]{1,0}, s8[4194304]{0}) %custom-call.1), index=0
  %reduce-scatter-start = ((f32[64,64]{1,0}), f32[16,64]{1,0}) async-start(f32[64,64]{1,0} %gte), calls=%async_rs
  %reduce-scatter-done = f32[16,64]{1,0} async-done(((f32[64,64]{1,0}), f32[16,64]{1,0}) %reduce-scatter-start), calls=%async_rs
  %collective-permute-start = (f32[16,64]{1,0}, f32[16,64]{1,0}, u32[], u32[]) collective-permute-start(f32[16,64]{1,0} %reduce-scatter-done), channel_id=2, source_target_pairs={{0,4},{4,0}}
  %collective-permute-done = f32[16,64]{1,0} collective-permute-done((f32[16,64]{1,0}, f32[16,64]{1,0}, u32[], u32[]) %collective-permute-start)
  %all-gather-start.2 = ((bf16[8]{0}, bf16[4]{0}), (bf16[64]{0}, bf16[32]{0})) all-gather-start(bf16[8]{0} %s, bf16[4]{0} %t), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}
  %all-gather-done.2 = (bf16[64]{0}, bf16[32]{0}) all-gather-done(((bf16[8]{0}, bf16[4]{0}), (bf16[64]{0}, bf16[32]{0})) %all-gather-start.2)
  %w = (s32[], f32[16,32]{1,0}, f32[32,64]{1,0}) while((s32[], f32[16,32]{1,0}, f32[32,64]{1,0}) %t0), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out = f32[16,64]{1,0} copy(f32[16,64]{1,0} %collective-permute-done)
}
"""


def by_kind():
    found = parse_collectives(GPU_MODULE, MESH, AXES)
    out = {}
    for c in found:
        out.setdefault(c.kind, []).append((c.count, c.bytes, c.group_size, c.axes))
    return out


def test_tuple_elements_split_at_the_top_level_only():
    assert tuple_elements("((bf16[8]{0}, bf16[4]{0}), (bf16[64]{0}, bf16[32]{0}))") == [
        "(bf16[8]{0}, bf16[4]{0})", "(bf16[64]{0}, bf16[32]{0})"]
    assert tuple_elements("f32[2,3]{1,0}") == ["f32[2,3]{1,0}"]


def test_async_pairs_count_once_with_the_result_bytes():
    kinds = by_kind()
    # the gather's result (64·32 f32), and two arrays gathered at once (64 + 32 bf16)
    assert sorted(kinds["all-gather"]) == [(1, 192, 8, ("data", "tensor")),
                                          (1, 8192, 4, ("tensor",))]
    # the all-reduce-start inside the loop: 3 trips of a 16·64 f32 array over tensor
    assert kinds["all-reduce"] == [(3, 4096, 4, ("tensor",))]
    # the permute's result (its second element), once
    assert kinds["collective-permute"] == [(1, 4096, 2, ("data",))]


def test_an_async_wrapped_reduce_scatter_counts_once():
    """The async-done names the same computation as its start: it must not run it again. Bytes:
    the unscattered input, result 16·64 f32 times the group of 4."""
    assert by_kind()["reduce-scatter"] == [(1, 16 * 64 * 4 * 4, 4, ("tensor",))]


def test_matmuls_in_fusions_loops_and_cublas_gemms():
    """The fused dot runs 3 times (the loop), 2·16·64·32 each; the gemm once, 2·64·64·32."""
    assert matmul_flops(GPU_MODULE) == 3 * 2 * 16 * 64 * 32 + 2 * 64 * 64 * 32


def test_gpu_check_dry_run_says_what_it_would_measure(capsys):
    """benchmarks/gpu_check.py on the CPU: the prediction and the plan, nothing measured."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert gpu_check.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "flash attention" in out and "dry run: would compile and time" in out
    for row in ("step time", "MFU", "memory/device", "collective bytes"):
        assert row in out
    assert gpu_check.main([]) == 2  # no GPU here: refused, pointing at --dry-run
