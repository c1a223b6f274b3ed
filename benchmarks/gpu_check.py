"""Is parex ready for a real GPU? One GPT step (350M-1B parameters) in bfloat16 with flash
attention on one GPU: MFU, memory and collectives as measured, beside the prediction, as ratios.

    python benchmarks/gpu_check.py                # on a GPU machine (profile from the chip)
    python benchmarks/gpu_check.py --model gpt2-large --hardware h100-sxm
    python benchmarks/gpu_check.py --dry-run                # anywhere: what it would measure

The prediction is parex's own program on that chip: convention gpu, recipe parex (the step keeps
float32 master weights, gradients and Adam moments; compute in bfloat16). MFU counts model FLOPs
(parex.model.transformer.flops_per_token: 6N + 12·L·D·T per token, causal attention in full as Megatron's
papers count it) over the chip's bfloat16 peak; flash attention's backward recompute is hardware
FLOPs, not model FLOPs. Memory: the compiled step's argument + output − alias + temp, and the
allocator's peak (Device.memory_stats) where the platform reports it. Collectives: one device
runs none; the row checks that the parser (parex.measure.hlo: async start/done pairs) and the
predictor agree on that. The dry run prints the prediction and the plan, and measures nothing.
"""

from __future__ import annotations

import argparse
import sys

import jax

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.model.transformer import flops_per_token
from parex.predict import predict

# device_kind substrings -> hardware profiles (data/hardware/)
PROFILES = (("H200", "h200"), ("H100", "h100-sxm"), ("A100", "a100-80gb"), ("B200", "b200"),
            ("MI300", "mi300x"))
SIZES = ("gpt2-medium", "gpt2-large", "gpt2-xl")  # 350M, 774M, 1.56B: the first two in range


def profile_of(device) -> str:
    kind = getattr(device, "device_kind", "")
    for key, name in PROFILES:
        if key in kind:
            return name
    raise SystemExit(f"gpu_check: no hardware profile for device {kind!r}: give --hardware "
                     f"(one of {', '.join(n for _, n in PROFILES)})")


def setup(args):
    model = model_preset(args.model).replace(dtype="bfloat16")
    train = TrainConfig(global_batch=args.global_batch, seq_len=args.seq, steps=args.steps,
                        attention="flash")
    return model, train, Layout()


def predicted(model, train, layout, hardware) -> dict:
    p = predict(model, train, layout, hardware, convention="gpu", recipe="parex")
    return {"step_s": p.step_time_s["total"], "mfu": p.mfu,
            "memory_bytes": p.memory_bytes_per_device["total"],
            "collective_bytes": float(sum(p.comm_bytes_per_device.values()))}


def measured(model, train, layout, hardware) -> dict:
    from parex.hardware import load_chip
    from parex.measure import measure

    device = jax.devices()[0]
    m = measure(model, train, layout, devices=[device])
    step = m.step_time_s["median"]
    model_flops = flops_per_token(model, train.seq_len) * train.global_batch * train.seq_len
    stats = device.memory_stats() or {}
    return {"step_s": step, "mfu": model_flops / (step * load_chip(hardware).peak("bfloat16")),
            "memory_bytes": m.memory_bytes_per_device["total"],
            "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
            "collective_bytes": float(sum(m.comm_bytes_per_device.values())),
            "hardware_flops": m.matmul_flops_per_device, "model_flops": model_flops,
            "loss": m.losses[-1]}


def report(pred: dict, meas: dict | None) -> str:
    rows = [("step time (s)", "step_s"), ("MFU", "mfu"), ("memory/device (bytes)",
                                                          "memory_bytes"),
            ("collective bytes", "collective_bytes")]
    lines = [f"{'quantity':24s} {'predicted':>14s} {'measured':>14s} {'measured/pred':>14s}"]
    for label, key in rows:
        p = pred[key]
        m = meas.get(key) if meas else None
        ratio = ("n/a" if m is None else "both 0" if not p and not m
                 else f"{m / p:.3f}" if p else "pred 0")
        lines.append(f"{label:24s} {p:14.4g} {'-' if m is None else f'{m:14.4g}':>14s} "
                     f"{ratio:>14s}")
    if meas:
        lines.append(f"allocator peak: {meas['peak_bytes_in_use']} bytes · matmul FLOPs "
                     f"{meas['hardware_flops']:.4g} (model {meas['model_flops']:.4g}: HFU/MFU "
                     f"{meas['hardware_flops'] / meas['model_flops']:.3f}) · loss "
                     f"{meas['loss']:.4f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2-medium", choices=SIZES)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--hardware", default=None, help="profile (default: from the GPU's name)")
    p.add_argument("--dry-run", action="store_true", help="say what would be measured")
    args = p.parse_args(argv)
    model, train, layout = setup(args)
    gpu = jax.default_backend() == "gpu"
    hardware = args.hardware or (profile_of(jax.devices()[0]) if gpu and not args.dry_run
                                 else "h100-sxm")
    print(f"gpu_check · {model.name} ({model.n_params / 1e6:.0f}M parameters) · bfloat16 · "
          f"flash attention · {train.global_batch} × {train.seq_len} tokens · one device · "
          f"profile {hardware}")
    pred = predicted(model, train, layout, hardware)
    if args.dry_run or not gpu:
        if not args.dry_run:
            print("gpu_check: no GPU here (JAX backend "
                  f"{jax.default_backend()!r}); use --dry-run to see the plan", file=sys.stderr)
            return 2
        print(f"dry run: would compile and time {train.steps} steps on one GPU and measure the "
              "median step time (MFU from model FLOPs over the bf16 peak), the compiled step's "
              "memory and the allocator's peak, and the collectives in its HLO; then print each "
              "beside this prediction as measured/predicted")
        print(report(pred, None))
        return 0
    print(report(pred, measured(model, train, layout, hardware)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
