"""Train this package's transformer on the anchor task (docs/science.md §6), scan (γ, depth) and
(γ, λ), and measure the mechanism (Zhang et al., NeurIPS 2024, arXiv 2405.05409).

One run (kind ``llm-anchor``): a :class:`~smallinit.llm.model.transformer.Transformer`
initialized by ``apply_init`` with the run's scheme (``gamma:γ``: every matrix
σ = d_in^(−γ), docs/science.md §1) is trained with AdamW on fixed-length sequences, the loss being
the cross-entropy of the *last position only*,

    L = −(1/B) Σ_i log softmax(W_head h_L(x_i)[T−1])[y_i].

Training is the core :class:`~smallinit.llm.training.train.Trainer` running
:class:`AnchorTask`: the same AdamW (weight decay on matrices and embeddings only), warmup +
cosine schedule, clipping, bf16 autocast on GPU, compile, DDP, checkpoints and resume as
pretraining. Step s trains on ``batch_size`` training samples drawn with replacement by a
generator seeded with (seed, s), so the data depend on the step only and a resumed run
repeats the uninterrupted one exactly.

At the end the run stores (``arrays.npz``) the predictions on the three splits, the
classification of the held-out pair, and the mechanism measurements, all through
:mod:`smallinit.kernels`:

* ``emb_cos_anchors`` — cosine Gram of the four anchor embeddings; ``emb_cos_values`` — of
  the value-token embeddings (ordered by the leading eigenvector for display);
* ``wq_cos`` — cosine Gram of the rows of the first layer's query matrix W_Q^(1) (each row
  a "measurement function" of the input), ``wq_condensation`` its condensation score
  (share of the row norm in the 4 heaviest orientation clusters at cos ≥ 0.95) and
  ``wq_clusters`` the cluster count;
* ``attn_last`` — mean attention of the last position on x, a1, a2 and on everything else,
  per layer and head, over the held-out (4, 3) inputs; ``attn_map`` — the mean attention
  matrix of the held-out inputs with the triple at the middle position.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from smallinit import profiles
from smallinit.config import (
    STORE_HINT,
    check_fields,
    check_instance,
    config_from_dict,
    load_config,
    read_toml,
    replace_config,
)
from smallinit.errors import ConfigError, require
from smallinit.jobs import Job, Results, run_jobs
from smallinit.kernels import (
    cluster_count,
    condensation_baseline,
    condensation_score,
    cosine_gram,
    leading_eigvec_order,
)
from smallinit.llm.config import ModelConfig, TrainConfig
from smallinit.llm.data import anchor
from smallinit.llm.model.init import as_scheme, matrix_table
from smallinit.llm.model.matrices import one
from smallinit.llm.training.objectives import LastPositionLoss, last_logits
from smallinit.llm.training.train import Trainer, fit_run
from smallinit.runs import Run, RunStore
from smallinit.stats import Estimate, one_sample
from smallinit.theory.init_rules import canonical_scheme

log = logging.getLogger(__name__)
KIND = "llm-anchor"
VERSION = "2"  # 2: attention-on-triple indexing fixed; training accuracy on 2048 rows
SECTION = "anchor"  # the profiles' table of this experiment (smallinit/profiles/*.toml)


def _model_default() -> ModelConfig:
    return ModelConfig(vocab_size=128, context=9, d_model=64, n_layers=2, n_heads=4,
                       positions="learned")


def _train_default() -> TrainConfig:
    return TrainConfig(steps=1000, batch_size=128, lr=1e-3, warmup=50, weight_decay=0.01,
                       log_every=50, eval_every=250, checkpoint_every=0, device="cpu")


@dataclass
class AnchorConfig:
    """One anchor-task run: init scheme, task sizes, model and optimizer."""

    seed: int = 0  # init and batch order (the data have their own task.seed)
    init: str = "gamma:0.5"
    task: anchor.AnchorTaskConfig = field(default_factory=anchor.AnchorTaskConfig)
    model: ModelConfig = field(default_factory=_model_default)
    train: TrainConfig = field(default_factory=_train_default)

    def __post_init__(self) -> None:
        check_fields(self)
        try:
            self.init = canonical_scheme(self.init)  # one spelling, one run key
        except ValueError as err:
            raise ConfigError(f"init={self.init!r}: {err}") from None
        require(self.model.vocab_size > self.task.max_label,
                f"model.vocab_size={self.model.vocab_size} is too small; labels reach "
                f"{self.task.max_label}, so it must be >= {self.task.max_label + 1}")
        require(self.model.context >= self.task.seq_len,
                f"model.context={self.model.context} is shorter than task.seq_len="
                f"{self.task.seq_len}")

    @property
    def scheme(self):
        return as_scheme(self.init)


@dataclass
class AnchorScan:
    """The phase-diagram grid: (γ, depth) at the base weight decay, and (γ, λ) at depth
    ``wd_layers`` (0: the base config's depth), each cell once per seed."""

    gammas: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9)
    layers: tuple[int, ...] = (2, 3)
    weight_decays: tuple[float, ...] = (0.0, 0.1, 1.0)
    wd_layers: int = 0
    seeds: tuple[int, ...] = (0,)
    mechanism_gammas: tuple[float, ...] = (0.5, 0.8)  # contrasted in the mechanism view

    def __post_init__(self) -> None:
        check_fields(self, "scan")
        require(len(self.gammas) >= 1 and all(g > 0 for g in self.gammas),
                f"scan.gammas={list(self.gammas)} must be a non-empty list of numbers > 0")
        require(len(self.layers) >= 1 and all(n >= 1 for n in self.layers),
                f"scan.layers={list(self.layers)} must be a non-empty list of integers >= 1")
        require(all(w >= 0 for w in self.weight_decays),
                f"scan.weight_decays={list(self.weight_decays)} must all be >= 0")
        require(self.wd_layers >= 0, f"scan.wd_layers={self.wd_layers} must be >= 0")
        require(len(self.seeds) >= 1, "scan.seeds must name at least one seed")
        require(len(self.mechanism_gammas) == 2 and all(g > 0 for g in self.mechanism_gammas),
                f"scan.mechanism_gammas={list(self.mechanism_gammas)} must be two numbers > 0")


# ----------------------------------------------------------------------------- profiles
def profile_path(profile: str) -> Path:
    """The profile file whose ``[anchor]`` table holds the run config and ``[anchor.scan]``
    the grid (:mod:`smallinit.profiles`)."""
    return profiles.path(profile)


def load_profile(source: str | Path = "quick", overrides=()) -> tuple[AnchorConfig, AnchorScan]:
    """Run config and scan grid from a profile name (its ``[anchor]`` table) or a TOML
    path (run config at the top, grid in ``[scan]``), plus ``key=value`` overrides
    (``scan.*`` keys go to the grid, all others to the run config)."""
    if str(source) in profiles.names():
        data = profiles.section(str(source), SECTION)
    else:
        data = read_toml(Path(source))
    scan_data = data.pop("scan", {})
    overrides = list(overrides)
    run_over = [o for o in overrides if not o.strip().startswith("scan.")]
    scan_over = [o.strip()[len("scan."):] for o in overrides if o.strip().startswith("scan.")]
    cfg = load_config(AnchorConfig, None, run_over, base=config_from_dict(AnchorConfig, data))
    scan = load_config(AnchorScan, None, scan_over,
                       base=config_from_dict(AnchorScan, scan_data, where="scan"))
    return cfg, scan


def gamma_init(gamma: float) -> str:
    return f"gamma:{gamma:g}"


def init_gamma(init: str) -> float | None:
    """γ of a plain ``gamma:γ`` scheme (None for anything else)."""
    match = re.fullmatch(r"gamma:([0-9.eE+-]+)", init.strip())
    return float(match.group(1)) if match else None


def cell_config(base: AnchorConfig, *, gamma: float | None = None, layers: int | None = None,
                weight_decay: float | None = None, seed: int | None = None) -> AnchorConfig:
    """``base`` with one grid cell's γ, depth, weight decay and seed."""
    changes: dict[str, Any] = {}
    if gamma is not None:
        require(math.isfinite(gamma) and gamma > 0,
                f"gamma {gamma} is not allowed; γ must be a finite number > 0 (as scan.gammas)")
        changes["init"] = gamma_init(gamma)
    if seed is not None:
        changes["seed"] = seed
    if layers is not None:
        changes["model"] = {"n_layers": layers}
    if weight_decay is not None:
        changes["train"] = {"weight_decay": weight_decay}
    return replace_config(base, **changes)


# ----------------------------------------------------------------------------- training
def predict(model, tokens: np.ndarray, batch: int = 1024) -> np.ndarray:
    """Greedy prediction at the last position for every row of ``tokens``."""
    device = next(model.parameters()).device
    out = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(tokens), batch):
            x = torch.from_numpy(tokens[i:i + batch]).to(device)
            out.append(last_logits(model, x).argmax(-1).cpu().numpy())
    model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


FIT_ROWS = 2048  # training samples whose accuracy is reported (i.i.d., so the first ones)


def evaluate(model, data: anchor.AnchorData) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Accuracies and solution shares, and the predictions they came from (on the first
    ``FIT_ROWS`` training samples, all test samples)."""
    fit = anchor.subset(data, FIT_ROWS)
    preds = {"train": predict(model, fit.train.tokens),
             **{name: predict(model, getattr(data, name).tokens)
                for name in ("test_seen", "test_held_out")}}
    metrics = anchor.summarize(preds["train"], preds["test_seen"], preds["test_held_out"], fit)
    return metrics, preds


def batch_indices(step: int, seed: int, n: int, batch: int) -> np.ndarray:
    """Training rows of step ``step`` (with replacement; deterministic in seed and step)."""
    return np.random.default_rng([seed, 7919, step]).integers(0, n, size=batch)


class AnchorTask:
    """The anchor task as a task of :class:`smallinit.llm.training.train.Trainer`: the
    global batch of step s is the training rows :func:`batch_indices` (seed, s) (each
    rank its slice), the loss the last position's cross-entropy
    (:class:`~smallinit.llm.training.objectives.LastPositionLoss`), and every
    ``eval_every`` steps that is also a log step (and at the last step) the log record
    carries :func:`evaluate`'s accuracies and shares. ``train.eval_batches`` does not apply
    (the evaluation uses whole splits). At the end: predictions, the held-out
    classification and the :func:`mechanism` measurements go to ``arrays.npz``."""

    def __init__(self, cfg: AnchorConfig, device):
        self.cfg = cfg
        self.name = f"anchor {cfg.init}"
        self.tokens_per_step = 0  # fixed-length classification: no token throughput
        self.loss_sum_dtype = torch.float64  # as this task's loop summed before the Trainer
        self.clip_in_model_order = True
        self.data = anchor.generate(cfg.task)
        self.device = device
        self.x = torch.from_numpy(self.data.train.tokens).to(device)
        self.y = torch.from_numpy(self.data.train.labels).to(device)

    def batch(self, step: int, dist):
        rows = batch_indices(step, self.cfg.seed, len(self.y), self.cfg.train.batch_size)
        rows = torch.from_numpy(dist.share(rows)).to(self.device)
        return self.x[rows], self.y[rows]

    def objective(self, model):
        return LastPositionLoss(model)

    def log_fields(self, step: int, model, ctx) -> dict[str, Any]:
        t = self.cfg.train
        if t.eval_every and (step % t.eval_every == 0 or step == t.steps):
            with ctx:
                return evaluate(model, self.data)[0]
        return {}

    def evaluate(self, step: int, model, ctx) -> None:
        return None  # the evaluation rides on the log records (log_fields)

    def finish(self, run: Run, model, ctx, train_loss: float) -> dict[str, Any]:
        cfg, data = self.cfg, self.data
        with ctx:
            metrics, preds = evaluate(model, data)
        arrays = {
            "pred_train": preds["train"], "pred_test_seen": preds["test_seen"],
            "pred_held_out": preds["test_held_out"],
            "held_out_x": data.test_held_out.x,
            "held_out_kind": anchor.classify(preds["test_held_out"], data.test_held_out.x),
            "pair_acc_test_seen": anchor.pair_accuracy(preds["test_seen"], data.test_seen),
            **mechanism(model, cfg, data),
        }
        run.save_arrays(**arrays)
        summary = {**metrics, "steps": cfg.train.steps, "params": model.num_params(),
                   "wq_condensation": float(arrays["wq_condensation"]),
                   "wq_clusters": int(arrays["wq_clusters"]),
                   "wq_condensation_baseline": float(arrays["wq_condensation_baseline"])}
        log.info("%s L=%d λ=%g: seen train %.3f test %.3f | held-out inferential %.3f "
                 "symmetric %.3f", cfg.init, cfg.model.n_layers, cfg.train.weight_decay,
                 metrics["acc_seen_train"], metrics["acc_seen_test"],
                 metrics["share_inferential"], metrics["share_symmetric"])
        return summary


# ----------------------------------------------------------------------------- mechanism
def mechanism(model, cfg: AnchorConfig, data: anchor.AnchorData) -> dict[str, np.ndarray]:
    """Embedding geometry, W_Q^(1) condensation and attention on the anchor positions."""
    table = matrix_table(model)
    emb = one(table, "embedding").rows_out.detach().float().cpu().numpy()
    values = emb[cfg.task.value_lo:cfg.task.value_hi + 1]
    value_cos = np.asarray(cosine_gram(values))
    wq = one(table, "attn.q", 0).rows_out.detach().float().cpu().numpy()  # rows: q neurons
    wq_cos = np.asarray(cosine_gram(wq))
    wq_order = leading_eigvec_order(wq_cos)
    held = data.test_held_out
    with torch.no_grad():
        x = torch.from_numpy(held.tokens).to(next(model.parameters()).device)
        _, _, weights = model(x, need_weights=True)
    attn = np.stack([w.float().cpu().numpy() for w in weights])  # (L, B, H, T, T)
    last = attn[:, :, :, -1, :].transpose(1, 3, 0, 2)  # (B, T, L, H): the last query's row
    rows = np.arange(len(held))
    triple = np.stack([last[rows, held.pos + k] for k in range(3)], axis=-1)  # (B, L, H, 3)
    rest = 1.0 - triple.sum(-1, keepdims=True)
    attn_last = np.concatenate([triple, rest], axis=-1).mean(axis=0)  # (L, H, 4)
    middle = cfg.task.n_positions // 2
    sel = held.pos == middle
    attn_map = attn[:, sel].mean(axis=1) if sel.any() else np.full(attn.shape[:1] +
                                                                   attn.shape[2:], np.nan)
    return {
        "emb_cos_anchors": np.asarray(cosine_gram(emb[list(anchor.ANCHORS)])),
        "emb_cos_values": value_cos,
        "emb_values_order": leading_eigvec_order(value_cos),
        "wq_cos": wq_cos[np.ix_(wq_order, wq_order)],
        "wq_condensation": np.float64(condensation_score(wq)),
        "wq_condensation_baseline": np.float64(condensation_baseline(wq.shape[0], wq.shape[1])),
        "wq_clusters": np.int64(cluster_count(wq)),
        "attn_last": attn_last,
        "attn_map": attn_map,
        "attn_map_position": np.int64(middle),
    }


# ----------------------------------------------------------------------------- entry points
def run_anchor(cfg: AnchorConfig, store: RunStore | None = None, *, force: bool = False) -> Run:
    """Train (or resume, or reuse) the run for ``cfg``, alone or under ``torchrun``."""
    check_instance(cfg, AnchorConfig, "run_anchor")
    store = check_instance(store or RunStore(), RunStore, "run_anchor(store=...)", STORE_HINT)
    return fit_run(store, KIND, VERSION, cfg,
                   lambda dist: Trainer(cfg, dist, AnchorTask), force=force,
                   explicit_attention=True)


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


ENTRY = "smallinit.llm.experiments.anchor:anchor_job"


def anchor_job(cfg: AnchorConfig, store: RunStore, force: bool) -> Run:
    """The job driver's entry for one anchor run (:func:`run_anchor`)."""
    return run_anchor(cfg, store, force=force)


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
                cells.append(("wd", cell_config(base, gamma=gamma, layers=wd_depth,
                                                weight_decay=wd, seed=seed)))
    return cells


def _job(cfg: AnchorConfig, **tags: Any) -> Job:
    return Job(KIND, VERSION, cfg, ENTRY, {"gamma": init_gamma(cfg.init),
                                           "layers": cfg.model.n_layers,
                                           "weight_decay": cfg.train.weight_decay,
                                           "seed": cfg.seed, **tags})


def scan_jobs(base: AnchorConfig, scan: AnchorScan) -> list[Job]:
    """The grid's cells as jobs for the driver (tag ``panel``: depth or wd)."""
    return [_job(cfg, panel=panel) for panel, cfg in scan_cells(base, scan)]


def mechanism_jobs(base: AnchorConfig, scan: AnchorScan) -> list[Job]:
    """The two contrasting models of the mechanism view (base depth and weight decay,
    first seed), tagged ``panel=mechanism``."""
    return [_job(cell_config(base, gamma=g, seed=scan.seeds[0]), panel="mechanism")
            for g in scan.mechanism_gammas]


def run_scan(base: AnchorConfig, scan: AnchorScan, store: RunStore | None = None, *,
             force: bool = False, workers: int | None = None,
             executor: str | None = None) -> Results:
    """Train every cell of the grid through the job driver (reusing finished runs;
    ``workers`` None: every core; ``executor``: local or ray)."""
    return run_jobs(scan_jobs(base, scan), store, force=force, workers=workers,
                    executor=executor, desc="anchor scan")


def mechanism_runs(base: AnchorConfig, scan: AnchorScan, store: RunStore | None = None, *,
                   force: bool = False) -> list[Run]:
    """The runs of :func:`mechanism_jobs` (computed when missing)."""
    return run_jobs(mechanism_jobs(base, scan), store, force=force).runs


def cells(results: Results) -> list[Cell]:
    """The grid cells of a scan's results (mechanism-only jobs left out)."""
    out = []
    for job, run in results:
        t = job.tags
        if t.get("panel") not in ("depth", "wd"):
            continue
        if not run.done:
            log.warning("cell %s L=%d λ=%g failed: %s", job.config.init, t["layers"],
                        t["weight_decay"], run.status().get("reason"))
        out.append(Cell(t["panel"], t["gamma"], t["layers"], t["weight_decay"], t["seed"],
                        run))
    return out


def scan_table(scan: Results | list[Cell]) -> list[dict[str, Any]]:
    """One row per cell (means over seeds): the numbers behind fig 6."""
    groups: dict[tuple, list[Cell]] = {}
    for c in (cells(scan) if isinstance(scan, Results) else scan):
        groups.setdefault((c.panel, c.gamma, c.layers, c.weight_decay), []).append(c)
    rows = []
    keys = ("acc_seen_train", "acc_seen_test", "share_inferential", "share_symmetric",
            "share_other", "wq_condensation")
    for (panel, gamma, layers, wd), group in groups.items():
        done = [c.summary() for c in group if c.ok]
        row = {"panel": panel, "gamma": gamma, "layers": layers, "weight_decay": wd,
               "seeds": len(group), "failed": len(group) - len(done)}
        for k in keys:
            row[k] = float(np.mean([s[k] for s in done])) if done else float("nan")
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- seeds
MAJORITY = 0.5  # a seed "answers (4, 3) symmetrically" when more than half its answers are


def expected_solution(gamma: float) -> str | None:
    """The published outcome's solution at ``gamma`` (Zhang et al., docs/science.md §6):
    ``symmetric`` at γ <= 0.5 (large init), ``inferential`` at γ >= 0.8 (small init), None
    between (no published claim)."""
    if gamma <= 0.5:
        return "symmetric"
    if gamma >= 0.8:
        return "inferential"
    return None


def seed_shares(scan: Results | list[Cell], panel: str = "depth", layers: int | None = None,
                weight_decay: float | None = None) -> dict[float, dict[str, np.ndarray]]:
    """Per γ, the finished seeds of one (depth, λ) line of the grid and their (4, 3) shares
    (arrays ``seed``, ``share_inferential``, ``share_symmetric``, ``share_other``, in seed
    order). ``layers``/``weight_decay`` None: the line's only value (the first one seen)."""
    chosen = [c for c in (cells(scan) if isinstance(scan, Results) else scan)
              if c.panel == panel and c.ok]
    if chosen and layers is None:
        layers = chosen[0].layers
    if chosen and weight_decay is None:
        weight_decay = chosen[0].weight_decay
    out: dict[float, dict[str, list]] = {}
    for c in sorted(chosen, key=lambda c: (c.gamma, c.seed)):
        if c.layers != layers or c.weight_decay != weight_decay:
            continue
        row = out.setdefault(c.gamma, {"seed": [], **{f"share_{k}": []
                                                       for k in anchor.SOLUTIONS}})
        row["seed"].append(c.seed)
        for k in anchor.SOLUTIONS:
            row[f"share_{k}"].append(float(c.summary()[f"share_{k}"]))
    return {g: {k: np.asarray(v) for k, v in row.items()} for g, row in out.items()}


@dataclass(frozen=True)
class ShareVerdict:
    """One γ's expected-solution share over seeds: the mean against 0.5 (one-sided t,
    :func:`smallinit.stats.one_sample`) and how many seeds had a majority of that solution."""

    gamma: float
    solution: str
    estimate: Estimate  # effect = mean share − 0.5
    majority: int  # seeds whose share > 0.5

    @property
    def mean(self) -> float:
        return self.estimate.effect + MAJORITY

    def label(self) -> str:
        e = self.estimate
        shifted = Estimate(self.mean, e.ci_low + MAJORITY, e.ci_high + MAJORITY, e.p_value, e.n)
        return (shifted.label(f"γ {self.gamma:g} {self.solution}", digits=2)
                .replace("p =", "p(>0.5) =").replace("p <", "p(>0.5) <")
                + f", majority {self.majority}/{e.n}")


def share_verdicts(shares: dict[float, dict[str, np.ndarray]]) -> list[ShareVerdict]:
    """For every γ with a published expectation (:func:`expected_solution`): that
    solution's share over seeds, tested one-sided against 0.5."""
    out = []
    for gamma in sorted(shares):
        solution = expected_solution(gamma)
        if solution is None:
            continue
        vals = shares[gamma][f"share_{solution}"]
        out.append(ShareVerdict(gamma, solution,
                                one_sample(vals, MAJORITY, alternative="greater"),
                                int(np.sum(vals > MAJORITY))))
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'panel':<6}{'γ':>6}{'L':>3}{'λ':>7}  {'seen/train':>10}{'seen/test':>10}"
            f"{'infer':>7}{'symm':>7}{'other':>7}{'WQcond':>8}")
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['panel']:<6}{r['gamma']:>6g}{r['layers']:>3d}{r['weight_decay']:>7g}  "
            f"{r['acc_seen_train']:>10.3f}{r['acc_seen_test']:>10.3f}"
            f"{r['share_inferential']:>7.3f}{r['share_symmetric']:>7.3f}"
            f"{r['share_other']:>7.3f}{r['wq_condensation']:>8.3f}"
            + (f"  ({r['failed']} failed)" if r["failed"] else ""))
    return os.linesep.join(lines)
