"""Fig 6: the anchor task's phase diagram — (γ, depth) at the base weight decay and (γ, λ)
at one depth, each cell once per seed — and the two contrasting models of the mechanism
view (docs/science.md §6; Zhang et al., NeurIPS 2024, arXiv 2405.05409).

The profile's ``[anchor]`` table is one tree: the run config of every cell
(:class:`~smallinit.llm.training.anchor.AnchorConfig`: seed, init, task, model, train) and
its ``scan`` grid (:class:`AnchorScan`). ``key=value`` overrides apply to that tree with the
one override function (``scan.gammas=0.5,1`` reaches the grid, ``train.steps=2000`` every
cell's run).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core import profiles
from smallinit.core.config import (
    check_fields,
    config_from_dict,
    merge_tables,
    override,
    parse_overrides,
    read_toml,
)
from smallinit.core.errors import require
from smallinit.core.jobs import Results
from smallinit.core.runs import Run
from smallinit.llm.data import anchor
from smallinit.llm.training.anchor import AnchorConfig, AnchorSpec
from smallinit.study.experiments.experiment import Experiment
from smallinit.theory.init_rules import gamma_scheme, parse_scheme

log = logging.getLogger(__name__)
TABLE = "anchor"  # the profiles' table of this experiment


@dataclass
class AnchorScan:
    """The phase-diagram grid: (γ, depth) at the base weight decay, and (γ, λ) at depth
    ``wd_layers`` (0: the base config's depth), each cell once per seed (no seeds: the
    profile cuts the anchor task, and it has no runs)."""

    gammas: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9)
    layers: tuple[int, ...] = (2, 3)
    weight_decays: tuple[float, ...] = (0.0, 0.1, 1.0)
    wd_layers: int = 0
    seeds: tuple[int, ...] = (0,)
    mechanism_gammas: tuple[float, ...] = (0.5, 0.8)  # contrasted in the mechanism view
    #: the budget curve: each budget a multiple of the base run's training samples (its
    #: steps, warmup and evaluation interval times the multiple, its batch as it is), at
    #: each width of ``budget_widths`` (empty: the base's d_model), at the base depth and
    #: weight decay, for ``budget_gammas`` (empty: ``mechanism_gammas``) and every seed
    budgets: tuple[float, ...] = ()
    budget_widths: tuple[int, ...] = ()
    budget_gammas: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_fields(self, "scan")
        require(
            len(self.gammas) >= 1 and all(g > 0 for g in self.gammas),
            f"scan.gammas={list(self.gammas)} must be a non-empty list of numbers > 0",
        )
        require(
            len(self.layers) >= 1 and all(n >= 1 for n in self.layers),
            f"scan.layers={list(self.layers)} must be a non-empty list of integers >= 1",
        )
        require(
            all(w >= 0 for w in self.weight_decays),
            f"scan.weight_decays={list(self.weight_decays)} must all be >= 0",
        )
        require(self.wd_layers >= 0, f"scan.wd_layers={self.wd_layers} must be >= 0")
        require(
            all(math.isfinite(b) and b > 0 for b in self.budgets),
            f"scan.budgets={list(self.budgets)} must all be finite numbers > 0",
        )
        require(
            all(w >= 1 for w in self.budget_widths),
            f"scan.budget_widths={list(self.budget_widths)} must all be integers >= 1",
        )
        require(
            all(g > 0 for g in self.budget_gammas),
            f"scan.budget_gammas={list(self.budget_gammas)} must all be numbers > 0",
        )
        require(
            len(self.mechanism_gammas) == 2 and all(g > 0 for g in self.mechanism_gammas),
            f"scan.mechanism_gammas={list(self.mechanism_gammas)} must be two numbers > 0",
        )


def load(
    profile: str = "quick", overrides=(), *, file: str | Path | None = None
) -> tuple[AnchorConfig, AnchorScan]:
    """Run config and scan grid of a profile (its ``[anchor]`` table; a derived profile's
    too), then the TOML ``file`` of the same form (run config at the top, grid in
    ``[scan]``) laid over it, then ``key=value`` overrides, applied to that one tree
    (module doc); the fields none of them states keep the defaults in code."""
    data = profiles.section(profile, TABLE)
    if file is not None:
        data = merge_tables(data, read_toml(Path(file)))
    data = override(data, parse_overrides(overrides))
    scan = config_from_dict(AnchorScan, data.pop("scan", {}), where="scan")
    return config_from_dict(AnchorConfig, data), scan


def init_gamma(init: str) -> float | None:
    """γ of a plain γ-rule scheme, as theory's :func:`parse_scheme` reads ``init`` (None for
    another scheme, or a γ rule with per-part overrides or depth scaling)."""
    scheme = parse_scheme(init)
    plain = scheme.name == "gamma" and not scheme.overrides and not scheme.depth_scaling
    return scheme.gamma if plain else None


def cell_config(
    base: AnchorConfig,
    *,
    gamma: float | None = None,
    layers: int | None = None,
    weight_decay: float | None = None,
    seed: int | None = None,
) -> AnchorConfig:
    """``base`` with one grid cell's γ, depth, weight decay and seed."""
    changes: dict[str, Any] = {}
    if gamma is not None:
        require(
            math.isfinite(gamma) and gamma > 0,
            f"gamma {gamma} is not allowed; γ must be a finite number > 0 (as scan.gammas)",
        )
        changes["init"] = gamma_scheme(gamma)
    if seed is not None:
        changes["seed"] = seed
    if layers is not None:
        changes["model.n_layers"] = layers
    if weight_decay is not None:
        changes["train.weight_decay"] = weight_decay
    return override(base, changes)


def scan_cells(base: AnchorConfig, scan: AnchorScan) -> list[tuple[str, AnchorConfig]]:
    """Every (panel, config) of the grid; a config shared by both panels appears twice but
    trains once (same run key)."""
    wd_depth = scan.wd_layers or base.model.n_layers
    cells = []
    for seed in scan.seeds:
        for gamma in scan.gammas:
            for layers in scan.layers:
                cells.append(("depth", cell_config(base, gamma=gamma, layers=layers, seed=seed)))
            for wd in scan.weight_decays:
                cells.append(
                    (
                        "wd",
                        cell_config(base, gamma=gamma, layers=wd_depth, weight_decay=wd, seed=seed),
                    )
                )
    return cells


def _spec(cfg: AnchorConfig, **tags: Any) -> AnchorSpec:
    return AnchorSpec(
        cfg,
        {
            "gamma": init_gamma(cfg.init),
            "layers": cfg.model.n_layers,
            "weight_decay": cfg.train.weight_decay,
            "seed": cfg.seed,
            **tags,
        },
    )


def cell_specs(base: AnchorConfig, scan: AnchorScan) -> list[AnchorSpec]:
    """The grid's cells (tag ``panel``: depth or wd)."""
    return [_spec(cfg, panel=panel) for panel, cfg in scan_cells(base, scan)]


def mechanism_specs(base: AnchorConfig, scan: AnchorScan) -> list[AnchorSpec]:
    """The two contrasting models of the mechanism view (base depth and weight decay, first
    seed; tag ``panel=mechanism``; none without seeds)."""
    return [
        _spec(cell_config(base, gamma=g, seed=scan.seeds[0]), panel="mechanism")
        for g in scan.mechanism_gammas
        if scan.seeds
    ]


def budget_config(base: AnchorConfig, multiple: float, width: int) -> AnchorConfig:
    """``base`` trained on ``multiple`` times its samples at d_model ``width``: steps, warmup
    and evaluation interval scaled (rounded to whole steps, at least 1), batch unchanged."""
    t = base.train

    def scaled(steps: int) -> int:
        return max(1, round(steps * multiple)) if steps else 0

    return override(
        base,
        {
            "model.d_model": width,
            "train.steps": scaled(t.steps),
            "train.warmup": scaled(t.warmup),
            "train.eval_every": scaled(t.eval_every),
        },
    )


def budget_specs(base: AnchorConfig, scan: AnchorScan) -> list[AnchorSpec]:
    """The budget curve's runs (tag ``panel=budget`` with ``budget`` and ``d_model``)."""
    out = []
    for seed in scan.seeds:
        for gamma in scan.budget_gammas or scan.mechanism_gammas:
            for width in scan.budget_widths or (base.model.d_model,):
                for multiple in scan.budgets:
                    cfg = cell_config(budget_config(base, multiple, width), gamma=gamma, seed=seed)
                    out.append(_spec(cfg, panel="budget", budget=multiple, d_model=width))
    return out


def specs(profile: str) -> list[AnchorSpec]:
    base, scan = load(profile)
    return cell_specs(base, scan) + mechanism_specs(base, scan) + budget_specs(base, scan)


EXPERIMENT = Experiment(
    "anchor-scan",
    (6,),
    "anchor task: (γ, depth) and (γ, λ) grids and the two mechanism models",
    specs,
)


@dataclass
class Cell:
    panel: str  # "depth" or "wd"
    gamma: float
    layers: int
    weight_decay: float
    seed: int
    run: Run

    @property
    def ok(self) -> bool:
        return self.run.done

    def summary(self) -> dict[str, Any]:
        return self.run.summary if self.ok else {}


def cells(results: Results) -> list[Cell]:
    """The grid cells of a scan's results (the mechanism models left out)."""
    out = []
    for spec, run in results:
        t = spec.tags
        if t.get("panel") not in ("depth", "wd"):
            continue
        if not run.done:
            log.warning(
                "cell %s L=%d λ=%g failed: %s",
                spec.config.init,
                t["layers"],
                t["weight_decay"],
                run.status().get("reason"),
            )
        out.append(Cell(t["panel"], t["gamma"], t["layers"], t["weight_decay"], t["seed"], run))
    return out


def scan_table(scan: Results | list[Cell]) -> list[dict[str, Any]]:
    """One row per cell (means over seeds): the numbers behind fig 6."""
    groups: dict[tuple, list[Cell]] = {}
    for c in cells(scan) if isinstance(scan, Results) else scan:
        groups.setdefault((c.panel, c.gamma, c.layers, c.weight_decay), []).append(c)
    rows = []
    keys = (
        "acc_seen_train",
        "acc_seen_test",
        "share_inferential",
        "share_symmetric",
        "share_other",
        "wq_condensation",
    )
    for (panel, gamma, layers, wd), group in groups.items():
        done = [c.summary() for c in group if c.ok]
        row = {
            "panel": panel,
            "gamma": gamma,
            "layers": layers,
            "weight_decay": wd,
            "seeds": len(group),
            "failed": len(group) - len(done),
        }
        for k in keys:
            row[k] = float(np.mean([s[k] for s in done])) if done else float("nan")
        rows.append(row)
    return rows


def seed_shares(
    scan: Results | list[Cell],
    panel: str = "depth",
    layers: int | None = None,
    weight_decay: float | None = None,
) -> dict[float, dict[str, np.ndarray]]:
    """Per γ, the finished seeds of one (depth, λ) line of the grid and their (4, 3) shares
    (arrays ``seed``, ``share_inferential``, ``share_symmetric``, ``share_other``, in seed
    order). ``layers``/``weight_decay`` None: the line's only value (the first one seen)."""
    chosen = [
        c for c in (cells(scan) if isinstance(scan, Results) else scan) if c.panel == panel and c.ok
    ]
    if chosen and layers is None:
        layers = chosen[0].layers
    if chosen and weight_decay is None:
        weight_decay = chosen[0].weight_decay
    out: dict[float, dict[str, list]] = {}
    for c in sorted(chosen, key=lambda c: (c.gamma, c.seed)):
        if c.layers != layers or c.weight_decay != weight_decay:
            continue
        row = out.setdefault(c.gamma, {"seed": [], **{f"share_{k}": [] for k in anchor.SOLUTIONS}})
        row["seed"].append(c.seed)
        for k in anchor.SOLUTIONS:
            row[f"share_{k}"].append(float(c.summary()[f"share_{k}"]))
    return {g: {k: np.asarray(v) for k, v in row.items()} for g, row in out.items()}


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'panel':<6}{'γ':>6}{'L':>3}{'λ':>7}  {'seen/train':>10}{'seen/test':>10}"
        f"{'infer':>7}{'symm':>7}{'other':>7}{'WQcond':>8}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['panel']:<6}{r['gamma']:>6g}{r['layers']:>3d}{r['weight_decay']:>7g}  "
            f"{r['acc_seen_train']:>10.3f}{r['acc_seen_test']:>10.3f}"
            f"{r['share_inferential']:>7.3f}{r['share_symmetric']:>7.3f}"
            f"{r['share_other']:>7.3f}{r['wq_condensation']:>8.3f}"
            + (f"  ({r['failed']} failed)" if r["failed"] else "")
        )
    return os.linesep.join(lines)
