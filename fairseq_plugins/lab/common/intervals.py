"""Intervals over training seeds and test documents together (docs/analysis.md, "Seeds").

A comparison trained with S seeds and scored on the same D test documents has two sources of
noise: **training** (another seed gives another model) and **test data** (other documents give
another loss). The estimate of a model's loss, or of a pair's difference, is the mean over
its seeds of each seed's value; its variance is the sum of

- the training noise: the spread of the per-seed values, s²/S with S − 1 degrees of freedom
  (for a pair whose two arms were trained with different seeds, Welch's s²_a/S_a + s²_b/S_b);
  a pair trained with the same seeds is compared seed by seed (the per-seed differences);
- the test-data noise: the variance, over bootstrap replicates that draw the D documents with
  replacement (the same draw for every seed), of the seed mean (infinite degrees of freedom).

The interval is estimate ± t_ν · √(sum), ν by Welch–Satterthwaite
(ν = (Σ a_g)² / Σ a_g² / (S_g − 1) over the training terms a_g). With one seed per arm no
training noise can be estimated: the interval is then the percentile bootstrap over documents
alone (:func:`~fairseq_plugins.lab.common.bootstrap.percentile_interval`), and the report says so.
Satterthwaite, *Biometrics Bulletin* 2 (1946); Welch, *Biometrika* 34 (1947).
"""

import math
from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

from fairseq_plugins.lab.common.bootstrap import percentile_interval

DOCUMENTS = "documents"  # the interval covers test-data noise only (one seed)
SEEDS_AND_DOCUMENTS = "seeds and documents"
# an arm of one seed beside arms of several: its training noise is unknown and left out
PARTIAL = "documents and the seeds of the arms trained with several"


class Interval(NamedTuple):
    """Per column (``(K,)`` each): the estimate, the interval's bounds and its degrees of freedom
    (``inf`` for a documents-only interval); ``kind`` is :data:`DOCUMENTS` or
    :data:`SEEDS_AND_DOCUMENTS`."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    dof: np.ndarray
    kind: str


def combine(groups: Sequence[np.ndarray], signs: Sequence[float], replicas: np.ndarray,
            level: float = 0.95) -> Interval:
    """The interval of Σ_g sign_g · mean(groups[g]) over seeds and documents (module docstring).

    Args:
        groups: per group (an arm, or a pair's per-seed differences) ``(S_g, K)`` values, one
            row per seed, one column per bucket.
        signs: +1 or −1 per group (a difference of two arms: ``[+1, −1]``).
        replicas: ``(R, K)`` the same estimate in each document-bootstrap replicate (NaN where a
            replicate drew no token of the column).
        level: the interval's coverage.
    Returns:
        :class:`Interval`; documents only when every group has one seed (a group of one seed
        beside groups of several adds no training term: :data:`PARTIAL`).
    Raises:
        ValueError: a group without rows, or groups and signs of different lengths.
    """
    from scipy import stats

    if len(groups) != len(signs) or any(len(g) == 0 for g in groups):
        raise ValueError("every group needs at least one seed, and one sign per group")
    estimate = sum(s * np.asarray(g, dtype=np.float64).mean(0) for g, s in zip(groups, signs))
    if all(len(g) == 1 for g in groups):
        low, high = percentile_interval(replicas, level)
        return Interval(estimate, low, high, np.full_like(estimate, np.inf), DOCUMENTS)
    terms = [np.asarray(g, dtype=np.float64).var(0, ddof=1) / len(g) for g in groups if len(g) > 1]
    dofs = [len(g) - 1 for g in groups if len(g) > 1]
    training = sum(terms)
    with np.errstate(invalid="ignore"):
        test_data = np.nanvar(replicas, axis=0, ddof=1)
    denominator = sum(t * t / d for t, d in zip(terms, dofs))
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = np.where(denominator > 0, (training + test_data) ** 2 / np.where(denominator > 0, denominator, 1.0),
                       np.inf)
    half = stats.t.ppf(0.5 + level / 2.0, dof) * np.sqrt(training + test_data)
    kind = SEEDS_AND_DOCUMENTS if all(len(g) > 1 for g in groups) else PARTIAL
    return Interval(estimate, estimate - half, estimate + half, dof, kind)


def t_interval(values: Sequence[float], level: float = 0.95) -> Tuple[float, Optional[float], Optional[float]]:
    """``(mean, low, high)`` of one value per seed: mean ± t(S − 1, (1 + level)/2) · s/√S, s the
    standard deviation over the S seeds (ddof 1); training noise only, for a result whose test data
    noise is not resampled (``low`` and ``high`` None for a single value).

    Raises:
        ValueError: no value.
    """
    from scipy import stats

    n = len(values)
    if n == 0:
        raise ValueError("t_interval needs at least one value")
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half
