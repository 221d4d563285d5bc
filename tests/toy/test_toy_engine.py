"""The two-layer JAX engine: gradients, conservation law, determinism, failure records."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from planting import planted_copy  # noqa: E402

from smallinit.kernels import two_layer  # noqa: E402
from smallinit.theory.phase import conserved_quantities  # noqa: E402
from smallinit.toy import grouped_engine  # noqa: E402
from smallinit.toy import twolayer as tl  # noqa: E402


def _batch(points, m, seeds=(0,)):
    a0, W0, k, kp = [], [], [], []
    for g, gp in points:
        for s in seeds:
            a, W = tl.init_asi(s, m, 2)
            kappa, kappa_p = tl.kappas(*tl.luo_family(g, gp, m))
            a0.append(a)
            W0.append(W)
            k.append(kappa)
            kp.append(kappa_p)
    return np.stack(a0), np.stack(W0), np.array(k), np.array(kp)


def test_luo_family_has_the_requested_coordinates():
    for m in (100, 1000):
        kappa, kappa_p = tl.kappas(*tl.luo_family(1.25, -0.5, m))
        assert -np.log(kappa) / np.log(m) == pytest.approx(1.25)
        assert -np.log(kappa_p) / np.log(m) == pytest.approx(-0.5)


def test_asi_output_is_zero_at_init():
    X, y = tl.reference_data()
    a, W = tl.init_asi(3, 40, 2)
    f = np.maximum(X @ W.T, 0) @ a
    assert np.abs(f).max() < 1e-12


@pytest.mark.parametrize("act", ["relu", "tanh", "xtanh"])
def test_closed_form_gradients_match_autodiff(act):
    import jax.numpy as jnp

    X, y = tl.reference_data()
    rng = np.random.default_rng(0)
    a, W = rng.normal(size=12), rng.normal(size=(12, 2))
    kappa = 0.3
    fn = tl.activation(act)

    def loss(a, W):
        f = kappa * (fn(jnp.asarray(X) @ W.T) @ a)
        return 0.5 * jnp.mean((f - y) ** 2)

    ga, gW = jax.grad(loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(W))
    L, ca, cW = tl.gradients(
        jnp.asarray(a), jnp.asarray(W), kappa, jnp.asarray(X), jnp.asarray(y), act
    )
    np.testing.assert_allclose(ca, ga, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(cW, gW, rtol=1e-10, atol=1e-14)


def assert_fast_steps_take_the_plain_step(engine, act, rule, grouped=grouped_engine):
    """The engine's step, taken by both of its paths, is the plain step of
    docs/science.md §2, ā ← ā − (η̄/κ') ∇_ā R and w̄ ← w̄ − η̄ κ' ∇_w̄ R, with the gradients
    of the one definition (:func:`smallinit.kernels.two_layer.loss_and_gradients`, held to
    autodiff in tests/kernels/test_kernels_two_layer.py) at the step size η̄ it reports (the
    Gram rule's or the fixed one), from the same loss: the one-network ``_single_step``
    itself (of the module ``engine``: the toy's, or a planted copy), and one step of a
    one-step budget through ``train_batch``'s lockstep path (``tail=0``: the step vmapped
    over the batch and frozen at the stop) and through its one-network loop (the default
    on CPU). Tolerance: the step sums with matrix products and folds κ into the step size,
    a few float64 ulps of rounding. The grouped engine (the module ``grouped``; ReLU only
    under the Gram rule) takes the same step, in the ragged layout of the kernels' grouped
    step."""
    import jax.numpy as jnp

    engine.enable_x64()  # the engine's float64, as its public entry points set it
    X, y = engine.reference_data()
    rng = np.random.default_rng(1)
    m = 12
    a0, W0 = rng.normal(size=(1, m)), rng.normal(size=(1, m, 2))
    kappa, kappa_p = 0.3, 0.7
    settings = engine.TrainSettings(activation=act, step_rule=rule, lr=1e-2)
    state, const = engine._setup(a0, W0, np.array([kappa]), np.array([kappa_p]), X, y, settings)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    single = engine._single_step(*engine._pick(state, const, 0), Xj, yj, settings)

    fn = tl.activation(act)
    dfn = tl.derivative(fn)
    loss, ga, gW, _ = two_layer.loss_and_gradients(
        np, X, y, a0[0], W0[0].T, kappa, lambda z: (np.asarray(fn(z)), np.asarray(dfn(z)))
    )
    eta = float(single["eta"])
    plain_a = a0[0] - eta / kappa_p * ga
    plain_W = W0[0] - eta * kappa_p * gW.T
    assert float(single["loss"]) == pytest.approx(float(loss), rel=1e-12)
    np.testing.assert_allclose(single["a"], plain_a, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(single["W"]).T, plain_W, rtol=1e-12, atol=1e-14)
    one = engine.TrainSettings(activation=act, step_rule=rule, lr=1e-2, max_steps=1)
    for tail in (0, None):  # the lockstep path, the one-network loop
        out = engine.train_batch(a0, W0, [kappa], [kappa_p], X, y, one, tail=tail)
        assert out["step"][0] == 1
        np.testing.assert_allclose(out["time"][0], eta, rtol=1e-12)
        np.testing.assert_allclose(out["a"][0], plain_a, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(out["W"][0], plain_W, rtol=1e-12, atol=1e-14)
    if grouped is None or (act != "relu" and rule == "gram"):
        return  # the grouped engine's Gram rule is ReLU's alone (check_settings refuses)
    # the grouped engine's step (the kernels' grouped_two_layer_step, ragged layout), one
    # step of a one-step budget
    out = grouped.train_grouped([a0[0]], [W0[0]], [kappa], [kappa_p], X, y, one)
    assert out["step"][0] == 1
    np.testing.assert_allclose(out["time"][0], eta, rtol=1e-12)
    np.testing.assert_allclose(out["a"], plain_a, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["W"], plain_W, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("act", ["relu", "tanh"])
@pytest.mark.parametrize("rule", ["fixed", "gram"])
def test_each_fast_step_is_the_plain_gradient_step(act, rule):
    assert_fast_steps_take_the_plain_step(tl, act, rule)


#: errors planted in a copy of toy/twolayer.py: each in the step's own lines or in how a
#: path applies it
PLANTED_STEPS = {
    "single-forward-wrong-activation-derivative": (
        "h, S, D = two_layer.hidden(X, W, lambda z: (act(z), dact(z)))",
        "h, S, D = two_layer.hidden(X, W, lambda z: (act(z), act(z)))",
    ),
    "advance-keeps-the-old-input-weights": (
        '"W": jnp.where(move, p["W"], state["W"]),',
        '"W": jnp.where(move, state["W"], p["W"]),',
    ),
    "advance-counts-no-time": (
        '"time": state["time"] + jnp.where(move, p["eta"], 0.0),',
        '"time": state["time"] + jnp.where(move, 0.0, p["eta"]),',
    ),
    "advance-never-freezes-a-stopped-network": (
        'move = live & ~p["stop_now"]',
        "move = live",
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED_STEPS))
def test_a_planted_error_in_a_fast_step_fails_the_check(name):
    """Each check above can fail: a copy of the engine with one wrong line (σ for σ', a
    step that keeps the old weights or counts no time, a batch that steps past a network's
    stop)
    does not take the plain step."""
    bad = planted_copy(tl, *PLANTED_STEPS[name])
    with pytest.raises(AssertionError):
        assert_fast_steps_take_the_plain_step(bad, "tanh", "fixed", grouped=None)


def test_a_planted_error_in_the_one_definition_fails_the_one_network_step(monkeypatch):
    """The one-network step calls the one definition; a wrong sign there (in the copy the
    engine calls, not in the reference's) makes it leave the plain step."""
    bad = planted_copy(
        two_layer, "a_new = a - (eta * kappa / kappa_p)", "a_new = a + (eta * kappa / kappa_p)"
    )
    monkeypatch.setattr(tl, "two_layer", bad)
    with pytest.raises(AssertionError):
        assert_fast_steps_take_the_plain_step(tl, "relu", "gram", grouped=None)


@pytest.mark.parametrize("rule", ["fixed", "gram"])
def test_a_planted_error_in_the_grouped_engines_step_fails_the_check(rule):
    """The grouped engine's step (the kernels' gradients, then its own update) with the
    input weights' preconditioner inverted does not take the plain step."""
    bad = planted_copy(
        grouped_engine,
        "bt.W - seg.spread(eta * kappa_p)[:, None] * out.grad_W",
        "bt.W - seg.spread(eta / kappa_p)[:, None] * out.grad_W",
    )
    with pytest.raises(AssertionError):
        assert_fast_steps_take_the_plain_step(tl, "relu", rule, grouped=bad)


def test_conservation_law_drift_small_under_small_fixed_step():
    """a_k² − ‖w_k‖² per neuron (original variables) is conserved by ReLU gradient flow;
    gradient descent with a small step drifts by O(η) of the change in a_k², and a 10×
    larger step drifts about 10× more (so the check can fail)."""
    X, y = tl.reference_data()
    m, g, gp = 40, 1.0, 0.0
    alpha, b1, b2 = tl.luo_family(g, gp, m)
    a0, W0, k, kp = _batch([(g, gp)], m)
    drifts = []
    for lr in (0.02, 0.2):
        s = tl.TrainSettings(
            step_rule="fixed", lr=lr, max_steps=int(40 / lr), tol=1e-30, record_every=1000
        )
        out = tl.train_batch(a0, W0, k, kp, X, y, s)
        c0 = conserved_quantities(a0[0] * b1, W0[0] * b2)
        c1 = conserved_quantities(out["a"][0] * b1, out["W"][0] * b2)
        moved = np.abs((out["a"][0] * b1) ** 2 - (a0[0] * b1) ** 2).max()
        assert moved > 0.05  # the weights did move (a test that cannot fail otherwise)
        drifts.append(np.abs(c1 - c0).max() / moved)
    assert drifts[0] < 0.01
    assert drifts[1] > 3 * drifts[0]


def test_batched_engine_is_deterministic_and_matches_per_network_loop():
    X, y = tl.reference_data()
    a0, W0, k, kp = _batch([(0.5, 0.0), (1.75, 0.0), (1.0, 0.5)], 100, seeds=(0, 1))
    s = tl.TrainSettings(max_steps=3000)
    one = tl.train_batch(a0, W0, k, kp, X, y, s, chunk=200)
    two = tl.train_batch(a0, W0, k, kp, X, y, s, chunk=200)
    other = tl.train_batch(a0, W0, k, kp, X, y, s, chunk=700, tail=0)
    # lockstep until two networks are left, which finish in the one-network loop
    mixed = tl.train_batch(a0, W0, k, kp, X, y, s, chunk=200, tail=2)
    loop = tl.train_loop(a0, W0, k, kp, X, y, s)
    assert (one["status"] == 0).all()
    for key in ("rd", "loss", "W", "a", "hist_rd", "hist_loss"):
        np.testing.assert_array_equal(one[key], two[key])
        # other chunking: the same steps, compiled in other shapes (last-bit differences)
        np.testing.assert_allclose(one[key], other[key], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(one[key], mixed[key], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(one[key], loop[key], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(one["step"], loop["step"])
    np.testing.assert_array_equal(one["step"], mixed["step"])
    np.testing.assert_allclose(one["hist_rd"], loop["hist_rd"], rtol=1e-9, atol=1e-12)
    assert (one["loss"] < s.tol).all()
    # a different seed gives different numbers
    assert not np.allclose(one["rd"][0], one["rd"][1])


def test_diverging_network_is_recorded_as_failed_and_the_batch_goes_on():
    X, y = tl.reference_data()
    a0, W0, k, kp = _batch([(0.5, 0.0), (1.0, 0.0)], 100)
    # a fixed step that suits the mean-field point is far too large for the NTK point
    # (stable step ~ 1/(m κ²): κ = m^-1/2 there)
    s = tl.TrainSettings(step_rule="fixed", lr=50.0, max_steps=4000)
    out = tl.train_batch(a0, W0, k, kp, X, y, s)
    assert tl.STATUS[out["status"][0]] == "diverged"
    assert tl.STATUS[out["status"][1]] == "converged"
    assert out["loss"][1] < 1e-6


# ----------------------------------------------------------------------------- stalled networks
# (γ, γ') = (1.75, −0.75) at width 20, seed 0 lands on the affine trap within 100 steps (the
# same happens at widths 250–1000 of the benchmark grid); the other two points converge.
TRAP_POINTS = [(1.75, -0.75), (0.5, 0.0), (1.0, 0.75)]


def _trap_run(**overrides):
    X, y = tl.reference_data()
    settings = tl.TrainSettings(max_steps=4000, **overrides)
    return tl.train_batch(*_batch(TRAP_POINTS, 20), X, y, settings)


def test_a_network_at_an_exact_stationary_point_stops_as_stalled_and_nothing_else_moves():
    """docs/science.md §2 "Stopping": the stall rule stops the trapped network (which ran to
    the budget before) and leaves every other network's steps, status and weights as they
    were without the rule."""
    with_rule = _trap_run()
    without = _trap_run(stall_window=10**6)  # no check step is ever reached
    assert list(with_rule["status"]) == [tl.STALLED, tl.CONVERGED, tl.CONVERGED]
    assert without["status"][0] == tl.BUDGET and without["step"][0] == 4000
    assert with_rule["step"][0] == 2000  # the second check: no progress since the first
    for key in ("step", "status", "rd", "loss"):
        np.testing.assert_array_equal(with_rule[key][1:], without[key][1:])
    np.testing.assert_array_equal(with_rule["W"][0], without["W"][0])  # it never moved


def test_the_stalled_network_sits_at_the_least_squares_affine_fit_with_zero_gradient():
    """Why it stalls: every unit is active on all four points or on none, so the network is
    affine on the data, its loss is the least-squares affine fit's, and the residual is
    orthogonal to (x, 1), which makes every gradient component vanish."""
    import jax.numpy as jnp

    X, y = tl.reference_data()
    out = _trap_run()
    a, W = out["a"][0], out["W"][0]
    active = (X @ W.T) > 0
    assert (active.all(axis=0) | ~active.any(axis=0)).all()
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    affine_loss = 0.5 * np.mean((X @ coef - y) ** 2)
    kappa = _batch(TRAP_POINTS[:1], 20)[2][0]
    loss, ga, gW = tl.gradients(
        jnp.asarray(a), jnp.asarray(W), kappa, jnp.asarray(X), jnp.asarray(y), "relu"
    )
    assert float(loss) == pytest.approx(affine_loss, rel=1e-12)
    assert np.abs(np.asarray(ga)).max() < 1e-15 and np.abs(np.asarray(gW)).max() < 1e-15


@pytest.mark.kernel_sensitive
def test_engine_matches_a_python_stepped_pytorch_autograd_loop():
    """The engine against the independent reference of tests/torch_phase_loop.py (autograd
    gradients, closed-form Gram step, same stopping): same status and stopping step for
    every network, RD equal to rounding."""
    import torch_phase_loop as torch_loop  # tests/ is on sys.path (rootdir conftest)

    X, y = tl.reference_data()
    settings = tl.TrainSettings(max_steps=4000)
    batch = _batch(TRAP_POINTS, 20)
    ours = tl.train_batch(*batch, X, y, settings)
    ref = torch_loop.train_scan([batch], X, y, max_steps=4000)
    np.testing.assert_array_equal(ref["status"][0], ours["status"])
    np.testing.assert_array_equal(ref["steps"][0], ours["step"])
    rd = np.linalg.norm(ours["W"] - batch[1], axis=(1, 2)) / np.linalg.norm(batch[1], axis=(1, 2))
    np.testing.assert_allclose(ref["rd"][0], rd, rtol=1e-10)
