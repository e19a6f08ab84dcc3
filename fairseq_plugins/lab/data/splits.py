"""The split rule of corpora without their own splits (docs/data-preparation.md).

A name's bucket is ``int(md5(name)[:8], 16) % 100``: below :data:`TEST_PERCENT` test, below
``TEST_PERCENT + VALID_PERCENT`` valid, else train; :func:`assign_splits` then fills an empty
split deterministically. Standard library only.
"""
import hashlib

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.data.text import SPLITS

TEST_PERCENT = 5
VALID_PERCENT = 5


def name_md5(name):
    return hashlib.md5(name.encode("utf-8")).hexdigest()


def hash_split(name):
    bucket = int(name_md5(name)[:8], 16) % 100
    if bucket < TEST_PERCENT:
        return "test"
    if bucket < TEST_PERCENT + VALID_PERCENT:
        return "valid"
    return "train"


def assign_splits(names, what="documents"):
    """Deterministic split by md5 of the name; every split gets >= 1 name (``what`` names them
    in the error)."""
    if len(names) < 3:
        raise ConfigError(f"need at least 3 non-empty {what} to make train/valid/test splits, found {len(names)}")
    groups = {s: [] for s in SPLITS}
    for n in names:
        groups[hash_split(n)].append(n)
    for target in ("test", "valid", "train"):
        if not groups[target]:
            donor = max(SPLITS, key=lambda s: (len(groups[s]), -SPLITS.index(s)))
            moved = min(groups[donor], key=lambda n: (name_md5(n), n))
            groups[donor].remove(moved)
            groups[target].append(moved)
    return {n: s for s, members in groups.items() for n in members}
