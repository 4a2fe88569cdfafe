"""The settings interactive segmentation starts from, per image kind (no model ships: each image's scribbles
train its own forest).

Pictures: the geodesic share and the cut's smoothness measured on the GrabCut pictures' scribbles; volumes:
measured on openkbp-hn CT from scribbled slices, where on 4-5 mm voxels a cut's boundary cost outweighs small
organs' evidence and shrinks them to their scribbles (so no cut), and classes are weighed equally because an
organ's scribbles are a few dozen voxels against thousands. `SegmentationForest`'s defaults are the pictures'
forest settings. Plain dicts: importing them costs nothing, which keeps the command's start-up fast.
"""

FOREST = {"n_trees": 20, "max_depth": 12, "min_samples_leaf": 3}
# Colour rounds: weight 0.3, 2 rounds, the best mean of both scribble sets of the 35 GrabCut pictures over 0.1-0.5
# and 1-3 rounds (`benchmarks/segment/grabcut.py --colour-grid`; chosen on four fifths of the pictures at a time,
# the held-out IoU is 0.811 / 0.903 against 0.768 / 0.897 without the rounds).
# stroke_regions (keep only each class's regions that hold one of its strokes) is off by default: it helps one
# object per class (the GrabCut pictures: set-1 0.820 -> 0.828, set-2 0.910 -> 0.939; sparse strokes on the
# Weizmann horses 0.649 -> 0.656) but would drop every instance a person did not paint (cells, where a few strokes
# stand for all of a kind), and on CT the extent bound already holds the organs (12 validation scans 0.747 either
# way). `--stroke-regions` turns it on.
PICTURE = {**FOREST, "class_weight": None, "geodesic_weight": 0.6, "smoothness": 50.0, "colour_weight": 0.3,
           "colour_rounds": 2, "stroke_regions": False}
# extent_margin: a class painted on separate slices reaches at most one spacing of them beyond its outermost ones
# (chosen among 0.5-2 on 12 validation scans of openkbp-hn: `benchmarks/segment/ct.py --fold 0 --validation
# --extent-margins ...`); pictures have no bound. slice_path_scale: geodesic steps across the scribbled slices count
# half (chosen among 0.3-1 on the same scans: `ct.py --fold 0 --validation --slice-path-scale ...`)
VOLUME = {**FOREST, "class_weight": "balanced", "geodesic_weight": 0.8, "smoothness": 0.0, "init_weight": 0.25,
          "colour_weight": 0.0, "colour_rounds": 0, "extent_margin": 1.0, "slice_path_scale": 0.5,
          "stroke_regions": False}
