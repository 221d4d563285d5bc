"""Condensation across the phase diagram: orientation/amplitude of every neuron (docs/science.md
§2).

For each (γ, γ') of a grid, one ReLU network of width m in the docs/science.md §2 setting is trained
to the loss tolerance (engine: :mod:`smallinit.toy.twolayer`, one batched call). Per neuron
k (1-d input, w̄_k = (u_k, b_k)): orientation θ_k = atan2(b_k, u_k) and amplitude
A_k = |ā_k|·‖w̄_k‖ (the rescaled A_k differ from |a_k|‖w_k‖ by the common factor β1β2, so
shares are unchanged). Measures, from :mod:`smallinit.kernels.measure`: the condensation
score (share of total amplitude in the ``top_k`` heaviest orientation clusters at a cosine
``threshold``), the cluster count of the neurons carrying amplitude, and the cosine matrix
reordered by its leading eigenvector. In the condensed regime the amplitude gathers on a
few isolated orientations (score → 1); in the linear regime the neurons barely move from
their isotropic init (score near the random baseline, ≈ top_k·acos(t)/π in d = 2).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from smallinit.core import profiles
from smallinit.core.config import MAX_STEPS, STORE_HINT, check_fields, check_instance, override
from smallinit.core.errors import require
from smallinit.core.jobs import RunSpec
from smallinit.core.memory import check_memory
from smallinit.core.store import RunStore
from smallinit.kernels.measure import cluster_count, condensation_score, mean_abs_cosine
from smallinit.toy import twolayer as tl
from smallinit.toy.jaxsetup import use_all_cpu_cores
from smallinit.toy.limits import check_family_scales, condense_bytes

KIND = "toy-condense"
SECTION = "condense"  # the profiles' table of the grid (core/profiles/*.toml)
VERSION = "3"  # 3: the CPU engine's one-network step sums in another order (rounding)
# 2: the "stalled" stopping rule of toy.stopping


@dataclasses.dataclass
class CondenseConfig:
    """A grid of (γ, γ') at one width, one seed."""

    gammas: tuple[float, ...] = (0.5, 1.0, 1.75)
    gamma_primes: tuple[float, ...] = (-0.5, 0.0, 0.5)
    width: int = 1000
    seed: int = 0
    tol: float = 1e-6
    max_steps: int = 20000
    top_k: int = 4
    threshold: float = 0.95

    def __post_init__(self):
        check_fields(
            self,
            bounds={
                "tol": (0, None),
                "max_steps": (1, MAX_STEPS),
                "top_k": (1, None),
                "threshold": (0, 1),
            },
        )
        require(
            self.width >= 2 and self.width % 2 == 0,
            f"width={self.width} is not allowed; it must be even and >= 2 (ASI)",
        )
        require(len(self.gammas) > 0 and len(self.gamma_primes) > 0, "the grid is empty")
        for g in self.gammas:
            for gp in self.gamma_primes:
                check_family_scales(g, gp, self.width)

    def check_memory(self) -> None:
        """ConfigError when the estimated peak memory (:func:`toy.limits.condense_bytes`)
        exceeds the limit of :mod:`smallinit.core.memory`."""
        n_points = len(self.gammas) * len(self.gamma_primes)
        check_memory(
            condense_bytes(n_points, self.width),
            f"the condensation grid of {n_points} points at width={self.width}",
        )


def orientation_amplitude(a: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(θ_k = atan2(b_k, u_k), A_k = |a_k|·‖w_k‖) for 1-d inputs with bias (W: (m, 2))."""
    return np.arctan2(W[:, 1], W[:, 0]), np.abs(a) * np.linalg.norm(W, axis=1)


def measure(a: np.ndarray, W: np.ndarray, *, top_k: int, threshold: float) -> dict:
    """Condensation score, cluster count (amplitude-carrying neurons), mean |cos|."""
    _, amp = orientation_amplitude(a, W)
    heavy = amp >= 1e-3 * amp.max()
    return {
        "score": condensation_score(W, amp, top_k=top_k, threshold=threshold),
        "clusters": cluster_count(W[heavy], threshold),
        "mean_abs_cos": mean_abs_cosine(W),
    }


def run(cfg: CondenseConfig, store=None, *, force: bool = False) -> dict:
    """Train the grid (one batched call) and measure every point; cached in the store."""
    check_instance(cfg, CondenseConfig, "run_condense")
    cfg.check_memory()
    store = check_instance(store or RunStore(), RunStore, "run_condense(store=...)", STORE_HINT)

    def body(run):
        use_all_cpu_cores()  # the engine starts here: one JAX CPU device per core (jaxsetup)
        X, y = tl.reference_data()
        a0, W0 = tl.init_asi(cfg.seed, cfg.width, 2)
        pts = [(g, gp) for g in cfg.gammas for gp in cfg.gamma_primes]
        ks = np.array([tl.kappas(*tl.luo_family(g, gp, cfg.width)) for g, gp in pts])
        B = len(pts)
        settings = tl.TrainSettings(tol=cfg.tol, max_steps=cfg.max_steps)
        out = tl.train_batch(
            np.repeat(a0[None], B, 0), np.repeat(W0[None], B, 0), ks[:, 0], ks[:, 1], X, y, settings
        )
        shape = (len(cfg.gammas), len(cfg.gamma_primes))
        meas = {
            "score": np.full(B, np.nan),
            "clusters": np.zeros(B, int),
            "mean_abs_cos": np.full(B, np.nan),
        }
        for i in range(B):
            m = measure(out["a"][i], out["W"][i], top_k=cfg.top_k, threshold=cfg.threshold)
            for key in meas:
                meas[key][i] = m[key]
            run.log(
                {
                    "gamma": pts[i][0],
                    "gamma_prime": pts[i][1],
                    **m,
                    "status": tl.STATUS[out["status"][i]],
                }
            )
        init = measure(a0, W0, top_k=cfg.top_k, threshold=cfg.threshold)
        run.save_arrays(
            a=out["a"].reshape(*shape, -1),
            W=out["W"].reshape(*shape, -1, 2),
            a0=a0,
            W0=W0,
            status=out["status"].reshape(shape),
            **{k: v.reshape(shape) for k, v in meas.items()},
        )
        return {
            "init_score": init["score"],
            "points": B,
            "converged": int((out["status"] == 0).sum()),
        }

    r = store.get_or_run(KIND, cfg, body, version=VERSION, force=force)
    return {**r.summary, **r.arrays()}


def from_profile(profile: str) -> CondenseConfig:
    """The grid of a profile's ``[condense]`` table; fields it leaves out keep the defaults
    (read here for the experiment and for ``smallinit toy condense`` alike)."""
    return override(
        CondenseConfig(), profiles.section(profile, SECTION), where=f"{profile}.{SECTION}"
    )


@dataclasses.dataclass
class CondenseSpec(RunSpec):
    """A condensation grid for the job driver (:mod:`smallinit.core.jobs`): ``config`` is
    its :class:`CondenseConfig`."""

    kind, version, runner = KIND, VERSION, staticmethod(run)
