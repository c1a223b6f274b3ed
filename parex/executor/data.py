"""Training data: a byte-level tokenizer over the corpus shipped in data/, random tokens, and
synthetic labelled images for a vision transformer.

Batches are deterministic functions of (seed, step), so every layout sees the same tokens, and are
placed on the mesh with the Layout's batch sharding.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import InputError
from ..files import DATA_DIR
from ..model.transformer import labels_per_sequence
from ..model.vision import patchify

SOURCES = ("corpus", "synthetic")
IMAGE_NOISE = 0.5  # σ of the pixel noise around each class's prototype image (prototypes ~ N(0, 1))


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


class Images(Batches):
    """A vision transformer's batches: synthetic labelled images, {"inputs": (B, N, P²C) float32
    patches, "targets": (B, 1) int32 labels} (parex.model.vision). Every class c has a fixed
    prototype image drawn from N(0, 1) with the seed; an image of class c is its prototype plus
    N(0, IMAGE_NOISE²) noise per pixel, its class drawn uniformly. Deterministic in (seed,
    step), learnable (the classes are separable), and nothing to download."""

    def __init__(self, model, global_batch: int, seed: int = 0):
        self.model, self.B, self.seed = model, global_batch, seed
        shape = (model.vocab, model.image, model.image, model.channels)
        self.prototypes = np.random.default_rng([seed, 2**31 - 1]).standard_normal(
            shape, dtype=np.float32)

    def __getitem__(self, step: int) -> dict:
        rng = np.random.default_rng([self.seed, step])
        labels = rng.integers(0, self.model.vocab, self.B, dtype=np.int32)
        noise = rng.standard_normal((self.B, *self.prototypes.shape[1:]), dtype=np.float32)
        images = self.prototypes[labels] + IMAGE_NOISE * noise
        return {"inputs": patchify(images, self.model.patch), "targets": labels[:, None]}


def batches_for(model, source: str, global_batch: int, seq_len: int, seed: int = 0) -> Batches:
    """The model's batches: a language model's from `source`, a ViT's synthetic images (the only
    data it has; `source` names a token stream, so it is not read)."""
    if model.vision:
        return Images(model, global_batch, seed)
    return Batches(source, global_batch, seq_len, model.vocab, seed)


def batch_shapes(model, global_batch: int, seq_len: int) -> dict:
    """{"inputs", "targets"}: (shape, dtype) of one global batch, as `batches_for` makes it."""
    targets = ((global_batch, labels_per_sequence(model, seq_len)), jnp.int32)
    if model.vision:
        return {"inputs": ((global_batch, model.patches, model.patch_dim), jnp.float32),
                "targets": targets}
    return {"inputs": ((global_batch, seq_len), jnp.int32), "targets": targets}
