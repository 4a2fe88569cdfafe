"""Hyper-parameters declared once per estimator class and checked by one function.

Each estimator lists ``parameter_constraints``: name -> a rule below. `check_params` checks every declared
hyper-parameter of an estimator against its rule at `fit` and raises `InvalidInputError` naming the class, the
parameter, what it accepts and what it got (scikit-learn's ``parameter_constraints`` idea, in a few lines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imageforest.exceptions import InvalidInputError


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Rule:
    """A rule accepts a value or not, and says what it accepts."""

    allow_none: bool = field(default=False, kw_only=True)

    def accepts(self, value: Any) -> bool:
        return (self.allow_none and value is None) or self._accepts(value)

    def _accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        text = self._describe()
        return f"{text} or None" if self.allow_none else text

    def _describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Integer(Rule):
    low: int = 0
    high: int | None = None

    def _accepts(self, value: Any) -> bool:
        return _is_int(value) and value >= self.low and (self.high is None or value <= self.high)

    def _describe(self) -> str:
        return f"an integer >= {self.low}" + (f" and <= {self.high}" if self.high is not None else "")


@dataclass(frozen=True)
class Real(Rule):
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False

    def _accepts(self, value: Any) -> bool:
        if not _is_real(value) or not math.isfinite(float(value)):
            return False
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def _describe(self) -> str:
        parts = []
        if self.low > -math.inf:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high < math.inf:
            parts.append(f"<= {self.high:g}")
        return "a finite number" + (" " + " and ".join(parts) if parts else "")


@dataclass(frozen=True)
class Options(Rule):
    choices: tuple[str, ...] = ()

    def _accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.choices

    def _describe(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)


@dataclass(frozen=True)
class Boolean(Rule):
    def _accepts(self, value: Any) -> bool:
        return isinstance(value, (bool, np.bool_))

    def _describe(self) -> str:
        return "True or False"


@dataclass(frozen=True)
class Candidates(Rule):
    """rho: a positive count, a fraction of the features in (0, 1], or 'sqrt', 'log2', 'all'."""

    def _accepts(self, value: Any) -> bool:
        if isinstance(value, str):
            return value in ("sqrt", "log2", "all")
        if _is_int(value):
            return value >= 1
        return _is_real(value) and 0.0 < value <= 1.0

    def _describe(self) -> str:
        return "a positive integer, a fraction in (0, 1], 'sqrt', 'log2' or 'all'"


@dataclass(frozen=True)
class Samples(Rule):
    """Points per tree: a positive count or a fraction in (0, 1]."""

    def _accepts(self, value: Any) -> bool:
        return (_is_int(value) and value >= 1) or (_is_real(value) and not _is_int(value) and 0.0 < value <= 1.0)

    def _describe(self) -> str:
        return "a positive integer or a fraction in (0, 1]"


@dataclass(frozen=True)
class Seed(Rule):
    """random_state: None, a non-negative integer or a numpy Generator."""

    def _accepts(self, value: Any) -> bool:
        return value is None or (_is_int(value) and value >= 0) or isinstance(value, np.random.Generator)

    def _describe(self) -> str:
        return "None, an integer >= 0 or a numpy Generator"


@dataclass(frozen=True)
class ClassWeight(Rule):
    def _accepts(self, value: Any) -> bool:
        return value is None or value == "balanced" or (
            isinstance(value, dict) and all(_is_real(w) and w >= 0 for w in value.values()))

    def _describe(self) -> str:
        return "None, 'balanced' or a dict of class -> weight >= 0"


@dataclass(frozen=True)
class Threads(Rule):
    """n_jobs: None or -1 (every core), or a positive count."""

    def _accepts(self, value: Any) -> bool:
        return value is None or (_is_int(value) and (value == -1 or value >= 1))

    def _describe(self) -> str:
        return "None, -1 or a positive integer"


@dataclass(frozen=True)
class Either(Rule):
    """Any value one of `rules` accepts."""

    rules: tuple[Rule, ...] = ()

    def _accepts(self, value: Any) -> bool:
        return any(rule.accepts(value) for rule in self.rules)

    def _describe(self) -> str:
        return " or ".join(rule.describe() for rule in self.rules)


@dataclass(frozen=True)
class RealEach(Real):
    """A number, or a non-empty list or tuple of them (one per class, organ, ...), each within the bounds."""

    def _accepts(self, value: Any) -> bool:
        if isinstance(value, (list, tuple)):
            return len(value) > 0 and all(Real._accepts(self, v) for v in value)
        return Real._accepts(self, value)

    def _describe(self) -> str:
        return Real._describe(self) + ", or a list of them"


@dataclass(frozen=True)
class Anything(Rule):
    """No check here (the parameter is checked where it is used, e.g. a feature family)."""

    def _accepts(self, value: Any) -> bool:
        return True

    def _describe(self) -> str:
        return "anything"


def check_params(estimator: Any) -> None:
    """Check every hyper-parameter of `estimator` against its class's ``parameter_constraints``."""
    rules: dict[str, Rule] = type(estimator).parameter_constraints
    for name, value in estimator.get_params().items():
        rule = rules.get(name)
        if rule is None:
            raise TypeError(f"{type(estimator).__name__} declares no rule for its parameter {name!r}")
        if not rule.accepts(value):
            raise InvalidInputError(f"{type(estimator).__name__}: {name} must be {rule.describe()}, got {value!r}")


# The growth hyper-parameters every forest shares, in the monograph's vocabulary (T, D, rho, K).
GROWTH = {
    "n_trees": Integer(1),
    "max_depth": Integer(0, allow_none=True),
    "weak_learner": Options(choices=("axis", "oblique", "conic")),
    "n_candidates": Candidates(),
    "n_thresholds": Integer(1, allow_none=True),
    "bootstrap": Boolean(),
    "max_samples": Samples(allow_none=True),
    "min_samples_split": Integer(2),
    "min_samples_leaf": Integer(1),
    "min_gain": Real(0.0),
    "structure": Options(choices=("tree", "fern")),
    "two_sided": Boolean(),
    "random_state": Seed(),
    "n_jobs": Threads(),
}
