"""The two-layer engine: many networks trained by full-batch gradient flow at once, in JAX.

Model (SPEC §2, Luo, Xu, Ma, Zhang, JMLR 2021, eqs. 2-4), one network of width m on inputs
x̃ = (x, 1) (each input weight vector carries its bias as last entry):

    f(x) = (1/α) Σ_k a_k σ(w_k·x̃),  a_k ~ N(0, β1²),  w_k ~ N(0, β2² I),
    R = (1/2n) Σ_i (f(x_i) − y_i)².

The engine works in the rescaled variables ā = a/β1, w̄ = w/β2 (both O(1) at init) with
κ = β1β2/α, κ' = β1/β2:

    f = κ Σ_k ā_k σ(w̄_k·x̃),  dā/dt̄ = −(1/κ') ∇_ā R,  dw̄/dt̄ = −κ' ∇_w̄ R.

A gradient-descent step of size η̄ here is exactly the step η = β1β2 η̄ in the original
variables, so nothing is lost. Relative distances of input weights are scale free and the
same in both. Anti-symmetric initialization (ASI): m/2 units are drawn and duplicated with
output weight −ā and the same w̄, so f ≡ 0 at t = 0.

Step rule ``"gram"``: η̄ = c / L with L an upper bound of the largest eigenvalue of the
preconditioned loss Hessian P^{1/2} ∇²R P^{1/2}, P = diag(1/κ', κ' I):

    L = λ_max(K) + max_k (κ ‖Σ_i r_i σ'(h_ik) x̃_i‖ + κκ' |ā_k| Σ_i |r_i σ''(h_ik)| ‖x̃_i‖²),

with K = J P Jᵀ / n the n×n tangent Gram matrix (J the Jacobian of the outputs) and
r = (f − y)/n. The first term is the Gauss-Newton part; the second bounds the per-neuron
a–w and w–w blocks of Σ_i r_i ∇²f(x_i) (triangle inequality). SPEC §2 explains why a fixed
step fails: the stable step scales like 1/(mκ²), many orders of magnitude apart across a
phase-diagram scan. Because η̄ only reparametrizes time along (a discretization of) the
gradient-flow path, RD at the first time the loss falls below ``tol`` does not depend on
it. The Gram part alone is not enough in the condensed regime at small init, where
mκ ≪ 1 and the a–w coupling term (∝ κ|r|) dominates the curvature; hence the second term.
Step rule ``"fixed"``: η̄ = ``lr`` (used by the conservation-law test and to show divergence).

A network stops at the first step whose loss is below ``tol`` (status ``converged``), at the
step budget (``budget``), or when its loss becomes non-finite or grows ``div_factor``-fold
over its initial value (``diverged``); stopped networks are frozen while the rest of their
batch continues, so one bad network never stops a scan.

Batching: :func:`train_batch` vmaps one network's ``lax.while_loop`` over a batch of
(init, κ, κ') and splits the batch across all ``jax.devices()`` with ``jax.shard_map`` (each
device runs its own loop, no synchronization per step). All networks of a batch share the
width m; a scan groups its networks by width (see :mod:`smallinit.toy.scan`).

Float64 is switched on (``jax_enable_x64``) because ``tol`` = 1e-6 on a loss that starts at
≈ 1e-2 and reaches 1e-7 needs relative precision well below float32's near convergence.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from smallinit.toy.activations import activation, check_activation, derivative

jax.config.update("jax_enable_x64", True)

log = logging.getLogger(__name__)

STATUS = ("converged", "budget", "diverged")
CONVERGED, BUDGET, DIVERGED = 0, 1, 2


# ----------------------------------------------------------------------------- settings
@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """How every network of a batch is trained (hashable: it is a static jit argument)."""

    activation: str = "relu"
    tol: float = 1e-6
    max_steps: int = 20000
    step_rule: Literal["gram", "fixed"] = "gram"
    lr_factor: float = 1.0  # c in η̄ = c / L (step rule "gram")
    lr: float = 1e-3  # η̄ (step rule "fixed")
    div_factor: float = 1e6
    record_every: int = 100

    def __post_init__(self):
        check_activation(self.activation)
        if self.step_rule not in ("gram", "fixed"):
            raise ValueError(f"step_rule={self.step_rule!r} is not allowed; use gram or fixed")
        for name in ("tol", "lr_factor", "lr", "div_factor"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and np.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} is not allowed; it must be a positive number")
        for name in ("max_steps", "record_every"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name}={value!r} is not allowed; it must be a positive integer")

    @property
    def n_records(self) -> int:
        return self.max_steps // self.record_every + 1


# ----------------------------------------------------------------------------- family and data
def luo_family(gamma: float, gamma_prime: float, m: int) -> tuple[float, float, float]:
    """SPEC §2 reference family: β1 = 1, β2 = m^{γ'}, α = β1 β2 m^γ; returns (α, β1, β2).

    Then κ = β1β2/α = m^{−γ} and κ' = β1/β2 = m^{−γ'} exactly, so (γ, γ') are the point's
    phase-diagram coordinates at every width.
    """
    beta1 = 1.0
    beta2 = float(m) ** gamma_prime
    alpha = beta1 * beta2 * float(m) ** gamma
    return alpha, beta1, beta2


def kappas(alpha: float, beta1: float, beta2: float) -> tuple[float, float]:
    """(κ, κ') = (β1β2/α, β1/β2) (SPEC §2 rescaling)."""
    return beta1 * beta2 / alpha, beta1 / beta2


def reference_data(n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §2 1-d setting: x = linspace(−1/2, 1/2, n), y = x²; returns (x̃ (n, 2), y)."""
    x = np.linspace(-0.5, 0.5, n)
    return np.stack([x, np.ones_like(x)], axis=1), x**2


def init_asi(seed: int, m: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Rescaled ASI init (ā (m,), w̄ (m, d)): m/2 draws of N(0,1), N(0, I), duplicated with
    ā → −ā. Deterministic in (seed, m, d); the same for every (γ, γ') (common random
    numbers across a scan). ``m`` must be even."""
    if m < 2 or m % 2:
        raise ValueError(f"width m={m} is not allowed; ASI needs an even width >= 2")
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), m), d)
    ka, kw = jax.random.split(key)
    a = jax.random.normal(ka, (m // 2,), dtype=jnp.float64)
    w = jax.random.normal(kw, (m // 2, d), dtype=jnp.float64)
    return np.concatenate([a, -a]), np.concatenate([w, w])


# ----------------------------------------------------------------------------- one network
def _forward(a, W, kappa, X, y, act, dact):
    """Outputs, residual r = (f − y)/n, loss, features σ(h) and σ'(h), h = X̃ Wᵀ (n, m)."""
    n = X.shape[0]
    h = X @ W.T
    S = act(h)
    D = dact(h)
    f = kappa * (S @ a)
    e = f - y
    loss = 0.5 * jnp.mean(e * e)
    return e / n, loss, S, D, h


def gradients(a, W, kappa, X, y, act_name: str):
    """(R, ∇_ā R, ∇_w̄ R) in rescaled variables, closed form:
    ∇_ā R = κ Sᵀ r,  ∇_w̄_k R = κ ā_k Σ_i r_i σ'(h_ik) x̃_i."""
    act = activation(act_name)
    r, loss, S, D, _ = _forward(a, W, kappa, X, y, act, derivative(act))
    return loss, kappa * (S.T @ r), kappa * a[:, None] * ((D * r[:, None]).T @ X)


def _top_eigenvalue_bound(K, squarings: int = 4):
    """Upper bound of λ_max of a PSD n×n matrix: tr(K^p)^{1/p} with p = 2^squarings lies in
    [λ_max, n^{1/p} λ_max] (1.09 λ_max for n = 4, p = 16). Tiny matmuls instead of an
    eigendecomposition, which is slow when batched on CPU; K is normalized by its trace
    first so the powers neither overflow nor underflow."""
    tr = jnp.trace(K)
    A = K / jnp.where(tr > 0, tr, 1.0)
    for _ in range(squarings):
        A = A @ A
    return tr * jnp.maximum(jnp.trace(A), 0.0) ** (1.0 / 2**squarings)


def _step_size(a, kappa, kappa_p, X, r, S, D, h, GW, dact, settings: TrainSettings):
    """η̄ = c / L (see the module docstring for L)."""
    n = X.shape[0]
    Da = D * a[None, :]
    K = (kappa**2 / n) * (S @ S.T / kappa_p + kappa_p * (Da @ Da.T) * (X @ X.T))
    lam = _top_eigenvalue_bound(K)
    cross = kappa * jnp.sqrt(jnp.sum(GW * GW, axis=1))
    if settings.activation != "relu":
        D2 = derivative(dact)(h)
        x2 = jnp.sum(X * X, axis=1)
        cross = cross + kappa * kappa_p * jnp.abs(a) * (jnp.abs(D2).T @ (jnp.abs(r) * x2))
    return settings.lr_factor / (lam + jnp.max(cross))


def _initial_state(a0, W0, kappa, X, y, settings: TrainSettings):
    """Loop state of one network at step 0 (``stop`` False, status ``budget``)."""
    act = activation(settings.activation)
    _, loss0, _, _, _ = _forward(a0, W0, kappa, X, y, act, derivative(act))
    nan_hist = jnp.full((settings.n_records,), jnp.nan, dtype=a0.dtype)
    return {
        "a": a0,
        "W": W0,
        "step": jnp.asarray(0, jnp.int32),
        "stop": jnp.asarray(False),
        "status": jnp.asarray(BUDGET, jnp.int32),
        "loss0": loss0,
        "loss": loss0,
        "rd": jnp.asarray(0.0, a0.dtype),
        "time": jnp.asarray(0.0, a0.dtype),
        "hist_rd": nan_hist,
        "hist_loss": nan_hist,
    }


def _advance(state, W0, kappa, kappa_p, X, y, limit, settings: TrainSettings):
    """Run one network's loop from ``state`` until it stops or reaches step ``limit``."""
    act = activation(settings.activation)
    dact = derivative(act)
    w0norm = jnp.sqrt(jnp.sum(W0 * W0))

    def cond(state):
        return ~state["stop"] & (state["step"] < limit)

    def body(state):
        a, W, k = state["a"], state["W"], state["step"]
        r, loss, S, D, h = _forward(a, W, kappa, X, y, act, dact)
        GW = (D * r[:, None]).T @ X  # (m, d): Σ_i r_i σ'(h_ik) x̃_i
        rd = jnp.sqrt(jnp.sum((W - W0) ** 2)) / w0norm
        slot = k // settings.record_every
        rec = (k % settings.record_every) == 0
        here = rec & (jnp.arange(settings.n_records) == slot)  # a mask, not a scatter
        hist_rd = jnp.where(here, rd, state["hist_rd"])
        hist_loss = jnp.where(here, loss, state["hist_loss"])
        bad = ~jnp.isfinite(loss) | (loss > settings.div_factor * state["loss0"])
        ok = loss < settings.tol
        out_of_steps = k >= settings.max_steps
        status = jnp.where(bad, DIVERGED, jnp.where(ok, CONVERGED, BUDGET)).astype(jnp.int32)
        stop = bad | ok | out_of_steps
        if settings.step_rule == "gram":
            eta = _step_size(a, kappa, kappa_p, X, r, S, D, h, GW, dact, settings)
        else:
            eta = jnp.asarray(settings.lr, a.dtype)
        a_new = a - eta * (kappa / kappa_p) * (S.T @ r)
        W_new = W - eta * (kappa_p * kappa) * a[:, None] * GW
        return {
            "a": jnp.where(stop, a, a_new),
            "W": jnp.where(stop, W, W_new),
            "step": jnp.where(stop, k, k + 1).astype(jnp.int32),
            "stop": stop,
            "status": status,
            "loss0": state["loss0"],
            "loss": loss,
            "rd": rd,
            "time": state["time"] + jnp.where(stop, 0.0, eta),
            "hist_rd": hist_rd,
            "hist_loss": hist_loss,
        }

    return jax.lax.while_loop(cond, body, state)


def _train_one(a0, W0, kappa, kappa_p, X, y, settings: TrainSettings):
    """Train one network to its stop (the whole budget in one loop)."""
    state = _initial_state(a0, W0, kappa, X, y, settings)
    return _advance(state, W0, kappa, kappa_p, X, y, settings.max_steps + 1, settings)


_BATCH_AXES = (0, 0, 0, 0, None, None, None)


@functools.partial(jax.jit, static_argnames=("settings",))
def _init_vmapped(a0, W0, kappa, X, y, settings):
    return jax.vmap(_initial_state, in_axes=(0, 0, 0, None, None, None))(
        a0, W0, kappa, X, y, settings)


@functools.partial(jax.jit, static_argnames=("settings",))
def train_single(a0, W0, kappa, kappa_p, X, y, settings):
    """One network, compiled on its own (the per-network reference of the benchmark)."""
    return _train_one(a0, W0, kappa, kappa_p, X, y, settings)


@functools.cache
def _advance_fn(n_devices: int, settings: TrainSettings):
    """Compiled vmapped :func:`_advance`; with several devices, a shard_map that gives each
    device its own slice of the batch and its own loop. Returns (fn, split, whole)."""

    def local(state, W0, kappa, kappa_p, X, y, limit):
        return jax.vmap(_advance, in_axes=(0, 0, 0, 0, None, None, None, None))(
            state, W0, kappa, kappa_p, X, y, limit, settings)

    if n_devices <= 1:
        return jax.jit(local), None, None
    mesh = jax.make_mesh((n_devices,), ("net",))
    P = jax.sharding.PartitionSpec
    spec = P("net")
    fn = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(spec, spec, spec, spec, P(), P(), P()),
        out_specs=spec,
        check_vma=False,
    )
    split = jax.sharding.NamedSharding(mesh, spec)
    whole = jax.sharding.NamedSharding(mesh, P())
    return jax.jit(fn), split, whole


def _bucket(n_active: int, B: int, n_dev: int) -> int:
    """Padded batch size for ``n_active`` networks: B / 4^k (few distinct compiled shapes),
    at least 4 per device, a multiple of the device count."""
    size = B
    while size // 4 >= max(n_active, 4 * n_dev):
        size //= 4
    return -(-size // n_dev) * n_dev


def train_batch(a0, W0, kappa, kappa_p, X, y, settings: TrainSettings, *, chunk: int = 1000):
    """Train a batch of B networks of one width; returns a dict of NumPy arrays.

    a0 (B, m), W0 (B, m, d), kappa and kappa_p (B,), X (n, d), y (n,). Keys: ``a``, ``W``
    (state at the stop), ``step`` (stopping step), ``status`` (index into :data:`STATUS`),
    ``loss`` (at the stop), ``rd`` (RD of input weights at the stop), ``time`` (t̄ reached),
    ``hist_rd`` and ``hist_loss`` (B, n_records): RD and loss every ``record_every`` steps
    (NaN after the stop).

    Execution: rounds of compiled vmapped loops up to step limits chunk, 2·chunk, 4·chunk,
    ...; after each round the stopped networks are set aside and the rest is packed into a
    smaller batch (sizes B/4^k, so only a few shapes compile). The batch is padded to a
    multiple of ``jax.device_count()`` and split over the devices. The numbers do not depend
    on the rounds: a network's loop is the same sequence of steps whatever its batch.
    """
    f64 = jnp.float64
    W0 = np.asarray(W0, np.float64)
    kappa = np.asarray(kappa, np.float64)
    kappa_p = np.asarray(kappa_p, np.float64)
    X = jnp.asarray(X, f64)
    y = jnp.asarray(y, f64)
    B = W0.shape[0]
    n_dev = jax.device_count()
    state = {k: np.array(v) for k, v in _init_vmapped(
        jnp.asarray(a0, f64), jnp.asarray(W0), jnp.asarray(kappa), X, y, settings).items()}
    fn, split, whole = _advance_fn(n_dev, settings)
    limit = chunk
    active = np.arange(B)
    while active.size:
        size = _bucket(active.size, B, n_dev)
        idx = np.concatenate([active, np.repeat(active[-1:], size - active.size)])
        args = [{k: v[idx] for k, v in state.items()}, W0[idx], kappa[idx], kappa_p[idx]]
        if split is not None:
            args = [jax.device_put(v, split) for v in args]
            rest = [jax.device_put(X, whole), jax.device_put(y, whole)]
        else:
            rest = [X, y]
        out = fn(*args, *rest, jnp.asarray(limit, jnp.int32))
        n = active.size
        for k, v in out.items():
            state[k][active] = np.asarray(v)[:n]
        active = active[~state["stop"][active]]
        limit = min(2 * limit, settings.max_steps + 1)
    return {k: v for k, v in state.items() if k not in ("stop", "loss0")}


def train_loop(a0, W0, kappa, kappa_p, X, y, settings: TrainSettings):
    """The same algorithm one network at a time (a Python loop over compiled single-network
    calls): the reference the batched engine is benchmarked and checked against."""
    X, y = jnp.asarray(X, jnp.float64), jnp.asarray(y, jnp.float64)
    outs = [
        train_single(jnp.asarray(a0[i]), jnp.asarray(W0[i]), kappa[i], kappa_p[i], X, y,
                     settings)
        for i in range(len(kappa))
    ]
    return {
        k: np.stack([np.asarray(o[k]) for o in outs]) for k in outs[0]
        if k not in ("stop", "loss0")
    }
