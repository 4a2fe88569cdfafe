"""The training parameters of the default model (`python -m imageforest.apps.localize.scripts.train_default`).

`imageforest train-localizer` starts from them too, so a model trained on users' own scans gets the settings that
were cross-validated on openkbp-hn unless a flag says otherwise. A plain dict: importing it costs nothing, which
keeps the command's start-up fast.
"""

PARAMETERS = dict(spacing_mm=4.0, n_trees=10, max_depth=12, n_candidates=60, n_thresholds=12, min_samples_leaf=20,
                  max_offset_mm=80.0, box_size_mm=(4.0, 40.0), points_per_scan=800, crops_per_scan=1,
                  vote_points=20_000, vote_fraction=0.02, edge_prior_share=0.25, presence_fraction=0.3,
                  min_visible=0.5, refine_spacing_mm=2.0, refine_trees=4, refine_min_samples_leaf=(50, 30),
                  refine_margin_mm=(10.0, 6.0), refine_reach_mm=(30.0, 20.0), refine_jitter_mm=(6.0, 3.0),
                  slice_elongation=4.0, slice_trees=4, slice_min_samples_leaf=30, slice_margin_mm=10.0,
                  slice_reach_mm=20.0, slice_points=800, slice_fraction=0.1, slice_window=5, random_state=2026)
