"""Model files: .npz + JSON metadata, no pickle, validated on load; determinism of the bytes."""

import io
import json
import zipfile

import numpy as np
import pytest

from imageforest import ClassificationForest, ModelFormatError, RegressionForest
from imageforest.toy_data import gap_regression, spirals


@pytest.fixture(scope="module")
def data():
    return spirals(80, 3, seed=0)


@pytest.mark.parametrize("weak_learner", ["axis", "oblique", "conic"])
def test_classification_round_trip(tmp_path, data, weak_learner):
    X, y = data
    forest = ClassificationForest(n_trees=10, weak_learner=weak_learner, random_state=0).fit(X, y)
    path = tmp_path / "model.npz"
    forest.save(path)
    loaded = ClassificationForest.load(path)
    assert np.array_equal(loaded.predict_proba(X), forest.predict_proba(X))
    assert np.array_equal(loaded.classes_, forest.classes_)
    assert loaded.get_params() == forest.get_params()
    with np.load(path, allow_pickle=False) as npz:
        meta = json.loads(npz["__metadata__"].tobytes())
    assert meta["format_version"] == 1 and meta["task"] == "classification"
    assert meta["family"]["kind"] == weak_learner


@pytest.mark.parametrize("leaf_model", ["constant", "gaussian", "linear"])
def test_regression_round_trip(tmp_path, leaf_model):
    X, y = gap_regression(80)
    forest = RegressionForest(n_trees=8, leaf_model=leaf_model, random_state=0).fit(X, y)
    forest.save(tmp_path / "r.npz")
    loaded = RegressionForest.load(tmp_path / "r.npz")
    assert np.array_equal(loaded.predict(X), forest.predict(X))
    if leaf_model != "constant":
        assert np.allclose(loaded.predict_distribution(X).std(), forest.predict_distribution(X).std())


def test_same_seed_same_bytes_whatever_the_thread_count(tmp_path, data):
    X, y = data
    paths = []
    for n_jobs in (1, 2):
        for structure in ("tree", "fern"):
            path = tmp_path / f"m{n_jobs}{structure}.npz"
            ClassificationForest(n_trees=8, structure=structure, bootstrap=True, weak_learner="oblique",
                                 max_depth=8, random_state=7, n_jobs=n_jobs).fit(X, y).save(path)
            paths.append(path)
    assert paths[0].read_bytes() == paths[2].read_bytes()
    assert paths[1].read_bytes() == paths[3].read_bytes()
    other = tmp_path / "other.npz"
    ClassificationForest(n_trees=8, structure="tree", bootstrap=True, weak_learner="oblique", max_depth=8,
                         random_state=8).fit(X, y).save(other)
    assert other.read_bytes() != paths[0].read_bytes()


def test_regression_determinism_across_threads(tmp_path):
    X, y = gap_regression(200)
    a = RegressionForest(n_trees=6, random_state=3, n_jobs=1).fit(X, y)
    b = RegressionForest(n_trees=6, random_state=3, n_jobs=2).fit(X, y)
    a.save(tmp_path / "a.npz")
    b.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_damaged_and_foreign_files_are_refused(tmp_path, data):
    X, y = data
    forest = ClassificationForest(n_trees=4, random_state=0).fit(X, y)
    good = tmp_path / "good.npz"
    forest.save(good)

    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ModelFormatError):
        ClassificationForest.load(truncated)

    text = tmp_path / "notes.npz"
    text.write_text("hello")
    with pytest.raises(ModelFormatError):
        ClassificationForest.load(text)

    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.arange(3))
    with pytest.raises(ModelFormatError, match="metadata"):
        ClassificationForest.load(foreign)

    with pytest.raises(ModelFormatError, match=r"ClassificationForest"):
        RegressionForest.load(good)

    with pytest.raises(FileNotFoundError):
        ClassificationForest.load(tmp_path / "missing.npz")


def _rewrite(src, dst, edit):
    with np.load(src, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    edit(arrays)
    np.savez(dst, **arrays)


def test_corrupted_structure_is_caught_before_traversal(tmp_path, data):
    X, y = data
    good = tmp_path / "good.npz"
    ClassificationForest(n_trees=4, random_state=0).fit(X, y).save(good)

    def bad_child(a):
        a["forest.child"] = a["forest.child"].copy()
        a["forest.child"][0] = 10 ** 6

    def bad_version(a):
        meta = json.loads(a["__metadata__"].tobytes())
        meta["format_version"] = 99
        a["__metadata__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)

    def bad_feature(a):
        a["forest.params"] = a["forest.params"].copy()
        a["forest.params"][0, 0] = 57

    def missing_leaves(a):
        del a["leaf.posterior"]

    def shared_subtree(a):  # tree 1's root adopts tree 0's children: indices stay valid, the walk would not
        a["forest.child"] = a["forest.child"].copy()
        a["forest.child"][1] = a["forest.child"][0]

    for i, edit in enumerate([bad_child, bad_version, bad_feature, missing_leaves, shared_subtree]):
        path = tmp_path / f"bad{i}.npz"
        _rewrite(good, path, edit)
        with pytest.raises(ModelFormatError):
            ClassificationForest.load(path)


def test_no_pickle_inside(tmp_path, data):
    X, y = data
    path = tmp_path / "m.npz"
    ClassificationForest(n_trees=3, random_state=0).fit(X, np.array(["x", "y", "z"])[y]).save(path)
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            header = zf.read(name)[:128]
            assert b"'descr': '|O'" not in header and b"'descr': 'O'" not in header


def test_save_is_atomic_and_never_leaves_partial_files(tmp_path, data):
    X, y = data
    forest = ClassificationForest(n_trees=3, random_state=0).fit(X, y)
    with pytest.raises(FileNotFoundError):
        forest.save(tmp_path / "no_such_dir" / "m.npz")
    forest.save(tmp_path / "m.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


def test_preorder_layout_matches_a_recursive_walk(data):
    """The traversal tables' node order: each tree depth first, left child first, trees one after another."""
    X, y = data
    arrays = ClassificationForest(n_trees=4, max_depth=6, random_state=0).fit(X, y).forest_
    order = []

    def walk(j):
        order.append(j)
        if arrays.child[j] >= 0:
            walk(int(arrays.child[j]))
            walk(int(arrays.child[j]) + 1)

    for root in arrays.tree_root:
        walk(int(root))
    pos = arrays._preorder_positions()
    assert np.array_equal(np.argsort(pos), order)
    assert np.array_equal(arrays.leaves_depth_first(), [j for j in order if arrays.child[j] < 0])


def _meta(arrays):
    return json.loads(arrays["__metadata__"].tobytes().decode())


def _set_meta(arrays, meta):
    arrays["__metadata__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)


def test_crafted_files_end_in_model_format_errors(tmp_path, data):
    """What an attacker's file tries: a bare .npy, a member declaring gigabytes (refused from its header, before
    anything is inflated), metadata nested 100,000 deep, an object array, hyper-parameters of the wrong type."""
    X, y = data
    good = tmp_path / "good.npz"
    ClassificationForest(n_trees=3, random_state=0).fit(X, y).save(good)

    bare = tmp_path / "bare.npz"
    np.save(tmp_path / "bare.npy", np.arange(4))
    (tmp_path / "bare.npy").rename(bare)
    with pytest.raises(ModelFormatError, match=r"not an \.npz"):
        ClassificationForest.load(bare)

    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                      "shape": (60000, 60000)})
        zf.writestr("big.npy", header.getvalue() + b"\0" * 1024)
    with pytest.raises(ModelFormatError, match="declare over"):
        ClassificationForest.load(bomb)

    deep = tmp_path / "deep.npz"
    _rewrite(good, deep, lambda a: a.__setitem__("__metadata__", np.frombuffer(
        ("[" * 100_000 + "]" * 100_000).encode(), dtype=np.uint8)))
    with pytest.raises(ModelFormatError, match="metadata"):
        ClassificationForest.load(deep)

    def wrong_type(arrays):
        meta = _meta(arrays)
        meta["hyper_parameters"]["n_trees"] = "many"
        _set_meta(arrays, meta)

    typed = tmp_path / "typed.npz"
    _rewrite(good, typed, wrong_type)
    with pytest.raises(ModelFormatError, match="n_trees must be"):
        ClassificationForest.load(typed)


def test_random_byte_flips_end_in_a_model_or_a_model_format_error(tmp_path, data):
    """A fuzz of the loader: every damaged file either loads into a working model or is refused in one line."""
    X, y = data
    good = tmp_path / "good.npz"
    ClassificationForest(n_trees=3, max_depth=4, random_state=0).fit(X, y).save(good)
    raw = bytearray(good.read_bytes())
    rng = np.random.default_rng(0)
    outcomes = {"refused": 0, "loaded": 0}
    for trial in range(150):
        damaged = bytearray(raw)
        for at in rng.integers(0, len(raw), int(rng.integers(1, 4))):
            damaged[at] ^= int(rng.integers(1, 256))
        path = tmp_path / f"flip{trial}.npz"
        path.write_bytes(bytes(damaged))
        try:
            model = ClassificationForest.load(path)
        except ModelFormatError:
            outcomes["refused"] += 1
            continue
        model.predict_proba(X[:5])  # whatever loaded must also run
        outcomes["loaded"] += 1
    assert outcomes["refused"] > 0


def test_random_array_mutations_never_crash_the_reader(tmp_path, data):
    """A fuzz of the arrays themselves (children, leaves, parameters, thresholds, leaf models, class names): each
    mutated file is refused with ModelFormatError, or loads into a model whose predictions are probabilities."""
    from imageforest import ImageForestError

    X, y = data
    good = tmp_path / "good.npz"
    ClassificationForest(n_trees=3, max_depth=5, random_state=0).fit(X, y).save(good)
    n_classes = np.unique(y).size
    with np.load(good, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    names = sorted(k for k in arrays if k != "__metadata__" and arrays[k].dtype.kind in "biuf" and arrays[k].size)
    specials = [-1, 0, 1, 2**31 - 1, -(2**31), 7, np.nan, np.inf, -np.inf, 1e30, -1e30, 0.5]
    rng = np.random.default_rng(1)
    refused = 0
    for trial in range(150):
        mutated = {k: v.copy() for k, v in arrays.items()}
        name = names[int(rng.integers(len(names)))]
        flat = mutated[name].reshape(-1)
        for at in rng.integers(0, flat.size, int(rng.integers(1, 4))):
            value = specials[int(rng.integers(len(specials)))]
            with np.errstate(invalid="ignore", over="ignore"):
                flat[at] = np.array(value).astype(flat.dtype) if flat.dtype.kind != "b" else bool(value == value)
        path = tmp_path / f"m{trial}.npz"
        np.savez(path, **mutated)
        try:
            model = ClassificationForest.load(path)
            proba = model.predict_proba(X[:20])
        except ImageForestError:
            refused += 1
            continue
        assert proba.shape == (20, n_classes) and np.all(np.isfinite(proba))
        assert np.all((proba >= 0) & (proba <= 1 + 1e-6))
    assert refused > 0
