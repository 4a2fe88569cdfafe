"""The shipped contour model's settings: `OrganContourer`'s defaults, and `train-contour`'s."""

RECIPE = {
    "n_trees": 8, "max_depth": 16, "entangled_depths": (8, 12), "n_candidates": 100, "n_thresholds": 16,
    "min_samples_leaf": 8, "max_offset_mm": 60.0, "box_size_mm": (3.0, 30.0), "context_share": 0.5,
    "mean_share": 0.5, "margin_mm": 15.0, "crop_mm": 25.0, "jitter_mm": 6.0, "organ_points": 1500,
    "background_points": 6000, "background_scale": 1.0, "largest_component": True,
}
