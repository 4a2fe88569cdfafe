"""Several named forests in one model file (`imageforest.estimators.files`)."""

from pathlib import Path

import numpy as np
import pytest

from imageforest import ClassificationForest, RegressionForest
from imageforest.estimators.files import load_forests, save_forests
from imageforest.exceptions import ModelFormatError
from imageforest.forest.serialization import load_model, save_model

RNG = np.random.default_rng(0)
X = RNG.normal(size=(200, 4))
Y = (X[:, 0] > 0).astype(int)


@pytest.fixture(scope="module")
def forests():
    return {"stage/coarse": ClassificationForest(n_trees=3, random_state=0).fit(X, Y),
            "stage/fine.1": RegressionForest(n_trees=2, max_depth=5, random_state=1).fit(X, X[:, 1])}


def test_named_forests_round_trip_with_shared_metadata(forests, tmp_path: Path):
    save_forests(tmp_path / "m.npz", forests, {"organs": ["a", "b"]})
    meta, arrays = load_model(tmp_path / "m.npz")
    assert sorted(meta["forests"]) == ["stage/coarse", "stage/fine.1"]
    assert all(k.split("/")[-1].startswith(("forest.", "leaf.", "family.")) or "/" in k for k in arrays)
    shared, loaded = load_forests(tmp_path / "m.npz", [ClassificationForest, RegressionForest])
    assert shared == {"organs": ["a", "b"]}
    np.testing.assert_array_equal(loaded["stage/coarse"].predict_proba(X), forests["stage/coarse"].predict_proba(X))
    np.testing.assert_array_equal(loaded["stage/fine.1"].predict(X), forests["stage/fine.1"].predict(X))
    # the same forests give the same bytes
    save_forests(tmp_path / "again.npz", forests, {"organs": ["a", "b"]})
    assert (tmp_path / "m.npz").read_bytes() == (tmp_path / "again.npz").read_bytes()


def test_files_of_named_forests_are_checked(forests, tmp_path: Path):
    save_forests(tmp_path / "m.npz", forests)
    with pytest.raises(ModelFormatError, match="'RegressionForest', which this reader does not take"):
        load_forests(tmp_path / "m.npz", [ClassificationForest])
    meta, arrays = load_model(tmp_path / "m.npz")
    stray = {**arrays, "other/forest.child": arrays["stage/coarse/forest.child"]}
    save_model(tmp_path / "stray.npz", meta, stray)
    with pytest.raises(ModelFormatError, match="belongs to no forest"):
        load_forests(tmp_path / "stray.npz", [ClassificationForest, RegressionForest])
    damaged = {**arrays, "stage/fine.1/forest.child": arrays["stage/fine.1/forest.child"][:-1]}
    save_model(tmp_path / "damaged.npz", meta, damaged)
    with pytest.raises(ModelFormatError, match=r"forest stage/fine\.1"):
        load_forests(tmp_path / "damaged.npz", [ClassificationForest, RegressionForest])
    save_model(tmp_path / "one.npz", *forests["stage/coarse"].to_record())
    with pytest.raises(ModelFormatError, match="no named forests"):
        load_forests(tmp_path / "one.npz", [ClassificationForest])
    with pytest.raises(ValueError, match="forest name"):
        save_forests(tmp_path / "x.npz", {"../up": forests["stage/coarse"]})
    with pytest.raises(ValueError, match="reserved"):
        save_forests(tmp_path / "x.npz", forests, {"forests": 1})
