"""An interactive segmentation session: one image, the user's scribbles, and the forest's answer after each stroke.

    session = SegmentationSession(image)            # features computed once, here
    session.set_scribbles(scribbles)                # 0 = not labelled, 1..K = classes (any positive numbers)
    result = session.update()                       # labels, probabilities, uncertainty
    session.suggest(5)                              # where a next scribble would help most
    session.model().save("model.npz")               # apply to other images: SegmentationForest.load(...).segment(...)

Each update (the method, semi-supervised in the sense of Criminisi et al. 2012, ch. 7: the unlabelled pixels take
part through the image's own geometry):

1. a `SegmentationForest` is grown on the scribbled pixels (at most `max_training_pixels`, drawn per class);
   its posterior p_f covers every pixel. After a stroke that adds no class, the new forest is applied only where
   its answer may move (`local_updates`): pixels the last forest was unsure of, the blocks around the stroke, and
   the blocks where a sparse sample of pixels changed its mind; elsewhere p_f stays the last forest's. A
   volume's first update applies it at every second voxel along each axis, then exactly in the blocks that are
   unsure or border another class (`COARSE_STEP`);
2. geodesic transduction: each class's scribbles spread along the image, the geodesic distance D_k growing with
   every edge crossed (`imageforest.imaging.geodesic`); p_g(k) is proportional to 1 / D_k. Only the classes whose
   strokes changed are swept again; in a volume, a class that only gained strokes is swept within
   `LOCAL_REACH_MM` of them (`local_updates`), and a sweep over the whole volume makes one forward-backward
   pair of raster scans (`VOLUME_PASSES`);
3. the two are pooled log-linearly, p proportional to p_g^a p_f^(1 - a) (a = `geodesic_weight`); in a volume,
   a class whose strokes lie on separate slices along an axis (an organ painted on a few axial slices) is held
   within `extent_margin` times the spacing of those slices beyond its outermost ones (`stroke_extents`): the
   geodesic transduction alone would carry it along any tissue that continues it (the brainstem into the brain,
   the larynx into the pharynx) as far as no other stroke stops it; and the geodesic paths count only
   `slice_path_scale` of each step across those slices, so that a class reaches along the axis the strokes sample
   sparsely as readily as within a slice, where they are dense;
4. a contrast-sensitive graph cut regularises the labels (`smoothness`; scribbled pixels keep their label); with
   `stroke_regions`, a class's connected region that holds none of its strokes then goes to the background
   (`regions.keep_stroked_regions`: one object per class, where unpainted look-alikes are errors);
5. colour models re-estimated from the cut (GrabCut's iterations; Rother, Kolmogorov and Blake 2004): each class's
   colours in the last labels are fitted by a mixture of Gaussians, whose class posterior p_c is pooled with
   step 3's, p' proportional to p^(1 - c) p_c^c (c = `colour_weight`), and the cut runs again, `colour_rounds`
   times. The forest and the geodesic distances know only the strokes; the colour models know every pixel the
   cut gave the class, which fills regions the strokes never reached;
6. uncertainty is the pooled posterior's entropy; `suggest` proposes the centres of the most uncertain regions
   not yet scribbled (active learning, sec. 7.4).

Starting from an automatic result (`set_init`: a label map such as `imageforest contour`'s, 0 = background): the
scribbled organs are corrected, the others stay as they were. The init's map of each scribbled class, softened
over a voxel and held within [0.2, 0.8] (`INIT_FLOOR`), is one more term of the pooling, p proportional to
p_init^b p^(1 - b) (b = `init_weight`); strokes override it where they disagree; the background strokes' number
stands for the init's 0 and for every organ not scribbled, whose voxels keep their init label. The labels are
then in the init's numbering (0 = background). `model` grows an inductive forest on the scribbles plus the
confidently transduced pixels, for other images.

Locking a class (`lock`): its pixels in the last result stay exactly as they are through later updates, and no
other pixel joins it; strokes of other classes inside it and its own strokes outside it are ignored until it is
unlocked.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from imageforest.apps.segment.features import PreparedImage, prepare
from imageforest.apps.segment.model import MAX_SMOOTHNESS, Segmentation, SegmentationForest, entropy, label_dtype
from imageforest.apps.segment.recipe import PICTURE, VOLUME
from imageforest.apps.segment.regions import keep_stroked_regions
from imageforest.estimators.base import numba_threads
from imageforest.exceptions import InvalidInputError
from imageforest.forest.threads import n_threads, run_ranges
from imageforest.imaging.colour_models import class_colour_posterior, exp_normalise
from imageforest.imaging.geodesic import geodesic_distances
from imageforest.imaging.regularize import contrast_weights, graph_cut
from imageforest.kernels import njit

# Defaults by image kind (recipe.py: measured on the GrabCut scribbles and openkbp-hn CT)
PICTURE_GEODESIC_WEIGHT, PICTURE_SMOOTHNESS = PICTURE["geodesic_weight"], PICTURE["smoothness"]
VOLUME_GEODESIC_WEIGHT, VOLUME_SMOOTHNESS = VOLUME["geodesic_weight"], VOLUME["smoothness"]
# Scribbled pixels of each class the forest is grown on at least, when there are more scribbles than it takes
MIN_CLASS_PIXELS = 50
GEODESIC_FLOOR = 1e-3  # mm added to geodesic distances: a scribbled pixel's own class gets p_g ~ 1, not a division by 0
INIT_WEIGHT = VOLUME["init_weight"]
INIT_SOFTENING = 1.0  # voxels: the init's class maps are blurred by a Gaussian this wide (its borders are uncertain)
# The init's class maps are held within [INIT_FLOOR, 1 - INIT_FLOOR]: where the automatic contour misses part of a
# scribbled organ (its oesophagus often), its absence weighs against the strokes' evidence without vetoing it. On
# 12 validation CT scans: floor 0 / 0.1 / 0.2 / 0.3 at weight 0.25 gave mean Dice 0.743 / 0.753 / 0.756 / 0.754
# (the oesophagus 0.50 / 0.65 / 0.68 / 0.69), the scribbles alone 0.747
INIT_FLOOR = 0.2
# After a stroke the new forest is applied where the last one was unsure (its largest posterior below
# LOCAL_SURE), in the LOCAL_STEP^d blocks around the stroke, and around each pixel of a sparse sample (every
# LOCAL_STEP-th along each axis) where it moves a posterior by more than LOCAL_MOVE (an arg-max that changes by
# less is a near tie, which the unsure pixels hold). On head-and-neck CT the last forest is sure of about 98% of the
# voxels, and outside them a regrown forest's arg-max moves on none of the sampled voxels: an update costs a
# fiftieth of the forest's prediction.
LOCAL_SURE, LOCAL_STEP, LOCAL_MOVE = 0.95, 4, 0.1
LOCAL_ABOVE = 0.5  # a band wider than this share of the pixels: the forest is applied everywhere
# A volume's first update applies the forest at every COARSE_STEP-th voxel along each axis, then at every voxel of
# the blocks that are unsure or border a block of another arg-max (organ surfaces); the others take their sample's
# posterior
COARSE_STEP = 2
# In a volume, a class whose strokes only grew is swept again within this reach (mm) of the new strokes; farther
# voxels keep their distances (a path from the new strokes would be at least this long there)
LOCAL_REACH_MM = 40.0
# Forward-backward raster-scan pairs of a sweep over a whole volume: one (a picture's, and the local sweeps
# near new strokes: two). On 12 validation CT scans one pair gave mean Dice 0.697 against two's 0.698, and a
# volume's first update 0.84 s instead of 1.3 s (the sweeps of all classes bound it)
VOLUME_PASSES = 1
# a class's posterior beyond its stroked extent: the pooling's floor, so that the class never wins there unless every
# class is held (a voxel no stroke explains) yet no cue is vetoed outright
EXTENT_FLOOR = 1e-6
# one thread for the geodesic sweeps, which run while the forest grows and predicts (both kernels release the GIL)
_SWEEPS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="imageforest-geodesic")


class SegmentationSession:
    """Segment one image from scribbles, interactively.

    Parameters
    ----------
    image : `imageforest.imaging.Image` or array: (y, x) grey, (y, x, 3|4) RGB, (z, y, x) volume
    spacing : (z, y, x) mm for a volume given as an array
    rgb : whether a 3-D array is an RGB picture (None: guessed from a last axis of 3 or 4)
    forest : the forest's settings (a `SegmentationForest`, unfitted; default: 20 trees of depth 12, classes
        weighted equally for volumes, where an organ's scribbles are a few dozen voxels against thousands)
    geodesic_weight : a, the geodesic transduction's share of the pooled posterior (0: the forest alone);
        None: 0.6 for pictures, 0.8 for volumes
    gamma : weight of intensity change in geodesic path lengths (per unit of L* or stretched intensity)
    smoothness : graph-cut boundary weight (0: no regularisation); None: 50 for pictures, 0 for volumes (on CT at
        4-5 mm a cut's boundary cost outweighs small organs' evidence and shrinks them to their scribbles)
    colour_weight : c, the re-estimated colour models' share of the pooled posterior (0: none); None: the
        recipe's for pictures, 0 for volumes
    colour_rounds : how many times the colour models are re-estimated and the cut run again; None: the recipe's
    max_training_pixels : scribbled pixels the forest is grown on at most
    local_updates : after a stroke, apply the new forest only where its answer may move, and sweep a volume's
        geodesic distances near the new strokes only (steps 1 and 2); False recomputes both everywhere
    extent_margin : in a volume, how far a class reaches beyond its outermost stroked slices along an axis where
        its strokes lie on separate slices, in multiples of their mean spacing (step 3); `math.inf`: no bound;
        None: the recipe's for volumes. The background (the largest scribbled number, or the init's) is never
        held. Pictures are not bounded.
    slice_path_scale : in a volume whose strokes lie on separate slices, the share of a geodesic step across those
        slices that counts (1: the voxel spacing as it is); None: the recipe's for volumes
    stroke_regions : after each cut, a region of a class (connected through faces, edges and corners) that holds
        none of its strokes goes to the background (the largest scribble number, or the init's; its own regions
        and a locked class's stay); None: the recipe's
    """

    def __init__(self, image, spacing=None, rgb: bool | None = None, forest: SegmentationForest | None = None,
                 geodesic_weight: float | None = None, gamma: float = 1.0, smoothness: float | None = None,
                 max_training_pixels: int = 20000, colour_weight: float | None = None,
                 colour_rounds: int | None = None, local_updates: bool = True,
                 extent_margin: float | None = None, slice_path_scale: float | None = None,
                 stroke_regions: bool | None = None) -> None:
        if extent_margin is not None and not (isinstance(extent_margin, (int, float)) and extent_margin >= 0):
            raise InvalidInputError(f"extent_margin must be a number >= 0 (inf: no bound), got {extent_margin!r}")
        if slice_path_scale is not None and not (isinstance(slice_path_scale, (int, float))
                                                 and 0.01 <= slice_path_scale <= 1):
            raise InvalidInputError(f"slice_path_scale must be a number in [0.01, 1], got {slice_path_scale!r}")
        for name, value, top in (("geodesic_weight", geodesic_weight, 1.0), ("gamma", gamma, 1e3),
                                 ("smoothness", smoothness, MAX_SMOOTHNESS), ("colour_weight", colour_weight, 1.0)):
            if value is not None and not (isinstance(value, (int, float)) and 0 <= value <= top):
                raise InvalidInputError(f"{name} must be a number in [0, {top}], got {value!r}")
        if colour_rounds is not None and not (isinstance(colour_rounds, (int, np.integer))
                                              and 0 <= colour_rounds <= 10):
            raise InvalidInputError(f"colour_rounds must be an integer in [0, 10], got {colour_rounds!r}")
        if not (isinstance(max_training_pixels, int) and max_training_pixels >= 2):
            raise InvalidInputError(f"max_training_pixels must be an integer >= 2, got {max_training_pixels!r}")
        t0 = time.perf_counter()
        self.prepared: PreparedImage = image if isinstance(image, PreparedImage) else prepare(image, spacing, rgb)
        self.features_s = time.perf_counter() - t0
        volume = self.prepared.kind == "volume"
        if geodesic_weight is None:
            geodesic_weight = VOLUME_GEODESIC_WEIGHT if volume else PICTURE_GEODESIC_WEIGHT
        if smoothness is None:
            smoothness = VOLUME_SMOOTHNESS if volume else PICTURE_SMOOTHNESS
        self.settings = forest if forest is not None else SegmentationForest.for_kind(volume)
        self.geodesic_weight = float(geodesic_weight)
        self.gamma = float(gamma)
        self.smoothness = float(smoothness)
        recipe = VOLUME if volume else PICTURE
        self.colour_weight = float(recipe["colour_weight"] if colour_weight is None else colour_weight)
        self.colour_rounds = int(recipe["colour_rounds"] if colour_rounds is None else colour_rounds)
        self.max_training_pixels = max_training_pixels
        self.extent_margin = float(recipe.get("extent_margin", np.inf) if extent_margin is None else extent_margin)
        self.slice_path_scale = float(recipe.get("slice_path_scale", 1.0) if slice_path_scale is None
                                      else slice_path_scale)
        self.stroke_regions = bool(recipe.get("stroke_regions", False) if stroke_regions is None
                                   else stroke_regions)
        self.scribbles = np.zeros(self.prepared.shape, dtype=np.int64)
        self.init: np.ndarray | None = None
        self.init_weight = INIT_WEIGHT
        self.background: int | None = None
        self.result: Segmentation | None = None
        self.preview: np.ndarray | None = None  # the first cut's labels while an update's colour rounds run
        self.locked: dict[int, np.ndarray] = {}  # class number -> its frozen pixels (raveled bool)
        # the cut's boundary weights depend on the image and the smoothness only: (smoothness, weights)
        self._edges: tuple[float, list[tuple[int, np.ndarray]]] | None = None
        # each class's last geodesic distances: class number -> ((gamma, path spacing), its seed voxels (sorted
        # raveled indices), distances (n,) float32); a stroke then costs one sweep of its own class
        self._geodesic: dict[int, tuple[tuple, np.ndarray, np.ndarray]] = {}
        self.local_updates = bool(local_updates)
        # the last forest's posterior, for a local update: (forest settings, classes, scribbles (raveled), (n, K))
        self._forest_post: tuple[dict, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.prepared.shape

    # -- scribbles ----------------------------------------------------------------------------------------
    def _checked(self, labels) -> np.ndarray:
        arr = np.asarray(labels)
        if arr.shape != self.shape:
            raise InvalidInputError(f"scribbles have shape {arr.shape}; the image's grid is {self.shape}")
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
                raise InvalidInputError("scribbles must be whole numbers (0 = not labelled, 1..K = classes)")
        elif arr.dtype.kind not in "biu":
            raise InvalidInputError(f"scribbles must be integer labels, got dtype {arr.dtype}")
        if arr.size and arr.min() < 0:
            raise InvalidInputError("scribbles must be >= 0 (0 = not labelled)")
        return arr.astype(np.int64)

    def set_scribbles(self, labels) -> None:
        """Replace every scribble: `labels` of the image's spatial shape, 0 = not labelled."""
        self.scribbles = self._checked(labels).copy()

    def add_scribbles(self, labels) -> None:
        """Add strokes: nonzero entries of `labels` overwrite the scribbles there."""
        new = self._checked(labels)
        self.scribbles = np.where(new > 0, new, self.scribbles)

    def set_init(self, labels, background: int | None = None, weight: float = INIT_WEIGHT) -> None:
        """Start from an automatic segmentation: `labels` on the image's grid (0 = background, 1..K = organs; None
        forgets it). `background` is the scribble number painted for background (default: the largest scribbled
        number the init does not use); `weight` is b, the init's share of the pooled posterior (0..1)."""
        if labels is None:
            self.init = None
            return
        if not (isinstance(weight, (int, float)) and 0.0 <= weight <= 1.0):
            raise InvalidInputError(f"the init's weight must be a number in [0, 1], got {weight!r}")
        if background is not None and not (isinstance(background, (int, np.integer)) and background >= 1):
            raise InvalidInputError(f"the background's scribble number must be a positive integer, got {background!r}")
        init = self._checked(labels)
        if background is not None and background in set(np.unique(init).tolist()):
            raise InvalidInputError(f"the background's scribble number {background} is an organ of the init")
        self.init, self.background, self.init_weight = init, None if background is None else int(background), weight

    def lock(self, label: int) -> None:
        """Freeze class `label` as the last result has it: later updates keep exactly these pixels in it."""
        if self.result is None:
            raise InvalidInputError("nothing to lock before the first update")
        if not isinstance(label, (int, np.integer)) or label < 1:
            raise InvalidInputError(f"lock a class number >= 1, got {label!r}")
        pixels = (self.result.labels == label).ravel()
        if not pixels.any():
            raise InvalidInputError(f"class {label} has no pixels in the current segmentation")
        self.locked[int(label)] = pixels

    def unlock(self, label: int | None = None) -> None:
        """Let class `label` (None: every class) change again."""
        if label is None:
            self.locked.clear()
        else:
            self.locked.pop(int(label), None)

    # -- segmentation -------------------------------------------------------------------------------------
    def update(self) -> Segmentation:
        """Segment with the current scribbles (see the module docstring); the result is also `self.result`."""
        steps = self.update_steps()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def update_steps(self) -> Generator[str, None, Segmentation]:
        """`update` as a generator that yields the name of each step it finished ("forest", "geodesic", and
        "graph_cut" when colour rounds follow, with the first cut's labels in `preview` meanwhile) and returns the
        segmentation: a background worker (the napari plugin's) can stop between steps when a newer stroke makes
        this update stale, and show the preview. Scribbles are read once, at the start."""
        flat = self.scribbles.ravel().copy()
        index = np.flatnonzero(flat)
        classes = np.unique(flat[index])
        if classes.size < 2:
            raise InvalidInputError("scribbles name " + ("no class" if classes.size == 0 else
                                    f"a single class ({classes[0]})") + "; paint at least two classes")
        timing = {}
        t0 = time.perf_counter()
        background = self._init_background(classes) if self.init is not None else None
        held = classes[-1] if background is None else background  # the class whose extent is never bounded
        # each class's runs of stroked slices: the extent bound and the path spacing both read them
        runs = stroke_runs(flat.reshape(self.shape), classes, held, index) if self.prepared.kind == "volume" else []
        path_spacing = self._path_spacing(runs)
        # the geodesic sweeps run beside the forest: an added stroke sweeps one class, on one thread
        sweeps = None
        if self.geodesic_weight > 0:  # on the caller's thread count (a command's --threads), which is per thread
            sweeps = _SWEEPS.submit(self._geodesic_on_threads, n_threads(), flat, classes, path_spacing)
        train = self._training_pixels(index, values=flat[index])
        forest = self._new_forest().fit_pixels(self.prepared, train, flat[train])
        p_forest = self._forest_posterior(forest, flat, classes)
        t1 = time.perf_counter()
        timing["forest"] = t1 - t0
        yield "forest"
        pooled = p_forest if sweeps is not None else p_forest.copy()  # the result may not share the cache
        if sweeps is not None:
            distances, new = sweeps.result()
            self._commit_geodesic(new, classes)
            pooled = np.empty(p_forest.shape, dtype=np.float32)
            run_ranges(_pool_range, flat.size, distances, np.ascontiguousarray(p_forest, dtype=np.float32),
                       self.geodesic_weight, GEODESIC_FLOOR, pooled, min_per_thread=4096)
        fixed = np.full(flat.size, -1, dtype=np.int64)
        fixed[index] = np.searchsorted(classes, flat[index])
        untouched = None
        if runs and np.isfinite(self.extent_margin):
            bounds = reaches(runs, self.extent_margin, self.shape)
            if bounds:  # `pooled` is this update's own array (the pooling's, or the forest posterior's copy)
                bound_extents(pooled, self.shape, bounds)
        if self.init is not None:
            pooled, untouched = self._pool_init(pooled, classes, background)
            fixed[untouched & (fixed < 0)] = int(np.searchsorted(classes, background))
        if self.locked:
            pooled = self._apply_locks(pooled, classes, fixed)
        t2 = time.perf_counter()
        timing["geodesic"] = t2 - t1
        yield "geodesic"
        grid = self.prepared.guide.shape[:3]
        if self.smoothness > 0 and (self._edges is None or self._edges[0] != self.smoothness):
            self._edges = (self.smoothness, contrast_weights(self.prepared.guide, self.prepared.spacing,
                                                             self.smoothness))
        edges = self._edges[1] if self._edges else None
        regions = self._regions(fixed, classes, held)
        idx = regions(graph_cut(pooled.reshape(*grid, classes.size), self.prepared.guide, self.prepared.spacing,
                                self.smoothness, fixed.reshape(grid), edges=edges))
        t3 = time.perf_counter()
        timing["graph_cut"] = t3 - t2
        if self.colour_weight > 0 and self.colour_rounds > 0:
            # the first cut's labels, for a viewer to show while the colour rounds run
            self.preview = self._labels(idx, classes, flat, untouched, background).reshape(self.shape)
            yield "graph_cut"
            colours = self.prepared.guide.reshape(-1, self.prepared.n_channels)
            strokes = pooled  # each round pools the newest colour models with the strokes' posterior, once
            for _ in range(self.colour_rounds):
                p_colour = class_colour_posterior(colours, np.asarray(idx).ravel(), classes.size)
                pooled = pool_log_linear(strokes, p_colour, self.colour_weight)
                if self.locked:
                    pooled = self._apply_locks(pooled, classes, fixed)
                idx = regions(graph_cut(pooled.reshape(*grid, classes.size), self.prepared.guide,
                                        self.prepared.spacing, self.smoothness, fixed.reshape(grid), edges=edges))
            timing["colour"] = time.perf_counter() - t3
        shape = self.shape
        self.result = Segmentation(self._labels(idx, classes, flat, untouched, background).reshape(shape),
                                   pooled.astype(np.float32, copy=False).reshape(*shape, classes.size),
                                   entropy(pooled).reshape(shape), classes, timing)
        self.preview = None
        return self.result

    def _regions(self, fixed: np.ndarray, classes: np.ndarray, held: int):
        """What each cut's class indices go through: `keep_stroked_regions` with the strokes (and the voxels an
        init fixes to the background) as seeds, or nothing when `stroke_regions` is off."""
        if not self.stroke_regions:
            return lambda idx: idx
        grid = self.prepared.guide.shape[:3]
        background = int(np.searchsorted(classes, held))
        exempt = np.isin(classes, list(self.locked))

        def regions(idx):
            return keep_stroked_regions(np.asarray(idx).ravel(), grid, fixed, background, exempt).reshape(
                np.shape(idx))
        return regions

    def _labels(self, idx, classes: np.ndarray, flat: np.ndarray, untouched: np.ndarray | None,
                background: int | None) -> np.ndarray:
        """(n,) labels from the cut's class indices, in the init's numbering when there is one, locked classes
        kept."""
        labels = classes[np.asarray(idx).ravel()]
        if self.init is not None:  # back to the init's numbering: organs not scribbled keep their voxels
            init = self.init.ravel()
            labels = np.where(labels == background, 0, labels)
            keep = untouched & (flat == 0)
            labels[keep] = init[keep]
        for label, pixels in self.locked.items():  # a locked class not scribbled this time keeps its pixels too
            labels[pixels] = label
        numbers = classes if self.init is None else np.r_[classes, self.init.max()]
        if self.locked:
            numbers = np.r_[numbers, max(self.locked)]
        return labels.astype(label_dtype(numbers))

    def _apply_locks(self, pooled: np.ndarray, classes: np.ndarray, fixed: np.ndarray) -> np.ndarray:
        """The pooled posterior (n, C) with every locked class certain on its frozen pixels and impossible
        elsewhere; `fixed` (n,) (the cut's clamped classes, -1 free) is changed to match."""
        pooled = np.array(pooled, dtype=np.float32, copy=True)
        column = {label: int(np.searchsorted(classes, label)) for label in self.locked}
        scribbled = {label: k for label, k in column.items() if k < classes.size and classes[k] == label}
        for label, pixels in self.locked.items():
            k = scribbled.get(label)
            if k is None:  # not scribbled this time: the others may not take its pixels either
                fixed[pixels] = -1
                continue
            fixed[(fixed == k) & ~pixels] = -1  # its strokes outside the frozen pixels wait for an unlock
            pooled[~pixels, k] = 0.0
            pooled[pixels] = 0.0
            pooled[pixels, k] = 1.0
            fixed[pixels] = k
        empty = pooled.sum(axis=1) <= 0  # only a locked class was possible there: any other, evenly
        pooled[empty] = 1.0
        for label, k in scribbled.items():
            pooled[empty & ~self.locked[label], k] = 0.0
        pooled /= np.maximum(pooled.sum(axis=1, keepdims=True), 1e-30)
        return pooled

    def _init_background(self, classes: np.ndarray) -> int:
        """The scribble number that stands for the init's background."""
        used = set(np.unique(self.init).tolist())
        if self.background is not None:
            if self.background not in classes:
                raise InvalidInputError(f"no background strokes: paint the background with {self.background}")
            return self.background
        free = [int(c) for c in classes if int(c) not in used]
        if not free:
            raise InvalidInputError("every scribbled number is an organ of the init: paint the background with a "
                                    f"number the init does not use (e.g. {max(used) + 1})")
        return free[-1]

    def _pool_init(self, pooled: np.ndarray, classes: np.ndarray, background: int) -> tuple[np.ndarray, np.ndarray]:
        """The pooled posterior (n, C) with the init's term, and the voxels (n,) bool of organs not scribbled."""
        from scipy import ndimage

        init = self.init
        organs = [int(c) for c in classes if c != background]
        untouched = ((init > 0) & ~np.isin(init, organs)).ravel()
        low = np.log(1e-6)
        b = float(self.init_weight)
        log_p = np.empty(pooled.shape, dtype=np.float32)
        for k, c in enumerate(classes):
            member = (init == c) if c != background else ~np.isin(init, organs)
            soft = INIT_FLOOR + (1.0 - 2.0 * INIT_FLOOR) * ndimage.gaussian_filter(member.astype(np.float32),
                                                                                 INIT_SOFTENING)
            log_p[:, k] = (b * np.maximum(np.log(np.maximum(soft.ravel(), 1e-30)), low)
                           + (1.0 - b) * np.maximum(np.log(np.maximum(pooled[:, k], 1e-30)), low))
        log_p -= log_p.max(axis=1, keepdims=True)
        out = np.exp(log_p)
        out /= out.sum(axis=1, keepdims=True)
        return out, untouched

    def _forest_posterior(self, forest: SegmentationForest, flat: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """(n, K) float32 posterior of the new `forest` (grown on the scribbles `flat`, raveled): everywhere at a
        first update, after a change of classes or of the forest's settings; else only where it may differ from
        the last forest's (see LOCAL_SURE), the last forest's elsewhere."""
        params = self.settings.get_params()
        last = self._forest_post
        if not self.local_updates or last is None or last[0] != params or not np.array_equal(last[1], classes):
            if self.local_updates and self.prepared.kind == "volume":
                post = self._coarse_to_fine(forest)
            else:
                post = np.asarray(forest.pixel_posterior(self.prepared), dtype=np.float32)
        else:
            old = last[3]
            band = self._local_band(forest, old, np.flatnonzero(last[2] != flat))
            if band.size > LOCAL_ABOVE * flat.size:
                post = np.asarray(forest.pixel_posterior(self.prepared), dtype=np.float32)
            else:
                post = old.copy()
                if band.size:
                    forest.check_image(self.prepared)
                    post[band] = forest.predict_proba(self.prepared.features[band])
        self._forest_post = (params, classes.copy(), flat.copy(), post)
        return post

    def _coarse_to_fine(self, forest: SegmentationForest) -> np.ndarray:
        """(n, K) float32 posterior of `forest`: exact in the blocks of COARSE_STEP^d voxels whose sample is unsure
        (largest posterior below LOCAL_SURE) or whose neighbouring blocks' arg-max differs from theirs, the block's
        sample elsewhere."""
        from scipy import ndimage

        forest.check_image(self.prepared)
        grid = tuple(self.shape)
        sample, coarse_shape = grid_sample(grid, COARSE_STEP)
        coarse = np.asarray(forest.predict_proba(self.prepared.features[sample]), dtype=np.float32)
        coarse = coarse.reshape(*coarse_shape, -1)
        best = coarse.argmax(axis=-1)
        around = np.ones((3,) * len(grid), dtype=bool)
        exact = ((ndimage.maximum_filter(best, footprint=around) != ndimage.minimum_filter(best, footprint=around))
                 | (coarse.max(axis=-1) < LOCAL_SURE))
        post = np.ascontiguousarray(blocks_to_grid(coarse, COARSE_STEP, grid).reshape(-1, coarse.shape[-1]))
        band = np.flatnonzero(blocks_to_grid(exact, COARSE_STEP, grid).ravel())
        if band.size:
            post[band] = forest.predict_proba(self.prepared.features[band])
        return post

    def _local_band(self, forest: SegmentationForest, old: np.ndarray, changed: np.ndarray) -> np.ndarray:
        """Sorted raveled indices of the pixels where the new `forest`'s posterior may differ from `old` (n, K):
        where old is unsure, in the blocks around the `changed` scribbles, and around the sampled pixels where the
        new forest moves."""
        from scipy import ndimage

        grid = tuple(self.shape)
        sample, coarse_shape = grid_sample(grid, LOCAL_STEP)
        moved = np.abs(forest.predict_proba(self.prepared.features[sample]) - old[sample])
        coarse = (moved.max(axis=1) > LOCAL_MOVE).reshape(coarse_shape)
        if changed.size:
            cells = np.unravel_index(changed, grid)
            coarse[tuple(c // LOCAL_STEP for c in cells)] = True
        # a sampled pixel stands for the block up to the next samples on either side
        coarse = ndimage.binary_dilation(coarse, np.ones((3,) * len(grid), dtype=bool))
        band = blocks_to_grid(coarse, LOCAL_STEP, grid).ravel() | (old.max(axis=1) < LOCAL_SURE)
        return np.flatnonzero(band)

    def _new_forest(self) -> SegmentationForest:
        return SegmentationForest(**self.settings.get_params())

    def _training_pixels(self, index: np.ndarray, limit: int | None = None,
                         values: np.ndarray | None = None) -> np.ndarray:
        """About `limit` (default `max_training_pixels`) of the pixels `index`, each kept with the same chance (so
        every class keeps its share), by a fixed draw; with their classes `values`, each class keeps at least
        `MIN_CLASS_PIXELS` (all of a smaller one's): a short stroke beside a large one would otherwise be left out,
        and the forest would not know its class."""
        limit = self.max_training_pixels if limit is None else limit
        if index.size <= limit:
            return index
        draw = np.random.default_rng(0).random(index.size)
        keep = draw < limit / index.size
        if values is not None:
            for c in np.unique(values):
                mine = np.flatnonzero(values == c)
                least = min(mine.size, MIN_CLASS_PIXELS)
                if int(keep[mine].sum()) < least:
                    keep[mine[np.argsort(draw[mine], kind="stable")[:least]]] = True
        return index[keep]

    def _path_spacing(self, runs: list[tuple[int, int, int, int, float]]) -> np.ndarray:
        """(z, y, x) mm a geodesic step costs along each axis: the voxel spacing, with the axis across which most
        classes lie on separate slices (`runs`, from `stroke_runs`) scaled by `slice_path_scale`."""
        spacing = np.array(self.prepared.spacing, dtype=np.float64)
        if self.prepared.kind != "volume" or self.slice_path_scale == 1.0:
            return spacing
        across = [axis for _, axis, _, _ in reaches(runs, 0.0, self.shape)]
        if across:
            spacing[int(np.bincount(across).argmax())] *= self.slice_path_scale
        return spacing

    def _geodesic_distances(self, flat: np.ndarray, classes: np.ndarray, spacing: np.ndarray | None = None
                            ) -> tuple[np.ndarray, dict[int, tuple[tuple, np.ndarray, np.ndarray]]]:
        """(n_voxels, K) float32 geodesic distances D_k from class k's scribbles (`flat`: the scribbles, raveled),
        and the entries of the distance cache to replace (`_geodesic`; the caller commits them, so that an update
        abandoned halfway leaves the cache as it was).

        A class whose scribbles did not change since the last update keeps its distances; one whose scribbles only
        grew starts its sweep from them (`geodesic_distances`' `start`: the new strokes' paths are added, none is
        lost, so the distances are never longer than a fresh sweep's); any other class is swept afresh. All the
        sweeps that remain run together, sharing their step costs. `spacing`: the (z, y, x) mm of a step
        (`_path_spacing`; default the voxel spacing)."""
        grid = self.prepared.guide.shape[:3]
        spacing = np.array(self.prepared.spacing if spacing is None else spacing, dtype=np.float64)
        key = (self.gamma, tuple(spacing.tolist()))
        known = dict(self._geodesic)
        seeds = {int(c): np.flatnonzero(flat == c) for c in classes}
        todo, fresh = [], []
        for c in seeds:
            entry = known.get(c)
            if entry is None or entry[0] != key:
                todo.append(c)
                fresh.append(True)
            elif not np.array_equal(entry[1], seeds[c]):
                todo.append(c)
                fresh.append(not np.isin(entry[1], seeds[c], assume_unique=True).all())
        new: dict[int, tuple[float, np.ndarray, np.ndarray]] = {}
        if todo:
            labels = np.full(flat.size, -1, dtype=np.int64)
            start = np.empty((flat.size, len(todo)), dtype=np.float32)
            for j, c in enumerate(todo):
                labels[seeds[c]] = j
                start[:, j] = np.inf if fresh[j] else known[c][2]
            box = None
            if self.local_updates and self.prepared.kind == "volume" and not any(fresh):
                added = np.concatenate([np.setdiff1d(seeds[c], known[c][1], assume_unique=True) for c in todo])
                reach = np.ceil(LOCAL_REACH_MM / spacing).astype(int)
                box = tuple(slice(max(int(a.min()) - r, 0), min(int(a.max()) + r + 1, n))
                            for a, r, n in zip(np.unravel_index(added, grid), reach, grid, strict=True))
            if box is None:
                d = geodesic_distances(self.prepared.guide, labels.reshape(grid), len(todo), spacing,
                                       self.gamma, passes=self._passes(), start=start.reshape(*grid, len(todo)))
            else:  # within reach of the new strokes; farther voxels keep their distances
                d = start.reshape(*grid, len(todo))
                d[box] = geodesic_distances(self.prepared.guide[box], labels.reshape(grid)[box], len(todo),
                                            spacing, self.gamma, start=d[box])
            d = d.reshape(flat.size, len(todo))
            new = {c: (key, seeds[c], np.ascontiguousarray(d[:, j])) for j, c in enumerate(todo)}
        known.update(new)
        return np.stack([known[int(c)][2] for c in classes], axis=1), new

    def _passes(self) -> int:
        """Raster-scan pairs of a sweep over the whole image (see VOLUME_PASSES)."""
        return VOLUME_PASSES if self.prepared.kind == "volume" else 2

    def _geodesic_on_threads(self, threads: int, flat: np.ndarray, classes: np.ndarray, spacing: np.ndarray):
        """`_geodesic_distances` with numba's kernels on `threads` threads."""
        with numba_threads(threads):
            return self._geodesic_distances(flat, classes, spacing)

    def _commit_geodesic(self, new: dict[int, tuple[tuple, np.ndarray, np.ndarray]], classes: np.ndarray) -> None:
        """Keep the distances of the classes painted now (`new` replacing their old entries)."""
        self._geodesic.update(new)
        for c in set(self._geodesic) - {int(c) for c in classes}:
            del self._geodesic[c]

    # -- active learning ----------------------------------------------------------------------------------
    def suggest(self, k: int = 5, radius: float | None = None) -> np.ndarray:
        """Where to scribble next: the centres of the k most uncertain regions that hold no scribble yet.

        The entropy map, smoothed over `radius` (pixels for pictures, mm for volumes; default 4% of the
        image's longest side), is searched greedily for maxima at least 2 x radius apart.

        Returns
        -------
        (m, ndim) int64 pixel indices ((y, x) or (z, y, x)), m <= k, most uncertain first
        """
        from scipy import ndimage

        if self.result is None:
            raise InvalidInputError("nothing to suggest before the first update")
        if not (isinstance(k, (int, np.integer)) and k >= 1):
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        sp = self.prepared.spacing[-len(self.shape):]
        extent = float(np.max(np.asarray(self.shape) * sp))
        r = 0.04 * extent if radius is None else float(radius)
        score = ndimage.gaussian_filter(self.result.uncertainty.astype(np.float64), r / sp / 2.0)
        score[ndimage.binary_dilation(self.scribbles > 0, iterations=2)] = -np.inf
        grids = np.indices(self.shape, dtype=np.float64)
        out = []
        for _ in range(int(k)):
            best = int(np.argmax(score))
            if not np.isfinite(score.flat[best]) or score.flat[best] <= 0:
                break
            at = np.unravel_index(best, self.shape)
            out.append(at)
            dist2 = sum(((g - a) * s) ** 2 for g, a, s in zip(grids, at, sp, strict=True))
            score[dist2 <= (2.0 * r) ** 2] = -np.inf
        return np.array(out, dtype=np.int64).reshape(-1, len(self.shape))

    # -- induction ----------------------------------------------------------------------------------------
    def model(self, confidence: float = 0.9) -> SegmentationForest:
        """A forest for other images: grown on the scribbles plus pixels the last update labelled with the class of
        pooled probability >= `confidence` (at most `max_training_pixels` in all; scribbles weigh 3x). A pixel
        whose label is another class (the cut's, or a look-alike region `stroke_regions` gave the background) is
        not sure: it would teach the forest that the class's look is another's."""
        if self.result is None:
            raise InvalidInputError("no segmentation yet: call update() first")
        flat = self.scribbles.ravel()
        scribbled = np.flatnonzero(flat)
        labels = self.result.labels.ravel()
        proba = self.result.probabilities.reshape(flat.size, -1)
        top = np.argmax(proba, axis=1)
        sure = np.flatnonzero((proba[np.arange(flat.size), top] >= confidence) & (flat == 0)
                              & (labels == self.result.classes[top]))
        scribbled = self._training_pixels(scribbled, self.max_training_pixels // 2, flat[scribbled])
        sure = self._training_pixels(sure, self.max_training_pixels - scribbled.size, labels[sure])
        index = np.concatenate([scribbled, sure])
        values = np.concatenate([flat[scribbled], labels[sure].astype(np.int64)])
        weight = np.concatenate([np.full(scribbled.size, 3.0), np.ones(sure.size)])
        forest = self._new_forest()
        forest.smoothness = self.smoothness
        return forest.fit_pixels(self.prepared, index, values, sample_weight=weight)


def stroke_runs(scribbles: np.ndarray, classes: np.ndarray, background: int, index: np.ndarray | None = None
                ) -> list[tuple[int, int, int, int, float]]:
    """How each class but `background` is painted across slices: (column k in `classes`, axis, first, last,
    spacing) for every axis along which the class's strokes fall into two or more separate runs of slices, first
    and last the outermost runs' outer slices and spacing the mean distance between the runs' centres (voxels).
    Strokes that all lie in one slice of some axis (separate lines or blobs on one slice) say nothing of the
    class's extent, and give no runs.

    scribbles : (z, y, x) int, 0 = not labelled
    index : the raveled indices of its nonzero voxels, when known (faster than a search of the whole volume)
    """
    index = np.flatnonzero(scribbles) if index is None else index
    values = scribbles.ravel()[index]
    where = np.unravel_index(index, scribbles.shape)
    runs = []
    for k, c in enumerate(classes):
        if c == background:
            continue
        mine = values == c
        cells = tuple(w[mine] for w in where)
        if any(np.ptp(coords) == 0 for coords in cells if coords.size):
            continue
        for axis, coords in enumerate(cells):
            planes = np.unique(coords)
            breaks = np.flatnonzero(np.diff(planes) > 1)
            if breaks.size == 0:
                continue
            starts, ends = planes[np.r_[0, breaks + 1]], planes[np.r_[breaks, planes.size - 1]]
            spacing = ((starts[-1] + ends[-1]) - (starts[0] + ends[0])) / 2.0 / (starts.size - 1)
            runs.append((k, axis, int(starts[0]), int(ends[-1]), float(spacing)))
    return runs


def reaches(runs: list[tuple[int, int, int, int, float]], margin: float, shape: tuple[int, ...]
            ) -> list[tuple[int, int, int, int]]:
    """Where each class painted on separate slices (`stroke_runs`) may reach: (column k, axis, lo, hi), inclusive
    voxel indices of `shape`, its outermost runs widened by `margin` times their spacing (strokes spread over an
    organ's extent at that spacing leave about a spacing of it unpainted at either end); a reach that spans the
    whole axis is left out."""
    bounds = []
    for k, axis, first, last, spacing in runs:
        reach = int(np.floor(margin * spacing))
        lo, hi = max(first - reach, 0), min(last + reach, shape[axis] - 1)
        if lo > 0 or hi < shape[axis] - 1:
            bounds.append((k, axis, lo, hi))
    return bounds


def stroke_extents(scribbles: np.ndarray, classes: np.ndarray, background: int, margin: float,
                   index: np.ndarray | None = None) -> list[tuple[int, int, int, int]]:
    """`reaches` of the classes in `scribbles` (z, y, x), all but `background`: the extent bound of step 3."""
    return reaches(stroke_runs(scribbles, classes, background, index), margin, scribbles.shape)


def bound_extents(pooled: np.ndarray, grid: tuple[int, ...], bounds: list[tuple[int, int, int, int]]) -> None:
    """Hold each bounded class (`stroke_extents`) at most at the pooling's floor outside its reach, in place, and
    renormalise `pooled` (n, C) float32 (the background is never bounded, so every voxel keeps a likely class)."""
    n_cls = pooled.shape[1]
    lo = np.zeros((n_cls, 3), dtype=np.int64)
    hi = np.tile(np.asarray(grid, dtype=np.int64) - 1, (n_cls, 1))
    for k, axis, a, b in bounds:
        lo[k, axis], hi[k, axis] = max(lo[k, axis], a), min(hi[k, axis], b)
    run_ranges(_bound_range, pooled.shape[0], pooled, np.asarray(grid, dtype=np.int64), lo, hi, EXTENT_FLOOR,
               min_per_thread=4096)


@njit(cache=True, nogil=True)
def _bound_range(i0, i1, pooled, grid, lo, hi, floor):  # pragma: no cover - numba
    n_cls = pooled.shape[1]
    plane = grid[1] * grid[2]
    for i in range(i0, i1):
        z, rest = i // plane, i % plane
        y, x = rest // grid[2], rest % grid[2]
        held = False
        for k in range(n_cls):
            if (z < lo[k, 0] or z > hi[k, 0] or y < lo[k, 1] or y > hi[k, 1] or x < lo[k, 2] or x > hi[k, 2]) \
                    and pooled[i, k] > floor:
                pooled[i, k] = floor
                held = True
        if held:
            total = 0.0
            for k in range(n_cls):
                total += pooled[i, k]
            for k in range(n_cls):
                pooled[i, k] /= total


def grid_sample(grid: tuple[int, ...], step: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Raveled indices of every `step`-th pixel along each axis of `grid` (C order), and the sampled grid's shape."""
    axes = [np.arange(0, n, step) for n in grid]
    index = np.ravel_multi_index(np.meshgrid(*axes, indexing="ij"), grid).ravel()
    return index, tuple(a.size for a in axes)


def blocks_to_grid(values: np.ndarray, step: int, grid: tuple[int, ...]) -> np.ndarray:
    """A sampled grid's values (its shape plus any trailing axes) spread over the `step`^d blocks they stand for,
    cut to `grid`."""
    for axis, n in enumerate(grid):
        values = np.repeat(values, step, axis=axis).take(np.arange(n), axis=axis)
    return values


def pool_log_linear(p: np.ndarray, q: np.ndarray, weight: float) -> np.ndarray:
    """(n, K) float32 posterior proportional to p^(1 - weight) q^weight, both floored at 1e-6 (no single cue
    vetoes a class)."""
    out = np.empty(p.shape, dtype=np.float32)
    run_ranges(_pool_two_range, p.shape[0], np.ascontiguousarray(p, dtype=np.float32),
               np.ascontiguousarray(q, dtype=np.float32), float(weight), out, min_per_thread=4096)
    return out


@njit(cache=True, nogil=True)
def _pool_two_range(i0, i1, p, q, weight, out):  # pragma: no cover - numba
    n_cls = p.shape[1]
    low = np.log(1e-6)
    for i in range(i0, i1):
        top = -np.inf
        for k in range(n_cls):
            v = ((1.0 - weight) * max(np.log(max(p[i, k], 1e-30)), low)
                 + weight * max(np.log(max(q[i, k], 1e-30)), low))
            out[i, k] = v
            top = max(top, v)
        exp_normalise(out[i], top)


@njit(cache=True, nogil=True)
def _pool_range(i0, i1, dist, p_forest, a, floor, out):  # pragma: no cover - numba
    """Pooled posterior p proportional to p_g^a p_f^(1 - a) for voxels i0..i1, with p_g(k) proportional to
    1 / (D_k + floor) and both floored at 1e-6 (no single cue vetoes a class)."""
    n_cls = dist.shape[1]
    low = np.log(1e-6)
    for i in range(i0, i1):
        total = 0.0
        for k in range(n_cls):
            total += 1.0 / (dist[i, k] + floor)
        log_total = np.log(total)
        top = -np.inf
        for k in range(n_cls):
            log_geo = max(-np.log(dist[i, k] + floor) - log_total, low)
            log_forest = max(np.log(max(p_forest[i, k], 1e-30)), low)
            v = a * log_geo + (1.0 - a) * log_forest
            out[i, k] = v
            top = max(top, v)
        exp_normalise(out[i], top)
