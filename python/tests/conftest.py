import numpy as np
import pytest


def tree_mean(leaves):
    """The mean as nablac sums it (TAPE-FORMAT.md, Results): one balanced pairwise tree over
    the leaves zero-padded to a power of two, then divided by the path count."""
    x = np.asarray(leaves, dtype=np.float64)
    n = len(x)
    size = 1
    while size < n:
        size *= 2
    x = np.concatenate([x, np.zeros(size - n)])
    while len(x) > 1:
        x = x[0::2] + x[1::2]
    return x[0] / n


@pytest.fixture
def tree():
    return tree_mean
