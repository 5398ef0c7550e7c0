"""Programs as textbooks write them, shared by the test files that check different passes on
them (padded slices, the row carry)."""
import numpy as np


def cholesky_banachiewicz(A):
    """Cholesky-Banachiewicz, row by row."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(i + 1):
            s = np.dot(L[i, :j], L[j, :j])
            if i == j:
                L[i, j] = np.sqrt(A[i, i] - s)
            else:
                L[i, j] = (A[i, j] - s) / L[j, j]
    return L
