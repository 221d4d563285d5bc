"""The anchor task (docs/science.md §6; Zhang et al., NeurIPS 2024, arXiv 2405.05409) as a task
of the one trainer: this package's transformer trained on it, and the mechanism measured.

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
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from smallinit.core.config import KEY_NEUTRAL, STORE_HINT, check_fields, check_instance, override
from smallinit.core.errors import require
from smallinit.core.jobs import RunSpec
from smallinit.core.runs import Run
from smallinit.core.store import RunStore
from smallinit.kernels import (
    cluster_count,
    condensation_baseline,
    condensation_score,
    cosine_gram,
    leading_eigvec_order,
)
from smallinit.llm.data import anchor
from smallinit.llm.model.init import as_scheme, matrix_table
from smallinit.llm.model.matrices import one
from smallinit.llm.run_config import ModelConfig, TrainConfig, canonical_init
from smallinit.llm.training import population
from smallinit.llm.training.objectives import LastPositionLoss, last_logits
from smallinit.llm.training.train import Dist, Rounding, Trainer, fit_run, preflight, trial

KIND = "llm-anchor"
VERSION = "2"  # a new version whenever a run of this kind would hold other numbers
log = logging.getLogger(__name__)


def _model_default() -> ModelConfig:
    return ModelConfig(
        vocab_size=128, context=9, d_model=64, n_layers=2, n_heads=4, positions="learned"
    )


def _train_default() -> TrainConfig:
    return TrainConfig(
        steps=1000,
        batch_size=128,
        lr=1e-3,
        warmup=50,
        weight_decay=0.01,
        log_every=50,
        eval_every=250,
        checkpoint_every=0,
        device="cpu",
    )


def zhang2024_recipe(model: ModelConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model and optimizer settings of the anchor task's published runs (docs/science.md
    §6.1), as the authors' code (github.com/xuzhiqin1990/anchor_function_pub) builds and
    trains them, at the width ``model.d_model``: post-norm LayerNorm blocks (gain and
    bias) with no final norm; one attention head of width d_model/2 and no biases in the
    attention and feed-forward layers; a ReLU feed-forward of 3·d_model; learned
    positions, an untied head with a bias, the 201-token vocabulary; AdamW as
    ``torch.optim.AdamW(model.parameters())`` builds it (β₂ 0.999, ε 1e-8, weight decay on
    every parameter) with gradient clipping at 1 and a warmup from lr/10 to lr. Depth,
    width, steps, batch, lr, λ (the original's: AdamW's default 0.01) and the schedule's
    lengths stay the run's own, so a scan can vary them."""
    d = model.d_model
    return (
        {
            "norm": "layernorm",
            "norm_position": "post",
            "norm_eps": 1e-5,
            "n_heads": 1,
            "attn_dim": d // 2,
            "mlp": "relu",
            "d_ff": 3 * d,
            "bias": False,
            "norm_bias": True,
            "head_bias": True,
            "positions": "learned",
            "tie_embeddings": False,
            "gated_attention": False,
            "vocab_size": 201,
        },
        {
            "beta1": 0.9,
            "beta2": 0.999,
            "adam_eps": 1e-8,
            "decay_all": True,
            "grad_clip": 1.0,
            "warmup_from": 0.1,
        },
    )


#: The anchor task's recipes: ``smallinit`` uses the run's model and train tables as they
#: are; ``zhang2024`` replaces the settings :func:`zhang2024_recipe` names.
RECIPES = {"zhang2024": zhang2024_recipe}


@dataclass
class AnchorConfig:
    """One anchor-task run: init scheme, task sizes, model and optimizer.

    ``recipe``: ``smallinit`` (the model and train tables as given) or ``zhang2024`` (the
    authors' architecture and optimizer, :func:`zhang2024_recipe`, over the tables: the
    settings it names are replaced, a replaced value logged, and the run stores the
    result)."""

    seed: int = 0  # init and batch order (the data have their own task.seed)
    init: str = "gamma:0.5"
    task: anchor.AnchorTaskConfig = field(default_factory=anchor.AnchorTaskConfig)
    model: ModelConfig = field(default_factory=_model_default)
    train: TrainConfig = field(default_factory=_train_default)
    recipe: Literal["smallinit", "zhang2024"] = field(
        default="smallinit", metadata={KEY_NEUTRAL: True}
    )

    def __post_init__(self) -> None:
        check_fields(self)
        self.init = canonical_init(self.init)
        if self.recipe in RECIPES:
            model, train = RECIPES[self.recipe](self.model)
            replaced = [
                f"{part}.{k}={getattr(cfg, k)!r}→{v!r}"
                for part, cfg, table in (("model", self.model, model), ("train", self.train, train))
                for k, v in table.items()
                if getattr(cfg, k) != v
            ]
            if replaced:
                log.debug("recipe %s sets %s", self.recipe, ", ".join(replaced))
            self.model = override(self.model, model, where="model")
            self.train = override(self.train, train, where="train")
        require(
            self.model.vocab_size > self.task.max_label,
            f"model.vocab_size={self.model.vocab_size} is too small; labels reach "
            f"{self.task.max_label}, so it must be >= {self.task.max_label + 1}",
        )
        require(
            self.model.context >= self.task.seq_len,
            f"model.context={self.model.context} is shorter than task.seq_len={self.task.seq_len}",
        )

    @property
    def scheme(self):
        return as_scheme(self.init)


# ----------------------------------------------------------------------------- training
def predict(model, tokens: np.ndarray, batch: int = 1024) -> np.ndarray:
    """Greedy prediction at the last position for every row of ``tokens``."""
    device = next(model.parameters()).device
    out = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(tokens), batch):
            x = torch.from_numpy(tokens[i : i + batch]).to(device)
            out.append(last_logits(model, x).argmax(-1).cpu().numpy())
    model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


FIT_ROWS = 2048  # training samples whose accuracy is reported (i.i.d., so the first ones)


def evaluate(model, data: anchor.AnchorData) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Accuracies and solution shares, and the predictions they came from (on the first
    ``FIT_ROWS`` training samples, all test samples)."""
    fit = anchor.subset(data, FIT_ROWS)
    preds = {
        "train": predict(model, fit.train.tokens),
        **{
            name: predict(model, getattr(data, name).tokens)
            for name in ("test_seen", "test_held_out")
        },
    }
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

    rounding = Rounding(loss_sum_dtype=torch.float64, clip_in_model_order=True)  # as the
    # runs of this version were computed

    def __init__(self, cfg: AnchorConfig, device):
        self.cfg = cfg
        self.name = f"anchor {cfg.init}"
        self.tokens_per_step = 0  # fixed-length classification: no token throughput
        self.data = anchor.generate(cfg.task)
        self.device = device
        self.x = torch.from_numpy(self.data.train.tokens).to(device)
        self.y = torch.from_numpy(self.data.train.labels).to(device)

    def callbacks(self) -> list:
        return []

    def rows(self, step: int, dist) -> np.ndarray:
        """This rank's training rows of ``step``."""
        return dist.share(
            batch_indices(step, self.cfg.seed, len(self.y), self.cfg.train.batch_size)
        )

    def batch(self, step: int, dist):
        rows = torch.from_numpy(self.rows(step, dist)).to(self.device)
        return self.x[rows], self.y[rows]

    @staticmethod
    def population_batch(tasks: list[AnchorTask], step: int):
        """The batches of ``step`` of ``tasks`` (a population's members: one task table, so
        one set of samples, each member its own seed), stacked (M, B, T) and (M, B): every
        member's rows indexed at once, one copy to the device."""
        first = tasks[0]
        rows = np.stack([task.rows(step, Dist()) for task in tasks])
        rows = torch.from_numpy(rows).to(first.device)
        return first.x[rows], first.y[rows]

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
            "pred_train": preds["train"],
            "pred_test_seen": preds["test_seen"],
            "pred_held_out": preds["test_held_out"],
            "held_out_x": data.test_held_out.x,
            "held_out_kind": anchor.classify(preds["test_held_out"], data.test_held_out.x),
            "pair_acc_test_seen": anchor.pair_accuracy(preds["test_seen"], data.test_seen),
            **mechanism(model, cfg, data),
        }
        run.save_arrays(**arrays)
        summary = {
            **metrics,
            "steps": cfg.train.steps,
            "params": model.num_params(),
            "wq_condensation": float(arrays["wq_condensation"]),
            "wq_clusters": int(arrays["wq_clusters"]),
            "wq_condensation_baseline": float(arrays["wq_condensation_baseline"]),
        }
        log.info(
            "%s L=%d λ=%g: seen train %.3f test %.3f | held-out inferential %.3f symmetric %.3f",
            cfg.init,
            cfg.model.n_layers,
            cfg.train.weight_decay,
            metrics["acc_seen_train"],
            metrics["acc_seen_test"],
            metrics["share_inferential"],
            metrics["share_symmetric"],
        )
        return summary


# ----------------------------------------------------------------------------- mechanism
def mechanism(model, cfg: AnchorConfig, data: anchor.AnchorData) -> dict[str, np.ndarray]:
    """Embedding geometry, W_Q^(1) condensation and attention on the anchor positions."""
    table = matrix_table(model)
    emb = one(table, "embedding").rows_out.detach().float().cpu().numpy()
    values = emb[cfg.task.value_lo : cfg.task.value_hi + 1]
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
    attn_map = (
        attn[:, sel].mean(axis=1) if sel.any() else np.full(attn.shape[:1] + attn.shape[2:], np.nan)
    )
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
def _run_alone(cfg: AnchorConfig, root, force: bool, callbacks) -> Run:
    return run_anchor(cfg, RunStore(root), force=force)


#: the anchor task's runs for a population
#: (:func:`smallinit.llm.training.population.train_population`): members of one shape (model,
#: task table, steps, batch) that differ in seed, init, learning rate, decay, ε, …
ANCHOR = population.RunKind(
    KIND, VERSION, AnchorConfig, AnchorTask, _run_alone, explicit_attention=True
)


def run_anchor_population(
    cfgs: list[AnchorConfig],
    store: RunStore | None = None,
    *,
    force: bool = False,
    execution: str | None = None,
) -> list[Run]:
    """Train (or resume, or reuse) the anchor runs ``cfgs`` (one shape) as populations
    (:func:`smallinit.llm.training.population.train_populations`); each is stored as
    :func:`run_anchor` stores it."""
    store = check_instance(
        store or RunStore(), RunStore, "run_anchor_population(store=...)", STORE_HINT
    )
    return population.train_populations(
        cfgs, runs_dir=store.root, force=force, kind=ANCHOR, execution=execution
    )


def run_anchor(cfg: AnchorConfig, store: RunStore | None = None, *, force: bool = False) -> Run:
    """Train (or resume, or reuse) the run for ``cfg``, alone or under ``torchrun``."""
    check_instance(cfg, AnchorConfig, "run_anchor")
    store = check_instance(store or RunStore(), RunStore, "run_anchor(store=...)", STORE_HINT)
    return fit_run(
        store,
        KIND,
        VERSION,
        cfg,
        lambda dist: Trainer(cfg, dist, AnchorTask),
        force=force,
        explicit_attention=True,
    )


@dataclass
class AnchorSpec(population.Populated, RunSpec):
    """An anchor-task run for the job driver (:mod:`smallinit.core.jobs`): ``config`` is its
    :class:`AnchorConfig`; runs of one shape train together as populations where the
    driver forms them (:class:`~smallinit.llm.training.population.Populated`)."""

    kind, version, runner = KIND, VERSION, staticmethod(run_anchor)
    population_kind = ANCHOR

    def check(self, memory: tuple[int, str] | None = None) -> None:
        """The checks :func:`run_anchor` makes before a run exists (the trainer's
        preflight with the explicit attention of the mechanism measurements)."""
        preflight(self.config, Dist(), explicit_attention=True, memory=memory)

    def trial(self, config=None) -> dict[str, Any]:
        """The trainer's :func:`~smallinit.llm.training.train.trial` of ``config`` (a cut of
        this spec's, default its own) on the anchor task."""
        return trial(self.config if config is None else config, AnchorTask)
