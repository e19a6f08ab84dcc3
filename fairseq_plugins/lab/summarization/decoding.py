"""Summary-length decoding options from the prepared training targets (docs/summarization.md#decoding).

From the sentencepiece lengths of the *training* targets in ``stats.json``
(data-prep/prepare-summarization.sh), never of the split being decoded:

=============  =====================================================================
``MIN_LEN``    half the median target length (at least 1)
``MAX_LEN_B``  1.1 x the 90th percentile, rounded up (at least ``MIN_LEN`` + 1)
``LENPEN``     2.0 when the median target has 64 pieces or more (long abstracts, as
               fairseq's BART CNN-DM recipe), else 1.0 (short summaries, as its XSum recipe)
=============  =====================================================================

Without ``stats.json``: :data:`FIXED` (chosen for ACLSum abstracts). A variable set in the
environment is kept.
"""

import json
import math
import os
from typing import Dict, Mapping, Optional, Tuple

from fairseq_plugins.errors import ConfigError

FIXED = {"MIN_LEN": "80", "MAX_LEN_B": "300", "LENPEN": "2.0"}


def find_stats(data_dir: str) -> Optional[str]:
    """``DATA_DIR/stats.json``, or ``DATA_DIR/../stats.json`` (DATA_DIR is the bin/ folder), or ``None``."""
    for path in (os.path.join(data_dir, "stats.json"), os.path.join(data_dir, os.pardir, "stats.json")):
        if os.path.isfile(path):
            return os.path.normpath(path)
    return None


def derive(stats: dict) -> Tuple[Dict[str, str], Tuple[float, float]]:
    """(``MIN_LEN``, ``MAX_LEN_B``, ``LENPEN`` as strings; (median, p90) in pieces) of a stats.json document.

    Raises:
        ConfigError: it lacks ``splits.train.target.spm_tokens`` median/p90.
    """
    try:
        lengths = stats["splits"]["train"]["target"]["spm_tokens"]
        median, p90 = float(lengths["median"]), float(lengths["p90"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError("stats.json has no splits.train.target.spm_tokens median/p90 "
                          "(prepare the data again with data-prep/prepare-summarization.sh)") from None
    min_len = max(1, round(median / 2))
    max_len_b = max(min_len + 1, math.ceil(1.1 * p90))
    return {"MIN_LEN": str(min_len), "MAX_LEN_B": str(max_len_b), "LENPEN": "2.0" if median >= 64 else "1.0"}, \
        (median, p90)


def choose(data_dir: str, env: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, str], str]:
    """(values, one-line explanation) for the data folder ``data_dir`` (or its bin/); values set
    in ``env`` (default ``os.environ``) are kept.

    Raises:
        ConfigError: a stats.json that is not JSON or lacks the training targets' lengths.
    """
    env = os.environ if env is None else env
    path = find_stats(data_dir)
    if path is None:
        values, why = dict(FIXED), "fixed defaults (no stats.json next to the data)"
    else:
        try:
            with open(path, encoding="utf-8") as f:
                stats = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not JSON ({e})") from None
        values, (median, p90) = derive(stats)
        why = f"from {path} (training targets: median {median:g}, p90 {p90:g} pieces)"
    kept = [k for k in values if env.get(k)]
    for k in kept:
        values[k] = env[k]
    why += f"; {', '.join(kept)} from the environment" if kept else "; set MIN_LEN, MAX_LEN_B, LENPEN to override"
    return values, why


def shell_lines(data_dir: str, env: Optional[Mapping[str, str]] = None) -> str:
    """``MIN_LEN=..``, ``MAX_LEN_B=..``, ``LENPEN=..`` and ``LENGTHS_FROM=..`` (the values and
    where they come from, one line), one per line, for bash's ``declare``."""
    values, why = choose(data_dir, env)
    summary = " ".join(f"{k}={v}" for k, v in values.items())
    lines = [f"{k}={v}" for k, v in values.items()]
    lines.append(f"LENGTHS_FROM={summary} {why}".replace("\n", " "))
    return "\n".join(lines)
