"""Fig 11: where small init's gains land, token by token (docs/science.md §5).

Matched models (smallest size, same seed, data and steps; γ = 1 against γ = 0.5), one pair
per seed. For each held-out token the gain is ℓ(γ = 0.5) − ℓ(γ = 1) (> 0: small init
better). Bars: each bucket's share of the total gain, Σ_B g / Σ g, with 95% bootstrap
intervals over held-out windows (both seeds' pairs pooled); dots: the bucket's share of
tokens (where the bars would sit if every token gained equally); grey dots: each seed's own
share. Buckets
(:mod:`smallinit.llm.analysis.tokens`): quartiles of add-½ unigram and bigram loss of the
target, whether (previous token, target) already occurred in the window (copyable), and the
synthetic corpus's category of the target with item answers split off. The title carries
the ``token-gains-context-constrained`` record of docs/science.md §13
(:mod:`smallinit.study.claims`): per seed S_B − n_B/n for B the top bigram-loss quartile, seeds
with a total gain ≤ 0 dropped (effect, 95% CI over seeds, one-sided p, n, verdict).
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.llm.analysis.tokens import bucket_families, gain_shares, total_gain_ci
from smallinit.llm.data import corpus as corpus_mod
from smallinit.study import claims
from smallinit.study.figure import Figure

log = logging.getLogger(__name__)
FAMILIES = [
    ("unigram", "unigram loss quartile"),
    ("bigram", "bigram loss quartile"),
    ("copyable", "copyable from context"),
    ("category", "corpus category"),
]


def matched_gains(pairs):
    """(gain (W, T) stacked over seeds, token arrays stacked the same way, per-seed totals)."""
    by = {(j.tags["seed"], j.tags["gamma"]): r for j, r in pairs.done()}
    gains, toks, per_seed = [], [], {}
    for seed in sorted({s for s, _ in by}):
        if (seed, 0.5) not in by or (seed, 1.0) not in by:
            log.warning("seed %d has no matched γ = 0.5 / γ = 1 pair; left out", seed)
            continue
        a, b = by[(seed, 0.5)].arrays(), by[(seed, 1.0)].arrays()
        if not np.array_equal(a["targets"], b["targets"]):
            raise ValueError(f"seed {seed}: the two runs scored different held-out tokens")
        g = a["losses"].astype(float) - b["losses"].astype(float)
        gains.append(g)
        toks.append(a)
        per_seed[seed] = total_gain_ci(g)
    stacked = {
        k: np.concatenate([t[k] for t in toks]) for k in ("inputs", "targets", "tags", "answer")
    }
    return np.concatenate(gains), stacked, per_seed


def make(ctx):
    pairs = ctx.results("token-gains")
    gain, tokens, per_seed = matched_gains(pairs)
    cfg = pairs[0][0].config
    train = np.asarray(corpus_mod.load(cfg.data, cfg.model.vocab_size).train)
    fams = bucket_families(tokens, train, cfg.model.vocab_size)
    total = total_gain_ci(gain)
    judged = claims.judge("token-gains-context-constrained", pairs, ctx.profile)
    results = {}
    with use_style():
        fig, axes = plt.subplots(
            1,
            4,
            figsize=(15, 4.5),
            constrained_layout=True,
            gridspec_kw={"width_ratios": [4, 4, 2, 8]},
        )
        for ax, (fam, title) in zip(axes, FAMILIES, strict=True):
            idx, labels = fams[fam]
            res = gain_shares(gain, idx, labels)
            results[fam] = res
            x = np.arange(len(res))
            share = np.array([r.share for r in res])
            err = np.array([[r.share - r.share_ci[0], r.share_ci[1] - r.share] for r in res]).T
            ax.bar(
                x,
                share,
                yerr=err,
                color="tab:green",
                alpha=0.8,
                capsize=2,
                label="share of total gain",
            )
            ax.plot(x, [r.token_share for r in res], "ko", ms=4, label="share of tokens")
            # each seed's own S_B (its windows are one block of the stacked arrays)
            for k, (g_s, i_s) in enumerate(
                zip(np.split(gain, len(per_seed)), np.split(idx, len(per_seed)), strict=True)
            ):
                mine = [r.share for r in gain_shares(g_s, i_s, labels, n_boot=200)]
                ax.plot(
                    x + 0.12 * (k - (len(per_seed) - 1) / 2) / max(len(per_seed), 1),
                    mine,
                    ".",
                    color="0.35",
                    ms=3,
                    label="single seeds" if k == 0 else None,
                )
            ax.axhline(0, color="k", lw=0.6)
            ax.set_xticks(
                x,
                [r.label.replace(f"{fam} ", "") for r in res],
                rotation=45,
                ha="right",
                fontsize=7,
            )
            ax.set_title(title, fontsize=9)
        axes[0].set_ylabel("share")
        axes[0].legend(fontsize=7)
        seeds = ", ".join(
            f"seed {s}: {m:+.4f} [{lo:+.4f}, {hi:+.4f}]" for s, (m, lo, hi) in per_seed.items()
        )
        fig.suptitle(
            f"gain = loss(γ = 0.5) − loss(γ = 1) per held-out token, d_model = "
            f"{cfg.model.d_model}: mean {total[0]:+.4f} nats/token "
            f"[{total[1]:+.4f}, {total[2]:+.4f}] (n = {len(per_seed)} seeds; "
            f"{seeds})\ntoken-gains-context-constrained, S_B − n_B/n for B = top "
            f"bigram-loss quartile: {judged.label('Δ')}"
            + (f" ({judged.detail})" if judged.detail else ""),
            fontsize=9,
        )
        paths = ctx.save(fig)
    log.info(
        "fig 11 total gain %s per seed %s; claim %s (per seed %s)",
        total,
        per_seed,
        judged.label("Δ"),
        judged.values,
    )
    for res in results.values():
        for r in res:
            log.info(
                "fig 11 %s: n %d tokens %.3f share %.3f [%.3f, %.3f] mean gain %.4f [%.4f, %.4f]",
                r.label,
                r.n_tokens,
                r.token_share,
                r.share,
                *r.share_ci,
                r.mean_gain,
                *r.mean_gain_ci,
            )
    return paths


FIGURE = Figure(
    number=11,
    caption=__doc__,
    make=make,
    title="Token-level gains of γ = 1 over γ = 0.5 by context-dependence bucket",
)
