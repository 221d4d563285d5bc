"""Escape from small initialization: plateau length versus init scale ε (docs/science.md §4).

Toy: the depth-L diagonal linear network β = w₊^L − w₋^L on theory's planted sparse
regression (:func:`smallinit.theory.lazy_rich.planted_sparse_problem`), loss
R = (1/2n)‖Xβ − y‖², started at w₊ = w₋ = ε·1. It is L-homogeneous in its parameters
(L = 2: a two-layer linear net per coordinate; L = 3: one layer more). Near θ = 0 the gradient
is g₀ = −Xᵀy/n and each growing coordinate obeys dw/dt = L|g₀_i| w^{L−1}: the norm ODE
dr/dt = c r^{L−1} of :mod:`smallinit.theory.escape`, led by the fastest coordinate,
c = L max_i |g₀_i|.

Measured plateau T(ε): the gradient-flow time until the loss first falls below ``frac`` of
its initial value, flow discretized by gradient descent with a step that limits the
relative change of every coordinate per step to ``h`` (so time is resolved on the plateau
and after it):

    η = h / (L max_i w_i^{L−2} ‖g‖_∞ + λ_max(XᵀX/n) L² max_i w_i^{2(L−1)}),  T = Σ η.

Theory (theory.escape.escape_time): T(ε) = (ε^{2−L} − ρ^{2−L})/((L−2)c) for L > 2 and
ln(ρ/ε)/c for L = 2, ρ the (unknown, ε-independent) scale where the plateau ends. The
differences T(ε) − T(ε_ref) do not depend on ρ; they are compared directly, and the scaling
is summarized as the slope dT/d ln(1/ε) over the smallest ε (L = 2, theory 1/c) and the
log-log slope d ln T / d ln ε over the smallest ε (L > 2, theory → 2 − L). Measured on the
default problem: L = 2 slope 0.411 vs 1/c = 0.407 (per-decade increments fall from 1.13 to
0.945 toward ln 10/c = 0.936: the runner-up coordinates fade only slowly); L = 3 log-log
slope −1.002, T(ε) − T(0.1) within 0.5% of theory's.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from smallinit.core.config import MAX_STEPS, STORE_HINT, check_fields, check_instance
from smallinit.core.errors import require
from smallinit.core.store import RunStore
from smallinit.theory import escape, lazy_rich
from smallinit.toy.jaxsetup import enable_x64

KIND = "toy-escape"
VERSION = "1"


@dataclasses.dataclass
class EscapeConfig:
    """Plateau length across ε for each homogeneity order L (the diagonal net's depth)."""

    orders: tuple[int, ...] = (2, 3)
    eps_2: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
    eps_3: tuple[float, ...] = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3)
    n: int = 10
    dim: int = 40
    k: int = 3
    seed: int = 0
    h: float = 0.002
    frac: float = 0.5
    max_steps: int = 200000

    def __post_init__(self):
        check_fields(self, bounds={"k": (1, None), "max_steps": (1, MAX_STEPS)})
        require(
            len(self.orders) > 0 and all(L in (2, 3) for L in self.orders),
            f"orders={list(self.orders)} is not allowed; use 2 and/or 3",
        )
        for name in ("eps_2", "eps_3"):
            v = getattr(self, name)
            require(
                len(v) >= 2 and all(0 < e < 1 for e in v),
                f"{name}={list(v)} needs at least two values in (0, 1)",
            )
        require(0 < self.h <= 0.1, f"h={self.h} is not allowed; it must lie in (0, 0.1]")
        require(0 < self.frac < 1, f"frac={self.frac} is not allowed; it must lie in (0, 1)")
        require(0 < self.n < self.dim, f"n={self.n}, dim={self.dim}: need 0 < n < dim")

    def eps(self, L: int) -> tuple[float, ...]:
        return self.eps_2 if L == 2 else self.eps_3


@functools.cache
def _solver(L: int, h: float, frac: float, max_steps: int):
    def one(eps, X, y):
        n = X.shape[0]
        lam = jnp.linalg.eigvalsh(X.T @ X / n)[-1]
        w0 = jnp.full((X.shape[1],), eps)

        def loss(wp, wm):
            e = X @ (wp**L - wm**L) - y
            return 0.5 * jnp.mean(e * e), X.T @ e / n

        R0 = loss(w0, w0)[0]

        def cond(s):
            return (s[2] > frac * R0) & (s[4] < max_steps)

        def body(s):
            wp, wm, _, t, k = s
            _, g = loss(wp, wm)
            top = jnp.maximum(jnp.max(wp), jnp.max(wm))
            eta = h / (L * top ** (L - 2) * jnp.max(jnp.abs(g)) + lam * L**2 * top ** (2 * L - 2))
            wp = wp - eta * L * wp ** (L - 1) * g
            wm = wm + eta * L * wm ** (L - 1) * g
            return wp, wm, loss(wp, wm)[0], t + eta, k + 1

        _, _, R, T, steps = jax.lax.while_loop(
            cond, body, (w0, w0, R0, jnp.asarray(0.0), jnp.asarray(0))
        )
        return T, steps, R / R0

    return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


def growth_rate(L: int, X: np.ndarray, y: np.ndarray) -> float:
    """c = L max_i |(Xᵀy/n)_i|: the fastest coordinate's rate in dr/dt = c r^{L−1} at 0."""
    return float(L * np.abs(X.T @ y / X.shape[0]).max())


def plateau_times(cfg: EscapeConfig, L: int, X, y) -> dict[str, np.ndarray]:
    """Measured T(ε), steps and final loss ratio for every ε of order L (float64)."""
    enable_x64()
    T, steps, ratio = _solver(L, cfg.h, cfg.frac, cfg.max_steps)(
        np.asarray(cfg.eps(L)), np.asarray(X, float), np.asarray(y, float)
    )
    return {"T": np.asarray(T), "steps": np.asarray(steps), "ratio": np.asarray(ratio)}


def theory_times(L: int, eps, c: float) -> np.ndarray:
    """theory.escape.escape_time(L, ε, c, ρ = 1) for each ε (its differences are ρ-free)."""
    return np.array([float(escape.escape_time(L, float(e), c, 1)) for e in eps])


def scaling(L: int, eps, T) -> dict[str, float]:
    """The slopes that summarize T(ε) as ε → 0: dT/d ln(1/ε) by least squares over the three
    smallest ε (L = 2; at larger ε the runner-up coordinates still shift T) and
    d ln T / d ln ε over the two smallest ε (L > 2)."""
    lne = np.log(np.asarray(eps, float))
    T = np.asarray(T, float)
    small = np.argsort(lne)[:3]
    out = {"slope_T_vs_ln_inv_eps": float(np.polyfit(-lne[small], T[small], 1)[0])}
    order = np.argsort(lne)[:2]
    out["loglog_slope"] = float(np.diff(np.log(T[order]))[0] / np.diff(lne[order])[0])
    return out


def run(cfg: EscapeConfig, store=None, *, force: bool = False) -> dict:
    """Measure T(ε) for every order and compare with theory; cached in the run store.
    Returns per order L: eps, T, T_theory_rel (theory's T(ε) − T(ε_max)), T_rel (measured,
    same reference), rel_err of those differences, c, the slopes and theory's values."""
    check_instance(cfg, EscapeConfig, "run_escape")
    store = check_instance(store or RunStore(), RunStore, "run_escape(store=...)", STORE_HINT)

    def body(run):
        X, y, _ = lazy_rich.planted_sparse_problem(cfg.n, cfg.dim, cfg.k, cfg.seed)
        arrays, summary = {}, {}
        for L in cfg.orders:
            eps = np.asarray(cfg.eps(L))
            meas = plateau_times(cfg, L, X, y)
            c = growth_rate(L, X, y)
            ref = int(np.argmax(eps))
            theory = theory_times(L, eps, c)
            t_rel, th_rel = meas["T"] - meas["T"][ref], theory - theory[ref]
            mask = np.arange(len(eps)) != ref
            rel_err = np.abs(t_rel[mask] - th_rel[mask]) / np.abs(th_rel[mask])
            sc = scaling(L, eps, meas["T"])
            summary[f"L{L}"] = {
                "c": c,
                **sc,
                "theory_slope_T_vs_ln_inv_eps": 1.0 / c if L == 2 else None,
                "theory_loglog_slope": 2.0 - L if L > 2 else 0.0,
                "max_rel_err_of_differences": float(rel_err.max()),
                "reached": bool((meas["ratio"] <= cfg.frac).all()),
            }
            arrays.update(
                {
                    f"eps_{L}": eps,
                    f"T_{L}": meas["T"],
                    f"steps_{L}": meas["steps"],
                    f"T_rel_{L}": t_rel,
                    f"T_theory_rel_{L}": th_rel,
                }
            )
            for i, e in enumerate(eps):
                run.log(
                    {
                        "L": L,
                        "eps": float(e),
                        "T": float(meas["T"][i]),
                        "T_rel": float(t_rel[i]),
                        "T_theory_rel": float(th_rel[i]),
                        "steps": int(meas["steps"][i]),
                    }
                )
        run.save_arrays(**arrays)
        return summary

    r = store.get_or_run(KIND, cfg, body, version=VERSION, force=force)
    return {"summary": r.summary, **r.arrays()}


def format_table(result: dict, cfg: EscapeConfig) -> str:
    """One line per (L, ε): measured plateau, its change from the largest ε, theory's."""
    lines = [f"{'L':>2} {'eps':>8} {'T':>12} {'T-T(ref)':>12} {'theory':>12}"]
    for L in cfg.orders:
        for e, T, a, b in zip(
            result[f"eps_{L}"],
            result[f"T_{L}"],
            result[f"T_rel_{L}"],
            result[f"T_theory_rel_{L}"],
            strict=True,
        ):
            lines.append(f"{L:2d} {e:8.1e} {T:12.4g} {a:12.4g} {b:12.4g}")
        s = result["summary"][f"L{L}"]
        if L == 2:
            lines.append(
                f"   L=2: dT/dln(1/eps) = {s['slope_T_vs_ln_inv_eps']:.4g} "
                f"(theory 1/c = {s['theory_slope_T_vs_ln_inv_eps']:.4g})"
            )
        else:
            lines.append(
                f"   L={L}: dlnT/dln eps = {s['loglog_slope']:.3f} "
                f"(theory -> {s['theory_loglog_slope']:g})"
            )
    return "\n".join(lines)
