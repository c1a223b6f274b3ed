"""Studies: small experiments measured on the emulated mesh, each a function returning a
DataFrame that the figures and notebooks read. activation.py: Korthikanti et al.'s activation
memory per recompute mode; pipeline.py: bubbles per schedule; sequence.py: memory and
communication against sequence length for tp, tp+sp, ring and Ulysses."""
