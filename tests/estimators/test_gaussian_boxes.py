"""Gaussian masses inside boxes (`box_masses`): exact where the mass factorises, within 3e-3 (3e-4 on average) of
scipy's Genz code otherwise, deterministic."""

import numpy as np
from scipy import stats

from imageforest.estimators.gaussian_boxes import box_masses, normal_quantile


def _cases(d: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, d, d))
    cov = a @ a.transpose(0, 2, 1) + 0.3 * np.eye(d)
    mean = rng.normal(size=(n, d))
    lo = rng.normal(size=(n, d)) - 1.0
    hi = lo + rng.uniform(0.5, 3.0, size=(n, d))
    lo[rng.random((n, d)) < 0.3] = -np.inf
    hi[rng.random((n, d)) < 0.3] = np.inf
    return mean, cov, lo, hi


def test_quantile_inverts_the_normal_cdf():
    p = np.array([1e-300, 1e-12, 1e-5, 0.02, 0.3, 0.5, 0.9, 0.99999])
    assert np.allclose([normal_quantile(v) for v in p], stats.norm.ppf(p), rtol=1e-10, atol=1e-12)
    # near 1 the float p itself holds few digits of 1 - p
    assert abs(normal_quantile(1 - 1e-12) - stats.norm.ppf(1 - 1e-12)) < 1e-5


def test_masses_match_scipy_and_are_exact_where_they_factorise():
    for d in (2, 4, 7):
        mean, cov, lo, hi = _cases(d, 12, d)
        mass, err = box_masses(mean, cov, lo, hi)
        ref = np.array([stats.multivariate_normal.cdf(hi[k], mean[k], cov[k], lower_limit=lo[k], abseps=1e-7,
                                                      releps=1e-7, maxpts=300_000, rng=0) for k in range(12)])
        assert np.all(np.abs(mass - ref) < 3e-3) and np.mean(np.abs(mass - ref)) < 3e-4, (d, np.abs(mass - ref))
        assert np.all((mass >= 0) & (mass <= 1)) and np.all(err >= 0)
        again, _ = box_masses(mean, cov, lo, hi)
        assert np.array_equal(mass, again)  # a fixed seed: the same leaves get the same masses
        diagonal = cov * np.eye(d)
        exact = np.prod(stats.norm.cdf(hi, mean, np.sqrt(np.diagonal(diagonal, axis1=1, axis2=2)))
                        - stats.norm.cdf(lo, mean, np.sqrt(np.diagonal(diagonal, axis1=1, axis2=2))), axis=1)
        got, err = box_masses(mean, diagonal, lo, hi)
        assert np.allclose(got, exact, atol=1e-14) and np.all(err == 0)
    mean, cov, lo, hi = _cases(4, 3, 0)
    everywhere, err = box_masses(mean, cov, np.full_like(lo, -np.inf), np.full_like(hi, np.inf))
    assert np.allclose(everywhere, 1.0) and np.all(err <= 1e-4)


def test_two_cut_axes_take_a_one_dimensional_rule_to_within_its_stated_error():
    """With two axes cutting the Gaussian, the mass is a 1-D integral: against adaptive quadrature of the same
    integral, the Gauss-Legendre estimate is within the error it reports (and far inside the lattice's)."""
    from scipy import integrate

    mean, cov, lo, hi = _cases(2, 40, 11)
    lo[:, :] = np.where(np.isinf(lo), -1.5, lo)  # both axes cut every Gaussian
    cov[:5] = [[1.0, 0.999], [0.999, 1.0]]  # nearly degenerate: a steep integrand, left to the lattice
    mass, err = box_masses(mean, cov, lo, hi)
    gaps = []
    for k in range(40):
        s1 = np.sqrt(cov[k, 0, 0])
        slope, s2 = cov[k, 1, 0] / cov[k, 0, 0], np.sqrt(cov[k, 1, 1] - cov[k, 1, 0] ** 2 / cov[k, 0, 0])

        def inner(x, k=k, slope=slope, s2=s2, s1=s1):
            c = mean[k, 1] + slope * (x - mean[k, 0])
            return stats.norm.pdf(x, mean[k, 0], s1) * (stats.norm.cdf(hi[k, 1], c, s2)
                                                        - stats.norm.cdf(lo[k, 1], c, s2))

        ref = integrate.quad(inner, lo[k, 0], hi[k, 0], epsabs=1e-13, epsrel=1e-12, limit=200)[0]
        assert abs(mass[k] - ref) <= max(err[k], 1e-12) + 1e-12, (k, mass[k], ref, err[k])
        gaps.append(abs(mass[k] - ref))
    assert np.all(err[5:] < 3e-4) and np.mean(gaps) < 1e-5 and max(gaps) < 1e-4
