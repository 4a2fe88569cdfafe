"""In-place selection and medians for numba kernels that take medians of votes.

numba's own np.median / np.partition compile for seconds on a command's first run with an empty cache; these
plain loops compile in a fraction of that and are shared by every kernel that takes medians of votes
(`imageforest.voting.votes`, a cascade's per-slice stage), so they compile once per process.
"""

from __future__ import annotations

from imageforest.kernels import njit


@njit(cache=True)
def select_kth(a, n, k):  # pragma: no cover - numba
    """The k-th smallest (0-based) of a[:n], reordering a[:n] in place so that a[:k] <= a[k] <= a[k + 1:n]
    (Wirth's selection with a median-of-three pivot)."""
    lo, hi = 0, n - 1
    while hi > lo:
        x, y, z = a[lo], a[(lo + hi) // 2], a[hi]
        pivot = max(min(x, y), min(max(x, y), z))
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[k]


@njit(cache=True)
def median_inplace(a, n):  # pragma: no cover - numba
    """Median of a[:n] (n >= 1, no NaN; reordered in place), equal to np.median's: the mean of the two middle
    values for even n."""
    upper = select_kth(a, n, n // 2)
    if n % 2:
        return upper
    lower = a[0]
    for i in range(1, n // 2):
        lower = max(lower, a[i])
    return 0.5 * (lower + upper)


@njit(cache=True)
def median_and_spread(a, n):  # pragma: no cover - numba
    """Median of a[:n] and its robust spread 1.4826 x MAD (the median absolute deviation): a[:n] is overwritten."""
    centre = median_inplace(a, n)
    for i in range(n):
        a[i] = abs(a[i] - centre)
    return centre, 1.4826 * median_inplace(a, n)
