"""The CUDA kernels' test cases, their reference values and their tolerances: one list,
run on a GPU by test_kernels_gpu.py and on the CPU emulation of CUDA by
test_kernels_emulated.py.

Tolerances are error bounds derived from the terms, not fixed rtol/atol. A kernel computing
in a float format with unit roundoff u (2⁻²⁴ float32, 2⁻⁵³ float64) is compared with the
float64 NumPy reference on the same (already rounded) inputs, so the tolerance is the bound
on the kernel's error plus the same bound at u = 2⁻⁵³ for the reference's. Each bound is the
first-order running error analysis of the formulas (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., §3.1 and §4.2): a sum of N terms t_k computed in any order
is off by at most γ_{N−1}·Σ|t_k| with γ_k = k·u/(1 − k·u), and errors of the terms add their
own absolute bounds. It holds whatever order the threads add in (warp shuffles, atomics,
FMA contraction only remove roundings).
"""

from __future__ import annotations

import numpy as np
import pytest

import smallinit.kernels as K
from smallinit.kernels import cpu, pointwise

GRAM_SHAPES = [
    (1, 1),
    (0, 3),
    (2, 0, 4),
    (1, 1, 1),
    (130, 7),
    (3, 65, 17),
    (2, 64, 64),
    (5, 200, 129),
]
DTYPES = [np.float32, np.float64]
#: widths of the ragged batch: a lone neuron, an empty network, more neurons than threads
#: (1025 = 4·256 + 1), and a width below a warp
GROUPED_WIDTHS = [1, 0, 300, 1025, 7]
GROUPED_N = 9
GROUPED_D = [1, 5, 17]  # DMAX 4, 8 (256 threads) and 32 (128 threads)
GROUPED_CASES = [
    (act, dtype, per_network, d)
    for act in pointwise.NAMES
    for dtype in DTYPES
    for per_network in (False, True)
    for d in GROUPED_D
]
GROUPED_IDS = [
    f"{a}-{np.dtype(t).name}-{'per' if p else 'shared'}-d{d}" for a, t, p, d in GROUPED_CASES
]
U64 = 2.0**-53
#: |σ̂(z) − σ(z)| ≤ ACT_ROUNDINGS·u·(1 + |z|)² for every activation of grouped_step.cu:
#: each formula makes at most 2 library calls (tanh, exp, log1p, erf: ≤ 2 ulp = 4u each in
#: CUDA, CUDA C++ Programming Guide, "Mathematical Functions") and 5 roundings, on terms of
#: magnitude ≤ 2(1 + |z|)² (the largest: x2tanh's z²·(1 − tanh²z) and 2z·tanh z)
ACT_ROUNDINGS = 2 * (2 * 4 + 5)


def unit_roundoff(dtype) -> float:
    return float(np.finfo(dtype).eps) / 2


def gamma(k: int | np.ndarray, u: float):
    return k * u / (1 - k * u)


def assert_within(got, want, bound, what: str) -> None:
    """|got − want| ≤ bound elementwise; a NaN (an element the kernel never wrote: outputs
    start as NaN bytes in the emulation) fails."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    diff = np.abs(got - want)
    bad = ~(diff <= bound)
    if bad.any():
        i = np.unravel_index(
            np.argmax(np.where(bad, np.nan_to_num(diff, nan=np.inf), -1)), diff.shape
        )
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {diff.size} elements off by more than the bound; "
            f"at {tuple(int(j) for j in i)}: got {got[i]!r}, want {want[i]!r}, bound {bound[i]!r}"
        )


# ----------------------------------------------------------------------------- cosine Gram
def gram_input(shape, dtype) -> np.ndarray:
    W = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if W.size and shape[-2] > 2:
        W[..., 1, :] = 0
    return W


def gram_bound(d: int, u: float) -> float:
    """cos = (W_i·W_j)·r_i·r_j: the dot product is off by γ_d·Σ|w_i w_j|·r_i r_j ≤ γ_d
    (Cauchy–Schwarz), each r = 1/√(Σw²) by γ_{d+2}/2 + γ_2 relatively; clipping only
    shrinks the error. Together at most γ_{2d+6}."""
    return gamma(2 * d + 6, u)


def check_cosine_gram(gram, W: np.ndarray, acc_dtype) -> None:
    """``gram(W)`` (a host array) against the float64 reference within the bound."""
    want = cpu.cosine_gram(W.astype(np.float64))
    d = W.shape[-1]
    bound = np.full(want.shape, gram_bound(d, unit_roundoff(acc_dtype)) + gram_bound(d, U64))
    assert_within(gram(W), want, bound, f"cosine_gram {W.shape} {W.dtype}")


# ----------------------------------------------------------------------------- grouped step
def grouped_inputs(dtype, per_network: bool, d: int, widths=GROUPED_WIDTHS, n=GROUPED_N):
    """(X, y, a, W, b, offsets, alpha) in ``dtype``, drawn as the GPU test always has."""
    r = np.random.default_rng(2)
    off = K.offsets_from_widths(widths)
    G, M = len(widths), int(off[-1])
    X = r.standard_normal((G, n, d) if per_network else (n, d))
    y, a = r.standard_normal((G, n)), r.standard_normal(M) / np.sqrt(M)
    W, b, al = r.standard_normal((M, d)), r.standard_normal(M), r.uniform(0.5, 2, G)
    return (*(v.astype(dtype) for v in (X, y, a, W, b)), off, al.astype(dtype))


def grouped_step_bound(X, y, a, W, b, offsets, alpha, act: str, u: float):
    """Bounds on |computed − exact| of (loss, grad_a, grad_W, grad_b, f) for the grouped
    step in a format of unit roundoff u (first order; module docstring). With ε_q the bound
    on quantity q and Σ over a network's N neurons k or its n points i:

      ε_z = γ_{d+1}(Σ_j|w_kj x_ij| + |b_k|); ε_σ = ACT_ROUNDINGS·u·(1+|z|)² plus the change of
      σ (and σ') over [z − ε_z, z + ε_z] (which also catches relu's step);
      ε_f = (γ_{N+3} Σ|a_k σ_ik| + Σ|a_k| ε_σ,ik)/|α|;  ε_e = ε_f + u(|f| + |y|);
      ε_R = Σ|e_i| ε_e,i / n + γ_{n+3} R;
      ε_∂a = c(γ_{n+3} Σ|e_i σ_ik| + Σ(ε_e,i |σ_ik| + |e_i| ε_σ,ik)), c = 1/(n|α|);
      ε_∂b = c|a_k|(γ_{n+4} Σ|e_i σ'_ik| + Σ(ε_e,i |σ'_ik| + |e_i| ε_σ',ik)), ε_∂W likewise
      with |x_ij| inside the sums.
    """
    X, y, a, W, alpha = (np.asarray(v, dtype=np.float64) for v in (X, y, a, W, alpha))
    b = None if b is None else np.asarray(b, dtype=np.float64)
    G, n, d = offsets.size - 1, y.shape[-1], W.shape[1]
    y = np.broadcast_to(y, (G, n))
    alpha = np.broadcast_to(alpha, (G,))
    e_loss, e_f = np.zeros(G), np.zeros((G, n))
    e_ga, e_gW, e_gb = np.zeros_like(a), np.zeros_like(W), np.zeros_like(a)

    def sigma(z):
        return pointwise.forward_and_derivative(act, z)

    for g in range(G):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        N = hi - lo
        Xg = X if X.ndim == 2 else X[g]
        bg = 0.0 if b is None else b[lo:hi]
        z = Xg @ W[lo:hi].T + bg
        dz = gamma(d + 1, u) * (np.abs(Xg) @ np.abs(W[lo:hi]).T + np.abs(bg))
        h, dh = sigma(z)
        (hp, dhp), (hm, dhm) = sigma(z + dz), sigma(z - dz)
        env = ACT_ROUNDINGS * u * (1 + np.abs(z)) ** 2
        eh = env + np.maximum(np.abs(hp - h), np.abs(hm - h))
        edh = env + np.maximum(np.abs(dhp - dh), np.abs(dhm - dh))
        A = np.abs(a[lo:hi])
        f = h @ a[lo:hi] / alpha[g]
        e = f - y[g]
        e_f[g] = (gamma(N + 3, u) * (np.abs(h) @ A) + eh @ A) / abs(alpha[g])
        ee = e_f[g] + u * (np.abs(f) + np.abs(y[g]))
        e_loss[g] = np.abs(e) @ ee / n + gamma(n + 3, u) * 0.5 * np.mean(e * e)
        c = 1.0 / (n * abs(alpha[g]))
        ae = np.abs(e)
        e_ga[lo:hi] = c * (gamma(n + 3, u) * (ae @ np.abs(h)) + ee @ np.abs(h) + ae @ eh)
        S = ae[:, None] * np.abs(dh)
        E = ee[:, None] * np.abs(dh) + ae[:, None] * edh
        e_gb[lo:hi] = c * A * (gamma(n + 4, u) * S.sum(0) + E.sum(0))
        e_gW[lo:hi] = c * A[:, None] * (gamma(n + 4, u) * (S.T @ np.abs(Xg)) + E.T @ np.abs(Xg))
    return e_loss, e_ga, e_gW, (None if b is None else e_gb), e_f


def check_grouped_step(step, inputs, act: str) -> None:
    """``step(X, y, a, W, b, offsets, alpha, act)`` (host arrays) against the float64
    reference on the same inputs, each output within its bound."""
    X, y, a, W, b, off, al = inputs
    wide = [None if v is None else np.asarray(v, dtype=np.float64) for v in (X, y, a, W, b)]
    want = cpu.grouped_two_layer_step_loop(*wide, off, al.astype(np.float64), act)
    u = unit_roundoff(W.dtype)
    bounds = [
        None if (p is None) else p + q
        for p, q in zip(
            grouped_step_bound(*wide, off, al, act, u),
            grouped_step_bound(*wide, off, al, act, U64),
            strict=True,
        )
    ]
    got = step(X, y, a, W, b, off, al, act)
    for name, g, w, bnd in zip(
        ("loss", "grad_a", "grad_W", "grad_b", "f"), got, want, bounds, strict=True
    ):
        if w is None:
            assert g is None, f"{name}: expected None"
            continue
        assert_within(g, w, bnd, f"grouped step {act} {W.dtype} d={W.shape[1]} {name}")


def check_no_bias_empty_batch_and_cpu_fallback(step) -> None:
    """No networks at all; then d = 40, past every DMAX: the CPU reference, with a warning."""
    empty = step(
        np.ones((3, 2)),
        np.zeros((0, 3)),
        np.zeros(0),
        np.zeros((0, 2)),
        None,
        np.array([0]),
        np.ones(0),
        "relu",
    )
    assert empty.loss.shape == (0,) and empty.grad_b is None
    r = np.random.default_rng(3)
    off = K.offsets_from_widths([4, 6])
    X, y = r.standard_normal((5, 40)), r.standard_normal((2, 5))
    a, W = r.standard_normal(10), r.standard_normal((10, 40))
    with pytest.warns(UserWarning, match="CPU"):
        got = step(X, y, a, W, None, off, np.ones(2), "tanh")
    want = cpu.grouped_two_layer_step_loop(X, y, a, W, None, off, np.ones(2), "tanh")
    np.testing.assert_allclose(np.asarray(got.grad_W), want[2], rtol=1e-11)
