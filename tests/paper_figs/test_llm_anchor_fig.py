"""Fig 6 (anchor phase diagram) renders from the run store; hatching marks unfit cells."""

import numpy as np

from smallinit.core.jobs import run_specs
from smallinit.core.store import RunStore
from smallinit.paper_figs import fig06_anchor_phase
from smallinit.study.experiments import anchor_scan
from smallinit.study.figs import load_figure
from smallinit.study.figure import FigureContext

TINY = [
    "task.n_train=2000",
    "task.n_test=200",
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "train.steps=10",
    "train.batch_size=32",
    "train.log_every=5",
    "train.eval_every=0",
    "scan.gammas=[0.5,1.0]",
    "scan.layers=[1]",
    "scan.weight_decays=[0.01]",
    "scan.mechanism_gammas=[0.5,1.0]",
]


def test_fig06_renders_and_hatches_unfit_cells(tmp_path):
    fig06 = load_figure(6)
    assert fig06.number == 6
    store = RunStore(tmp_path / "runs")
    base, scan = anchor_scan.load("quick", TINY)
    results = run_specs(
        anchor_scan.cell_specs(base, scan) + anchor_scan.mechanism_specs(base, scan), store
    )
    ctx = FigureContext(6, "quick", tmp_path / "out", {"anchor-scan": results})
    paths = fig06.make(ctx)
    names = sorted(p.name for p in paths)
    assert names == [
        "fig06_anchor_phase.pdf",
        "fig06_anchor_phase.png",
        "fig06_anchor_phase_mechanism.pdf",
        "fig06_anchor_phase_mechanism.png",
    ]
    assert all(p.stat().st_size > 1000 for p in paths)
    # 10 steps fit nothing: every cell is hatched in every panel
    rows = anchor_scan.scan_table(results)
    assert all(r["acc_seen_test"] < fig06_anchor_phase.FIT_THRESHOLD for r in rows)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    fig06_anchor_phase._heatmap(ax, rows, "depth", "share_inferential", "layers", "Blues")
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == len([r for r in rows if r["panel"] == "depth"]) == 2
    plt.close(fig)
    # a fitted cell is not hatched
    fitted = [dict(r, acc_seen_test=1.0) if r["gamma"] == 1.0 else r for r in rows]
    fig, ax = plt.subplots()
    fig06_anchor_phase._heatmap(ax, fitted, "depth", "share_inferential", "layers", "Blues")
    assert len([p for p in ax.patches if p.get_hatch()]) == 1
    plt.close(fig)
    assert np.isfinite([r["share_inferential"] for r in rows]).all()
