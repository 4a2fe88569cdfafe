"""The shipped contour model's settings: `OrganContourer`'s defaults, and `train-contour`'s.

Chosen on held-out openkbp-hn scans of the training folds (see the README's "How well"): class-balanced leaves
over-segmented every organ two- to four-fold, so leaves keep the sampled counts; half of the background voxels are
drawn near the organs, where the decisions are. The box atlas's weight and the background scale act after the
forest and were chosen per organ (`benchmarks/contour/tune.py`: 40 training scans, 30 validation scans of the
other folds); organs a recipe does not name take the best single setting, which is also the estimator's default.
The posterior maps are smoothed over 2 mm (sigma) before the labels are chosen: on 30 scans that the fold-0 forest
never saw (outside its 80 training scans and its 40 test scans) 0, 1, 1.5, 2, 2.5, 3 and 5 mm gave mean Dice 0.673,
0.674, 0.680, 0.683, 0.674, 0.653 and 0.494 (wider smoothing erases the cord and the mandible). Model files saved
before the setting existed load with 0, so that they predict as they did.
"""

from imageforest.apps.contour.model import CT_WINDOWS_HU

RECIPE = {
    "n_trees": 8, "max_depth": 16, "entangled_depths": (), "n_candidates": 100, "n_thresholds": 16,
    "class_weight": None, "min_samples_leaf": 8, "max_offset_mm": 60.0, "box_size_mm": (3.0, 30.0),
    "context_share": 0.5, "mean_share": 0.5, "local_share": 0.5, "margin_mm": 15.0, "crop_mm": 25.0,
    "jitter_mm": 6.0, "organ_points": 800, "background_points": 3000, "background_scale": 1.0,
    "largest_component": True, "prior_weight": 0.5, "atlas_bins": 20, "posterior_smoothing_mm": 2.0,
    "prior_maps": True, "image_windows": CT_WINDOWS_HU,
    "cut_smoothness": 0.0, "min_expected_share": 0.05,
    "absence_logit": (18.6, -0.9903, -6.228, -28.54, 0.4786), "absence_threshold": 0.95,
    "posterior_calibration": None,
}
# An organ holding under 5% of the voxels its box atlas expects inside the scan is reported absent
# (`benchmarks/contour/out_of_view.py --split validation --cases 82 --full --recipe-settings --shares 0,0.05,0.1,0.3`:
# the fold-0 forest on the 82 scans of the training folds it never saw, head and neck slabs and whole scans). At 0,
# 0.05, 0.1 and 0.3: organs absent from a slab given no voxel 95.3%, 95.8%, 96.0%, 96.5%; the slabs' score (1 for
# an absent organ left empty, the Dice of one partly in view) 0.7001, 0.7023, 0.7023, 0.6986; whole scans' mean Dice
# 0.7022, 0.7022, 0.7021, 0.7013. The smaller of the two best is kept. The misses left are parotids that the
# localizer finds on neck slabs cut below them: a gland a third to two thirds the parotid's expected size.
# The absence check (`absence_logit`, `absence_threshold`; `benchmarks/contour/presence.py --model
# bench_out/cv80/recipe_fold0.npz`): a logistic regression of "the organ is not in the scan" on the organ's voxels
# against its atlas's count (log), its mean posterior share, and the localizer's presence probability and mean wall
# spread, fitted on the 812 organs given voxels in the head and neck slabs and whole scans of the 82 validation
# scans (9 of them absent; the fold-0 forest and a localizer trained on the same 80 scans, neither of which saw
# them); its threshold chosen among 0.5-0.95 by 5-fold cross-validation there. On fold 0's 40 test scans, absent
# organs left empty 96.9% against 95.3% without it (193 slab-organ pairs), organs partly in view Dice 0.451
# against 0.454, whole scans unchanged (0.7023). The localizer's probability weighs most: on a neck slab it still
# boxes the parotids, less sure (0.52-0.73 against 0.9 on average) and with scattered votes.
# Intensity windows as further CT channels (air, soft tissue, bone: a box's mean over a window is the share of its
# voxels above that tissue's level): on the 30 validation scans below 0.696 against 0.686 without (the cord +0.06);
# on fold 0's 40 test scans with unseen boxes 0.676 against 0.661, for 27% more training time.
# The box atlas as the forest's first context (`prior_maps`) and a single stage (no entangled stages): on 30
# validation scans of the training folds (forests grown on 40 others, per-organ settings below), mean Dice 0.655
# for the earlier recipe (entangled stages at depths 8 and 12, no prior maps), 0.677 with the atlas as context
# and the same stages, 0.686 with the atlas as context and one stage. The later stages' posterior tests added
# nothing the atlas and the CT do not already say, as in every earlier comparison; one stage is also 20% faster.

# Per organ, by name: the settings that served each organ best on those validation scans (`tune.py --train-cases
# 40 --val-cases 30 --set prior_maps=true --set 'entangled_depths=[]'`, the grid 0/0.5/1 x
# 1/1.5): the brainstem and the parotids, whose boxes fix them best, take the atlas at full weight.
PER_ORGAN = {
    "prior_weight": {"Brainstem": 1.0, "SpinalCord": 0.5, "RightParotid": 1.0, "LeftParotid": 1.0,
                     "Esophagus": 0.5, "Larynx": 0.5, "Mandible": 0.5},
    "background_scale": {"Brainstem": 1.5, "SpinalCord": 1.0, "RightParotid": 1.5, "LeftParotid": 1.5,
                         "Esophagus": 1.0, "Larynx": 1.0, "Mandible": 1.5},
    # The final graph cut, per organ (`benchmarks/contour/regularize.py`, the fold-0 forest with windows on the 30
    # scans of the training folds it never saw; grid 0, 0.25, 0.5, 1, 2, 4; a cut where it beat none by more than
    # 0.005): the mandible gains 0.04 at 2 and the larynx 0.02 at 1; the cord and the oesophagus lose under any cut
    # (a thin organ's boundary costs more than its evidence).
    "cut_smoothness": {"Brainstem": 0.0, "SpinalCord": 0.0, "RightParotid": 0.5, "LeftParotid": 0.0,
                       "Esophagus": 0.0, "Larynx": 1.0, "Mandible": 2.0},
    # The written posteriors' calibration, (a, b) of sigmoid(a logit(s) + b) per organ (`benchmarks/contour/
    # calibrate.py --model bench_out/cv80/recipe_fold0.npz --localizer bench_out/loc_fold0_80.npz`: fitted on the
    # 42 scans of the training folds that the fold-0 forest and its localizer never saw, every voxel of the region
    # the forest ran over). On fold 0's 40 test scans the expected calibration error (10 bins) went from 0.025 to
    # 0.007 (the larynx 0.057 -> 0.012) and each contour's mean posterior came within 0.07-0.19 of the share of its
    # voxels the reference calls that organ (median per organ; 0.12-0.34 before). The forest's shares over-state
    # the organs: of the voxels given 0.55, 25-38% were the organ. The labels do not change.
    "posterior_calibration": {"Brainstem": (0.976, -1.009), "SpinalCord": (1.632, -0.928),
                              "RightParotid": (0.812, -0.713), "LeftParotid": (0.849, -0.415),
                              "Esophagus": (0.644, -1.248), "Larynx": (0.740, -1.080), "Mandible": (1.853, -0.635)},
}
IDENTITY = {"posterior_calibration": (1.0, 0.0)}  # an organ the recipe does not name: its shares as they are


def recipe_for(organs) -> dict:
    """The recipe for a model of `organs`: per-organ settings where the recipe names the organ, the single
    setting otherwise (one value when no organ is named)."""
    out = dict(RECIPE)
    for key, by_name in PER_ORGAN.items():
        if any(o in by_name for o in organs):
            out[key] = tuple(by_name.get(o, IDENTITY.get(key, RECIPE[key])) for o in organs)
    return out
