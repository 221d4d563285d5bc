"""The phase-scan training written the way a researcher would write it in PyTorch: one
network at a time, a Python ``for`` loop over steps, autograd for the gradients, ``.item()``
to test the stopping rule after every step (the style of the original phase-diagram code).

It is the reference the JAX engine (:mod:`smallinit.toy.twolayer`) is benchmarked against
in ``make bench`` and checked against in the tests, so it is written independently of the
engine from the formulas of docs/science.md §2 (rescaled variables, Luo et al. 2021):

    f(x) = κ Σ_k ā_k relu(w̄_k·x̃),   R = (1/2n) Σ_i (f(x_i) − y_i)²,
    ā ← ā − (η̄/κ') ∇_ā R,   w̄ ← w̄ − η̄ κ' ∇_w̄ R   (gradients from autograd),
    η̄ = c / (λ̂_max(K) + κ max_k ‖Σ_i r_i relu'(h_ik) x̃_i‖),
    K = (κ²/n) (SS/κ' + κ' DD ∘ X̃X̃ᵀ),  λ̂_max(K) = tr K · tr((K/tr K)^16)^(1/16),

and the same stopping (converged below ``tol``, diverged, stalled, step budget). Only the
initial weights (the ASI draw of :func:`smallinit.toy.twolayer.init_asi`) are shared.
"""

from __future__ import annotations

import math

import numpy as np
import torch

CONVERGED, BUDGET, DIVERGED, STALLED = 0, 1, 2, 3


def train_one(
    a0,
    W0,
    kappa,
    kappa_p,
    X,
    y,
    *,
    tol=1e-6,
    max_steps=20000,
    lr_factor=1.0,
    div_factor=1e6,
    stall_window=1000,
    stall_rtol=1e-12,
):
    """Train one network from (ā0 (m,), w̄0 (m, d)); returns (status, steps, RD, W)."""
    X = torch.as_tensor(X, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64)
    n = X.shape[0]
    XX = X @ X.T
    a = torch.tensor(a0, dtype=torch.float64, requires_grad=True)
    W = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    W_init = W.detach().clone()
    loss0 = ref = None
    status, step = BUDGET, 0
    for step in range(max_steps + 1):
        h = X @ W.T  # (n, m)
        f = kappa * torch.relu(h) @ a
        loss = 0.5 * torch.mean((f - y) ** 2)
        value = loss.item()
        if loss0 is None:
            loss0 = ref = value
        if not math.isfinite(value) or value > div_factor * loss0:
            status = DIVERGED
            break
        if value < tol:
            status = CONVERGED
            break
        if step > 0 and step % stall_window == 0:
            if value >= (1.0 - stall_rtol) * ref:
                status = STALLED
                break
            ref = value
        if step == max_steps:
            break
        a.grad = W.grad = None
        loss.backward()
        with torch.no_grad():
            S, D = torch.relu(h), (h > 0).to(h.dtype)
            r = (f - y) / n
            SS = S @ S.T
            Da = D * a
            K = kappa**2 / n * (SS / kappa_p + kappa_p * (Da @ Da.T) * XX)
            tr = torch.trace(K)
            P = K / tr
            for _ in range(4):
                P = P @ P
            lam = tr * torch.clamp(torch.trace(P), min=0.0) ** (1.0 / 16)
            cross = torch.linalg.vector_norm((r[:, None] * D).T @ X, dim=1).max()
            eta = lr_factor / (lam + kappa * cross)
            a -= eta / kappa_p * a.grad
            W -= eta * kappa_p * W.grad
    with torch.no_grad():
        rd = (torch.linalg.norm(W - W_init) / torch.linalg.norm(W_init)).item()
    return status, step, rd, W.detach().numpy()


def train_scan(batches, X, y, **settings):
    """Every network of ``batches`` = [(a0 (B, m), W0 (B, m, d), κ (B,), κ' (B,)), ...] in
    turn; returns {status, steps, rd}, each a list of arrays of shape (B,), one per batch."""
    out = {"status": [], "steps": [], "rd": []}
    for a0, W0, k, kp in batches:
        res = [
            train_one(a0[i], W0[i], float(k[i]), float(kp[i]), X, y, **settings)
            for i in range(len(k))
        ]
        out["status"].append(np.array([r[0] for r in res]))
        out["steps"].append(np.array([r[1] for r in res]))
        out["rd"].append(np.array([r[2] for r in res]))
    return out
