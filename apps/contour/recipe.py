"""The shipped contour model's settings: `OrganContourer`'s defaults, and `train-contour`'s.

Chosen on held-out openkbp-hn scans (see the README's "How well"): class-balanced leaves over-segmented every organ
two- to four-fold, so leaves keep the sampled counts and the background posterior is doubled before the arg-max;
half of the background voxels are drawn near the organs, where the decisions are.
"""

RECIPE = {
    "n_trees": 8, "max_depth": 16, "entangled_depths": (8, 12), "n_candidates": 100, "n_thresholds": 16,
    "class_weight": None, "min_samples_leaf": 8, "max_offset_mm": 60.0, "box_size_mm": (3.0, 30.0),
    "context_share": 0.5, "mean_share": 0.5, "local_share": 0.5, "margin_mm": 15.0, "crop_mm": 25.0,
    "jitter_mm": 6.0, "organ_points": 800, "background_points": 3000, "background_scale": 2.0,
    "largest_component": True,
}
