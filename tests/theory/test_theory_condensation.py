"""Initial condensation (docs/science.md §3): multiplicity, p = 1 direction, the 1-d polynomial."""

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from smallinit.theory import condensation as C


@pytest.mark.parametrize(
    "name,p",
    [
        ("tanh", 1),
        ("sigmoid", 1),
        ("softplus", 1),
        ("xtanh", 2),
        ("x2tanh", 3),
        ("gelu", 1),
        ("silu", 1),
    ],
)
def test_multiplicity_of_named_activations(name, p):
    assert C.multiplicity(name) == p


def test_leading_derivatives_and_custom_expressions():
    assert C.leading_derivative("sigmoid") == sp.Rational(1, 4)
    assert C.leading_derivative("x2tanh") == 6  # d³/dx³ (x² tanh x) at 0 = 3!·1
    x = C.x
    assert C.multiplicity(sp.sin(x) ** 4 + x**5) == 4
    assert C.multiplicity(sp.cos(x)) == 2  # σ'(0) = 0, σ''(0) = −1


def test_relu_is_reported_not_covered():
    with pytest.raises(ValueError, match="not covered") as err:
        C.multiplicity("relu")
    assert "\n" not in str(err.value)
    table = {row["activation"]: row for row in C.multiplicity_table()}
    assert table["relu"]["covered"] is False and table["relu"]["p"] is None
    assert [table[n]["p"] for n in ("tanh", "xtanh", "x2tanh")] == [1, 2, 3]
    with pytest.raises(ValueError, match="not covered"):
        C.multiplicity(sp.Abs(C.x))
    with pytest.raises(ValueError, match="not known"):
        C.multiplicity("swish2")


def test_p1_direction_on_the_reference_data():
    # docs/science.md §2's 1-d data: x = linspace(−1/2, 1/2, 4), y = x²; Σ y x = 0, so the p = 1
    # orientation is the pure bias direction ±(0, 1).
    x = np.linspace(-0.5, 0.5, 4)
    assert np.allclose(C.condensed_direction_p1(x, x**2), [0.0, 1.0])
    xs = [Fraction(-1, 2), Fraction(-1, 6), Fraction(1, 6), Fraction(1, 2)]
    assert np.allclose(C.candidate_directions_1d(xs, [v * v for v in xs], 1), [[0.0, 1.0]])


def test_p1_polynomial_root_is_the_p1_direction():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-1, 1, 7), rng.standard_normal(7)
    (direction,) = C.candidate_directions_1d(x, y, 1)
    v = C.condensed_direction_p1(x, y)
    assert abs(direction @ v) == pytest.approx(1.0, abs=1e-12)


def test_polynomial_degree_and_p2_eigenvectors():
    rng = np.random.default_rng(2)
    x, e = rng.uniform(-1, 1, 6), rng.standard_normal(6)
    for p in (1, 2, 3):
        assert C.direction_polynomial(x, e, p).degree() == p
    # p = 2: F(w) = M w with M = Σ e_i x̃_i x̃_iᵀ, so the invariant lines are M's eigenvectors
    Xt = np.column_stack([x, np.ones_like(x)])
    _, vecs = np.linalg.eigh((Xt * e[:, None]).T @ Xt)
    dirs = C.candidate_directions_1d(x, e, 2)
    assert len(dirs) == 2
    for v in vecs.T:
        assert max(abs(dirs @ v)) == pytest.approx(1.0, abs=1e-9)


def test_p3_early_dynamics_condense_on_the_polynomial_roots():
    """Integrate the direction of dw/dt = −a Σ_i e_i σ'(w·x̃_i) x̃_i with σ = x² tanh x at
    small w for many neurons: every one ends on a root of the degree-3 polynomial."""
    rng = np.random.default_rng(3)
    x = np.array([-1.0, -0.4, 0.3, 0.9, 1.3])
    e = np.array([1.0, -2.0, 1.5, -1.0, 0.7])
    Xt = np.column_stack([x, np.ones_like(x)])
    dirs = C.candidate_directions_1d(x, e, 3)
    w = rng.standard_normal((64, 2))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    a = rng.choice([-1.0, 1.0], size=(64, 1))
    scale = 1e-3  # small weights: σ'(z) ≈ 3z²
    for _ in range(4000):
        z = scale * (w @ Xt.T)
        dsig = 2 * z * np.tanh(z) + z**2 / np.cosh(z) ** 2  # σ'(z) for σ = z² tanh z
        F = -a * (dsig * e) @ Xt / scale**2
        F -= np.sum(F * w, axis=1, keepdims=True) * w  # tangential part: the direction
        w += 0.01 * F
        w /= np.linalg.norm(w, axis=1, keepdims=True)
    alignment = np.max(np.abs(w @ dirs.T), axis=1)
    assert np.all(alignment > 0.999)
    assert len(dirs) <= 3  # at most p lines, 2p orientations


def test_bad_inputs():
    with pytest.raises(ValueError, match="p=0"):
        C.direction_polynomial([0.1], [1.0], 0)
    with pytest.raises(ValueError, match="must match"):
        C.direction_polynomial([0.1, 0.2], [1.0], 1)
    with pytest.raises(ValueError, match="zero"):  # Σ y_i x_i = 0 without a bias column
        C.condensed_direction_p1(np.array([-1.0, 1.0]), np.array([1.0, 1.0]), bias=False)
