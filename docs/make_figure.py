"""Draw docs/figure.png: four layouts of the tiny model measured on the emulated mesh beside their
predictions on cpu-local, in the Explorer's overview chart.

    python docs/make_figure.py        # about a minute on two cores (four compiles)
"""

from pathlib import Path

import pandas as pd

import parex

LAYOUTS = ("data=2,tensor=4", "data=2,tensor=4,sp=on", "data=8", "fsdp=8")


def main(path: Path = Path(__file__).resolve().parent / "figure.png") -> Path:
    parex.emulate_devices(8)
    from parex import charts
    from parex.explorer.measuring import measure_run
    from parex.hardware import load_chip
    from parex.executor.mesh import devices_for
    from parex.predict import predict

    model, train = parex.model_preset("tiny"), parex.TrainConfig(steps=6, global_batch=16)
    rows = []
    for text in LAYOUTS:
        layout = parex.Layout.parse(text)
        measured, _, split = measure_run(model, train, layout, devices_for(8))
        rows.append(measured.to_row() | {f"memory_{k}_bytes": v for k, v in split.items()})
        rows.append(predict(model, train, layout, "cpu-local").to_row())
    chip = load_chip("cpu-local")
    chart = charts.overview_chart(pd.DataFrame(rows), chip.hbm_bytes, "cpu-local memory")
    return charts.save(chart, path, scale=1.5)


if __name__ == "__main__":
    print(main())
