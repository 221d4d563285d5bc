"""Batched primitives on the CPU backend: grouped two-layer step, cosine Gram."""

import numpy as np
import pytest
from planting import planted_copy

import smallinit.kernels as K
from smallinit.kernels import cpu, pointwise

ACTS = pointwise.NAMES


def ragged(seed, widths, n=5, d=3, per_network=False, bias=True, dtype=np.float64):
    r = np.random.default_rng(seed)
    G, M = len(widths), int(sum(widths))
    X = r.standard_normal((G, n, d) if per_network else (n, d))
    y = r.standard_normal((G, n))
    a, W = r.standard_normal(M), r.standard_normal((M, d))
    b = r.standard_normal(M) if bias else None
    alpha = r.uniform(0.5, 2.0, G)

    def cast(v):
        return None if v is None else v.astype(dtype)

    return cast(X), cast(y), cast(a), cast(W), cast(b), K.offsets_from_widths(widths), cast(alpha)


def assert_vectorized_step_matches_loop(step, act, per_network):
    """``step`` (the vectorized CPU grouped step, or a planted copy of it) against the loop
    over the one definition (kernels/two_layer.py), float64. Tolerance: the vectorized step
    sums over neurons with ``reduceat`` and over points through BLAS, and divides by α
    where the loop multiplies by 1/α, so they differ by a few ulps."""
    X, y, a, W, b, off, al = ragged(1, [4, 0, 7, 1], per_network=per_network)
    got = step(X, y, a, W, b, off, al, act)
    want = cpu.grouped_two_layer_step_loop(X, y, a, W, b, off, al, act)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("per_network", [False, True])
def test_grouped_step_matches_per_network_loop(act, per_network):
    def step(X, y, a, W, b, off, al, act):
        return K.grouped_two_layer_step(X, y, a, W, b, offsets=off, alpha=al, activation=act)

    assert_vectorized_step_matches_loop(step, act, per_network)


PLANTED = {
    "bias-gradient-sign": ("grad_b = ones @ D if", "grad_b = -ones @ D if"),
    "input-weight-gradient-of-the-shared-data-transposed": (
        "grad_W = D.T @ X\n",
        "grad_W = (D.T @ X)[:, ::-1]\n",
    ),
    "errors-of-the-neighbouring-network": (
        "Ek = np.repeat(E, widths, axis=1)",
        "Ek = np.repeat(np.roll(E, 1, axis=1), widths, axis=1)",
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_error_in_the_vectorized_step_fails_the_check(name):
    bad = planted_copy(cpu, *PLANTED[name])
    with pytest.raises(AssertionError):
        assert_vectorized_step_matches_loop(bad.grouped_two_layer_step, "tanh", False)


def test_grouped_step_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    widths = [3, 5, 2]
    X, y, a, W, b, off, al = ragged(2, widths, n=6, d=4)
    torch_act = {
        "relu": torch.relu,
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "softplus": torch.nn.functional.softplus,
        "xtanh": lambda z: z * torch.tanh(z),
        "x2tanh": lambda z: z * z * torch.tanh(z),
        "gelu": torch.nn.functional.gelu,
    }
    for act, fn in torch_act.items():
        got = K.grouped_two_layer_step(X, y, a, W, b, offsets=off, alpha=al, activation=act)
        for g in range(len(widths)):
            lo, hi = off[g], off[g + 1]
            ta = torch.tensor(a[lo:hi], requires_grad=True)
            tW = torch.tensor(W[lo:hi], requires_grad=True)
            tb = torch.tensor(b[lo:hi], requires_grad=True)
            f = fn(torch.tensor(X) @ tW.T + tb) @ ta / al[g]
            loss = 0.5 * torch.mean((f - torch.tensor(y[g])) ** 2)
            loss.backward()
            assert got.loss[g] == pytest.approx(loss.item(), rel=1e-12), act
            np.testing.assert_allclose(got.grad_a[lo:hi], ta.grad.numpy(), rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(got.grad_W[lo:hi], tW.grad.numpy(), rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(got.grad_b[lo:hi], tb.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_grouped_step_matches_jax_grad_without_bias():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    X, y, a, W, _, off, al = ragged(3, [6], n=4, d=2, bias=False, dtype=np.float32)

    def loss(a_, W_):
        f = jnp.tanh(jnp.asarray(X) @ W_.T) @ a_ / al[0]
        return 0.5 * jnp.mean((f - y[0]) ** 2)

    ga, gW = jax.grad(loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(W))
    got = K.grouped_two_layer_step(X, y[0], a, W, offsets=off, alpha=al[0], activation="tanh")
    assert got.grad_b is None and got.grad_W.dtype == np.float32
    np.testing.assert_allclose(got.grad_a, np.asarray(ga), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.grad_W, np.asarray(gW), rtol=1e-5, atol=1e-7)


def test_grouped_step_shared_y_alpha_scalar_and_torch_family():
    torch = pytest.importorskip("torch")
    X, y, a, W, b, off, _ = ragged(4, [2, 3])
    got = K.grouped_two_layer_step(
        torch.tensor(X),
        torch.tensor(y[0]),
        torch.tensor(a),
        torch.tensor(W),
        torch.tensor(b),
        offsets=off,
        alpha=2.0,
    )
    assert isinstance(got.grad_W, torch.Tensor)
    want = cpu.grouped_two_layer_step_loop(
        X, np.stack([y[0]] * 2), a, W, b, off, np.array([2.0, 2.0]), "relu"
    )
    np.testing.assert_allclose(got.loss.numpy(), want[0], rtol=1e-12)
    np.testing.assert_allclose(got.grad_W.numpy(), want[2], rtol=1e-12)


def test_grouped_step_descends():
    X, y, a, W, b, off, al = ragged(5, [20, 40], n=8, d=2)
    first = K.grouped_two_layer_step(X, y, a, W, b, offsets=off, alpha=al, activation="tanh")
    lr = 0.05
    a2, W2, b2 = a - lr * first.grad_a, W - lr * first.grad_W, b - lr * first.grad_b
    after = K.grouped_two_layer_step(X, y, a2, W2, b2, offsets=off, alpha=al, activation="tanh")
    assert np.all(after.loss < first.loss)


def test_grouped_step_bad_input():
    X, y, a, W, b, off, al = ragged(6, [2, 3])
    with pytest.raises(ValueError, match="activation"):
        K.grouped_two_layer_step(X, y, a, W, b, offsets=off, activation="swish")
    with pytest.raises(ValueError, match="offsets"):
        K.grouped_two_layer_step(X, y, a, W, b, offsets=[0, 2, 4])
    with pytest.raises(ValueError, match="nondecreasing"):
        K.grouped_two_layer_step(X, y, a, W, b, offsets=[0, 4, 2, 5])
    with pytest.raises(ValueError, match="X"):
        K.grouped_two_layer_step(X[:, :2], y, a, W, b, offsets=off)
    with pytest.raises(ValueError, match="alpha"):
        K.grouped_two_layer_step(X, y, a, W, b, offsets=off, alpha=0.0)
    with pytest.raises(ValueError, match="widths"):
        K.offsets_from_widths([2, -1])


def test_empty_batch_grouped_step():
    X = np.ones((3, 2))
    got = K.grouped_two_layer_step(
        X, np.zeros((0, 3)), np.zeros(0), np.zeros((0, 2)), offsets=[0], alpha=np.ones(0)
    )
    assert got.loss.shape == (0,) and got.grad_W.shape == (0, 2)


def test_backend_decision_rule():
    from smallinit.kernels.backend import decide

    def absent():
        return None, "no cupy"

    assert decide("cpu", absent) == ("cpu", None)
    assert decide(None, absent) == ("cpu", None)
    assert decide("auto", lambda: ("CP", "")) == ("cupy", "CP")
    with pytest.raises(RuntimeError, match="unusable"):
        decide("cupy", absent)
    with pytest.raises(ValueError, match="SMALLINIT_BACKEND"):
        decide("tpu", absent)


@pytest.mark.parametrize("per_network", [False, True])
def test_grouped_step_chunking_matches_loop(monkeypatch, per_network):
    monkeypatch.setattr(cpu, "CHUNK_NEURONS", 5)
    X, y, a, W, b, off, al = ragged(8, [3, 9, 0, 2, 2, 1, 7], per_network=per_network)
    got = cpu.grouped_two_layer_step(X, y, a, W, b, off, al, "tanh")
    want = cpu.grouped_two_layer_step_loop(X, y, a, W, b, off, al, "tanh")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
