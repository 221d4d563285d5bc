"""Initial condensation under small initialization (docs/science.md §3; Zhou et al., NeurIPS 2022).

Setting (docs/science.md §3): two-layer net f(x) = Σ_k a_k σ(w_k·x + b_k), m = 50 neurons, d = 5,
n = 80 points x ~ U[−4, 2]^5, y = Σ_j 3.5 sin(5 x_j + 1), every parameter drawn from
N(0, std²) with std = 0.005, trained with Adam (lr 1e-3) for ~100 steps on
R = (1/2n) Σ_i (f(x_i) − y_i)². With an activation of multiplicity p the input weights
(w_k, b_k) condense early onto at most 2p orientations (p lines through the origin); for
p = 1 onto ±normalize(Σ_i y_i x̃_i) (:func:`smallinit.theory.condensation.condensed_direction_p1`).

Measures (all from :mod:`smallinit.kernels.measure`): the m×m cosine matrix of (w_k, b_k)
reordered by its leading eigenvector, the number of orientation clusters at a cosine
threshold that carry at least ``min_share`` of the amplitude |a_k|·‖w_k‖ (the condensed
directions; also counted without signs, as lines), the mean |cosine|; for p = 1 also
|cos| between every neuron and theory's direction. Theory's direction and the 2p bound are
statements about gradient flow: ``optimizer="gd"`` follows it; the reference setting
(docs/science.md §3) uses Adam, whose coordinate-wise normalization bends the early direction (≈
sign pattern of the gradient), so under Adam the p = 1 alignment is weaker (|cos| ≈ 0.9 instead of
≈ 0.99).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from smallinit.core import profiles
from smallinit.core.config import STORE_HINT, check_fields, check_instance, override
from smallinit.core.errors import ConfigError, require
from smallinit.core.jobs import RunSpec
from smallinit.core.store import RunStore
from smallinit.kernels.measure import (
    cluster_count,
    cluster_labels,
    cosine_gram,
    leading_eigvec_order,
    mean_abs_cosine,
)
from smallinit.theory.condensation import condensed_direction_p1
from smallinit.toy.jax_activations import ACTIVATIONS, multiplicity
from smallinit.toy.jax_activations import activation as act_fn
from smallinit.toy.jaxsetup import enable_x64

KIND = "toy-initial-condensation"
VERSION = "1"


@dataclasses.dataclass
class InitialCondensationConfig:
    """docs/science.md §3 setting, one activation."""

    activation: str = "tanh"
    width: int = 50
    dim: int = 5
    n_points: int = 80
    init_std: float = 0.005
    lr: float = 1e-3
    steps: int = 100
    seed: int = 0
    threshold: float = 0.9
    min_share: float = 0.05
    optimizer: Literal["adam", "gd"] = "adam"

    def __post_init__(self):
        check_fields(self)
        require(
            self.activation in ACTIVATIONS and multiplicity(self.activation) is not None,
            f"activation={self.activation!r} is not allowed; choose one with a multiplicity: "
            + ", ".join(k for k in ACTIVATIONS if multiplicity(k) is not None),
        )
        for name in ("width", "dim", "n_points", "steps"):
            require(getattr(self, name) >= 1, f"{name}={getattr(self, name)} must be >= 1")
        for name in ("init_std", "lr"):
            require(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be > 0")
        if not -1 < self.threshold <= 1:
            raise ConfigError(f"threshold={self.threshold} must lie in (-1, 1]")


def spec_data(seed: int, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """x ~ U[−4, 2]^d, y = Σ_j 3.5 sin(5 x_j + 1) (docs/science.md §3)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-4.0, 2.0, size=(n, d))
    return X, np.sum(3.5 * np.sin(5 * X + 1), axis=1)


@functools.cache
def _trainer(activation: str, steps: int, lr: float, optimizer: str):
    act = act_fn(activation)
    b1, b2, eps = 0.9, 0.999, 1e-8

    def loss(params, Xt, y):
        a, W = params
        return 0.5 * jnp.mean((act(Xt @ W.T) @ a - y) ** 2)

    @jax.jit
    def train(a0, W0, Xt, y):
        def step(carry, t):
            params, m1, m2 = carry
            value, g = jax.value_and_grad(loss)(params, Xt, y)
            m1 = jax.tree.map(lambda m, gi: b1 * m + (1 - b1) * gi, m1, g)
            m2 = jax.tree.map(lambda v, gi: b2 * v + (1 - b2) * gi * gi, m2, g)
            c1, c2 = 1 - b1 ** (t + 1.0), 1 - b2 ** (t + 1.0)
            if optimizer == "adam":
                params = jax.tree.map(
                    lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m1, m2
                )
            else:
                params = jax.tree.map(lambda p, gi: p - lr * gi, params, g)
            return (params, m1, m2), value

        params = (a0, W0)
        zeros = jax.tree.map(jnp.zeros_like, params)
        (params, _, _), losses = jax.lax.scan(
            step, (params, zeros, zeros), jnp.arange(steps, dtype=jnp.float64)
        )
        return params, losses

    return train


def simulate(cfg: InitialCondensationConfig) -> dict[str, np.ndarray]:
    """Train once (float64); returns a0, W0, a, W (bias as last column of W), losses, X̃, y."""
    enable_x64()
    X, y = spec_data(cfg.seed, cfg.n_points, cfg.dim)
    Xt = np.hstack([X, np.ones((X.shape[0], 1))])
    ka, kw = jax.random.split(jax.random.PRNGKey(cfg.seed))
    a0 = cfg.init_std * np.asarray(jax.random.normal(ka, (cfg.width,), dtype="float64"))
    W0 = cfg.init_std * np.asarray(jax.random.normal(kw, (cfg.width, cfg.dim + 1), dtype="float64"))
    (a, W), losses = _trainer(cfg.activation, cfg.steps, cfg.lr, cfg.optimizer)(a0, W0, Xt, y)
    return {
        "a0": a0,
        "W0": W0,
        "a": np.asarray(a),
        "W": np.asarray(W),
        "losses": np.asarray(losses),
        "Xt": Xt,
        "y": y,
    }


def significant_clusters(
    a, W, threshold: float, min_share: float, *, sign_invariant: bool = False
) -> int:
    """Orientation clusters (leader clusters at a cosine threshold, led by the heaviest
    neurons) that carry at least ``min_share`` of the total amplitude Σ_k |a_k|·‖w_k‖: the
    directions the output actually uses."""
    amp = np.abs(a) * np.linalg.norm(W, axis=1)
    labels = cluster_labels(W, threshold, sign_invariant=sign_invariant, weights=amp)
    keep = labels >= 0
    mass = np.bincount(labels[keep], weights=amp[keep]) / amp.sum()
    return int((mass >= min_share).sum())


def measure(cfg: InitialCondensationConfig, sim: dict) -> dict:
    """Cosine matrix (reordered), cluster count, mean |cos|, and theory's checks."""
    W = sim["W"]
    G = np.asarray(cosine_gram(W))
    order = leading_eigvec_order(G)
    p = multiplicity(cfg.activation)
    assert p is not None  # the config admits only activations with a multiplicity
    out = {
        "activation": cfg.activation,
        "p": p,
        "max_orientations": 2 * p,
        "clusters": significant_clusters(sim["a"], W, cfg.threshold, cfg.min_share),
        "lines": significant_clusters(
            sim["a"], W, cfg.threshold, cfg.min_share, sign_invariant=True
        ),
        "clusters_all": cluster_count(W, cfg.threshold),
        "clusters_at_init": significant_clusters(
            sim["a0"], sim["W0"], cfg.threshold, cfg.min_share
        ),
        "mean_abs_cos": mean_abs_cosine(W),
        "mean_abs_cos_init": mean_abs_cosine(sim["W0"]),
        "loss_first": float(sim["losses"][0]),
        "loss_last": float(sim["losses"][-1]),
        "gram_reordered": G[np.ix_(order, order)],
    }
    if p == 1:
        v = condensed_direction_p1(sim["Xt"][:, :-1], sim["y"])
        cos = np.abs(np.asarray(cosine_gram(np.vstack([v, W])))[0, 1:])
        out["direction"] = v
        out["median_abs_cos_to_theory"] = float(np.median(cos))
    return out


def run(cfg: InitialCondensationConfig, store=None, *, force: bool = False) -> dict:
    """Compute (or reuse) one initial-condensation run; returns its measures and arrays."""
    check_instance(cfg, InitialCondensationConfig, "run_initial_condensation")
    store = check_instance(
        store or RunStore(), RunStore, "run_initial_condensation(store=...)", STORE_HINT
    )

    def body(run):
        sim = simulate(cfg)
        meas = measure(cfg, sim)
        arrays = {k: v for k, v in meas.items() if isinstance(v, np.ndarray)}
        run.save_arrays(**sim, **arrays)
        summary = {k: v for k, v in meas.items() if not isinstance(v, np.ndarray)}
        run.log(summary)
        return summary

    r = store.get_or_run(KIND, cfg, body, version=VERSION, force=force)
    return {**r.summary, **r.arrays()}


#: the profile table of the initial-condensation runs (figure 3)
TABLE = "initial-condensation"


def activations(profile: str) -> list[str]:
    """The activations of the profile's ``[initial-condensation]`` table, one run each."""
    found = profiles.section(profile, TABLE).get("activations", ["tanh"])
    require(
        isinstance(found, list) and len(found) > 0,
        f"{profile}.{TABLE}.activations={found!r} is not allowed; give a list of at "
        "least one activation (figure 3 draws one panel per activation)",
    )
    return found


def from_profile(profile: str, activation: str | None = None) -> InitialCondensationConfig:
    """The run of ``activation`` (None: the table's first) at ``profile``: the defaults in
    code with the table's other keys laid over them. The experiment
    (:mod:`smallinit.study.experiments.initial_condensation`) and ``smallinit toy
    initial-condensation`` both read it here, so the command loads no experiment registry
    (and no torch)."""
    table = profiles.section(profile, TABLE)
    table.pop("activations", None)
    activation = activations(profile)[0] if activation is None else activation
    return override(
        InitialCondensationConfig(), {**table, "activation": activation}, where=f"{profile}.{TABLE}"
    )


@dataclasses.dataclass
class InitialCondensationSpec(RunSpec):
    """An initial-condensation run for the job driver (:mod:`smallinit.core.jobs`):
    ``config`` is its :class:`InitialCondensationConfig`."""

    kind, version, runner = KIND, VERSION, staticmethod(run)
