"""`parex seqstudy`: the long-sequence study (parex.studies.sequence) from the command line."""

from __future__ import annotations

from ..studies.sequence import DEFAULT_LENGTHS, STUDY_MODES, long_sequence_study, study_table
from .args import at_least, choice_list, positive_list, preset, setup_devices

# --- parex seqstudy -----------------------------------------------------------------------------

def cmd_seqstudy(args) -> int:
    n = setup_devices(args, None)
    model = preset(args.model)
    lengths = [int(t) for t in args.lengths.split(",")]
    modes = [m.strip() for m in args.modes.split(",")]
    df = long_sequence_study(model, lengths, modes, n, args.global_batch, progress=True)
    print(f"long-sequence study · {model.name} · global batch {args.global_batch} · {n} devices "
          f"· per device, from the compiled step\n")
    print(study_table(df))
    print("\ntemp: XLA's temporary buffers (activations); total: + parameters, optimizer state "
          "and outputs.\ncomm: bytes per device per step by parex.measure.hlo's convention (whole "
          "buffers); sent: bytes each device sends\nwith ring algorithms (all-reduce 2(g−1)/g, "
          "gather/scatter/all-to-all (g−1)/g, permute 1 × the buffer).")
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.chart:
        from ..charts.records import save
        from ..charts.sequence import long_sequence_chart

        print(f"chart written to {save(long_sequence_chart(df), args.chart)}")
    return 0


def add_seqstudy(sub) -> None:
    p = sub.add_parser("seqstudy", help="per-device memory and communication against sequence "
                       "length for tp, tp+sp, ring and Ulysses (compiled, not run)")
    p.add_argument("--model", default="tiny", help="model preset (default tiny)")
    p.add_argument("--lengths", type=positive_list, default=",".join(map(str, DEFAULT_LENGTHS)),
                   help="comma-separated sequence lengths (default 256,...,4096)")
    p.add_argument("--modes", type=choice_list(tuple(STUDY_MODES)),
                   default=",".join(STUDY_MODES),
                   help=f"comma-separated subset of {', '.join(STUDY_MODES)}")
    p.add_argument("--global-batch", type=at_least(1), default=1,
                   help="sequences per step (default 1)")
    p.add_argument("--devices", type=at_least(1), default=None,
                   help="n, devices per layout (default 8)")
    p.add_argument("--platform", default=None, choices=["cpu", "gpu", "tpu"])
    p.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    p.add_argument("--chart", default=None, help="also save the chart (.png or .svg)")
    p.set_defaults(func=cmd_seqstudy)
