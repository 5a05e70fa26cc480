"""Cluster one MoE layer's experts and keep one representative per cluster.

``choose_kept_experts`` clusters expert signatures with scikit-learn's agglomerative clustering
(average linkage, Euclidean distance on the signatures, which the feature methods L2-normalise), one
cluster per kept expert. Grouped routers (DeepSeek-V3 style) are clustered inside each routing group
with the same number of clusters per group, so every group keeps the same count. The representative
is picked by a registered selector: ``medoid`` (the member closest to the rest of its cluster) or
``frequency`` (the most often routed member; needs calibration statistics).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeproxy.errors import InputError


@dataclass
class LayerClusters:
    kept: list[int]  # original expert ids kept, ascending (their new ids are their positions)
    labels: list[int]  # cluster id of every original expert
    members: list[list[int]]  # members of each cluster, in the order of ``kept``


def _medoid(features: np.ndarray, members: np.ndarray, frequency: np.ndarray | None) -> int:
    sub = features[members]
    dist = np.linalg.norm(sub[:, None, :] - sub[None, :, :], axis=-1).sum(axis=1)
    return int(members[int(np.argmin(dist))])


def _most_frequent(features: np.ndarray, members: np.ndarray, frequency: np.ndarray | None) -> int:
    if frequency is None:
        raise InputError("--select frequency needs routing statistics: use --method activations with --calibration")
    return int(members[int(np.argmax(frequency[members]))])


SELECTORS = {"medoid": _medoid, "frequency": _most_frequent}


def _cluster(features: np.ndarray, n_clusters: int) -> np.ndarray:
    n = features.shape[0]
    if n_clusters >= n:
        return np.arange(n)
    if n_clusters == 1:
        return np.zeros(n, dtype=int)
    from sklearn.cluster import AgglomerativeClustering

    return AgglomerativeClustering(n_clusters=n_clusters, linkage="average", metric="euclidean").fit_predict(features)


def choose_kept_experts(
    features: np.ndarray,
    kept: int,
    n_group: int = 1,
    select: str = "medoid",
    frequency: np.ndarray | None = None,
) -> LayerClusters:
    """Cluster ``features`` [E, D] into ``kept`` clusters (``kept // n_group`` per routing group)."""
    if select not in SELECTORS:
        raise InputError(f"unknown --select {select!r}; choose one of {', '.join(SELECTORS)}")
    features = np.asarray(features, dtype=np.float64)
    if not np.all(np.isfinite(features)):
        raise InputError("expert signatures contain NaN or inf (are the checkpoint's expert weights finite?)")
    e = features.shape[0]
    group_size, per_group = e // n_group, kept // n_group
    labels = np.empty(e, dtype=int)
    reps: list[tuple[int, list[int]]] = []
    for g in range(n_group):
        ids = np.arange(g * group_size, (g + 1) * group_size)
        local = _cluster(features[ids], per_group)
        for c in range(per_group):
            members = ids[local == c]
            labels[members] = len(reps)
            reps.append((SELECTORS[select](features, members, frequency), sorted(int(m) for m in members)))
    order = sorted(range(len(reps)), key=lambda i: reps[i][0])
    relabel = {old: new for new, old in enumerate(order)}
    return LayerClusters(
        kept=[reps[i][0] for i in order],
        labels=[relabel[int(l)] for l in labels],
        members=[reps[i][1] for i in order],
    )
