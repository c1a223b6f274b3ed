"""Deterministic batches from the shipped corpus and from random tokens."""

import numpy as np
import pytest

from parex.executor.data import Batches, ByteTokenizer, load_corpus


def test_tokenizer_round_trips_text():
    tok = ByteTokenizer()
    text = "the sharded replica gathers — 8 plus 4 is 12."
    assert tok.decode(tok.encode(text)) == text


def test_corpus_is_shipped_and_readable():
    tokens = load_corpus()
    assert len(tokens) > 100_000 and tokens.max() < 256
    assert "plus" in ByteTokenizer().decode(tokens[:2000])


@pytest.mark.parametrize("source", ["corpus", "synthetic"])
def test_batches_are_deterministic_shifted_windows(source):
    a, b = Batches(source, 4, 32, 256, seed=1), Batches(source, 4, 32, 256, seed=1)
    assert np.array_equal(a[3]["inputs"], b[3]["inputs"])
    assert not np.array_equal(a[3]["inputs"], a[4]["inputs"])
    batch = a[0]
    assert batch["inputs"].shape == batch["targets"].shape == (4, 32)
    assert np.array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])


def test_bad_sources_are_explained():
    with pytest.raises(ValueError, match="unknown data source 'web'"):
        Batches("web", 4, 32, 256)
    with pytest.raises(ValueError, match="needs vocab >= 256"):
        Batches("corpus", 4, 32, 100)
