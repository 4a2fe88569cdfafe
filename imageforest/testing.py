"""The conformance check every forest estimator passes, the engine's and the applications' alike.

    from imageforest.testing import check_estimator
    check_estimator(MyForest(n_trees=3, max_depth=4, random_state=0), fit=lambda est: est.fit(X, y))

`check_estimator` raises AssertionError naming the first convention the estimator breaks: declared
hyper-parameters, `get_params`/`set_params`, `clone`, NotFittedError before fit, a save/load round trip that gives
back the same bytes, the same bytes on one and on two threads, and the refusal of a bad value for every declared
hyper-parameter (InvalidInputError naming it).
"""

from __future__ import annotations

import copy
import inspect
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from imageforest.estimators.base import BaseForest
from imageforest.estimators.params import (
    Boolean,
    Candidates,
    ClassWeight,
    Integer,
    Options,
    Real,
    Rule,
    Samples,
    Seed,
    Threads,
)
from imageforest.exceptions import InvalidInputError, NotFittedError

Fit = Callable[[BaseForest], Any]


def clone(estimator: BaseForest) -> BaseForest:
    """A new, unfitted estimator with the same hyper-parameters (copied, so that the two share no mutable value)."""
    return type(estimator)(**copy.deepcopy(estimator.get_params()))


def same_params(a: dict, b: dict) -> bool:
    """Whether two hyper-parameter dicts hold equal values; objects without equality of their own (a feature
    family) are equal when of one type with equal attributes."""
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return same_params(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a).__eq__ is object.__eq__ and hasattr(a, "__dict__"):
        return same_params(vars(a), vars(b))
    return bool(a == b)


def bad_value(rule: Rule) -> Any:
    """A value `rule` refuses, or None for a rule that accepts anything."""
    if isinstance(rule, Integer):
        return rule.low - 1
    if isinstance(rule, Real):
        return math.nan
    if isinstance(rule, Options):
        return "no-such-choice"
    if isinstance(rule, Boolean):
        return "yes"
    if isinstance(rule, (Candidates, Samples)):
        return -1
    if isinstance(rule, (Seed, Threads)):
        return -2
    if isinstance(rule, ClassWeight):
        return "heaviest"
    return None


def _vector_fit(estimator: BaseForest) -> Fit:
    """Fit on 120 random 4-D points with targets that suit the estimator's kind."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    kind = getattr(estimator, "_estimator_kind", None)
    if kind == "classifier":
        y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
        if "semi" in estimator.task:
            y = np.where(np.arange(120) % 5 == 0, y, -1)
            y[:2] = [0, 1]
        return lambda est: est.fit(X, y)
    if kind == "regressor":
        return lambda est: est.fit(X, X[:, 0] * 2.0 + np.sin(X[:, 1]))
    return lambda est: est.fit(X)


def _model_bytes(estimator: BaseForest, folder: Path, name: str) -> bytes:
    path = folder / f"{name}.npz"
    estimator.save(path)
    return path.read_bytes()


def _with_threads(estimator: BaseForest, threads: int) -> BaseForest:
    est = clone(estimator)
    if "n_jobs" in est.get_params():
        est.set_params(n_jobs=threads)
    else:  # the engine reads the attribute; the estimator only does not let users set it
        est.n_jobs = threads
    return est


def check_estimator(estimator: BaseForest, fit: Fit | None = None) -> None:
    """Check that `estimator` keeps the engine's conventions; AssertionError names the first it breaks.

    Parameters
    ----------
    estimator : an unfitted estimator with small settings (a few shallow trees) and an integer random_state
    fit : ``fit(est)`` fits `est` on small data (returning anything); None: random 4-D vectors with class labels,
        regression targets or none, by the estimator's kind (the engine's estimators)
    """
    cls = type(estimator)
    name = cls.__name__
    fit = fit or _vector_fit(estimator)
    assert isinstance(estimator, BaseForest), f"{name} is not a BaseForest"
    assert cls.task, f"{name} declares no task"

    # declared parameters: every __init__ parameter has a rule, is stored as given, and the first alone is positional
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    names = [p.name for p in params]
    missing = sorted(set(names) - set(cls.parameter_constraints))
    assert not missing, f"{name}: no rule in parameter_constraints for {', '.join(missing)}"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:]), \
        f"{name}: parameters after the first must be keyword-only"
    given = estimator.get_params()
    assert list(given) == names, f"{name}.get_params() does not give the __init__ parameters"
    assert same_params(cls(**given).get_params(), given), f"{name}.__init__ changes the values it is given"

    # get_params / set_params / clone
    other = clone(estimator)
    assert other is not estimator and same_params(other.get_params(), given), \
        f"{name}: clone does not keep the parameters"
    assert other.set_params(**given) is other, f"{name}.set_params does not return the estimator"
    try:
        other.set_params(no_such_parameter=1)
    except ValueError:
        pass
    else:
        raise AssertionError(f"{name}.set_params accepts an unknown parameter")

    # not fitted
    try:
        clone(estimator).save(Path(tempfile.gettempdir()) / "never-written.npz")
    except NotFittedError:
        pass
    else:
        raise AssertionError(f"{name}: saving before fit does not raise NotFittedError")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        one = _with_threads(estimator, 1)
        fit(one)
        assert hasattr(one, "forest_"), f"{name}: fit did not set forest_"
        first = _model_bytes(one, folder, "one")

        # save / load round trip
        loaded = cls.load(folder / "one.npz")
        assert type(loaded) is cls, f"{name}.load gives a {type(loaded).__name__}"
        assert _model_bytes(loaded, folder, "again") == first, f"{name}: save, load and save change the bytes"
        assert same_params(loaded.saved_hyper_parameters(), one.saved_hyper_parameters()), \
            f"{name}: load changes the saved hyper-parameters"

        # determinism across thread counts
        two = _with_threads(estimator, 2)
        fit(two)
        assert _model_bytes(two, folder, "two") == first, f"{name}: one and two threads give different models"

    # refusal of bad parameters, each named in the message
    for param in names:
        bad = bad_value(cls.parameter_constraints[param])
        if bad is None:
            continue
        est = clone(estimator).set_params(**{param: bad})
        try:
            fit(est)
        except InvalidInputError as exc:
            assert param in str(exc), f"{name}: the error for a bad {param} does not name it: {exc}"
        else:
            raise AssertionError(f"{name}: fit accepts {param}={bad!r}")
