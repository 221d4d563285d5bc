"""The one definition of the two-layer step (smallinit.kernels.two_layer): its gradients
against automatic differentiation of the loss written independently here, its descent
against the plain preconditioned step, over NumPy and over jax.numpy; and planted errors in
a copy of the module that these checks must catch."""

from __future__ import annotations

import numpy as np
import pytest
from planting import planted_copy

from smallinit.kernels import pointwise, two_layer

jax = pytest.importorskip("jax")
jnp = jax.numpy

from smallinit.toy.jax_activations import activation, derivative  # noqa: E402
from smallinit.toy.jaxsetup import enable_x64  # noqa: E402

ACTS = ("relu", "tanh", "xtanh", "gelu")
# Tolerance of the float64 comparisons: each gradient entry is a sum over the n = 7 inputs
# of products of O(1) factors, off by at most γ_n Σ|t_i| ≈ 7·1.1e-16·O(10) ≈ 1e-14 in either
# computation (closed form or reverse-mode autodiff, which add in their own orders); 1e-13
# absolute and 1e-12 relative leave a margin of ten, and a planted error (a sign, a lost
# factor) is off by O(1).
RTOL, ATOL = 1e-12, 1e-13


def _problem(seed=0, n=7, d=3, m=10):
    """X̃ = (x, 1) with x ~ N(0, I), y, a, W (d+1, m) and a scale s."""
    r = np.random.default_rng(seed)
    X = np.hstack([r.standard_normal((n, d)), np.ones((n, 1))])
    return X, r.standard_normal(n), r.standard_normal(m), r.standard_normal((d + 1, m)), 0.37


def _sigma(xp, act):
    """(σ, σ') of ``act`` in ``xp``: the kernels' NumPy forms, the toy's JAX forms."""
    if xp is np:
        return lambda z: pointwise.forward_and_derivative(act, z)
    fn, dfn = activation(act), derivative(activation(act))
    return lambda z: (fn(z), dfn(z))


def _autodiff(X, y, a, W, s, act):
    """R, ∂R/∂a, ∂R/∂W by reverse-mode autodiff of R = ½ mean_i (s Σ_k a_k σ(x̃_i·w_k) − y_i)²."""
    fn = activation(act)

    def loss(a, W):
        return 0.5 * jnp.mean((s * (fn(X @ W) @ a) - y) ** 2)

    value, (ga, gW) = jax.value_and_grad(loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(W))
    return float(value), np.asarray(ga), np.asarray(gW)


def check_gradients(module, xp, act) -> None:
    enable_x64()
    X, y, a, W, s = _problem()
    want_loss, want_ga, want_gW = _autodiff(X, y, a, W, s, act)
    args = (X, y, a, W) if xp is np else tuple(jnp.asarray(v) for v in (X, y, a, W))
    loss, ga, gW, f = module.loss_and_gradients(xp, *args, s, _sigma(xp, act))
    assert float(loss) == pytest.approx(want_loss, rel=RTOL)
    np.testing.assert_allclose(np.asarray(ga), want_ga, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.asarray(gW), want_gW, rtol=RTOL, atol=ATOL)
    h, _ = pointwise.forward_and_derivative(act, X @ W)
    np.testing.assert_allclose(np.asarray(f), s * (h @ a), rtol=RTOL, atol=ATOL)


def check_descent(module, xp, act) -> None:
    """descend() is ā − (η/κ') ∇_ā R and w̄ − η κ' ∇_w̄ R with the gradients at scale κ.
    κ enters once as a product of scalars instead of scaling the sums, which moves the
    result by a few ulps of the step."""
    enable_x64()
    X, y, a, W, kappa = _problem(1)
    eta, kappa_p = 0.2, 1.7
    args = (X, y, a, W) if xp is np else tuple(jnp.asarray(v) for v in (X, y, a, W))
    _, ga, gW, _ = two_layer.loss_and_gradients(xp, *args, kappa, _sigma(xp, act))
    _, S, D = module.hidden(args[0], args[3], _sigma(xp, act))
    r, _ = module.residual(xp, module.outputs(S, args[2], kappa), args[1])
    G = module.input_weight_sums(xp, args[0], r, D)
    a_new, W_new = module.descend(args[2], args[3], r, S, G, eta, kappa, kappa_p)
    np.testing.assert_allclose(np.asarray(a_new), a - eta / kappa_p * np.asarray(ga), rtol=RTOL)
    np.testing.assert_allclose(np.asarray(W_new), W - eta * kappa_p * np.asarray(gW), rtol=RTOL)


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jax"])
@pytest.mark.parametrize("act", ACTS)
def test_the_one_definitions_gradients_are_the_loss_gradients(xp, act):
    check_gradients(two_layer, xp, act)


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jax"])
@pytest.mark.parametrize("act", ACTS)
def test_the_one_definitions_descent_is_the_preconditioned_step(xp, act):
    check_descent(two_layer, xp, act)


PLANTED = {
    "sign-of-the-input-weight-sums": ("c = X * r[:, None]", "c = -X * r[:, None]", check_gradients),
    "output-scale-lost": ("return scale * (S @ a)", "return S @ a", check_gradients),
    "mean-over-one-more-input": (
        "return e / y.shape[-1]",
        "return e / (y.shape[-1] + 1)",
        check_gradients,
    ),
    "sign-of-the-output-weight-step": (
        "a_new = a - (eta * kappa / kappa_p)",
        "a_new = a + (eta * kappa / kappa_p)",
        check_descent,
    ),
    "preconditioner-inverted-for-input-weights": (
        "W_new = W - (eta * kappa_p * kappa)",
        "W_new = W - (eta / kappa_p * kappa)",
        check_descent,
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_error_in_the_one_definition_fails_its_check(name):
    text, replacement, check = PLANTED[name]
    bad = planted_copy(two_layer, text, replacement)
    for xp in (np, jnp):
        with pytest.raises(AssertionError):
            check(bad, xp, "tanh")
