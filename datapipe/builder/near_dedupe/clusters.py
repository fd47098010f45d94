"""Clusters of near-duplicates: the connected components of the pairs that pass the estimate, each
kept at its first document in source order."""

from __future__ import annotations

import numpy as np


def first_of_cluster(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(documents, first): every document of ``pairs`` (edges between global numbers) and the
    least number in its connected component, both ascending by document."""
    if not len(pairs):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    nodes, index = np.unique(pairs, return_inverse=True)
    index = index.reshape(-1, 2)
    label = np.arange(len(nodes))
    while True:  # labels flow to the least of each edge, then jump along their own chains
        least = np.minimum(label[index[:, 0]], label[index[:, 1]])
        before = label.copy()
        np.minimum.at(label, index[:, 0], least)
        np.minimum.at(label, index[:, 1], least)
        while True:
            jumped = label[label]
            if (jumped == label).all():
                break
            label = jumped
        if (label == before).all():
            return nodes, nodes[label]
