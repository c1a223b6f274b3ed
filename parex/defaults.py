"""The defaults every entry point shares (the CLI, the Planner, the Explorer, sweeps): a value is a
default here and nowhere else."""

DEVICES = 8  # emulated devices when neither the layout nor --devices says how many
