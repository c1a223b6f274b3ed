"""Every notebook, executed top to bottom in its own kernel with small parameters.

The jupytext percent files in notebooks/ are the source of truth; each is read into a notebook, a
cell with the test's parameters is injected after the one tagged `parameters` (as papermill
does), and nbclient runs it on the emulated mesh.
"""

from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# Small sizes, and no offline Vega bundle: no browser renders these runs.
PARAMETERS = {
    "01_quick_start": {"offline": False, "steps": 3},
    "02_data_parallel_zero": {"offline": False, "steps": 2, "device_counts": [2, 8],
                              "strategies": ["dp", "fsdp"]},
    "03_tensor_sequence": {"offline": False, "steps": 2, "tensor_sizes": [2]},
    "04_pipeline_schedules": {"offline": False, "steps": 2, "bubble_ms": [2], "bubble_repeats": 2},
    "05_long_sequences": {"offline": False, "lengths": [256, 512], "modes": ["tp", "ring"]},
    "06_predicting_at_scale": {"offline": False},
    "07_explorer": {"offline": False, "steps": 2},
    "08_planner": {"offline": False, "verify_k": 0, "scale_model": "gpt2-small",
                   "scale_nodes": 1},
    "09_heterogeneous": {"offline": False, "global_batch": 64, "odd_batch": 48,
                         "seq_len": 2048, "speeds": [10]},
    "10_low_communication": {"offline": False, "steps": 20, "hs": [4, 10]},
    "11_gallery": {"offline": False, "figure_name": "interleaved-bubble",
                   "scoreboard_json": str(NOTEBOOKS.parent / "docs/figures/scoreboard.json")},
    "12_local_learning": {"offline": False, "steps": 4, "every": 2,
                          "layout_text": "data=2,stage=4,microbatches=4"},
    "13_tensor_3d": {"offline": False, "steps": 2, "batches": [16, 64]},
    "14_experts": {"offline": False, "steps": 2, "layouts_text": ["data=8", "data=2,expert=4"],
                   "pp": 4},
}
# Text each notebook must print: evidence that it computed what its prose promises.
EXPECTED = {
    "01_quick_start": ["parex run · tiny", "layout data=2,tensor=4", "all-reduce",
                       "not divisible by tensor=16", "predicted step on the emulated mesh",
                       "memory_argument_bytes"],
    "02_data_parallel_zero": ["fsdp=8", "comm_all_gather_bytes"],
    "03_tensor_sequence": ["tensor=2,sp=on", "count per layer", "reduce-scatter"],
    "04_pipeline_schedules": ["stage=4,schedule=1f1b,microbatches=8", "peak in flight",
                              "bubble_measured", "zbv"],
    "05_long_sequences": ["seq=8,cp=ring", "permute", "comm_collective_permute_bytes"],
    "06_predicting_at_scale": ["parex_tflops_per_gpu", "memory-bound (does not fit)",
                               "compute-bound", "communication-bound", "step breakdown",
                               "stragglers_s", "speedup_vs_bf16", "no microscaling"],
    "07_explorer": ["data=4,tensor=2", "measured"],
    "08_planner": ["parex plan · gpt2-small", "layouts considered", "loaded into the Explorer",
                   "use --memory-cap"],
    "10_low_communication": ["across replicas", "sync DP data=8", "gap_vs_sync_DP",
                             "h_crossover"],
    "09_heterogeneous": ["het-48: 16 × rtx-4090", "vs the best even split",
                         "vs a homogeneous cluster of the same peak", "pipeline  1",
                         "gradient relative error"],
    "11_gallery": ["fraction of the ideal", "scaling-book-roofline", "predicted + measured"],
    "12_local_learning": ["local  on A100s", "gap_vs_1f1b", "tuned for backprop",
                          "changes the optimisation"],
    "13_tensor_3d": ["fastest that fits", "the fastest 3D tensor layouts", "AxoNN step",
                     "tensor=2x2x1,stage=2,schedule=1f1b",
                     "Kendall's tau", "best 3D ÷ best Megatron-LM"],
    "14_experts": ["losses equal: True", "all_to_all_predicted", "expert=8,zero=1", "dualpipe",
                   "deepep"],
}
# notebooks moved to the slow suite: 09 searches three clusters and compiles two programs per
# stage of its MPMD run (80 s on 2 busy cores); 10 trains seven runs (about 90 s); 04 compiles
# and times ten pipelines (50 s; tests/test_pipeline*.py cover each in the default suite); 02 and
# 05 compile a dozen layouts each (30 s and 20 s; test_measure, test_context cover them); 03
# compiles its tensor and SP layouts (24 s; test_sequence_parallel covers each); 13 trains three
# 3D layouts and plans a cluster (70 s; tests/parallel/test_tensor3d.py covers them); 14 trains
# three mixtures of experts (tests/moe/test_moe.py covers them); 07 measures layouts in the
# Explorer (28 s; tests/explorer covers its widgets) and 08 plans gpt2-small and hands a row to
# the Explorer (16 s; tests/plan and tests/explorer/test_widgets_planner.py cover both)
SLOW = {"02_data_parallel_zero", "03_tensor_sequence", "04_pipeline_schedules",
        "05_long_sequences", "07_explorer", "08_planner", "09_heterogeneous",
        "10_low_communication", "12_local_learning", "13_tensor_3d", "14_experts"}


def notebook_paths():
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def execute(path: Path, overrides: dict, cwd: Path, timeout: int = 600):
    """Run the notebook at `path` with `overrides` injected after its parameters cell."""
    nb = jupytext.read(path)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    source = "\n".join(f"{name} = {value!r}" for name, value in overrides.items())
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(
        source, metadata={"tags": ["injected-parameters"]}))
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def output_text(nb) -> str:
    """Everything the code cells printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
            parts.append(out.get("data", {}).get("text/html", ""))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def _params(path: Path):
    marks = [pytest.mark.slow] if path.stem in SLOW else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_every_notebook_is_thin_and_parametrised():
    paths = notebook_paths()
    assert [p.stem for p in paths] == sorted(PARAMETERS), "one notebook per topic, 01..09"
    for path in paths:
        nb = jupytext.read(path)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert nb.cells[0].cell_type == "markdown", path.name
        assert "parex.emulate_devices(8)" in code[0].source, path.name
        assert any("parameters" in c.metadata.get("tags", []) for c in code), path.name
        assert path.stem in PARAMETERS, f"give {path.name} small test parameters"
        assert nb.metadata["kernelspec"]["name"] == "python3"
        for cell in code:  # logic lives in parex, not in notebooks
            assert "\ndef " not in "\n" + cell.source, f"{path.name} defines a function"
            assert len(cell.source.splitlines()) <= 15, f"{path.name}: cell too long"


@pytest.mark.parametrize("path", [_params(p) for p in notebook_paths()])
def test_notebook_runs_top_to_bottom(path, tmp_path):
    nb = execute(path, PARAMETERS[path.stem], tmp_path)
    text = output_text(nb)
    for expected in EXPECTED.get(path.stem, []):
        assert expected in text, f"{path.name} did not show {expected!r}"
