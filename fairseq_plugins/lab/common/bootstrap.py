"""Bootstrap intervals over documents for losses summed per (document, bucket).

A document is the unit of resampling (its tokens are not independent): each replicate draws
D documents with replacement, and a bucket's loss is the replicate's summed loss over its
summed token count (the token-weighted mean, as the point estimate). Efron & Tibshirani, *An
Introduction to the Bootstrap* (1993), ch. 13: the percentile interval.
"""

from typing import Tuple

import numpy as np


def resample_weights(num_documents: int, replicates: int, seed: int) -> np.ndarray:
    """``(replicates, D)`` float64: how often each document is drawn in each replicate."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, num_documents, size=(replicates, num_documents))
    return np.stack([np.bincount(row, minlength=num_documents) for row in draws]).astype(np.float64)


def replicate_means(loss_sums: np.ndarray, counts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Token-weighted mean loss per bucket in every replicate.

    Args:
        loss_sums: ``(D, K)`` loss summed over each document's tokens in each bucket.
        counts: ``(D, K)`` those tokens' counts.
        weights: ``(R, D)`` from :func:`resample_weights`.
    Returns:
        ``(R, K)``; NaN where a replicate drew no token of the bucket.
    """
    total = weights @ counts
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (weights @ loss_sums) / np.where(total > 0, total, 1.0), np.nan)


def percentile_interval(values: np.ndarray, level: float = 0.95) -> Tuple[np.ndarray, np.ndarray]:
    """Lower and upper percentile bounds over axis 0 (NaN replicates left out), each ``(K,)``."""
    tail = 100.0 * (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        low, high = np.nanpercentile(values, [tail, 100.0 - tail], axis=0)
    return low, high
