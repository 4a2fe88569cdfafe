"""The settings of the shipped body model (`python -m imageforest.apps.bodyparts.scripts.train_default`).

`imageforest train-bodyparts` and `train_bodyparts` start from them, and `BodyPartsForest`'s defaults are the same
(its seed aside). Every tree grows on its own third of the pixels (Shotton et al. give every tree its own images):
36,000 bodies between the trees at the fit time of 12,000 bodies per tree. Leaves of at least 24 pixels keep the
file within 20 MB (leaves of 3 pixels took 40 MB on the rendered bodies, for the same mean per-part accuracy). A
plain dict: importing it costs nothing, which keeps the command's start-up fast.
"""

RECIPE = {"n_trees": 3, "max_depth": 20, "n_candidates": 400, "pixels_per_image": 375, "max_samples": 1 / 3,
          "reach_m": 0.6, "min_samples_leaf": 24, "class_weight": "balanced", "threshold_sampling": "data",
          "random_state": 0}
