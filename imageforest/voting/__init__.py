"""Vote aggregation for regression-voting applications (organ boxes, object centres, joints).

`Votes` groups an image's leaf ids by leaf; `ranked_order` ranks a model's leaves by how certain they are of each
output; `ranked_medians` turns the most certain leaves' votes into medians and robust spreads; `select_kth`,
`median_inplace` and `median_and_spread` are the in-place selections numba kernels share.
"""

from __future__ import annotations

from imageforest.voting.selection import median_and_spread, median_inplace, select_kth
from imageforest.voting.votes import Votes, ranked_medians, ranked_order

__all__ = ["Votes", "median_and_spread", "median_inplace", "ranked_medians", "ranked_order", "select_kth"]
