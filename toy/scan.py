"""Phase scan: RD slope S_w over a (γ, γ') grid, compared with theory point by point.

Setting (docs/science.md §2): 4 points x = linspace(−1/2, 1/2, 4), y = x², ReLU with bias, ASI,
family β1 = 1, β2 = m^{γ'}, α = β1β2 m^γ; every network trained by the engine of
:mod:`smallinit.toy.twolayer` until its loss is below ``tol``. For each network,
RD = ‖θ_w(t*) − θ_w(0)‖/‖θ_w(0)‖ over input weights and biases at the stop t*
(:func:`smallinit.kernels.measure.segment_relative_distance`). Per seed, the slope
S_w = d ln RD / d ln m is the least-squares slope of ln RD against ln m over the widths at
which that seed converged; the point's S_w is the median over seeds.

Agreement (per point), theory's rule (:func:`smallinit.theory.phase.slope_agrees` and
``slope_in_interval``, shared with the toy-to-transformer comparison): the measured sign
must match the predicted regime (linear S_w < 0, condensed S_w > 0, critical
|S_w| ≤ ``critical_tol``); the table also says whether S_w lies in theory's slope interval.
The linear bound is RD ≲ m^Δ log m, whose log factor adds d ln(ln m)/d ln m = 1/ln m to the
slope, so there the upper end is taken as Δ + 1/ln(m_min) (theory's ``log_allowance``); the
condensed lower end Δ/2 is used as is; at a critical point the interval is {0} and
|S_w| ≤ ``critical_tol`` counts as inside.

Execution: one compiled call per width (all grid points × seeds vmapped, split over the JAX
devices); the whole scan is one run of kind ``toy-scan`` in the run store, its per-network
outcome (status, steps, RD, loss, RD(t)) in ``arrays.npz``, its per-point records in
``points.json``.

Engines (:data:`ENGINES`): ``jax`` (:func:`smallinit.toy.twolayer.train_batch`) or
``grouped`` (:mod:`smallinit.toy.grouped_engine`: every network of the scan, all widths, in
one ragged batch, one call of the kernels' grouped two-layer step per step; slower than JAX
on CPU). Both run the same algorithm and give the same S_w to rounding. A scan not given
an engine takes ``$SMALLINIT_TOY_ENGINE``, else ``auto`` (:func:`chosen_engine`): the
grouped engine where ``smallinit.kernels.backend() == "cupy"`` (a CUDA device) and the
scan's settings allow it (ReLU), else jax; so the study's scans run grouped on a GPU and
as before on a CPU. The engine is an execution choice, not part of
:class:`ScanConfig`: a jax scan keeps its run key (version ``VERSION``), a grouped scan is
stored under version ``VERSION + "-grouped"`` of the same kind, so the two never overwrite
each other and can be compared.

A network that diverges, stalls (:mod:`smallinit.toy.stopping`) or runs out of steps is
recorded with its status and left out of the fit; only a scan where no network converged
fails as a whole.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import time
from typing import Literal

import numpy as np

from smallinit.core import profiles
from smallinit.core.atomic import atomic_save_npz
from smallinit.core.config import MAX_STEPS, STORE_HINT, check_fields, check_instance, override
from smallinit.core.errors import ConfigError, RunFailed, require
from smallinit.core.jobs import RunSpec
from smallinit.core.memory import check_memory
from smallinit.core.progress import progress
from smallinit.core.store import RunStore
from smallinit.kernels import backend as kernels_backend
from smallinit.kernels.measure import segment_relative_distance
from smallinit.theory.phase import slope_agrees, slope_in_interval
from smallinit.toy import predictions
from smallinit.toy import twolayer as tl
from smallinit.toy.grouped_engine import check_settings, train_grouped
from smallinit.toy.jaxsetup import use_all_cpu_cores
from smallinit.toy.limits import check_family_scales, scan_bytes
from smallinit.toy.twolayer import TrainSettings

log = logging.getLogger(__name__)

KIND = "toy-scan"
VERSION = "5"  # 5: the CPU engine's one-network step sums in another order (rounding)
# 4: networks at an exact stationary point stop as "stalled" (toy.stopping)
ENGINES = ("jax", "grouped")
ENGINE_ENV = "SMALLINIT_TOY_ENGINE"  # the engine of a scan not given one: auto (default),
# jax or grouped (the switch that forces the grouped engine on a CPU, through NumPy)

BENCH_WIDTHS = (250, 500, 1000, 2000, 4000)
SECTION = "toy-scan"  # the profiles' table of the phase scan (core/profiles/*.toml)


@dataclasses.dataclass
class ScanConfig:
    """One phase scan (docs/science.md §2 reference setting)."""

    # the defaults live here; a profile's [toy-scan] table is an overlay on them
    gammas: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75)
    gamma_primes: tuple[float, ...] = (-0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75)
    widths: tuple[int, ...] = (250, 500, 1000)
    seeds: int = 3
    activation: str = "relu"
    tol: float = 1e-6
    max_steps: int = 20000
    step_rule: Literal["gram", "fixed"] = "gram"
    lr_factor: float = 1.0
    lr: float = 1e-3
    record_every: int = 100
    critical_tol: float = 0.15

    def __post_init__(self):
        check_fields(
            self,
            bounds={
                "max_steps": (1, MAX_STEPS),
                "record_every": (1, MAX_STEPS),
                "critical_tol": (0, None),
            },
        )
        require(len(self.gammas) > 0, "gammas is empty; give at least one γ")
        require(len(self.gamma_primes) > 0, "gamma_primes is empty; give at least one γ'")
        require(
            len(self.widths) >= 2,
            f"widths={list(self.widths)} needs at least two widths to fit a slope",
        )
        require(
            len(set(self.widths)) == len(self.widths), f"widths={list(self.widths)} has duplicates"
        )
        for m in self.widths:
            require(
                m >= 2 and m % 2 == 0,
                f"width {m} is not allowed; widths must be even (ASI) and >= 2",
            )
        require(self.seeds >= 1, f"seeds={self.seeds} is not allowed; it must be >= 1")
        for name in ("gammas", "gamma_primes"):
            for v in getattr(self, name):
                require(
                    math.isfinite(v) and abs(v) <= 4,
                    f"{name} value {v} is not allowed; use finite values in [-4, 4]",
                )
        try:
            self.settings()
        except ValueError as err:
            raise ConfigError(str(err)) from None

        for m in (min(self.widths), max(self.widths)):  # the scales are monotone in m
            for g in self.gammas:
                for gp in self.gamma_primes:
                    check_family_scales(g, gp, m)

    def check_memory(self, engine: str = "jax") -> None:
        """ConfigError when the scan's estimated peak memory (:func:`toy.limits.scan_bytes`)
        exceeds the limit of :mod:`smallinit.core.memory`; called before anything is allocated."""
        n_points = len(self.gammas) * len(self.gamma_primes)
        estimate = scan_bytes(
            n_points,
            self.seeds,
            self.widths,
            self.settings().n_records,
            grouped=engine == "grouped",
        )
        check_memory(
            estimate,
            f"the toy scan of {n_points} grid points x seeds={self.seeds} "
            f"at widths up to {max(self.widths)} with max_steps={self.max_steps} "
            f"(engine {engine})",
        )

    def settings(self):
        return TrainSettings(
            activation=self.activation,
            tol=self.tol,
            max_steps=self.max_steps,
            step_rule=self.step_rule,
            lr_factor=self.lr_factor,
            lr=self.lr,
            record_every=self.record_every,
        )


# ----------------------------------------------------------------------------- simulation
def _width_batch(cfg: ScanConfig, m: int):
    """Inits and (κ, κ') for every (γ, γ', seed) at width m, flattened in that order."""
    inits = [tl.init_asi(s, m, 2) for s in range(cfg.seeds)]
    a0, W0, k, kp = [], [], [], []
    for g in cfg.gammas:
        for gp in cfg.gamma_primes:
            kappa, kappa_p = tl.kappas(*tl.luo_family(g, gp, m))
            for s in range(cfg.seeds):
                a0.append(inits[s][0])
                W0.append(inits[s][1])
                k.append(kappa)
                kp.append(kappa_p)
    return np.stack(a0), np.stack(W0), np.array(k), np.array(kp)


def simulate(
    cfg: ScanConfig, *, engine: str = "batched", progress_desc: str = "toy scan", partial_dir=None
):
    """Train every network of the scan; returns a dict of arrays shaped
    (n_γ, n_γ', n_widths, seeds[, ...]). ``engine`` = "batched" (JAX, one call per width),
    "loop" (the same algorithm one network per call; for the benchmark) or "grouped" (all
    widths in one ragged batch through the kernels' grouped step).

    With ``partial_dir`` (batched and loop engines) each finished width is saved there as
    ``width-<m>.npz`` (atomically) and a width already saved is loaded instead of trained,
    so a scan killed after some widths resumes from them. A width's networks depend only
    on the config and the width (seeded inits, deterministic steps), so the resumed arrays
    equal the uninterrupted ones."""
    if engine == "grouped":
        return _simulate_grouped(cfg)
    if engine not in ("batched", "loop"):
        raise ValueError(f"engine={engine!r} is not allowed; use batched, loop or grouped")

    use_all_cpu_cores()  # the engine starts here: one JAX CPU device per core (jaxsetup)
    X, y = tl.reference_data()
    settings = cfg.settings()
    G, Gp, S = len(cfg.gammas), len(cfg.gamma_primes), cfg.seeds
    out = _empty_result(cfg, settings.n_records)
    train = tl.train_batch if engine == "batched" else tl.train_loop
    for w, m in enumerate(progress(cfg.widths, desc=progress_desc)):
        saved = _load_width(partial_dir, m)
        if saved is not None:
            for key, v in saved.items():
                out[key][:, :, w] = v
            log.info("width %d: loaded from %s", m, partial_dir)
            continue
        a0, W0, k, kp = _width_batch(cfg, m)
        t0 = time.perf_counter()
        res = train(a0, W0, k, kp, X, y, settings)
        log.info(
            "width %d: %d networks, max %d steps, %.1f s",
            m,
            len(k),
            int(res["step"].max()),
            time.perf_counter() - t0,
        )
        B = len(k)
        offsets = np.arange(B + 1) * m
        rd = segment_relative_distance(res["W"].reshape(B * m, -1), W0.reshape(B * m, -1), offsets)
        out["rd"][:, :, w] = rd.reshape(G, Gp, S)
        out["rd_engine"][:, :, w] = res["rd"].reshape(G, Gp, S)
        out["loss"][:, :, w] = res["loss"].reshape(G, Gp, S)
        out["steps"][:, :, w] = res["step"].reshape(G, Gp, S)
        out["status"][:, :, w] = res["status"].reshape(G, Gp, S)
        out["hist_rd"][:, :, w] = res["hist_rd"].reshape(G, Gp, S, -1)
        out["hist_loss"][:, :, w] = res["hist_loss"].reshape(G, Gp, S, -1)
        _save_width(partial_dir, m, {key: out[key][:, :, w] for key in out})
    return out


def _width_file(partial_dir, m: int):
    from pathlib import Path

    return Path(partial_dir) / f"width-{m}.npz"


def _load_width(partial_dir, m: int) -> dict[str, np.ndarray] | None:
    """A width's saved slices, or None (no folder, not saved yet, or unreadable)."""
    if partial_dir is None or not _width_file(partial_dir, m).is_file():
        return None
    try:
        with np.load(_width_file(partial_dir, m), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as err:  # a damaged partial file is recomputed, not trusted
        log.warning("ignoring unreadable %s: %s", _width_file(partial_dir, m), err)
        return None


def _save_width(partial_dir, m: int, arrays: dict[str, np.ndarray]) -> None:
    if partial_dir is None:
        return

    atomic_save_npz(_width_file(partial_dir, m), arrays)


def _empty_result(cfg: ScanConfig, n_records: int) -> dict[str, np.ndarray]:
    shape = (len(cfg.gammas), len(cfg.gamma_primes), len(cfg.widths), cfg.seeds)
    return {
        "rd": np.full(shape, np.nan),
        "rd_engine": np.full(shape, np.nan),
        "loss": np.full(shape, np.nan),
        "steps": np.zeros(shape, np.int64),
        "status": np.zeros(shape, np.int64),
        "hist_rd": np.full(shape + (n_records,), np.nan),
        "hist_loss": np.full(shape + (n_records,), np.nan),
    }


def _simulate_grouped(cfg: ScanConfig) -> dict[str, np.ndarray]:
    """:func:`simulate` through the grouped engine: the whole scan as one ragged batch."""
    X, y = tl.reference_data()
    settings = cfg.settings()
    a0, W0, k, kp = [], [], [], []
    for m in cfg.widths:
        a, W, kk, kkp = _width_batch(cfg, m)
        a0 += list(a)
        W0 += list(W)
        k.append(kk)
        kp.append(kkp)
    t0 = time.perf_counter()
    try:
        res = train_grouped(a0, W0, np.concatenate(k), np.concatenate(kp), X, y, settings)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    log.info(
        "grouped engine: %d networks, max %d steps, %.1f s",
        len(a0),
        int(res["step"].max()),
        time.perf_counter() - t0,
    )
    rd = segment_relative_distance(res["W"], np.concatenate(W0), res["offsets"])
    out = _empty_result(cfg, settings.n_records)
    G, Gp, Wn, S = out["rd"].shape

    def place(v):  # (widths, γ, γ', seeds[, ...]) → (γ, γ', widths, seeds[, ...])
        v = np.asarray(v).reshape((Wn, G, Gp, S) + np.shape(v)[1:])
        return np.moveaxis(v, 0, 2)

    for key, v in (
        ("rd", rd),
        ("rd_engine", res["rd"]),
        ("loss", res["loss"]),
        ("steps", res["step"]),
        ("status", res["status"]),
        ("hist_rd", res["hist_rd"]),
        ("hist_loss", res["hist_loss"]),
    ):
        out[key][...] = place(v)
    return out


def fit_slopes(rd: np.ndarray, status: np.ndarray, widths) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed least-squares slopes of ln RD vs ln m over converged widths (NaN when fewer
    than two), and their median over seeds (the last axis). rd, status: (..., n_widths, S)."""
    lnm = np.log(np.asarray(widths, dtype=float))
    ok = (status == 0) & np.isfinite(rd) & (rd > 0)
    lnrd = np.log(np.where(ok, rd, 1.0))
    wts = ok.astype(float)
    n = wts.sum(axis=-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = (wts * lnm[:, None]).sum(-2) / n
        my = (wts * lnrd).sum(-2) / n
        dx = (lnm[:, None] - mx[..., None, :]) * wts
        slope = (dx * (lnrd - my[..., None, :])).sum(-2) / (dx * dx).sum(-2)
    slope = np.where(n >= 2, slope, np.nan)
    finite = np.isfinite(slope)
    med = np.full(slope.shape[:-1], np.nan)
    any_ok = finite.any(-1)
    med[any_ok] = np.nanmedian(slope[any_ok], axis=-1)
    return slope, med


def compare(cfg: ScanConfig, s_w: np.ndarray, n_failed: np.ndarray) -> list[dict]:
    """Point-by-point records: measured S_w against theory's regime and slope interval
    (theory's rule: :func:`smallinit.theory.phase.slope_agrees`, ``slope_in_interval``)."""
    records = []
    for i, g in enumerate(cfg.gammas):
        for j, gp in enumerate(cfg.gamma_primes):
            regime = predictions.regime(g, gp)
            d = predictions.delta(g, gp)
            lo, hi = predictions.slope_interval(g, gp)
            s = float(s_w[i, j])
            agree = slope_agrees(regime, s, cfg.critical_tol)
            in_interval = slope_in_interval(regime, lo, hi, s, cfg.widths, cfg.critical_tol)
            records.append(
                {
                    "gamma": g,
                    "gamma_prime": gp,
                    "delta": d,
                    "regime": regime,
                    "interval": [None if math.isinf(lo) else lo, None if math.isinf(hi) else hi],
                    "S_w": s if math.isfinite(s) else None,
                    "agree": agree,
                    "in_interval": in_interval,
                    "failed_networks": int(n_failed[i, j]),
                }
            )
    return records


@dataclasses.dataclass
class ScanResult:
    """A finished scan: its config, per-point records and the stored arrays."""

    config: ScanConfig
    records: list[dict]
    arrays: dict[str, np.ndarray]
    run_path: str


def chosen_engine(cfg: ScanConfig, engine: str | None = None) -> str:
    """The engine of the scan ``cfg``: ``engine`` (one of :data:`ENGINES` or ``auto``;
    None: ``$SMALLINIT_TOY_ENGINE``, else ``auto``); ``auto`` is ``grouped`` on the CuPy
    backend (a CUDA device) when the scan's settings allow it, else ``jax``."""
    where = "engine"
    if engine is None:
        engine = os.environ.get(ENGINE_ENV, "").strip() or "auto"
        where = ENGINE_ENV
    if engine not in (*ENGINES, "auto"):
        raise ConfigError(
            f"{where}={engine!r} is not allowed; use one of {', '.join(ENGINES)} or auto"
        )
    if engine != "auto":
        return engine
    if kernels_backend() != "cupy":
        return "jax"
    try:
        check_settings(cfg.settings())
    except ValueError:  # not ReLU: the grouped engine cannot run it
        return "jax"
    return "grouped"


def scan_version(engine: str) -> str:
    """The run version of a scan computed by ``engine`` (module docstring)."""
    return VERSION if engine == "jax" else f"{VERSION}-{engine}"


def run_scan(
    cfg: ScanConfig, store=None, *, force: bool = False, engine: str | None = None
) -> ScanResult:
    """Compute (or reuse) the scan through the run store; raises RunFailed when no network
    of the scan converged (the run is then stored as failed with that reason). ``engine``
    is one of :data:`ENGINES` or ``auto`` (None: :func:`chosen_engine`'s default); it
    selects the run version (module docstring), not the config, so jax scans keep their
    keys."""
    check_instance(cfg, ScanConfig, "run_scan")
    engine = chosen_engine(cfg, engine)
    if engine == "grouped":
        try:
            check_settings(cfg.settings())
        except ValueError as err:
            raise ConfigError(str(err)) from None
    cfg.check_memory(engine)
    store = check_instance(store or RunStore(), RunStore, "run_scan(store=...)", STORE_HINT)

    def body(run):
        t0 = time.perf_counter()
        partial = run.path / "partial" if engine == "jax" else None
        sim = simulate(cfg, engine="batched" if engine == "jax" else engine, partial_dir=partial)
        slopes, s_w = fit_slopes(sim["rd"], sim["status"], cfg.widths)
        n_failed = (sim["status"] != 0).sum(axis=(2, 3))
        run.save_arrays(
            S_w=s_w,
            slopes=slopes,
            widths=np.asarray(cfg.widths),
            gammas=np.asarray(cfg.gammas),
            gamma_primes=np.asarray(cfg.gamma_primes),
            **sim,
        )
        if partial is not None:  # the whole grid is in arrays.npz now
            shutil.rmtree(partial, ignore_errors=True)
        counts = {name: int((sim["status"] == code).sum()) for code, name in enumerate(tl.STATUS)}
        run.log(
            {"event": "simulated", "engine": engine, "seconds": time.perf_counter() - t0, **counts}
        )
        if counts["converged"] == 0:
            raise RunFailed(
                f"no network of the scan converged ({counts}); "
                "the step rule or budget does not fit this grid"
            )
        records = compare(cfg, s_w, n_failed)
        run.write_json("points.json", records)
        graded = [r for r in records if r["agree"] is not None]
        return {
            "points": len(records),
            "agree": sum(bool(r["agree"]) for r in graded),
            "graded": len(graded),
            **counts,
        }

    run = store.get_or_run(KIND, cfg, body, version=scan_version(engine), force=force)
    if run.state == "failed":
        raise RunFailed(f"toy scan {run.path} failed: {run.status().get('reason')}")
    return ScanResult(cfg, run.read_json("points.json"), run.arrays(), str(run.path))


def format_table(records: list[dict]) -> str:
    """Plain-text agreement table, one line per grid point."""
    head = (
        f"{'gamma':>6} {'gamma_p':>7} {'Delta':>6} {'regime':>9} {'interval':>15} "
        f"{'S_w':>7} {'in_int':>6} {'agree':>5}"
    )
    lines = [head, "-" * len(head)]

    def yn(v):
        return "-" if v is None else ("yes" if v else "no")

    for r in records:
        lo, hi = r["interval"]
        left = "-inf" if lo is None else f"{lo:.2f}"
        right = "inf" if hi is None else f"{hi:.2f}"
        interval = f"[{left}, {right}]"
        s = "nan" if r["S_w"] is None else f"{r['S_w']:+.3f}"
        lines.append(
            f"{r['gamma']:6.2f} {r['gamma_prime']:7.2f} {r['delta']:+6.2f} "
            f"{r['regime']:>9} {interval:>15} {s:>7} {yn(r['in_interval']):>6} "
            f"{yn(r['agree']):>5}"
        )
    graded = [r for r in records if r["agree"] is not None]
    n_ok = sum(bool(r["agree"]) for r in graded)
    lines.append(
        f"agreement: {n_ok}/{len(graded)} points with a measured slope "
        f"({len(records) - len(graded)} without)"
    )
    return "\n".join(lines)


def from_profile(profile: str, table: str = SECTION) -> ScanConfig:
    """The scan of a profile's ``[toy-scan]`` table (or another table of the same form,
    e.g. fig 2's ``[rd-vs-width]``); fields it leaves out keep the defaults. The experiments
    (:mod:`smallinit.study.experiments.toy_scan`) and ``smallinit toy scan`` both read it
    here, so the command loads no experiment registry (and no torch)."""
    return override(ScanConfig(), profiles.section(profile, table), where=f"{profile}.{table}")


@dataclasses.dataclass
class ScanSpec(RunSpec):
    """A phase scan for the job driver (:mod:`smallinit.core.jobs`): ``config`` is its
    :class:`ScanConfig`; its engine (and so its version) is :func:`chosen_engine`'s
    default: grouped on a CUDA device, jax on a CPU, unless ``$SMALLINIT_TOY_ENGINE``
    says."""

    kind, runner = KIND, staticmethod(run_scan)

    @property
    def version(self) -> str:  # type: ignore[override]
        return scan_version(chosen_engine(self.config))
