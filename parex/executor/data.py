"""Training data: a byte-level tokenizer over the corpus shipped in data/, and random tokens.

Batches are deterministic functions of (seed, step), so every layout sees the same tokens, and are
placed on the mesh with the Layout's batch sharding.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from ..errors import InputError
from ..files import DATA_DIR
SOURCES = ("corpus", "synthetic")


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255: no vocabulary file, nothing to download."""

    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def decode(self, tokens) -> str:
        return bytes(np.asarray(tokens, dtype=np.uint8).tolist()).decode("utf-8", errors="replace")


def load_corpus(path: Path | None = None) -> np.ndarray:
    path = Path(path) if path else DATA_DIR / "corpus.txt"
    if not path.exists():
        raise FileNotFoundError(f"corpus not found at {path}; run `python data/make_corpus.py` "
                                f"in the parex checkout, or install parex with `pip install -e .`")
    return ByteTokenizer().encode(path.read_text())


class Batches:
    """`batches[step]` -> {"inputs", "targets"}: (B, T) int32 arrays, targets shifted by one."""

    def __init__(self, source: str, global_batch: int, seq_len: int, vocab: int, seed: int = 0):
        if source not in SOURCES:
            raise InputError(f"unknown data source {source!r}; use one of {', '.join(SOURCES)}")
        if source == "corpus" and vocab < ByteTokenizer.vocab_size:
            raise InputError(f"the byte-level corpus needs vocab >= 256, the model has {vocab}; "
                             f"use --data synthetic or a larger vocabulary")
        self.source, self.B, self.T = source, global_batch, seq_len
        self.vocab, self.seed = vocab, seed
        self.tokens = load_corpus() if source == "corpus" else None

    def __getitem__(self, step: int) -> dict:
        rng = np.random.default_rng([self.seed, step])
        if self.source == "synthetic":
            window = rng.integers(0, self.vocab, (self.B, self.T + 1), dtype=np.int32)
        else:
            starts = rng.integers(0, len(self.tokens) - self.T - 1, self.B)
            window = np.stack([self.tokens[s:s + self.T + 1] for s in starts])
        return {"inputs": window[:, :-1], "targets": window[:, 1:]}

    def on_mesh(self, step: int, sharding) -> dict:
        return {k: jax.device_put(v, sharding) for k, v in self[step].items()}
