# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-jupytext.text_representation.format_version
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Quick start: one layout, measured and predicted
#
# parex trains a small transformer for real on a device mesh, reads from the compiled step what
# XLA did (memory, FLOPs, collectives, step time), and puts an analytic prediction of the same
# numbers beside it. On a laptop the mesh is **eight emulated CPU devices**, which must be asked
# for before anything else touches JAX — so that is the first cell of every notebook.

# %%
import parex

parex.emulate_devices(8)

import jax  # noqa: E402
import pandas as pd  # noqa: E402

jax.devices()

# %% [markdown]
# The next cell holds the notebook's knobs. Tests execute this notebook with smaller values;
# `offline` stores Vega's JavaScript in the notebook so the charts render without internet.

# %% tags=["parameters"]
offline = True
model_name = "tiny"
steps = 10
layout_text = "data=2,tensor=4"

# %%
from parex import charts

if offline:
    charts.enable_offline()

# %% [markdown]
# ## A model, a training setup and a layout
# A **Layout** is a value: mesh axis sizes plus per-technique switches. `data=2,tensor=4` puts two
# model replicas on the mesh, each split four ways by Megatron tensor parallelism
# (`W_in[D, F_tensor]`, with an all-reduce after `W_out`). Validation runs before anything
# compiles and says what to change when a layout is impossible.

# %%
model = parex.model_preset(model_name)
train = parex.TrainConfig(steps=steps, global_batch=16)
layout = parex.validate(parex.Layout.parse(layout_text), model, train, n_devices=8)
print(f"{model.name}: {model.n_params / 1e6:.2f}M parameters, layout {layout}")
parex.make_mesh(layout).shape

# %% [markdown]
# An impossible layout fails early with the problem and the fix, for example splitting the eight
# attention heads sixteen ways:

# %%
try:
    parex.validate(parex.Layout.parse("tensor=16"), model, train, n_devices=16)
except parex.LayoutError as error:
    print(error)

# %% [markdown]
# ## Measure
# `measure` compiles the sharded train step, runs `steps` optimizer steps on the emulated mesh
# (the first is a warm-up) and reads XLA's per-device memory analysis, cost analysis and the
# collectives in the compiled HLO. Emulated devices share the real cores, so compare step times
# within one run, never across machines.

# %%
measured = parex.measure(model, train, layout, progress=True)
print(parex.measurement_report(measured, model.n_params))

# %% [markdown]
# The loss falls, and it is the same loss a single device computes: every layout is checked
# against the single-device reference in parex's tests.

# %%
print([round(loss, 3) for loss in measured.losses])

# %% [markdown]
# ## Predict
# The analytic model reads the same model, training setup and layout and computes memory, FLOPs,
# communication and step time from formulas. On `cpu-local` — this machine's own profile, which
# parex measures the first time it is needed (about half a minute, once) — it predicts what the
# emulated mesh does; on `a100-80gb` it says what the same layout would cost on a real GPU, in
# bfloat16 with mixed-precision state (an accelerator profile's defaults; pass dtype="float32",
# recipe="parex" for float32).

# %%
parex.ensure_local()  # this machine's cpu-local profile: measured once, then read
predicted = parex.predict(model, train, layout, "cpu-local")
on_a100 = parex.predict(model, train, layout, "a100-80gb")
print(f"predicted step on the emulated mesh {predicted.step_time_s['total'] * 1e3:.0f} ms, "
      f"measured {measured.step_time_s['median'] * 1e3:.0f} ms; "
      f"on one A100 node {on_a100.step_time_s['total'] * 1e6:.0f} µs")

# %% [markdown]
# ## Side by side
# Every field both sides have, with predicted ÷ measured. Memory and collective bytes come out of
# the compiled step exactly; step time on emulated devices is noisy (compare within one run).
# `parex.format_frame` writes each number in its unit, as the reports and charts do.

# %%
parex.format_frame(pd.DataFrame(parex.shared_fields(measured, predicted)))

# %% [markdown]
# ## One tidy table, and the pictures
# Every chart, widget and CLI table in parex reads the same tidy rows: one per measurement or
# prediction, with a `source` column that tells them apart. Memory per device is broken into
# XLA's parts on the measured side (argument = parameters, optimizer state and batch; temp =
# gradients, activations and workspace) and into the model's parts on the predicted side; the
# black tick is each side's total. Step time shows the measured median with its min–max beside
# the predicted compute, exposed communication and pipeline bubble. Below them, the bytes each
# kind of collective moves per device per step, measured from the HLO and predicted from the
# layout.

# %%
frame = parex.records_frame([measured, predicted])
charts.overview_chart(frame)
