"""Studies: small experiments measured on the emulated mesh, each a function returning a
DataFrame that the figures and notebooks read. activation.py: Korthikanti et al.'s activation
memory per recompute mode; pipeline.py: bubbles per schedule; sequence.py: memory and
communication against sequence length for tp, tp+sp, ring and Ulysses.

    bubble_study(model, p=2, ms=(2, 4))       measured pipeline bubble beside the table's
    long_sequence_study(model, [256, 512], ["tp", "ring"], n=8)   study_table(...) prints it
    activation_study(model, [1024, 2048])     activation bytes per layer against the paper's
    expert_study(model, train, layouts)       a mixture of experts' router and all-to-all
    dualpipe_tables(pp, m)                    1F1B, ZB1P, DualPipe, DualPipeV timed alike
"""

from .activation import activation_study
from .experts import dualpipe_tables, expert_study
from .pipeline import bubble_study
from .sequence import long_sequence_study, study_table

__all__ = ["activation_study", "bubble_study", "dualpipe_tables", "expert_study",
           "long_sequence_study", "study_table"]
