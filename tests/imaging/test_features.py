"""Image features against brute-force numpy, and apply against a plain traversal."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imageforest.forest.storage import ForestArrays
from imageforest.imaging import BoxFeatures, DepthProbes, ImageClassificationForest, ImageStack, integral_image
from imageforest.imaging.features import check_points
from imageforest.imaging.io import Image


def brute_box_mean(vol, spacing_zyx, p, offset, size, fill):
    lo, hi = [], []
    for a in range(3):
        lo.append(p[a] + int(np.floor((offset[a] - size[a] / 2) / spacing_zyx[a] + 0.5)))
        hi.append(p[a] + int(np.floor((offset[a] + size[a] / 2) / spacing_zyx[a] + 0.5)))
        hi[a] = max(hi[a], lo[a] + 1)
    lo = [max(v, 0) for v in lo]
    hi = [min(h, n) for h, n in zip(hi, vol.shape, strict=True)]
    if any(h <= v for v, h in zip(lo, hi, strict=True)):
        return fill
    return vol[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]].astype(np.float64).mean()


def test_integral_image_is_exact_for_int16():
    rng = np.random.default_rng(0)
    vol = rng.integers(-1024, 3072, (40, 64, 48)).astype(np.int16)
    table = integral_image(vol)
    assert table.shape == (41, 65, 49) and table.dtype == np.float64
    assert table[-1, -1, -1] == vol.astype(np.int64).sum()
    for _ in range(50):
        z0, y0, x0 = (rng.integers(0, s) for s in vol.shape)
        z1, y1, x1 = (rng.integers(a + 1, s + 1) for a, s in zip((z0, y0, x0), vol.shape, strict=True))
        s = (table[z1, y1, x1] - table[z0, y1, x1] - table[z1, y0, x1] - table[z1, y1, x0] + table[z0, y0, x1]
             + table[z0, y1, x0] + table[z1, y0, x0] - table[z0, y0, x0])
        assert s == vol[z0:z1, y0:y1, x0:x1].astype(np.int64).sum()
    assert integral_image(vol[0]).shape == (65, 49)


@pytest.mark.parametrize("difference", [False, True])
def test_box_features_match_brute_force(difference):
    rng = np.random.default_rng(1)
    vols = [rng.normal(size=(12, 20, 16)) * 100, rng.integers(0, 500, (9, 14, 25)).astype(np.int16)]
    spacings = [np.array([0.8, 1.3, 2.5]), np.array([3.0, 1.0, 0.7])]  # (x, y, z) mm, anisotropic
    images = [Image(v, s, np.zeros(3), np.eye(3)) for v, s in zip(vols, spacings, strict=True)]
    fam = BoxFeatures(max_offset_mm=15.0, box_size_mm=(1.0, 12.0), difference=difference, fill=-7.0)
    stack = fam.prepare(images)
    pts = np.concatenate([np.c_[np.full(40, k), rng.integers(0, v.shape[0], 40),
                                rng.integers(0, v.shape[1], 40), rng.integers(0, v.shape[2], 40)]
                          for k, v in enumerate(vols)])
    pts = check_points(pts, stack)
    params = fam.sample(rng, 1, 30)
    resp = fam.responses((stack, pts), params, np.arange(len(pts), dtype=np.int32),
                         np.zeros(len(pts), dtype=np.int32))
    for m, p in enumerate(pts):
        vol, sp = vols[p[0]], spacings[p[0]][::-1]
        for c in range(30):
            row = params[0, c]
            want = brute_box_mean(vol, sp, p[1:], row[1:4], row[4:7], -7.0)
            if difference:
                want -= brute_box_mean(vol, sp, p[1:], row[8:11], row[11:14], -7.0)
            assert resp[c, m] == pytest.approx(np.float32(want), rel=1e-5, abs=1e-3)


def brute_probe(depth, y, x, row, background):
    def at(yy, xx):
        if 0 <= yy < depth.shape[0] and 0 <= xx < depth.shape[1] and depth[yy, xx] > 0:
            return float(depth[yy, xx])
        return background
    inv = 1.0 / at(y, x)
    a = at(y + int(np.floor(row[0] * inv + 0.5)), x + int(np.floor(row[1] * inv + 0.5)))
    b = at(y + int(np.floor(row[2] * inv + 0.5)), x + int(np.floor(row[3] * inv + 0.5)))
    return a - b


def test_depth_probes_match_brute_force_with_background():
    rng = np.random.default_rng(2)
    depth = rng.integers(800, 3000, (30, 40)).astype(np.uint16)
    depth[:, :8] = 0  # background
    fam = DepthProbes(max_offset=20 * 2000.0, background=1e6)
    stack = fam.prepare([depth])
    yy, xx = rng.integers(0, 30, 60), rng.integers(0, 40, 60)
    pts = check_points(np.c_[np.zeros(60, int), yy, xx], stack)
    params = fam.sample(rng, 1, 25)
    resp = fam.responses((stack, pts), params, np.arange(60, dtype=np.int32), np.zeros(60, dtype=np.int32))
    for m in range(60):
        for c in range(25):
            want = brute_probe(depth, yy[m], xx[m], params[0, c], 1e6)
            assert resp[c, m] == pytest.approx(np.float32(want), rel=1e-6)


@pytest.mark.parametrize("fraction", [False, True])
def test_depth_probes_read_the_same_from_the_cut_training_maps(fraction):
    """Training reads maps cut to their readings (float32 when exact): every response must stay the same."""
    rng = np.random.default_rng(5)
    maps = []
    for k in range(4):
        depth = np.zeros((40, 50))
        depth[8 + k: 30, 12: 35 - k] = rng.integers(900, 3500, (22 - k, 23 - k))
        maps.append(depth + (0.1 if fraction else 0.0) * (depth > 0))  # 0.1 is no float32
    maps.append(np.zeros((40, 50)))  # no readings at all
    fam = DepthProbes(max_offset=25 * 2000.0, background=1e6)
    stack = fam.prepare(maps)
    img = rng.integers(0, 5, 300)
    yy, xx = rng.integers(0, 40, 300), rng.integers(0, 50, 300)  # some on background, outside the readings
    pts = check_points(np.c_[img, yy, xx], stack)
    cut = fam.training_data((stack, pts))
    assert cut[0].table.dtype == (np.float64 if fraction else np.float32)
    assert cut[0].table.size < stack.table.size
    params = fam.sample(rng, 3, 40)
    order = rng.permutation(300).astype(np.int32)  # a deep level: each node's few points from several maps
    pos_set = np.repeat(np.arange(3, dtype=np.int32), 100)
    full = fam.responses((stack, pts), params, order, pos_set)
    assert np.array_equal(fam.responses(cut, params, order, pos_set), full)
    for m in range(0, 300, 7):
        for c in range(0, 40, 9):
            want = brute_probe(maps[img[order[m]]], yy[order[m]], xx[order[m]], params[pos_set[m], c], 1e6)
            assert full[c, m] == pytest.approx(np.float32(want), rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(nz=st.integers(1, 6), ny=st.integers(1, 9), nx=st.integers(1, 9),
       sx=st.floats(0.2, 5.0), sy=st.floats(0.2, 5.0), sz=st.floats(0.2, 5.0), seed=st.integers(0, 10**6))
def test_box_response_properties(nz, ny, nx, sx, sy, sz, seed):
    """Any shape and spacing: responses are finite, a constant image gives its constant (or the fill)."""
    rng = np.random.default_rng(seed)
    img = Image(np.full((nz, ny, nx), 5.0), np.array([sx, sy, sz]), np.zeros(3), np.eye(3))
    fam = BoxFeatures(max_offset_mm=10.0, box_size_mm=(0.5, 8.0), fill=-1.0)
    stack = fam.prepare([img])
    pts = check_points(np.c_[np.zeros(5, int), rng.integers(0, nz, 5), rng.integers(0, ny, 5),
                             rng.integers(0, nx, 5)], stack)
    resp = fam.responses((stack, pts), fam.sample(rng, 1, 8), np.arange(5, dtype=np.int32),
                         np.zeros(5, dtype=np.int32))
    assert resp.shape == (8, 5)
    assert np.all((resp == 5.0) | (resp == -1.0))


@pytest.mark.parametrize("family", ["box", "depth"])
def test_apply_matches_a_plain_traversal_of_responses(family):
    """`apply` (fused kernels) and the trainer's responses must send every point to the same leaf."""
    rng = np.random.default_rng(3)
    if family == "box":
        vol = rng.normal(size=(8, 24, 24))
        vol[:, 12:, :] += 3.0
        img = Image(vol, np.array([1.0, 1.0, 2.0]), np.zeros(3), np.eye(3))
        pts = np.c_[np.zeros(300, int), rng.integers(0, 8, 300), rng.integers(0, 24, 300),
                    rng.integers(0, 24, 300)]
        feats = BoxFeatures(8.0, (1.0, 6.0), difference=True)
    else:
        vol = rng.integers(900, 1100, (1, 24, 24)).astype(np.uint16)
        vol[0, 12:, :] -= 300
        vol[0, :, :3] = 0
        img = Image(vol[0], np.ones(2), np.zeros(2), np.eye(2))
        pts = np.c_[np.zeros(300, int), np.zeros(300, int), rng.integers(0, 24, 300), rng.integers(0, 24, 300)]
        feats = DepthProbes(max_offset=6 * 1000.0)
    labels = (pts[:, 2] >= 12).astype(int)
    forest = ImageClassificationForest(feats, n_trees=4, max_depth=6, n_candidates=20,
                                       random_state=0).fit(img, pts, labels)
    leaves = forest.apply(img, pts)
    if family == "box":  # the multi-image kernel and the single-image one (voxel spans precomputed) agree
        assert np.array_equal(forest.apply([img, img], pts), leaves)
    f = forest.forest_
    stack = forest.family_.prepare(img)
    cpts = check_points(pts, stack)
    for t in range(4):
        node = np.full(len(pts), f.tree_root[t])
        for _ in range(f.max_depth + 1):
            inner = f.child[node] >= 0
            if not inner.any():
                break
            idx = np.flatnonzero(inner)
            resp = forest.family_.responses((stack, cpts), f.params[node[idx]][:, None, :],
                                            idx.astype(np.int32), np.arange(idx.size, dtype=np.int32))[0]
            left = (resp > f.thr_lo[node[idx]]) & (resp <= f.thr_hi[node[idx]])
            node[idx] = np.where(left, f.child[node[idx]], f.child[node[idx]] + 1)
        assert np.array_equal(-f.child[node] - 1, leaves[:, t])
    assert np.mean(forest.predict(img, pts) == labels) > 0.9


def test_image_forest_round_trip_and_posterior_image(tmp_path):
    rng = np.random.default_rng(4)
    depth = np.full((40, 50), 2000, dtype=np.uint16)
    depth[:, :10] = 0
    depth[10:30, 20:40] = 1500  # a nearer block: class 1
    yy, xx = np.nonzero(depth > 0)
    sel = rng.choice(yy.size, 400, replace=False)
    pts = np.c_[np.zeros(400, int), yy[sel], xx[sel]]
    labels = (depth[yy[sel], xx[sel]] == 1500).astype(int)
    forest = ImageClassificationForest(DepthProbes(max_offset=15 * 2000.0), n_trees=3, max_depth=10,
                                       random_state=0).fit([depth], pts, labels)
    post = forest.predict_proba_image(depth, mask=depth > 0)
    assert post.array.shape == (40, 50, 2)
    fg = depth > 0
    pred = np.argmax(post.array, axis=-1)
    assert np.mean(pred[fg] == (depth[fg] == 1500)) > 0.95
    assert np.all(post.array[~fg] == 0)
    forest.save(tmp_path / "m.npz")
    loaded = ImageClassificationForest.load(tmp_path / "m.npz")
    assert np.array_equal(loaded.predict_proba([depth], pts), forest.predict_proba([depth], pts))
    assert isinstance(loaded.family_, DepthProbes)


def test_box_parameters_that_give_no_voxel_span_are_refused():
    """A box row with a NaN, an infinite or an absurd offset or edge (mm) has no integer voxel span: a model file
    holding one is refused at load (`validate_params`), never cast to garbage voxel offsets."""
    fam = BoxFeatures(n_channels=2)
    good = np.zeros((2, 14))
    good[:, [4, 5, 6, 11, 12, 13]] = 3.0
    assert fam.validate_params(good)
    for value in (np.nan, np.inf, -np.inf, 1e12):
        bad = good.copy()
        bad[1, 2] = value
        assert not fam.validate_params(bad)
    bad = good.copy()
    bad[0, 7] = 2  # a channel the family does not have
    assert not fam.validate_params(bad)


def test_bad_points_and_images():
    from imageforest import InvalidInputError
    fam = BoxFeatures()
    stack = fam.prepare([np.zeros((4, 5, 6))])
    with pytest.raises(InvalidInputError, match="outside"):
        check_points(np.array([[0, 0, 5, 0]]), stack)
    with pytest.raises(InvalidInputError, match="image indices"):
        check_points(np.array([[1, 0, 0, 0]]), stack)
    with pytest.raises(InvalidInputError, match="shape"):
        check_points(np.zeros((3, 2), int), stack)
    with pytest.raises(InvalidInputError, match="finite"):
        ImageStack.from_images([np.full((3, 3), np.nan)], integral=True)
    with pytest.raises(InvalidInputError, match="2-D depth"):
        DepthProbes().prepare([np.ones((2, 3, 3))])


def test_background_shortcut_gives_the_same_leaves_as_walking():
    """Background reference pixels take a precomputed path; it must equal the full traversal."""
    from imageforest.imaging.features import _probe_apply

    rng = np.random.default_rng(5)
    depth = np.zeros((30, 40), np.uint16)
    depth[5:25, 10:30] = rng.integers(900, 1100, (20, 20))
    yy, xx = np.nonzero(depth > 0)
    pts = np.c_[np.zeros(yy.size, int), yy, xx]
    labels = (xx >= 20).astype(int)
    forest = ImageClassificationForest(DepthProbes(max_offset=8 * 1000.0, background=1e6), n_trees=3, max_depth=8,
                                       random_state=0).fit([depth], pts, labels)
    fam = forest.family_
    every = np.c_[np.zeros(1200, int), np.indices((30, 40)).reshape(2, -1).T]
    stack = fam.prepare([depth])
    cpts = check_points(every, stack)
    table, roots = forest.forest_.packed()
    shortcut = fam._background_leaves(table, roots, False)
    assert np.all(shortcut >= 0)
    nodes, compact_roots = forest.forest_.packed_compact()
    fam._background_cache = None
    assert np.array_equal(fam._background_leaves(nodes, compact_roots, True), shortcut)
    fast = fam.apply((stack, cpts), forest.forest_)
    slow = _probe_apply(stack.table, stack.base, stack.shape, cpts, table, roots, fam.background,
                        np.full(3, -1, dtype=np.int32), 1.0)
    assert np.array_equal(fast, slow)


def test_compact_table_holds_the_packed_values():
    """The 32-byte rows of depth-probe forests carry exactly the values of the float64 rows, or are not built."""
    rng = np.random.default_rng(6)
    depth = rng.integers(900, 1100, (30, 40)).astype(np.uint16)
    yy, xx = np.nonzero(depth > 0)
    pts = np.c_[np.zeros(yy.size, int), yy, xx]
    forest = ImageClassificationForest(DepthProbes(max_offset=8 * 1000.0), n_trees=3, max_depth=8,
                                       random_state=0).fit([depth], pts, (xx >= 20).astype(int))
    f = forest.forest_
    table, roots = f.packed()
    nodes, compact_roots = f.packed_compact()
    rows = nodes.view(np.float32)
    assert nodes.shape == (f.n_nodes, 8) and np.array_equal(roots, compact_roots)
    split = table[:, 0] >= 0
    assert np.array_equal(table[split, 0], np.flatnonzero(split) + 1)  # the left child is the next row
    assert np.array_equal(nodes[split, 0], table[split, 1]) and np.array_equal(nodes[~split, 0], table[~split, 0])
    assert np.array_equal(rows[:, 1:3].astype(np.float64), table[:, 2:4])
    assert np.array_equal(rows[:, 3:7].astype(np.float64), table[:, 4:8])
    shifted = ForestArrays(**{**{k.removeprefix("forest."): v for k, v in f.to_arrays().items()},
                              "params": f.params + 0.1})
    assert shifted.packed_compact() is None  # offsets float32 cannot hold: the float64 walk
