"""The entangled forest's prior maps: the first stage's context tests read maps the caller gives, prediction
needs the same maps, and a forest without them refuses them."""

import numpy as np
import pytest

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.entangled import EntangledForest

SETTINGS = {"n_trees": 4, "max_depth": 6, "entangled_depths": (3,), "n_candidates": 16, "max_offset_mm": 4,
            "box_size_mm": (1, 2), "min_samples_leaf": 2, "context_share": 0.5, "random_state": 0}


def _noise_and_prior(seed):
    """A picture of pure noise whose labels only a prior map tells: class 1 where the prior is high."""
    rng = np.random.default_rng(seed)
    img = rng.normal(0, 1, (40, 40)).astype(np.float32)
    prior = np.zeros((1, 40, 40), np.float32)
    prior[0, 8:30, 12:26] = 0.8
    truth = (prior[0] > 0.5).astype(int)
    return img, prior, truth


def test_the_first_stage_reads_the_prior_and_prediction_needs_it():
    train = [_noise_and_prior(s) for s in range(3)]
    pts = np.array([[i, y, x] for i in range(3) for y in range(0, 40, 2) for x in range(0, 40, 2)], np.int32)
    labels = np.array([train[i][2][y, x] for i, y, x in pts])
    with_prior = EntangledForest(prior_maps=True, **SETTINGS).fit([t[0] for t in train], pts, labels,
                                                                  priors=[t[1] for t in train])
    without = EntangledForest(**SETTINGS).fit([t[0] for t in train], pts, labels)
    img, prior, truth = _noise_and_prior(7)
    right = (with_prior.predict_proba_image(img, prior=prior).array.argmax(-1) == truth).mean()
    blind = (without.predict_proba_image(img).array.argmax(-1) == truth).mean()
    assert right > 0.97 and blind < 0.9, (right, blind)
    assert with_prior.context_use()[0, 1] > 0  # the first stage read the prior
    assert without.context_use()[0, 1] == 0
    # point-wise prediction takes the same maps
    some = np.array([[0, 10, 15], [0, 35, 35]], np.int32)
    assert np.array_equal(with_prior.predict([img], some, priors=[prior]), [1, 0])
    with pytest.raises(InvalidInputError, match="reads prior maps"):
        with_prior.predict_proba_image(img)
    with pytest.raises(InvalidInputError, match="takes no prior maps"):
        without.predict_proba_image(img, prior=prior)
    with pytest.raises(InvalidInputError, match="prior 0 must be"):
        with_prior.predict_proba_image(img, prior=prior[:, :20])
    with pytest.raises(InvalidInputError, match="NaN"):
        with_prior.predict_proba_image(img, prior=np.full_like(prior, np.nan))
    with pytest.raises(InvalidInputError, match="one prior per image"):
        EntangledForest(prior_maps=True, **SETTINGS).fit([t[0] for t in train], pts, labels, priors=[train[0][1]])


def test_prior_maps_survive_the_model_file(tmp_path):
    img, prior, truth = _noise_and_prior(0)
    pts = np.array([[0, y, x] for y in range(0, 40, 2) for x in range(0, 40, 2)], np.int32)
    forest = EntangledForest(prior_maps=True, **SETTINGS).fit([img], pts, truth[pts[:, 1], pts[:, 2]],
                                                              priors=[prior])
    forest.save(tmp_path / "f.npz")
    loaded = EntangledForest.load(tmp_path / "f.npz")
    assert loaded.prior_maps is True
    assert np.array_equal(loaded.predict_proba_image(img, prior=prior).array,
                          forest.predict_proba_image(img, prior=prior).array)
