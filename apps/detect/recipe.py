"""The settings of the shipped horse detector (`python -m imageforest.apps.detect.scripts.train_default`).

`imageforest train-detector` and `train_detector` start from them, and `HoughForestDetector`'s defaults are the same
(its seed aside), so that a detector trained on a user's own boxes gets the settings measured on the Weizmann horses
unless a flag says otherwise. A plain dict: importing it costs nothing, which keeps the command's start-up fast.
"""

RECIPE = {"n_trees": 10, "max_depth": 15, "n_candidates": 200, "patches_per_image": 400, "variant": "hough",
          "loss": "tangent", "random_state": 0}
