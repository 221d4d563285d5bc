"""When a two-layer network stops, written once for any array namespace.

Both toy engines (JAX in :mod:`smallinit.toy.twolayer`, NumPy/CuPy in
:mod:`smallinit.toy.grouped_engine`) call :func:`decide` at every step with their own array
module ``xp``. At step k (k steps taken, loss R_k measured before the update) a network stops
with status (docs/science.md §2, "Stopping"):

* ``converged`` — R_k < tol;
* ``diverged``  — R_k is not finite or R_k > div_factor · R_0;
* ``stalled``   — at a check step (k a positive multiple of ``stall_window``) the loss has
  not fallen since the previous check: R_k ≥ (1 − stall_rtol) · R_{k − stall_window};
* ``budget``    — k reached ``max_steps`` without any of the above.

Why ``stalled`` exists: on the phase-scan grid a few condensed networks (γ = 1.75, γ' = −0.75
at widths 250–1000) reach, within their first 100 steps, a configuration in which every
ReLU unit is either active on all four data points or on none. The network is then affine
on the data and sits at the least-squares affine fit of y = x² (loss 1/162 exactly); the
residual is orthogonal to (x, 1), so every gradient component is exactly zero and no step
size can move it. Before this rule those networks ran the whole 20,000-step budget with a
loss constant to 1e-17 and held about a quarter of all the steps of a scan. A stalled
network is excluded from every slope fit exactly as a budget network is, so the rule
changes no S_w; it only stops the idle steps. The tolerance 1e-12 is four orders above
float64 rounding of the loss and far below the progress of any network that converges on
the profiles' grids (checked in tests/toy/test_toy_engine.py: the same grid with and without
the rule gives the same status, steps and RD for every network that does not stall).
"""

from __future__ import annotations

import numpy as np

STATUS = ("converged", "budget", "diverged", "stalled")
CONVERGED, BUDGET, DIVERGED, STALLED = 0, 1, 2, 3


def decide(loss, loss0, loss_ref, k, settings, xp):
    """(status, stop, new loss_ref) of every network at step ``k`` (array or int).

    ``loss`` R_k, ``loss0`` R_0, ``loss_ref`` the loss at the last check step (R_0 before the
    first); ``settings`` a :class:`smallinit.toy.twolayer.TrainSettings`. ``status`` is the
    reason the network would stop at this step (``budget`` when ``stop`` is false)."""
    bad = ~xp.isfinite(loss) | (loss > settings.div_factor * loss0)
    ok = loss < settings.tol
    check = (k > 0) & (k % settings.stall_window == 0)
    stalled = check & ~bad & ~ok & (loss >= (1.0 - settings.stall_rtol) * loss_ref)
    stop = bad | ok | stalled | (k >= settings.max_steps)
    status = xp.where(bad, DIVERGED, xp.where(ok, CONVERGED, xp.where(stalled, STALLED, BUDGET)))
    return status.astype(np.int32), stop, xp.where(check, loss, loss_ref)
