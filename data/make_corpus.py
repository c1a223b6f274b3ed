"""Writes data/corpus.txt: a deterministic, self-generated English corpus (no download, no licence).

Sentences mix a small grammar about distributed training with arithmetic facts, so a byte-level
model has structure to learn quickly: its loss falls visibly within a few dozen steps.
Run: python data/make_corpus.py
"""

import random
from pathlib import Path

NOUNS = ["device", "mesh", "shard", "replica", "stage", "layer", "gradient", "batch", "tensor",
         "kernel", "compiler", "student", "pipeline", "optimizer", "cluster", "node"]
ADJECTIVES = ["small", "large", "sharded", "idle", "busy", "fast", "slow", "careful", "quiet"]
VERBS = ["sends", "gathers", "reduces", "splits", "waits for", "computes", "stores", "scatters"]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def sentence(rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        return (f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)} "
                f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}.")
    if kind == 1:
        a, b = rng.randrange(1, 50), rng.randrange(1, 50)
        return f"{a} plus {b} is {a + b}."
    n = rng.randrange(10)
    return f"{NUMBERS[n]} {rng.choice(NOUNS)}s make a {rng.choice(['mesh', 'ring', 'group'])}."


def main(n_bytes: int = 300_000, seed: int = 1234) -> None:
    rng = random.Random(seed)
    lines, size = [], 0
    while size < n_bytes:
        line = " ".join(sentence(rng) for _ in range(rng.randrange(2, 6)))
        lines.append(line)
        size += len(line) + 1
    Path(__file__).with_name("corpus.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
