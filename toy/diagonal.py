"""Lazy versus rich in a diagonal linear network (docs/science.md §4; Woodworth et al., COLT 2020).

Model: β = w₊^D − w₋^D (depth D ≥ 2), init w₊ = w₋ = α·1 (so β = 0), loss
L = (1/2n)‖Xβ − y‖² on an underdetermined problem (n < dim). Gradient flow converges to
theory's argmin Q_α(β) s.t. Xβ = y (:func:`smallinit.theory.lazy_rich.solve_q_alpha`): the
minimum-ℓ2 interpolant as α → ∞ (lazy) and the minimum-ℓ1 one as α → 0 (rich).

Discretization: gradient descent with η = c / L_t, L_t a bound of the loss Hessian's top
eigenvalue at the current point,

    L_t = λ_max(XᵀX/n) · D² · max_i (w₊_i^{2(D−1)} + w₋_i^{2(D−1)}) + D(D−1) max_i(w_i^{D−2}) ‖g‖_∞,

g = Xᵀ(Xβ − y)/n (Gauss-Newton part plus the diagonal second-derivative part). This
follows the flow's path with a step matched to the local curvature, from the plateau at
small α to the stiff kernel regime at large α. All α values train at once (vmap over α,
one compiled ``lax.while_loop``), until ‖Xβ − y‖ ≤ ``tol``·‖y‖ or ``max_steps``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from smallinit.core import grids, profiles
from smallinit.core.config import MAX_STEPS, STORE_HINT, check_fields, check_instance, override
from smallinit.core.errors import require
from smallinit.core.jobs import RunSpec
from smallinit.core.store import RunStore
from smallinit.theory import lazy_rich as lr
from smallinit.toy.jaxsetup import enable_x64

KIND = "toy-diagonal"
SECTION = "diagonal"  # the profiles' table of the runs (core/profiles/*.toml)
VERSION = "1"
MAX_DEPTH = 100
#: |log10| bound of α^{2D}: the curvature bound L_t holds w^{2(D−1)}, Q_α divides by α^D.
SCALE_DECADES = 40


@dataclasses.dataclass
class DiagonalConfig:
    """A sweep over the init scale α on theory's planted sparse problem."""

    alphas: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
    depth: int = 2
    n: int = 10
    dim: int = 40
    k: int = 3
    seed: int = 0
    lr_factor: float = 0.25
    tol: float = 1e-7
    max_steps: int = 200000

    def __post_init__(self):
        check_fields(self, bounds={"k": (1, None), "tol": (0, None), "max_steps": (1, MAX_STEPS)})
        require(
            len(self.alphas) > 0
            and all(isinstance(a, int | float) and math.isfinite(a) and a > 0 for a in self.alphas),
            f"alphas={list(self.alphas)} must be non-empty, finite and positive",
        )
        require(
            2 <= self.depth <= MAX_DEPTH,
            f"depth={self.depth} is not allowed; it must be in 2..{MAX_DEPTH}",
        )
        for a in self.alphas:  # the step rule squares w^(D-1) ~ alpha^(D-1)
            require(
                2 * self.depth * abs(math.log10(a)) <= SCALE_DECADES,
                f"alpha={a:g} at depth={self.depth} is not allowed: alpha^(2*depth) = "
                f"1e{2 * self.depth * math.log10(a):+.0f} leaves the float64 range the "
                f"solver needs (1e-{SCALE_DECADES} to 1e{SCALE_DECADES}); use alpha "
                f"between {10 ** (-SCALE_DECADES / (2 * self.depth)):.3g} and "
                f"{10 ** (SCALE_DECADES / (2 * self.depth)):.3g}",
            )
        require(0 < self.n < self.dim, f"n={self.n}, dim={self.dim}: need 0 < n < dim")
        require(0 < self.lr_factor < 2, f"lr_factor={self.lr_factor} must lie in (0, 2)")


@functools.cache
def _solver(depth: int, tol: float, max_steps: int, lr_factor: float):
    def one(alpha, X, y):
        n = X.shape[0]
        lam = jnp.linalg.eigvalsh(X.T @ X / n)[-1]
        ynorm = jnp.linalg.norm(y)
        w0 = jnp.full((X.shape[1],), alpha)

        def resid(wp, wm):
            return X @ (wp**depth - wm**depth) - y

        def cond(s):
            return (jnp.linalg.norm(resid(s[0], s[1])) > tol * ynorm) & (s[2] < max_steps)

        def body(s):
            wp, wm, k = s
            g = X.T @ resid(wp, wm) / n
            gn = depth * (wp ** (2 * depth - 2) + wm ** (2 * depth - 2))
            curv = lam * depth * jnp.max(gn) + depth * (depth - 1) * jnp.max(
                jnp.maximum(wp, wm) ** (depth - 2)
            ) * jnp.max(jnp.abs(g))
            eta = lr_factor / curv
            wp_new = wp - eta * depth * wp ** (depth - 1) * g
            wm_new = wm + eta * depth * wm ** (depth - 1) * g
            return wp_new, wm_new, k + 1

        wp, wm, steps = jax.lax.while_loop(cond, body, (w0, w0, jnp.asarray(0)))
        beta = wp**depth - wm**depth
        return beta, steps, jnp.linalg.norm(resid(wp, wm)) / ynorm

    return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


def train(cfg: DiagonalConfig, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """β at the end of training for every α (rows), steps taken and final relative residual
    (float64)."""
    enable_x64()
    fn = _solver(cfg.depth, cfg.tol, cfg.max_steps, cfg.lr_factor)
    beta, steps, res = fn(np.asarray(cfg.alphas, float), np.asarray(X, float), np.asarray(y, float))
    return {"beta": np.asarray(beta), "steps": np.asarray(steps), "residual": np.asarray(res)}


def run(cfg: DiagonalConfig, store=None, *, force: bool = False) -> dict:
    """Train across α and compare with theory's argmin Q_α (and the ℓ2/ℓ1 limits)."""
    check_instance(cfg, DiagonalConfig, "run_diagonal")
    store = check_instance(store or RunStore(), RunStore, "run_diagonal(store=...)", STORE_HINT)

    def body(run):
        X, y, beta_star = lr.planted_sparse_problem(cfg.n, cfg.dim, cfg.k, cfg.seed)
        out = train(cfg, X, y)
        theory = np.stack([lr.solve_q_alpha(X, y, a, depth=cfg.depth) for a in cfg.alphas])
        l2, l1 = lr.min_l2_interpolant(X, y), lr.min_l1_interpolant(X, y)
        rel_err = np.linalg.norm(out["beta"] - theory, axis=1) / np.linalg.norm(theory, axis=1)
        dist_l2 = np.linalg.norm(out["beta"] - l2, axis=1) / np.linalg.norm(l2)
        dist_l1 = np.linalg.norm(out["beta"] - l1, axis=1) / np.linalg.norm(l1)
        run.save_arrays(
            alphas=np.asarray(cfg.alphas),
            beta_theory=theory,
            l2=l2,
            l1=l1,
            beta_star=beta_star,
            X=X,
            y=y,
            rel_err=rel_err,
            dist_l2=dist_l2,
            dist_l1=dist_l1,
            **out,
        )
        for i, a in enumerate(cfg.alphas):
            run.log(
                {
                    "alpha": a,
                    "rel_err": float(rel_err[i]),
                    "dist_l2": float(dist_l2[i]),
                    "dist_l1": float(dist_l1[i]),
                    "steps": int(out["steps"][i]),
                    "residual": float(out["residual"][i]),
                }
            )
        return {
            "max_rel_err": float(rel_err.max()),
            "converged": bool((out["residual"] <= cfg.tol * 1.0001).all()),
        }

    r = store.get_or_run(KIND, cfg, body, version=VERSION, force=force)
    return {**r.summary, **r.arrays()}


def alphas(profile: str) -> tuple[float, ...]:
    """The α grid of a profile's ``[diagonal]`` table: ``logspace(start, stop, num)[::every]``,
    each point the correctly rounded double (:func:`smallinit.core.grids.logspace`), so the
    run key is the same on every processor."""
    grid = profiles.section(profile, SECTION)["alpha_grid"]
    values = grids.logspace(grid["start"], grid["stop"], int(grid["num"]))
    return values[:: int(grid.get("every", 1))]


def from_profile(profile: str) -> list[DiagonalConfig]:
    """One run per depth of a profile's ``[diagonal]`` table (read here for the experiment
    and for ``smallinit toy diagonal`` alike)."""
    table = profiles.section(profile, SECTION)
    return [
        override(
            DiagonalConfig(),
            {"alphas": list(alphas(profile)), "depth": depth, **table["problem"]},
            where=f"{profile}.{SECTION}",
        )
        for depth in table["depths"]
    ]


@dataclasses.dataclass
class DiagonalSpec(RunSpec):
    """A diagonal-net run for the job driver (:mod:`smallinit.core.jobs`): ``config`` is
    its :class:`DiagonalConfig`."""

    kind, version, runner = KIND, VERSION, staticmethod(run)
