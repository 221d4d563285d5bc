"""Shared measurements of smallinit.kernels against NumPy references and known answers."""

import numpy as np
import pytest

import smallinit.kernels as K

# the measurements against NumPy references at rel 1e-12, all through numpy's BLAS and LAPACK
pytestmark = pytest.mark.kernel_sensitive


def rng(seed=0):
    return np.random.default_rng(seed)


# ------------------------------------------------------------------ relative distance


def test_relative_distance_matches_definition():
    r = rng()
    w0, w = r.standard_normal((7, 3)), r.standard_normal((7, 3))
    want = np.linalg.norm(w - w0) / np.linalg.norm(w0)
    assert K.relative_distance(w, w0) == pytest.approx(want, rel=1e-12)


def test_relative_distance_list_is_concatenation():
    r = rng(1)
    W0, b0 = r.standard_normal((5, 2)), r.standard_normal(5)
    W, b = W0 + 0.1 * r.standard_normal((5, 2)), b0 + 0.3
    flat = K.relative_distance(np.concatenate([W.ravel(), b]), np.concatenate([W0.ravel(), b0]))
    assert K.relative_distance([W, b], [W0, b0]) == pytest.approx(flat, rel=1e-12)
    # excluding the bias changes the answer (the bias moved most)
    assert K.relative_distance(W, W0) < flat


def test_relative_distance_accepts_torch_and_jax():
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    r = rng(2)
    w0, w = r.standard_normal((4, 4)), r.standard_normal((4, 4))
    want = K.relative_distance(w, w0)
    assert K.relative_distance(torch.tensor(w), torch.tensor(w0)) == pytest.approx(want)
    got = K.relative_distance(jnp.asarray(w, dtype=jnp.float32), jnp.asarray(w0))
    assert got == pytest.approx(want, rel=1e-5)


def test_relative_distance_bad_input():
    with pytest.raises(ValueError, match="shapes"):
        K.relative_distance(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="zero norm"):
        K.relative_distance(np.ones(3), np.zeros(3))


def test_segment_relative_distance_matches_loop():
    r = rng(3)
    widths = [3, 0, 5, 1]
    off = K.offsets_from_widths(widths)
    W0 = r.standard_normal((9, 2))
    W = W0 + r.standard_normal((9, 2)) * np.repeat([0.1, 0, 1.0, 3.0], widths)[:, None]
    got = K.segment_relative_distance(W, W0, off)
    for g in range(4):
        lo, hi = off[g], off[g + 1]
        if hi == lo:
            assert np.isnan(got[g])
        else:
            assert got[g] == pytest.approx(K.relative_distance(W[lo:hi], W0[lo:hi]))


# ------------------------------------------------------------------ cosine Gram


def naive_cos(W):
    m = W.shape[0]
    G = np.zeros((m, m))
    for i in range(m):
        for j in range(m):
            ni, nj = np.linalg.norm(W[i]), np.linalg.norm(W[j])
            G[i, j] = 0.0 if ni == 0 or nj == 0 else W[i] @ W[j] / (ni * nj)
    return G


def test_cosine_gram_batched_against_loop_with_zero_rows():
    r = rng(4)
    W = r.standard_normal((2, 3, 6, 4))
    W[0, 1, 2] = 0
    G = K.cosine_gram(W)
    assert G.shape == (2, 3, 6, 6)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(G[i, j], naive_cos(W[i, j]), atol=1e-12)
    assert G[0, 1, 2, 2] == 0 and np.all(G[0, 1, 2] == 0)


def test_cosine_gram_returns_callers_family():
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    W = rng(5).standard_normal((5, 3)).astype(np.float32)
    Gt = K.cosine_gram(torch.from_numpy(W))
    assert isinstance(Gt, torch.Tensor) and Gt.dtype == torch.float32
    np.testing.assert_allclose(Gt.numpy(), naive_cos(W), atol=1e-6)
    Gj = K.cosine_gram(jnp.asarray(W))
    assert type(Gj).__module__.startswith("jax")
    np.testing.assert_allclose(np.asarray(Gj), naive_cos(W), atol=1e-6)
    with pytest.raises(ValueError, match="ndim"):
        K.cosine_gram(np.ones(3))


def test_leading_eigvec_order_groups_blocks():
    r = rng(6)
    u, v = r.standard_normal(8), r.standard_normal(8)
    v -= (v @ u) / (u @ u) * u
    rows = np.stack([u if i % 2 else v for i in range(10)]) + 0.01 * r.standard_normal((10, 8))
    order = K.leading_eigvec_order(K.cosine_gram(rows))
    parity = np.array([i % 2 for i in order])
    # the two orthogonal groups end up contiguous in the ordering
    assert np.count_nonzero(np.diff(parity)) == 1
    assert sorted(order.tolist()) == list(range(10))


# ------------------------------------------------------------------ clusters


def planted(r, k, m, d, noise=0.01, signs=False):
    centers = r.standard_normal((k, d))
    idx = r.integers(0, k, m)
    idx[:k] = np.arange(k)
    s = r.choice([-1.0, 1.0], m) if signs else np.ones(m)
    scale = r.uniform(0.5, 2.0, m)
    unit = centers[idx] / np.linalg.norm(centers[idx], axis=1)[:, None]
    rows = (s * scale)[:, None] * unit
    return rows + noise * r.standard_normal((m, d)), idx


def test_cluster_count_planted_and_sign_invariance():
    r = rng(7)
    W, _ = planted(r, 3, 120, 10)
    assert K.cluster_count(W) == 3
    Ws, _ = planted(rng(8), 3, 200, 10, signs=True)
    assert K.cluster_count(Ws) == 6
    assert K.cluster_count(Ws, sign_invariant=True) == 3


def test_cluster_count_random_high_dim_and_zero_rows():
    W = rng(9).standard_normal((50, 100))
    W[3] = 0
    labels = K.cluster_labels(W)
    assert labels[3] == -1
    assert K.cluster_count(W) == 49


def test_leader_clusters_do_not_chain_on_a_circle():
    ang = np.linspace(0, 2 * np.pi, 720, endpoint=False)
    W = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    c = K.cluster_count(W, 0.95)
    # each cap spans 2·acos(0.95) ≈ 36°, so at least 10 and at most ~20 clusters
    assert 10 <= c <= 20


# ------------------------------------------------------------------ condensation score


def test_condensation_score_condensed_is_near_one():
    W, _ = planted(rng(10), 2, 300, 20, noise=0.005)
    assert K.condensation_score(W, top_k=2) > 0.99
    assert K.condensation_score(W, top_k=1) < 0.9


def test_condensation_score_random_high_dim_matches_baseline():
    m, d = 400, 64
    W = rng(11).standard_normal((m, d))
    base = K.condensation_baseline(m, d)
    assert base == pytest.approx(4 / m, rel=1e-3)
    assert K.condensation_score(W, np.ones(m)) == pytest.approx(base, rel=1e-9)
    # row-norm amplitudes: a bit above top_k/m, far from condensed
    assert base <= K.condensation_score(W) < 1.5 * base


def test_condensation_score_random_low_dim_matches_baseline():
    m, d = 3000, 2
    W = rng(12).standard_normal((m, d))
    base = K.condensation_baseline(m, d)
    assert base == pytest.approx(4 * np.arccos(0.95) / np.pi, rel=0.01)
    assert K.condensation_score(W, np.ones(m)) == pytest.approx(base, abs=0.06)


def test_condensation_score_amplitude_weighting():
    r = rng(13)
    W = r.standard_normal((100, 30))
    amp = np.full(100, 1e-6)
    amp[:3] = 1.0  # three heavy neurons: all mass in three singleton clusters
    assert K.condensation_score(W, amp, top_k=3) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ValueError, match="amplitude"):
        K.condensation_score(W, -amp)
    with pytest.raises(ValueError, match="top_k"):
        K.condensation_score(W, top_k=0)
    with pytest.raises(ValueError, match="threshold"):
        K.condensation_score(W, threshold=1.5)


def test_cap_fraction_closed_forms_and_monte_carlo():
    t = 0.8
    assert K.cap_fraction(2, t) == pytest.approx(np.arccos(t) / np.pi)
    assert K.cap_fraction(3, t) == pytest.approx((1 - t) / 2)  # Archimedes
    x = rng(14).standard_normal((200_000, 6))
    mc = np.mean(x[:, 0] / np.linalg.norm(x, axis=1) >= 0.5)
    assert K.cap_fraction(6, 0.5) == pytest.approx(mc, abs=0.005)
    assert K.cap_fraction(3, t, sign_invariant=True) == pytest.approx(1 - t)


# ------------------------------------------------------------------ spectra


def test_effective_rank_and_top_share_known_spectra():
    r = rng(15)
    U, _ = np.linalg.qr(r.standard_normal((6, 6)))
    V, _ = np.linalg.qr(r.standard_normal((4, 4)))
    s = np.array([4.0, 2.0, 1.0, 1.0])
    W = U[:, :4] @ np.diag(s) @ V.T
    p = s / s.sum()
    assert K.effective_rank(W) == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-10)
    assert K.top_singular_share(W) == pytest.approx(0.5, rel=1e-10)
    assert K.effective_rank(np.eye(5)) == pytest.approx(5.0)
    assert K.effective_rank(np.outer(np.arange(1, 4), np.ones(7))) == pytest.approx(1.0)
    assert K.effective_rank(np.zeros((3, 3))) == 0.0
    assert K.top_singular_share(np.zeros((3, 3))) == 0.0
    batch = np.stack([np.eye(3), np.diag([1.0, 0, 0])])
    np.testing.assert_allclose(K.effective_rank(batch), [3.0, 1.0])
    np.testing.assert_allclose(K.top_singular_share(batch), [1 / 3, 1.0])


def test_measure_all_keys():
    out = K.measure_all(np.eye(4))
    assert out == pytest.approx(
        {
            "effective_rank": 4.0,
            "top_singular_share": 0.25,
            "cluster_count": 4.0,
            "mean_abs_cosine": 0.0,
        }
    )
