"""The grouped toy engine: a ragged batch of two-layer nets of different widths, one kernel
call per step, on the kernels' backend (NumPy on CPU, CuPy on a GPU).

Same algorithm as the JAX engine of :mod:`smallinit.toy.twolayer` (docs/science.md §2, Luo, Xu, Ma,
Zhang, JMLR 2021): rescaled variables ā = a/β1, w̄ = w/β2 with f = κ Σ_k ā_k σ(w̄_k·x̃),
preconditioned gradient descent

    ā ← ā − (η̄/κ') ∇_ā R,   w̄ ← w̄ − η̄κ' ∇_w̄ R,

the same step rules (``"gram"``: η̄ = c/L through :mod:`smallinit.toy.steprule`;
``"fixed"``), the same stopping (:mod:`smallinit.toy.stopping`: converged, diverged,
stalled, budget), RD of input weights (biases included) at the
stopping step and RD(t)/loss records every ``record_every`` steps.

Layout (the kernels' ragged layout): the neurons of all B networks are concatenated, ā (M,)
and w̄ (M, d) with M = Σ m_g, network g owning rows ``offsets[g]:offsets[g+1]``. Every step
makes one call of :func:`smallinit.kernels.grouped_two_layer_step` with α_g = 1/κ_g (the
kernel's f = (1/α) Σ a σ(w·x̃)), whose gradients are exactly the rescaled ones:
∂R/∂ā_k = κ Σ_i r_i σ(h_ik), ∂R/∂w̄_k = κ ā_k Σ_i r_i σ'(h_ik) x̃_i, r = (f − y)/n (the one
definition of the step, :mod:`smallinit.kernels.two_layer`, which the kernel is tested
against; this engine adds the step rule and the update ā − (η̄/κ') ∇_ā R, w̄ − η̄κ' ∇_w̄ R).
The Gram bound needs σ(h), σ'(h) per neuron, which the kernel does not return; they are
recomputed with array ops of the same backend, and the per-network sums over neurons are
segment sums (``numpy.add.reduceat`` on the CPU, ``cupyx.scatter_add``/``scatter_max`` on
the GPU), so no step has a Python loop over networks and device arrays stay on the device.

Stopped networks are frozen (``where`` on a per-neuron mask) and, at every record step,
removed from the ragged batch (their state copied to the host); the loop ends when none is
left. Networks run in lockstep from step 0, so the global step is every live network's step.

Differences from the JAX engine: summation orders differ (kernel and reduceat against XLA's
matrix products), so numbers agree to rounding (≈1e-12 relative), not bit for bit; a network
whose loss crosses ``tol`` within rounding of the threshold could stop one step apart. The
``"gram"`` rule's curvature term is written for ReLU only (its σ'' = 0); other activations
need the ``"fixed"`` rule here (the JAX engine has both). On the GPU the segment sums use
atomics, so repeated runs agree to rounding, not bit for bit (on the CPU they are
identical). Use this engine where ``smallinit.kernels.backend() == "cupy"``; on CPU it is
correct but slower than warm JAX (about 4× on 2 cores).

Kept as written: the ``"gram"`` rule builds two (n, n, M) float64 temporaries and
segment-sums them with ``cupyx.scatter_add`` on the GPU (2·n²·8 bytes a neuron, 256 B at
the scans' n = 4). A scan takes this engine on the CuPy backend
(:func:`smallinit.toy.scan.chosen_engine`) or when asked (``--engine grouped``,
``$SMALLINIT_TOY_ENGINE``); no GPU has run a profile's scan through it yet.
"""

from __future__ import annotations

import logging

import numpy as np

from smallinit.kernels import backend as kernels_backend
from smallinit.kernels import grouped_two_layer_step
from smallinit.kernels.backend import cp
from smallinit.toy import steprule, stopping
from smallinit.toy.stopping import BUDGET
from smallinit.toy.twolayer import MAX_POINTS, TrainSettings

log = logging.getLogger(__name__)


def array_module():
    """The kernels' array namespace: ``cupy`` on the cupy backend, else ``numpy``."""
    return cp if kernels_backend() == "cupy" else np


def _host(x) -> np.ndarray:
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


class _Segments:
    """Per-network reductions over the neuron axis (last axis) of the ragged layout."""

    def __init__(self, xp, widths: np.ndarray):
        self.xp = xp
        self.G = int(widths.size)
        self.offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        ids = np.repeat(np.arange(self.G), widths)
        self.ids = xp.asarray(ids)  # neuron → network (device on cupy)

    def sum(self, v):
        if self.xp is np:
            return np.add.reduceat(v, self.offsets[:-1], axis=-1)
        import cupyx  # noqa: PLC0415  (cupy backend only)

        out = self.xp.zeros(v.shape[:-1] + (self.G,), v.dtype)
        cupyx.scatter_add(out, (slice(None),) * (v.ndim - 1) + (self.ids,), v)
        return out

    def max_nonneg(self, v):
        """Segment max of a non-negative (M,) vector."""
        if self.xp is np:
            return np.maximum.reduceat(v, self.offsets[:-1])
        import cupyx  # noqa: PLC0415

        out = self.xp.zeros(self.G, v.dtype)
        cupyx.scatter_max(out, self.ids, v)
        return out

    def spread(self, v):
        """(..., G) per network → (..., M) per neuron."""
        return v[..., self.ids]


class _Batch:
    """Device state of the networks still in the ragged batch (all arrays indexed alike)."""

    FIELDS = (
        "kappa",
        "kappa_p",
        "w0norm",
        "loss0",
        "loss_ref",
        "step",
        "stop",
        "status",
        "loss",
        "rd",
        "time",
    )

    def __init__(self, xp, idx, widths, a, W, W0, per_net):
        self.xp, self.idx, self.widths = xp, idx, widths
        self.a, self.W, self.W0 = a, W, W0
        self.net = per_net
        self.seg = _Segments(xp, widths)
        self.alpha = 1.0 / _host(per_net["kappa"])  # host: the kernel reads α on the host

    def keep(self, mask: np.ndarray) -> _Batch:
        rows = self.xp.asarray(np.repeat(mask, self.widths))
        sel = self.xp.asarray(mask)
        return _Batch(
            self.xp,
            self.idx[mask],
            self.widths[mask],
            self.a[rows],
            self.W[rows],
            self.W0[rows],
            {k: v[sel] for k, v in self.net.items()},
        )


def _step(bt: _Batch, k: int, X, y, XX, settings: TrainSettings):
    """One step of every live network of ``bt`` at global step ``k`` (in place); returns the
    (loss, RD, live) of this step, as in the JAX engine's ``_step``."""
    xp, seg, net = bt.xp, bt.seg, bt.net
    n = X.shape[0]
    out = grouped_two_layer_step(
        X, y, bt.a, bt.W, offsets=seg.offsets, alpha=bt.alpha, activation=settings.activation
    )
    loss = out.loss
    dW = bt.W - bt.W0
    rd = xp.sqrt(seg.sum(xp.sum(dW * dW, axis=1))) / net["w0norm"]
    status, stop_now, loss_ref = stopping.decide(
        loss, net["loss0"], net["loss_ref"], k, settings, xp
    )
    live = ~net["stop"]
    move = live & ~stop_now
    kappa, kappa_p = net["kappa"], net["kappa_p"]
    if settings.step_rule == "gram":
        h = X @ bt.W.T  # (n, M)
        S = xp.maximum(h, 0.0)
        D = (h > 0).astype(h.dtype)
        Da = D * bt.a
        SS = xp.moveaxis(seg.sum(S[:, None, :] * S[None, :, :]), -1, 0)  # (B, n, n)
        DD = xp.moveaxis(seg.sum(Da[:, None, :] * Da[None, :, :]), -1, 0)
        K = steprule.tangent_gram(SS, DD, XX, kappa, kappa_p, n)
        r = (out.f - y) / n  # (B, n)
        Gk = (seg.spread(r.T) * D).T @ X  # (M, d): Σ_i r_i σ'(h_ik) x̃_i
        cross = xp.sqrt(xp.sum(Gk * Gk, axis=1))
        eta = steprule.gram_rate(K, seg.max_nonneg(cross), kappa, settings.lr_factor, xp)
    else:
        eta = xp.full(kappa.shape, settings.lr, loss.dtype)
    rows = seg.spread(move)
    bt.a = xp.where(rows, bt.a - seg.spread(eta / kappa_p) * out.grad_a, bt.a)
    bt.W = xp.where(rows[:, None], bt.W - seg.spread(eta * kappa_p)[:, None] * out.grad_W, bt.W)
    net["loss_ref"] = xp.where(live, loss_ref, net["loss_ref"])
    net["step"] = xp.where(move, net["step"] + 1, net["step"]).astype(np.int32)
    net["stop"] = net["stop"] | stop_now
    net["status"] = xp.where(live, status, net["status"])
    net["loss"] = xp.where(live, loss, net["loss"])
    net["rd"] = xp.where(live, rd, net["rd"])
    net["time"] = net["time"] + xp.where(move, eta, 0.0)
    return loss, rd, live


def check_settings(settings: TrainSettings) -> None:
    """ValueError for settings this engine does not implement (the ReLU-only Gram rule)."""
    if settings.step_rule == "gram" and settings.activation != "relu":
        raise ValueError(
            f"activation={settings.activation!r} with step_rule='gram' is not "
            "supported by the grouped engine (ReLU only); use the jax engine "
            "or step_rule='fixed'"
        )


def train_grouped(a0, W0, kappa, kappa_p, X, y, settings: TrainSettings) -> dict:
    """Train B networks of any widths together; returns a dict of NumPy arrays.

    a0: list of (m_g,), W0: list of (m_g, d) (rescaled ASI inits), kappa, kappa_p (B,),
    X (n, d), y (n,). Keys as :func:`smallinit.toy.twolayer.train_batch` (``step``,
    ``status``, ``loss``, ``rd``, ``time``, ``hist_rd``, ``hist_loss``), except that ``a``
    (M,) and ``W`` (M, d) are in the ragged layout, with ``offsets`` (B+1,).
    """
    check_settings(settings)
    X = np.asarray(X, np.float64)
    if X.shape[0] > MAX_POINTS:
        raise ValueError(
            f"{X.shape[0]} data points are not allowed; the Gram step is written "
            f"for small data sets (at most {MAX_POINTS} points)"
        )
    xp = array_module()
    widths = np.array([len(a) for a in a0], np.int64)
    B = widths.size
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    a_all = np.concatenate([np.asarray(a, np.float64) for a in a0])
    W_all = np.concatenate([np.asarray(w, np.float64) for w in W0])
    kappa = np.asarray(kappa, np.float64)
    per_net = {
        "kappa": kappa,
        "kappa_p": np.asarray(kappa_p, np.float64),
        "w0norm": np.sqrt(np.add.reduceat((W_all * W_all).sum(axis=1), offsets[:-1])),
        "loss0": np.zeros(B),
        "loss_ref": np.zeros(B),
        "step": np.zeros(B, np.int32),
        "stop": np.zeros(B, bool),
        "status": np.full(B, BUDGET, np.int32),
        "loss": np.zeros(B),
        "rd": np.zeros(B),
        "time": np.zeros(B),
    }
    bt = _Batch(
        xp,
        np.arange(B),
        widths,
        xp.asarray(a_all),
        xp.asarray(W_all),
        xp.asarray(W_all),
        {k: xp.asarray(v) for k, v in per_net.items()},
    )
    Xd, yd = xp.asarray(X), xp.asarray(np.asarray(y, np.float64))
    XX = Xd @ Xd.T
    bt.net["loss0"] = grouped_two_layer_step(
        Xd, yd, bt.a, bt.W, offsets=offsets, alpha=bt.alpha, activation=settings.activation
    ).loss
    bt.net["loss"] = bt.net["loss_ref"] = bt.net["loss0"]
    res = {
        k: np.asarray(v).copy()
        for k, v in per_net.items()
        if k in ("step", "status", "loss", "rd", "time")
    }
    res_a, res_W = a_all.copy(), W_all.copy()
    re = settings.record_every
    hist_rd = np.full((B, settings.n_records), np.nan)
    hist_loss = np.full((B, settings.n_records), np.nan)
    k = 0
    while bt.idx.size:
        loss, rd, live = _step(bt, k, Xd, yd, XX, settings)
        if k % re == 0:  # record, then set the stopped networks aside
            if k // re < settings.n_records:
                live_h = _host(live)
                hist_rd[bt.idx, k // re] = np.where(live_h, _host(rd), np.nan)
                hist_loss[bt.idx, k // re] = np.where(live_h, _host(loss), np.nan)
            done = _host(bt.net["stop"])
            if done.any():
                _store(bt, done, res, res_a, res_W, offsets)
                bt = bt.keep(~done)
        k += 1
    log.info("grouped engine: %d networks (%d neurons), %d steps", B, offsets[-1], k)
    res.update(a=res_a, W=res_W, offsets=offsets, hist_rd=hist_rd, hist_loss=hist_loss)
    return res


def _store(bt: _Batch, done: np.ndarray, res, res_a, res_W, offsets) -> None:
    """Copy the final state of the stopped networks ``done`` of ``bt`` to the host results."""
    gone = bt.idx[done]
    for key in res:
        res[key][gone] = _host(bt.net[key])[done]
    rows = bt.xp.asarray(np.repeat(done, bt.widths))
    dst = np.concatenate([np.arange(offsets[g], offsets[g + 1]) for g in gone])
    res_a[dst] = _host(bt.a[rows])
    res_W[dst] = _host(bt.W[rows])
