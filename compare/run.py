"""Run a comparison: theory, the two-layer toy and the transformer at every γ.

For each γ of a :class:`~smallinit.compare.comparison.CompareConfig`:

1. theory: the FFN block's coordinates under the γ rule with proportional widths,
   (γ, γ') = (2γ, 0), its regime and S_w interval
   (:func:`smallinit.theory.transformer.ffn_blocks`, width law, docs/science.md §5);
2. toy: the two-layer ReLU net of docs/science.md §2 at those coordinates — one phase scan over all
   the points (:func:`smallinit.toy.scan.run_scan`, a (γ, γ') grid of one γ' value) for
   S_w, and one condensation grid (:func:`smallinit.toy.condense.run`) for the score;
3. transformer: one training run per width (:func:`smallinit.llm.training.train.train`, kind
   ``llm-train``, all through the job driver :func:`smallinit.core.jobs.run_specs`), then the
   measurements of :mod:`smallinit.llm.analysis.ffn` between its re-created θ(0) and its
   final weights.

Every piece goes through the run store, so an interrupted comparison keeps its finished
training runs; the comparison itself is a run of kind ``compare`` whose directory holds
``table.json`` (records and config), ``table.csv`` and ``measurements.json``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from smallinit.compare.comparison import CompareConfig
from smallinit.compare.table import build_table, to_csv
from smallinit.core.atomic import atomic_write_text
from smallinit.core.config import STORE_HINT, check_instance
from smallinit.core.errors import RunFailed, StoreError
from smallinit.core.jobs import RunSpec, run_specs
from smallinit.core.runs import Run
from smallinit.core.store import RunStore
from smallinit.llm.analysis.ffn import initial_model, measure_layers, trained_model
from smallinit.llm.training.cost import training_flops_of
from smallinit.llm.training.train import KIND as TRAIN_KIND
from smallinit.llm.training.train import VERSION as TRAIN_VERSION
from smallinit.llm.training.train import preflight
from smallinit.llm.training.train_spec import TrainSpec
from smallinit.theory.init_rules import gamma_scheme, parse_scheme
from smallinit.theory.transformer import TransformerShape, ffn_blocks
from smallinit.toy import condense
from smallinit.toy.scan import ScanConfig, run_scan

log = logging.getLogger(__name__)

KIND = "compare"
VERSION = "3"  # 2: RMS displacement and validation loss in the records; 3: graded synthetic data


def theory_points(cfg: CompareConfig) -> list[dict[str, Any]]:
    """Theory's FFN point for each γ (proportional widths, width law), as plain data."""
    m = cfg.llm.model
    width = max(cfg.widths)
    shape = TransformerShape(
        d_model=width,
        d_ff=cfg.ffn_ratio * width,
        n_heads=cfg.llm_run(cfg.gammas[0], width).model.n_heads,
        n_layers=m.n_layers,
        vocab=m.vocab_size,
        mlp=m.mlp,
        gated_attention=m.gated_attention,
        tie_embeddings=m.tie_embeddings,
    )
    out = []
    for g in cfg.gammas:
        blocks = ffn_blocks(shape, parse_scheme(gamma_scheme(g)))
        points = {b["width_law"]["proportional"] for b in blocks}
        if len(points) != 1:  # the γ rule gives every block the same law
            raise ValueError(f"FFN blocks at γ={g} lie at different points: {points}")
        out.append(points.pop().as_dict())
    return out


def toy_points(
    cfg: CompareConfig, predictions: list[dict], store: RunStore, force: bool
) -> list[dict[str, Any]]:
    """S_w and condensation score of the two-layer net at each predicted (γ, γ')."""
    coords = [(p["gamma_value"], p["gamma_prime_value"]) for p in predictions]
    gammas = tuple(sorted({c[0] for c in coords}))
    gamma_primes = tuple(sorted({c[1] for c in coords}))
    scan = run_scan(
        ScanConfig(
            gammas=gammas,
            gamma_primes=gamma_primes,
            widths=tuple(cfg.toy_widths),
            seeds=cfg.toy_seeds,
            max_steps=cfg.toy_max_steps,
            critical_tol=cfg.critical_tol,
        ),
        store,
        force=force,
    )
    s_w = {(r["gamma"], r["gamma_prime"]): r["S_w"] for r in scan.records}
    cond = condense.run(
        condense.CondenseConfig(
            gammas=gammas,
            gamma_primes=gamma_primes,
            width=cfg.condense_width,
            max_steps=cfg.toy_max_steps,
            top_k=cfg.top_k,
            threshold=cfg.threshold,
        ),
        store,
        force=force,
    )
    out = []
    for g, gp in coords:
        i, j = gammas.index(g), gamma_primes.index(gp)
        converged = int(cond["status"][i, j]) == 0
        out.append(
            {
                "S_w": s_w[(g, gp)],
                "score": float(cond["score"][i, j]) if converged else None,
                "score_init": float(cond["init_score"]),
                "scan": scan.run_path,
            }
        )
    return out


def llm_specs(cfg: CompareConfig) -> list[TrainSpec]:
    """One transformer training run per (γ, width), for the job driver."""
    return [
        TrainSpec(cfg.llm_run(g, w), {"gamma": g, "width": w})
        for g in cfg.gammas
        for w in cfg.widths
    ]


def llm_point(cfg: CompareConfig, gamma: float, width: int, run) -> dict[str, Any]:
    """Measure the trained transformer at (γ, width) (its run from the job driver)."""
    run_cfg = cfg.llm_run(gamma, width)
    entry: dict[str, Any] = {
        "gamma": gamma,
        "width": width,
        "d_ff": cfg.ffn_ratio * width,
        "run": str(run.path),
        "state": run.state,
    }
    if run.state != "done":
        entry["reason"] = run.status().get("reason")
        log.warning(
            "transformer γ=%s d_model=%d: %s (%s)", gamma, width, run.state, entry["reason"]
        )
        return entry
    entry["layers"] = measure_layers(
        trained_model(run_cfg, run.path),
        initial_model(run_cfg),
        top_k=cfg.top_k,
        threshold=cfg.threshold,
    )
    entry["val_loss"] = run.summary.get("val_loss")
    log.info(
        "transformer γ=%s d_model=%d: RD_FFN %s, val loss %.3f",
        gamma,
        width,
        [round(lay["rd_ffn"], 4) for lay in entry["layers"]],
        entry["val_loss"],
    )
    return entry


def check_outcomes(runs: Iterable[Run]) -> None:
    """A :class:`StoreError` naming the first transformer run that has no outcome (neither
    done nor failed for good: e.g. refused for a damaged corpus, or interrupted), so that
    the comparison is recorded as a retryable failure, not as a finished table that later
    calls reuse; a run that diverged is an outcome, counted in ``llm_failed``."""
    for run in runs:
        if not run.reusable():
            raise StoreError(
                f"transformer run {run.name} is {run.state} "
                f"({run.status().get('reason')}); the comparison is recorded "
                "once every transformer has an outcome: run it again"
            )


def check_transformers(cfg: CompareConfig, store: RunStore, *, force: bool = False) -> None:
    """Before anything is computed: every transformer run the comparison would train passes
    the trainer's checks (:func:`smallinit.llm.training.train.preflight`: device, memory
    estimate, init σ), so a width that cannot fit is refused at once, not after the toy."""
    if not force and store.run(KIND, cfg, version=VERSION).reusable():
        return
    for width in sorted(cfg.widths, reverse=True):  # the largest is the likeliest to fail
        for gamma in cfg.gammas:
            run_cfg = cfg.llm_run(gamma, width)
            reused = store.run(TRAIN_KIND, run_cfg, version=TRAIN_VERSION).reusable()
            preflight(run_cfg, computing=force or not reused)


@dataclasses.dataclass
class CompareResult:
    """A finished comparison: its records and its run (files read through the run, so they
    are checked against its manifest)."""

    config: CompareConfig
    records: list[dict]
    run: Run

    @property
    def run_path(self) -> Path:
        return self.run.path

    @property
    def table_csv(self) -> Path:
        return self.run.file("table.csv")

    @property
    def table_json(self) -> Path:
        return self.run.file("table.json")

    def measurements(self) -> list[dict]:
        return self.run.read_json("measurements.json")


def run_compare(
    cfg: CompareConfig,
    store: RunStore | None = None,
    *,
    force: bool = False,
    workers: int | None = None,
    executor: str | None = None,
) -> CompareResult:
    """Compute (or reuse) the comparison through the run store (module docstring);
    ``force`` recomputes it and every run under it; the transformers train side by side
    (``workers``, None: every core; ``executor``: local or ray,
    :func:`~smallinit.core.jobs.run_specs`)."""
    check_instance(cfg, CompareConfig, "run_compare")
    store = check_instance(store or RunStore(), RunStore, "run_compare(store=...)", STORE_HINT)
    check_transformers(cfg, store, force=force)

    def body(run):
        predictions = theory_points(cfg)
        toy = toy_points(cfg, predictions, store, force)
        trained = run_specs(
            llm_specs(cfg),
            store,
            force=force,
            workers=workers,
            executor=executor,
            desc="compare: transformers",
            weigh=training_flops_of,
        )
        check_outcomes(r for _, r in trained)
        llm = [llm_point(cfg, job.tags["gamma"], job.tags["width"], r) for job, r in trained]
        run.write_json("measurements.json", llm)
        records = build_table(cfg, predictions, toy, llm)
        run.write_json("table.json", {"records": records, "theory": predictions, "toy": toy})
        atomic_write_text(run.path / "table.csv", to_csv(records))
        graded = [r for r in records if r["agree"] is not None]
        return {
            "gammas": len(records),
            "graded": len(graded),
            "agree": sum(bool(r["agree"]) for r in graded),
            "llm_failed": sum(e["state"] != "done" for e in llm),
        }

    run = store.get_or_run(KIND, cfg, body, version=VERSION, force=force)
    if run.state != "done":
        raise RunFailed(f"comparison {run.path} is {run.state}: {run.status().get('reason')}")
    return CompareResult(cfg, run.read_json("table.json")["records"], run)


@dataclasses.dataclass
class CompareSpec(RunSpec):
    """A comparison for the job driver (:mod:`smallinit.core.jobs`): ``config`` is its
    :class:`~smallinit.compare.comparison.CompareConfig`."""

    kind, version, runner = KIND, VERSION, staticmethod(run_compare)
