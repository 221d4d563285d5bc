"""The comparison table: theory's prediction, the toy's and the transformer's measurements,
one row per γ, and whether they agree (pure logic on stored results; no training here).

Slopes: per layer, S_w = d ln RD / d ln m is the least-squares slope of ln RD against
ln m over the widths whose training run finished (m = d_ff = r·d_model; with r fixed the
slope against ln d_model is the same). It is fitted by the toy's own
:func:`smallinit.toy.scan.fit_slopes`, so toy and transformer slopes are one computation.

Agreement: theory's one rule, the one the toy scan grades by
(:func:`smallinit.theory.phase.slope_agrees`, docs/science.md §2): a measured slope agrees
with the predicted regime when its sign does — linear S_w < 0, condensed S_w > 0, critical
|S_w| ≤ ``critical_tol``. "In interval" (:func:`smallinit.theory.phase.slope_in_interval`)
also asks for theory's bound: linear S_w ≤ Δ + 1/ln(m_min) (the log m factor of
RD ≲ m^Δ log m, ``log_allowance``), condensed S_w ≥ Δ/2, critical |S_w| ≤ ``critical_tol``.
A row's ``agree`` is yes when the FFN slope of every layer agrees.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np

from smallinit.theory.phase import slope_agrees, slope_in_interval
from smallinit.toy.scan import fit_slopes


def fit_layer_slopes(rd: np.ndarray, ok: np.ndarray, widths) -> np.ndarray:
    """Slope of ln RD vs ln m per layer. rd: (n_layers, n_widths); ok: (n_widths,) True
    where the run finished. NaN for a layer with fewer than two usable widths."""
    rd = np.asarray(rd, dtype=float)
    status = np.where(np.asarray(ok, dtype=bool), 0, 1)
    status = np.broadcast_to(status, rd.shape)
    _, med = fit_slopes(rd[..., None], status[..., None], list(widths))
    return med


def _finite(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def build_table(
    cfg, predictions: list[dict], toy: list[dict], llm: list[dict]
) -> list[dict[str, Any]]:
    """One record per γ of ``cfg.gammas``.

    ``predictions[i]``: theory's point for γ_i (keys gamma_value, gamma_prime_value,
    delta_value, regime, slope_lo_value, slope_hi_value: :meth:`PhasePoint.as_dict`).
    ``toy[i]``: S_w (or None), score, score_init at that point. ``llm``: one entry per
    (γ, width) with keys gamma, width, state ("done" or why not) and, when done, layers
    (:func:`smallinit.llm.analysis.ffn.measure_layers`).
    """
    m_widths = cfg.ffn_widths()
    n_layers = cfg.llm.model.n_layers
    records = []
    for g, pred, t in zip(cfg.gammas, predictions, toy, strict=True):
        runs = {e["width"]: e for e in llm if e["gamma"] == g}
        missing = [w for w in cfg.widths if w not in runs]
        if missing:
            raise ValueError(f"no transformer result for γ={g} at widths {missing}")
        ok = np.array([runs[w]["state"] == "done" for w in cfg.widths])

        def per_layer(key, runs=runs, ok=ok):
            arr = np.full((n_layers, len(cfg.widths)), np.nan)
            for j, w in enumerate(cfg.widths):
                if ok[j]:
                    arr[:, j] = [lay[key] for lay in runs[w]["layers"]]
            return arr

        rd_ffn, rd_qk = per_layer("rd_ffn"), per_layer("rd_qk")
        s_ffn = fit_layer_slopes(rd_ffn, ok, m_widths)
        s_qk = fit_layer_slopes(rd_qk, ok, m_widths)
        regime = pred["regime"]
        lo, hi = pred["slope_lo_value"], pred["slope_hi_value"]
        llm_agree = [slope_agrees(regime, _finite(s), cfg.critical_tol) for s in s_ffn]
        top = max((j for j in range(len(cfg.widths)) if ok[j]), default=None)
        score = per_layer("score")[:, top] if top is not None else np.full(n_layers, np.nan)
        score0 = per_layer("score_init")[:, top] if top is not None else np.full(n_layers, np.nan)
        toy_s = _finite(t["S_w"])
        records.append(
            {
                "gamma": g,
                "gamma_toy": pred["gamma_value"],
                "gamma_prime": pred["gamma_prime_value"],
                "delta": pred["delta_value"],
                "regime": regime,
                "interval": [lo, hi],
                "toy_S_w": toy_s,
                "toy_agree": slope_agrees(regime, toy_s, cfg.critical_tol),
                "toy_in_interval": slope_in_interval(
                    regime, lo, hi, toy_s, cfg.toy_widths, cfg.critical_tol
                ),
                "toy_score": _finite(t["score"]),
                "toy_score_init": _finite(t["score_init"]),
                "llm_S_w": [_finite(s) for s in s_ffn],
                "llm_S_w_qk": [_finite(s) for s in s_qk],
                "llm_agree": llm_agree,
                "llm_in_interval": [
                    slope_in_interval(regime, lo, hi, _finite(s), m_widths, cfg.critical_tol)
                    for s in s_ffn
                ],
                "llm_score": [_finite(s) for s in score],
                "llm_score_init": [_finite(s) for s in score0],
                "llm_score_width": cfg.widths[top] if top is not None else None,
                "llm_rd_ffn": {
                    str(w): [_finite(v) for v in rd_ffn[:, j]] for j, w in enumerate(cfg.widths)
                },
                "llm_rd_qk": {
                    str(w): [_finite(v) for v in rd_qk[:, j]] for j, w in enumerate(cfg.widths)
                },
                "llm_dw_rms_ffn": {
                    str(w): [_finite(v) for v in per_layer("dw_rms")[:, j]]
                    for j, w in enumerate(cfg.widths)
                },
                "llm_val_loss": {str(w): runs[w].get("val_loss") for w in cfg.widths},
                "llm_runs_failed": [w for j, w in enumerate(cfg.widths) if not ok[j]],
                "agree": None if any(a is None for a in llm_agree) else all(llm_agree),
            }
        )
    return records


# ----------------------------------------------------------------------------- output
def _yn(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _num(v: float | None, fmt: str = "+.2f") -> str:
    return "nan" if v is None else format(v, fmt)


def _interval(lo: float | None, hi: float | None) -> str:
    return f"[{'-inf' if lo is None else f'{lo:.2f}'}, {'inf' if hi is None else f'{hi:.2f}'}]"


def _layers(values: list, fmt: str = "+.2f") -> str:
    return "/".join(_num(v, fmt) for v in values)


def format_table(records: list[dict]) -> str:
    """Plain text: one line per γ; per-layer values are joined by '/' (layer 0 first).
    "LLM in int": the FFN slope lies in theory's interval (the stricter test); "toy ok" and
    "agree": the toy's and every transformer layer's slope have the predicted sign."""
    head = (
        f"{'γ':>5} {'(γ,γ′)':>11} {'regime':>9} {'S_w interval':>14} {'toy S_w':>7} "
        f"{'LLM S_w FFN':>13} {'LLM S_w QK':>13} {'toy cond':>8} {'LLM cond (init)':>21} "
        f"{'LLM in int':>10} {'toy ok':>6} {'agree':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in records:
        coords = f"({r['gamma_toy']:g},{r['gamma_prime']:g})"
        cond = f"{_layers(r['llm_score'], '.2f')} ({_layers(r['llm_score_init'], '.2f')})"
        lines.append(
            f"{r['gamma']:5.2f} {coords:>11} {r['regime']:>9} "
            f"{_interval(*r['interval']):>14} {_num(r['toy_S_w']):>7} "
            f"{_layers(r['llm_S_w']):>13} {_layers(r['llm_S_w_qk']):>13} "
            f"{_num(r['toy_score'], '.2f'):>8} {cond:>21} "
            f"{'/'.join(_yn(v) for v in r['llm_in_interval']):>10} {_yn(r['toy_agree']):>6} "
            f"{_yn(r['agree']):>5}"
        )
    graded = [r for r in records if r["agree"] is not None]
    lines.append(
        f"transformer agrees with theory (sign of S_w, every layer): "
        f"{sum(bool(r['agree']) for r in graded)}/{len(graded)} γ; toy: "
        f"{sum(bool(r['toy_agree']) for r in records if r['toy_agree'] is not None)}"
        f"/{sum(r['toy_agree'] is not None for r in records)}"
    )
    return "\n".join(lines)


CSV_SCALARS = (
    "gamma",
    "gamma_toy",
    "gamma_prime",
    "delta",
    "regime",
    "toy_S_w",
    "toy_agree",
    "toy_in_interval",
    "toy_score",
    "toy_score_init",
)
CSV_LAYERED = (
    "llm_S_w",
    "llm_S_w_qk",
    "llm_agree",
    "llm_in_interval",
    "llm_score",
    "llm_score_init",
)


def to_csv(records: list[dict]) -> str:
    """CSV text, one row per γ; per-layer values as columns ``<name>_L<layer>``."""
    n_layers = len(records[0]["llm_S_w"]) if records else 0
    header = [*CSV_SCALARS[:5], "slope_lo", "slope_hi", *CSV_SCALARS[5:]]
    header += [f"{k}_L{i}" for k in CSV_LAYERED for i in range(n_layers)]
    header += ["agree"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)

    def cell(v):
        return "" if v is None else v

    for r in records:
        row = [cell(r[k]) for k in CSV_SCALARS[:5]] + [cell(v) for v in r["interval"]]
        row += [cell(r[k]) for k in CSV_SCALARS[5:]]
        row += [cell(r[k][i]) for k in CSV_LAYERED for i in range(n_layers)]
        row.append(cell(r["agree"]))
        writer.writerow(row)
    return buf.getvalue()
