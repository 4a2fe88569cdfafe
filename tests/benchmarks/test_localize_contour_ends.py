"""The contour-end gap of benchmarks/localize/contour_ends.py on small synthetic volumes."""

import numpy as np

from benchmarks.localize.contour_ends import contour_end_gap


def _volume(tissue_from: int, organ_from: int, organ_to: int = 25) -> tuple[np.ndarray, np.ndarray]:
    ct = np.full((30, 12, 12), -1000.0, dtype=np.float32)
    ct[tissue_from:, 3:9, 3:9] = 40.0  # the scanned neck ends at slice `tissue_from`
    labels = np.zeros(ct.shape, dtype=np.uint8)
    labels[organ_from:organ_to, 5:7, 5:7] = 2
    return ct, labels


def test_contour_stopping_above_the_scanned_column_has_that_gap():
    ct, labels = _volume(tissue_from=4, organ_from=12)
    gap, z0 = contour_end_gap(ct, labels, 2, slice_mm=2.5)
    assert z0 == 12
    assert gap == (12 - 4) * 2.5


def test_contour_running_to_the_scan_end_has_no_gap():
    ct, labels = _volume(tissue_from=4, organ_from=4)
    assert contour_end_gap(ct, labels, 2, slice_mm=2.5)[0] == 0.0


def test_air_below_the_column_stops_the_gap_even_if_other_columns_go_on():
    ct, labels = _volume(tissue_from=10, organ_from=12)
    ct[:10, 0:2, 0:2] = 40.0  # tissue elsewhere in the lower slices (a shoulder) is not the organ's column
    assert contour_end_gap(ct, labels, 2, slice_mm=2.0)[0] == 4.0


def test_organ_not_contoured_gives_nan():
    ct, labels = _volume(tissue_from=4, organ_from=12)
    gap, z0 = contour_end_gap(ct, labels, 5, slice_mm=2.5)
    assert np.isnan(gap) and z0 == -1
