"""The two-layer engine: many networks trained by full-batch gradient flow at once, in JAX.

Model (docs/science.md §2, Luo, Xu, Ma, Zhang, JMLR 2021, eqs. 2-4), one network of width m on
inputs x̃ = (x, 1) (each input weight vector carries its bias as last entry):

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
a–w and w–w blocks of Σ_i r_i ∇²f(x_i) (triangle inequality). docs/science.md §2 explains why a
fixed step fails: the stable step scales like 1/(mκ²), many orders of magnitude apart across a
phase-diagram scan. Because η̄ only reparametrizes time along (a discretization of) the
gradient-flow path, RD at the first time the loss falls below ``tol`` does not depend on
it. The Gram part alone is not enough in the condensed regime at small init, where
mκ ≪ 1 and the a–w coupling term (∝ κ|r|) dominates the curvature; hence the second term.
Step rule ``"fixed"``: η̄ = ``lr`` (used by the conservation-law test and to show divergence).

A network stops at the first step whose loss is below ``tol`` (status ``converged``), at the
step budget (``budget``), when its loss becomes non-finite or grows ``div_factor``-fold
over its initial value (``diverged``), or when it made no progress over ``stall_window``
steps (``stalled``: an exact stationary point, see :mod:`smallinit.toy.stopping`); stopped
networks are frozen while the rest of their batch continues, so one bad network never stops
a scan.

Batching: on CPU, :func:`train_batch` runs every network in its own compiled
``lax.while_loop`` to its own stop, the networks spread round-robin over all
``jax.devices()`` (one per core, :mod:`smallinit.toy.jaxsetup`), all in one compiled call
(a ``jax.shard_map`` over the devices, each running its share one after the other with
``lax.map``: one compile and one dispatch per width). One network's step
(:func:`_single_step`) works on ā (m,), w̄ (d, m): the sums over neurons are small
matrix products (f = κ S ā, the Gram sums S Sᵀ and (D∘ā)(D∘ā)ᵀ, ∇_ā R = κ Sᵀ r, with S, D
the n × m matrices σ(h), σ'(h)); the sums over the n inputs and d coordinates of the
input-weight gradient are written out elementwise; RD is computed only at the record
steps; and the largest per-neuron cross term is found by halving (XLA's CPU reduction of
a long vector is one serial chain). Its working set stays in cache. On accelerators
:func:`train_batch` vmaps the same step over a lockstep batch of (init, κ, κ') split
across the devices with ``jax.shard_map``, and finishes the slowest quarter one by one.
All networks of a batch share the width m; a scan groups its networks by width (see
:mod:`smallinit.toy.scan`). Both paths take the one step, :func:`_single_step`, whose
math (forward pass, loss, gradients, descent) is the one definition of
:mod:`smallinit.kernels.two_layer`; batched, XLA may sum its matrix products in another
order, so the two paths agree to rounding (tests/toy/test_toy_engine.py).

Float64: every public function that computes with JAX (:func:`init_asi`, :func:`gradients`,
:func:`train_loop`, :func:`train_batch`) first calls
:func:`smallinit.toy.jaxsetup.enable_x64`, because ``tol`` = 1e-6 on a loss that starts at
≈ 1e-2 and reaches 1e-7 needs relative precision well below float32's near convergence.
Importing this module changes no JAX setting; the CPU device count is set where a scan
starts (:func:`smallinit.toy.jaxsetup.use_all_cpu_cores`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from smallinit.core.config import check_fields
from smallinit.kernels import two_layer
from smallinit.toy import steprule, stopping
from smallinit.toy.jax_activations import activation, check_activation, derivative
from smallinit.toy.jaxsetup import enable_x64
from smallinit.toy.stopping import BUDGET, CONVERGED, DIVERGED, STALLED, STATUS

__all__ = [
    "BUDGET",
    "CONVERGED",
    "DIVERGED",
    "STALLED",
    "STATUS",
    "TrainSettings",
    "gradients",
    "init_asi",
    "kappas",
    "luo_family",
    "reference_data",
    "train_batch",
    "train_loop",
]

PROGRESS_S = 30.0  # seconds between progress log lines of a long batch
MAX_POINTS = 16


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
    stall_window: int = 1000  # steps between stall checks (smallinit.toy.stopping)
    stall_rtol: float = 1e-12  # a check that finds R_k >= (1 - this) R_{k-window} stops

    def __post_init__(self):
        check_fields(self)
        check_activation(self.activation)
        if self.step_rule not in ("gram", "fixed"):
            raise ValueError(f"step_rule={self.step_rule!r} is not allowed; use gram or fixed")
        for name in ("tol", "lr_factor", "lr", "div_factor", "stall_rtol"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and np.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} is not allowed; it must be a positive number")
        for name in ("max_steps", "record_every", "stall_window"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name}={value!r} is not allowed; it must be a positive integer")

    @property
    def n_records(self) -> int:
        return self.max_steps // self.record_every + 1


# ----------------------------------------------------------------------------- family and data
def luo_family(gamma: float, gamma_prime: float, m: int) -> tuple[float, float, float]:
    """docs/science.md §2 reference family: β1 = 1, β2 = m^{γ'}, α = β1 β2 m^γ; returns (α, β1, β2).

    Then κ = β1β2/α = m^{−γ} and κ' = β1/β2 = m^{−γ'} exactly, so (γ, γ') are the point's
    phase-diagram coordinates at every width.
    """
    beta1 = 1.0
    beta2 = float(m) ** gamma_prime
    alpha = beta1 * beta2 * float(m) ** gamma
    return alpha, beta1, beta2


def kappas(alpha: float, beta1: float, beta2: float) -> tuple[float, float]:
    """(κ, κ') = (β1β2/α, β1/β2) (docs/science.md §2 rescaling)."""
    return beta1 * beta2 / alpha, beta1 / beta2


def reference_data(n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """docs/science.md §2 1-d setting: x = linspace(−1/2, 1/2, n), y = x²; returns (x̃ (n, 2), y)."""
    x = np.linspace(-0.5, 0.5, n)
    return np.stack([x, np.ones_like(x)], axis=1), x**2


def init_asi(seed: int, m: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Rescaled ASI init (ā (m,), w̄ (m, d)): m/2 draws of N(0,1), N(0, I), duplicated with
    ā → −ā. Deterministic in (seed, m, d); the same for every (γ, γ') (common random
    numbers across a scan). ``m`` must be even."""
    if m < 2 or m % 2:
        raise ValueError(f"width m={m} is not allowed; ASI needs an even width >= 2")
    enable_x64()
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), m), d)
    ka, kw = jax.random.split(key)
    a = jax.random.normal(ka, (m // 2,), dtype=jnp.float64)
    w = jax.random.normal(kw, (m // 2, d), dtype=jnp.float64)
    return np.concatenate([a, -a]), np.concatenate([w, w])


def _mm(A, B):
    """A @ B for stacks of tiny matrices, as a broadcast sum (no batched GEMM calls)."""
    return jnp.sum(A[..., :, :, None] * B[..., None, :, :], axis=-2)


# ----------------------------------------------------------------------------- one step
def _fold_max(x):
    """max of a 1-d array by halving: elementwise maxima of the two halves until at most 32
    values are left (vectorized; XLA's CPU reduction is one serial chain of dependent
    maxima, about 7× slower at 4000 values). Exact: max does not depend on the order."""
    while x.shape[0] > 32:
        if x.shape[0] % 2:
            x = jnp.concatenate([x, x[:1]])
        half = x.shape[0] // 2
        x = jnp.maximum(x[:half], x[half:])
    return jnp.max(x)


def _single_step(state, const, X, y, settings: TrainSettings):
    """One gradient step of one network, a (m,), W (d, m): the loss R_k, the stopping
    decision at step k (:func:`stopping.decide`), the step size η̄ and the updated weights,
    as a dict; the caller keeps the old weights when ``stop_now``. The forward pass, the
    loss, the gradient sums and the descent are the one definition's
    (:mod:`smallinit.kernels.two_layer`: f = κ S ā, ∇_ā R = κ Sᵀ r, ∇_w̄_k R = κ ā_k G_k
    with G_jk = Σ_i x̃_ij r_i σ'(h_ik), S = σ(h), D = σ'(h) n × m), called with
    ``jax.numpy``; what is this step's own is the Gram rule's curvature:
    SS = S Sᵀ, DD = (D∘ā)(D∘ā)ᵀ and, for ReLU, the cross term max_k ‖G_k‖ as the square
    root of max_k ‖G_k‖² (the root is monotone). Both execution paths take this step: the
    one-network loop (:func:`_run_single`) and, vmapped, the lockstep batch
    (:func:`_chunk_fn`); :func:`_advance` applies it."""
    act = activation(settings.activation)
    dact = derivative(act)
    a, W, k = state["a"], state["W"], state["step"]
    kappa, kappa_p = const["kappa"], const["kappa_p"]
    n, d = X.shape
    h, S, D = two_layer.hidden(X, W, lambda z: (act(z), dact(z)))
    Da = D * a
    r, loss = two_layer.residual(jnp, two_layer.outputs(S, a, kappa), y)
    status, stop_now, loss_ref = stopping.decide(
        loss, state["loss0"], state["loss_ref"], k, settings, jnp
    )
    G = two_layer.input_weight_sums(jnp, X, r, D)
    if settings.step_rule == "gram":
        K = steprule.tangent_gram(S @ S.T, Da @ Da.T, X @ X.T, kappa, kappa_p, n)
        g2 = sum(G[j] * G[j] for j in range(d))
        if settings.activation == "relu":  # σ'' = 0: the cross term is ‖G_k‖ alone
            cross_max = jnp.sqrt(_fold_max(g2))
        else:
            x2 = jnp.sum(X * X, axis=1)
            D2 = derivative(dact)(h)
            cross_max = _fold_max(
                jnp.sqrt(g2)
                + kappa_p * jnp.abs(a) * sum(jnp.abs(D2[i] * r[i]) * x2[i] for i in range(n))
            )
        eta = steprule.gram_rate(K, cross_max, kappa, settings.lr_factor, jnp, _mm)
    else:
        eta = jnp.asarray(settings.lr, a.dtype)
    a_new, W_new = two_layer.descend(a, W, r, S, G, eta, kappa, kappa_p)
    return {
        "loss": loss,
        "status": status,
        "stop_now": stop_now,
        "loss_ref": loss_ref,
        "eta": eta,
        "a": a_new,
        "W": W_new,
    }


def gradients(a, W, kappa, X, y, act_name: str):
    """(R, ∇_ā R, ∇_w̄ R) in rescaled variables for one network (a (m,), W (m, d)), closed
    form: ∇_ā R = κ Sᵀ r,  ∇_w̄_k R = κ ā_k Σ_i r_i σ'(h_ik) x̃_i, as
    :func:`smallinit.kernels.two_layer.loss_and_gradients` (the one definition) computes
    them."""
    enable_x64()
    act = activation(act_name)
    dact = derivative(act)
    W = jnp.asarray(W)
    loss, ga, gW, _ = two_layer.loss_and_gradients(
        jnp, jnp.asarray(X), jnp.asarray(y), jnp.asarray(a), W.T, kappa, lambda z: (act(z), dact(z))
    )
    return loss, ga, gW.T


def _advance(state, p):
    """The state after the step ``p`` of :func:`_single_step`: a network that stops at this
    step keeps its weights and step count and records why; a network stopped earlier
    changes nothing (``jnp.where`` selects, so a running network's numbers are the step's
    own, bit for bit)."""
    live = ~state["stop"]
    move = live & ~p["stop_now"]
    k = state["step"]
    return {
        **state,
        "a": jnp.where(move, p["a"], state["a"]),
        "W": jnp.where(move, p["W"], state["W"]),
        "step": jnp.where(move, k + 1, k).astype(jnp.int32),
        "stop": state["stop"] | p["stop_now"],
        "status": jnp.where(live, p["status"], state["status"]),
        "loss_ref": jnp.where(live, p["loss_ref"], state["loss_ref"]),
        "loss": jnp.where(live, p["loss"], state["loss"]),
        "time": state["time"] + jnp.where(move, p["eta"], 0.0),
    }


def _rel_dist(W, const):
    """RD = ‖W − W0‖ / ‖W0‖ of one network's input weights."""
    dW = W - const["W0"]
    return jnp.sqrt(jnp.sum(dW * dW)) / const["w0norm"]


# ----------------------------------------------------------------------------- setup
@functools.cache
def _initial_loss(name: str):
    """Compiled: R_0 of each network of a batch, a (B, m), W (B, d, m), κ (B,)."""
    act = activation(name)
    dact = derivative(act)

    def one(a, W, kappa, X, y):
        _, S, _ = two_layer.hidden(X, W, lambda z: (act(z), dact(z)))
        return two_layer.residual(jnp, two_layer.outputs(S, a, kappa), y)[1]

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None, None)))


def _setup(a0, W0, kappa, kappa_p, X, y, settings: TrainSettings):
    """Initial state and per-network constants (NumPy) of a batch a0 (B, m), W0 (B, m, d),
    with the weights stored as the step takes them: a (B, m), W (B, d, m)."""
    a = np.array(a0, np.float64)
    W0 = np.asarray(W0, np.float64)
    kappa = np.asarray(kappa, np.float64)
    kappa_p = np.asarray(kappa_p, np.float64)
    if X.shape[0] > MAX_POINTS:
        raise ValueError(
            f"{X.shape[0]} data points are not allowed; the engine's Gram step "
            f"is written for small data sets (at most {MAX_POINTS} points)"
        )
    W = np.ascontiguousarray(np.swapaxes(W0, -1, -2))  # (B, d, m)
    loss0 = _initial_loss(settings.activation)(a, W, kappa, jnp.asarray(X), jnp.asarray(y))
    B = a.shape[0]
    state = {
        "a": a,
        "W": W.copy(),
        "step": np.zeros(B, np.int32),
        "stop": np.zeros(B, bool),
        "status": np.full(B, BUDGET, np.int32),
        "loss0": np.array(loss0),
        "loss_ref": np.array(loss0),
        "loss": np.array(loss0),
        "rd": np.zeros(B),
        "time": np.zeros(B),
    }
    const = {
        "W0": W,
        "w0norm": np.sqrt((W0 * W0).sum(axis=(-2, -1))),
        "kappa": kappa,
        "kappa_p": kappa_p,
    }
    return state, const


def _result(state, hist_rd, hist_loss):
    out = {k: np.asarray(v) for k, v in state.items() if k not in ("stop", "loss0", "loss_ref")}
    out["W"] = np.swapaxes(out["W"], -1, -2)
    out["hist_rd"], out["hist_loss"] = hist_rd, hist_loss
    return out


# ----------------------------------------------------------------------------- per network
def _run_single(state, const, X, y, settings):
    """One network (a (m,), W and W0 (d, m)) to its stop by :func:`_single_step`;
    records RD and loss every ``record_every`` steps; returns (state, RD records, loss
    records). Traced inside :func:`_train_single` and :func:`_many_fn`.

    Two nested ``lax.while_loop``: the outer one runs blocks of ``record_every`` steps and
    records RD at each block's first step, the inner one the steps of a block up to the
    network's stop (so RD is computed only when recorded, and a step carries no recording
    logic). RD at the stop is computed once after the loops: the stopping step keeps W, so
    RD of the final W is RD at the stop."""
    re = settings.record_every
    nan_hist = jnp.full((settings.n_records,), jnp.nan, dtype=state["a"].dtype)

    def step(carry):
        st, i, first_loss = carry
        st = _advance(st, _single_step(st, const, X, y, settings))
        return st, i + 1, jnp.where(i == 0, st["loss"], first_loss)

    def block(carry):
        st, hr, hl = carry
        slot = st["step"] // re  # every block starts at a record step
        rd = _rel_dist(st["W"], const)
        st, _, loss = jax.lax.while_loop(
            lambda c: (c[1] < re) & ~c[0]["stop"], step, (st, jnp.int32(0), st["loss"])
        )
        return st, hr.at[slot].set(rd), hl.at[slot].set(loss)

    st, hr, hl = jax.lax.while_loop(lambda c: ~c[0]["stop"], block, (state, nan_hist, nan_hist))
    return {**st, "rd": _rel_dist(st["W"], const)}, hr, hl


#: One network per compiled call (:func:`train_loop`).
_train_single = jax.jit(_run_single, static_argnames=("settings",))


@functools.cache
def _many_fn(n_devices: int, settings: TrainSettings):
    """Compiled: stacks of networks (leading axis), one after the other (``lax.map`` of
    :func:`_run_single`); with several devices a shard_map gives each device its own equal
    slice of the stack, so one executable and one dispatch serve all devices. Returns the
    function and the stack's sharding (None for one device)."""

    def local(states, consts, X, y):
        return jax.lax.map(lambda sc: _run_single(sc[0], sc[1], X, y, settings), (states, consts))

    if n_devices <= 1:
        return jax.jit(local), None
    mesh = jax.make_mesh((n_devices,), ("net",))
    P = jax.sharding.PartitionSpec
    fn = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P("net"), P("net"), P(), P()),
        out_specs=P("net"),
        check_vma=False,
    )
    return jax.jit(fn), jax.sharding.NamedSharding(mesh, P("net"))


def _pick(state, const, idx):
    """Networks ``idx`` (an index or an index array) of a batch: their (state, const)."""
    return {k: v[idx] for k, v in state.items()}, {k: v[idx] for k, v in const.items()}


def _store(state, hist, idx, out, first_slot: int = 0):
    """Write :func:`_run_single`'s results for networks ``idx`` into the batch arrays
    (records from slot ``first_slot`` on)."""
    st, hr, hl = out
    for k, v in st.items():
        state[k][idx] = np.asarray(v)
    for h, rec in zip(hist, (hr, hl), strict=True):
        h[idx, first_slot:] = np.asarray(rec)[..., first_slot:]


def _train_on_devices(state, const, idx, X, y, settings, hist, first_slot: int):
    """Networks ``idx`` to their stops, spread round-robin over ``jax.devices()``, all in one
    call of :func:`_many_fn` (each device runs its share one after the other). Each
    device's share is padded to a power of two with networks marked stopped (they take no
    step), so few stack sizes compile."""
    n_dev = jax.device_count()
    shares = [idx[j::n_dev] for j in range(n_dev)]
    size = 1 << (len(shares[0]) - 1).bit_length()
    order = np.concatenate([np.concatenate([g, np.repeat(idx[:1], size - len(g))]) for g in shares])
    st, cs = _pick(state, const, order)
    for j, g in enumerate(shares):
        st["stop"][j * size + len(g) : (j + 1) * size] = True
    fn, split = _many_fn(n_dev, settings)
    if split is not None:
        st, cs = jax.device_put((st, cs), split)
    st, hr, hl = fn(st, cs, X, y)
    keep = np.concatenate([j * size + np.arange(len(g)) for j, g in enumerate(shares)])
    _store(
        state,
        hist,
        np.concatenate(shares),
        (
            {k: np.asarray(v)[keep] for k, v in st.items()},
            np.asarray(hr)[keep],
            np.asarray(hl)[keep],
        ),
        first_slot,
    )


def train_loop(a0, W0, kappa, kappa_p, X, y, settings: TrainSettings):
    """The same algorithm one network at a time (a Python loop over the compiled
    single-network ``while_loop`` of :func:`_train_single`, which stops exactly at the
    network's stop), all on the default device: the reference the batched engine is
    benchmarked and checked against."""
    enable_x64()
    state, const = _setup(a0, W0, kappa, kappa_p, X, y, settings)
    X, y = jnp.asarray(X, jnp.float64), jnp.asarray(y, jnp.float64)
    B = len(const["kappa"])
    hist = (np.full((B, settings.n_records), np.nan), np.full((B, settings.n_records), np.nan))
    for i in range(B):
        _store(state, hist, i, _train_single(*_pick(state, const, i), X, y, settings))
    return _result(state, *hist)


# ----------------------------------------------------------------------------- batched
@functools.cache
def _chunk_fn(n_devices: int, n_blocks: int, settings: TrainSettings):
    """Compiled: ``n_blocks`` × ``record_every`` steps of a whole batch, no host contact:
    :func:`_single_step` vmapped over the networks, each frozen once it stops
    (:func:`_advance`). Each block's first step also returns (RD, loss) of the live
    networks (NaN for stopped ones): the RD(t) records, (B, n_blocks) each; the state's
    ``rd`` is RD at the chunk's end, which for a stopped network is RD at its stop. With
    several devices, a shard_map gives each device its own slice of the batch."""

    def blocks(st, cs, X, y):
        nan = jnp.full((), jnp.nan, st["loss"].dtype)

        def block(st, _):
            live = ~st["stop"]
            rd = _rel_dist(st["W"], cs)

            def body(i, carry):
                st, first_loss = carry
                st = _advance(st, _single_step(st, cs, X, y, settings))
                return st, jnp.where(i == 0, st["loss"], first_loss)

            st, loss = jax.lax.fori_loop(0, settings.record_every, body, (st, nan))
            return st, (jnp.where(live, rd, nan), jnp.where(live, loss, nan))

        st, records = jax.lax.scan(block, st, None, length=n_blocks)
        return {**st, "rd": _rel_dist(st["W"], cs)}, records  # a stopped network's W is final

    local = jax.vmap(blocks, in_axes=(0, 0, None, None))
    if n_devices <= 1:
        return jax.jit(local), None, None
    mesh = jax.make_mesh((n_devices,), ("net",))
    P = jax.sharding.PartitionSpec
    spec = P("net")
    fn = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(spec, spec, P(), P()),
        out_specs=(spec, spec),
        check_vma=False,
    )
    return (
        jax.jit(fn),
        jax.sharding.NamedSharding(mesh, spec),
        jax.sharding.NamedSharding(mesh, P()),
    )


def _bucket(n_active: int, B: int, n_dev: int) -> int:
    """Padded batch size for ``n_active`` networks: B / 4^k (few distinct compiled shapes),
    at least 2 per device, a multiple of the device count."""
    size = B
    while size // 4 >= max(n_active, 2 * n_dev):
        size //= 4
    return -(-size // n_dev) * n_dev


def train_batch(
    a0,
    W0,
    kappa,
    kappa_p,
    X,
    y,
    settings: TrainSettings,
    *,
    chunk: int = 300,
    tail: int | None = None,
):
    """Train a batch of B networks of one width; returns a dict of NumPy arrays.

    a0 (B, m), W0 (B, m, d), kappa and kappa_p (B,), X (n, d), y (n,). Keys: ``a``, ``W``
    (state at the stop), ``step`` (stopping step), ``status`` (index into :data:`STATUS`),
    ``loss`` (at the stop), ``rd`` (RD of input weights at the stop), ``time`` (t̄ reached),
    ``hist_rd`` and ``hist_loss`` (B, n_records): RD and loss every ``record_every`` steps
    (NaN after the stop).

    Execution: compiled calls of ``chunk`` steps (rounded up to whole ``record_every``
    blocks) for all networks still running, in lockstep; between calls the host sets the
    stopped networks aside and, once at most a quarter are left, packs the rest into a
    smaller batch (sizes B/4^k, so few shapes compile). The batch is padded to a multiple of
    ``jax.device_count()`` and split over the devices. The last ``tail`` networks finish in
    the single-network loop of :func:`train_loop`, spread over the devices, which stops each
    exactly at its own stop instead of carrying a padded batch through a long straggler
    (step counts are heavy-tailed: a few networks of a scan need 5-10× the median); the
    devices get their shares round-robin, all in one compiled call (:func:`_many_fn`), each
    share padded to a power of two with stopped networks, so few shapes compile.

    Default ``tail``: on CPU the whole batch (no lockstep phase at all: each CPU device runs
    its share of networks one after the other, each network's working set, about
    100 kB at m = 4000, stays in cache, and its step is the one-network form of
    :func:`_single_step`; no steps are wasted on stopped networks); on accelerators a
    quarter of the batch (lockstep batches keep a GPU busy, one network does not). The
    numbers do not depend on the chunking: a network's steps are the same whatever its
    batch (the lockstep and the one-network step sum in different orders, so they agree to
    rounding), and in a lockstep batch a stopped network is frozen (its later steps are
    computed and discarded).
    """
    enable_x64()
    m = np.shape(a0)[-1]
    state, const = _setup(a0, W0, kappa, kappa_p, X, y, settings)
    X = jnp.asarray(X, jnp.float64)
    y = jnp.asarray(y, jnp.float64)
    B = len(const["kappa"])
    re = settings.record_every
    n_blocks = max(1, -(-chunk // re))
    hist_rd = np.full((B, settings.n_records), np.nan)
    hist_loss = np.full((B, settings.n_records), np.nan)
    n_dev = jax.device_count()
    if tail is None:
        tail = B if jax.default_backend() == "cpu" else max(n_dev, B // 4)
    if B > tail:  # a lockstep phase (never on CPU by default)
        fn, split, whole = _chunk_fn(n_dev, n_blocks, settings)
    import logging
    import time

    k0, active, size = 0, np.arange(B), None
    last_report = time.monotonic()
    while active.size > tail:
        if time.monotonic() - last_report > PROGRESS_S:  # a long budget shows it is alive
            logging.getLogger(__name__).info(
                "width %d: step %d of at most %d, %d of %d networks still training",
                m,
                k0,
                settings.max_steps,
                active.size,
                B,
            )
            last_report = time.monotonic()
        size = _bucket(active.size, B, n_dev)
        idx = np.concatenate([active, np.repeat(active[-1:], size - active.size)])
        st, cs = _pick(state, const, idx)
        rest = [X, y]
        if split is not None:
            st, cs = jax.device_put(st, split), jax.device_put(cs, split)
            rest = [jax.device_put(v, whole) for v in rest]
        # all networks of the batch stay in lockstep while they run, at step k0
        st, (rec_rd, rec_loss) = fn(st, cs, *rest)
        n = active.size
        for k, v in st.items():
            state[k][active] = np.asarray(v)[:n]
        slots = k0 // re + np.arange(n_blocks)
        keep = slots < settings.n_records
        hist_rd[np.ix_(active, slots[keep])] = np.asarray(rec_rd)[:n, keep]
        hist_loss[np.ix_(active, slots[keep])] = np.asarray(rec_loss)[:n, keep]
        active = active[~state["stop"][active]]
        k0 += n_blocks * re
    if active.size:  # the stragglers, each in its own exact-stop loop
        _train_on_devices(state, const, active, X, y, settings, (hist_rd, hist_loss), k0 // re)
    return _result(state, hist_rd, hist_loss)
