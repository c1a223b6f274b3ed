"""Calibrating this machine: the `cpu-local` profile's measurements (run.py), the pipeline
executor's tick cost (pipeline.py), and `ensure_local`, which measures the profile once when the
machine has none (local.py). Loading a profile never calibrates: parex.hardware reads it."""
