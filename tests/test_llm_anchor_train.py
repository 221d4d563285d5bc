"""Anchor task training, scan, mechanism measurements and CLI (issue 7)."""

import argparse
import json

import numpy as np
import pytest
import torch

from smallinit.cli.llm_anchor import register_anchor_commands
from smallinit.cli.util import ArgumentParser
from smallinit.errors import ConfigError
from smallinit.llm.data import anchor
from smallinit.llm.experiments.anchor import (
    KIND,
    cell_config,
    load_profile,
    mechanism,
    run_anchor,
    scan_cells,
)
from smallinit.runs import RunStore

TINY = ["task.n_train=2000", "task.n_test=200", "model.d_model=16", "model.n_layers=2",
        "model.n_heads=2", "train.steps=20", "train.batch_size=32", "train.log_every=10",
        "train.eval_every=10"]


def test_profiles_load_and_split_overrides():
    for profile in ("quick", "full"):
        cfg, scan = load_profile(profile)
        assert cfg.model.vocab_size > cfg.task.max_label
        assert cfg.task.seq_len == 9 and cfg.model.context >= 9
        assert len(scan.gammas) >= 3
    cfg, scan = load_profile("quick", ["train.steps=7", "scan.gammas=0.4,1.1"])
    assert cfg.train.steps == 7 and scan.gammas == (0.4, 1.1)
    base, _ = load_profile("quick")
    assert cfg.model == base.model  # an override leaves the profile's other values alone


def test_vocab_must_hold_every_label():
    with pytest.raises(ConfigError, match="vocab_size"):
        load_profile("quick", ["model.vocab_size=100"])  # labels reach 109


def test_scan_cells_cover_both_panels():
    base, scan = load_profile("quick", ["scan.gammas=0.5,1.0", "scan.layers=1,2",
                                        "scan.weight_decays=0,0.5", "scan.wd_layers=2"])
    cells = scan_cells(base, scan)
    depth = {(c.init, c.model.n_layers) for p, c in cells if p == "depth"}
    wd = {(c.init, c.train.weight_decay, c.model.n_layers) for p, c in cells if p == "wd"}
    assert depth == {(f"gamma:{g}", n) for g in ("0.5", "1") for n in (1, 2)}
    assert wd == {(f"gamma:{g}", w, 2) for g in ("0.5", "1") for w in (0.0, 0.5)}
    assert all(c.train.weight_decay == base.train.weight_decay for p, c in cells
               if p == "depth")


def test_mechanism_reads_the_first_layer_query_rows():
    cfg = cell_config(load_profile("quick", TINY)[0], gamma=0.5)
    from smallinit.llm.model.transformer import Transformer

    model = Transformer(cfg.model, cfg.scheme, seed=0)
    d = cfg.model.d_model
    with torch.no_grad():  # W_Q rows all parallel (one measurement function), K and V random
        w = model.blocks[0].attn.qkv.weight
        w[:d] = torch.outer(torch.linspace(0.5, 2.0, d), torch.randn(d))
    data = anchor.generate(cfg.task)
    m = mechanism(model, cfg, data)
    assert m["wq_condensation"] == pytest.approx(1.0)
    assert int(m["wq_clusters"]) == 1
    assert m["wq_condensation_baseline"] < 0.3
    # the last position's attention on x, a1, a2 (and the rest), per layer and head,
    # recomputed sample by sample
    held = data.test_held_out
    _, _, weights = model(torch.from_numpy(held.tokens), need_weights=True)
    L, H = cfg.model.n_layers, cfg.model.n_heads
    want = np.zeros((L, H, 4))
    for layer in range(L):
        w = weights[layer].detach().numpy()[:, :, -1, :]  # (B, H, T)
        for i, p in enumerate(held.pos):
            want[layer, :, :3] += w[i, :, p:p + 3] / len(held)
    want[..., 3] = 1 - want[..., :3].sum(-1)
    assert m["attn_last"].shape == (L, H, 4)
    assert np.allclose(m["attn_last"], want, atol=1e-5)
    assert np.allclose(np.diag(m["emb_cos_anchors"]), 1.0)


@pytest.mark.slow
def test_short_training_fits_the_seen_pairs(tmp_path):
    """A thousand steps of a two-layer model solve the seen pairs, also on the held-out
    (x, position) combinations, far above chance (1/128). (One layer cannot: finding x
    next to the anchors needs two attention steps; at d_model 32 the loss plateau outlasts
    a few hundred steps. ~35 s on 2 cores, hence slow.)"""
    cfg, _ = load_profile("quick", ["task.n_test=400", "model.n_layers=2",
                                    "train.steps=1000", "train.eval_every=0",
                                    "train.log_every=100", "init=gamma:0.5"])
    assert cfg.model.d_model == 64 and cfg.task.n_train == 50000
    run = run_anchor(cfg, RunStore(tmp_path))
    s = run.summary
    assert s["acc_seen_train"] > 0.9, s
    assert s["acc_seen_test"] > 0.9, s
    losses = [r["loss"] for r in run.metrics()]
    assert losses[-1] < 0.25 * losses[0]
    shares = s["share_inferential"] + s["share_symmetric"] + s["share_other"]
    assert shares == pytest.approx(1.0)


def test_training_is_deterministic(tmp_path):
    cfg, _ = load_profile("quick", TINY)
    a = run_anchor(cfg, RunStore(tmp_path / "a"))
    b = run_anchor(cfg, RunStore(tmp_path / "b"))
    assert [r["loss"] for r in a.metrics()] == [r["loss"] for r in b.metrics()]
    assert np.array_equal(a.arrays()["pred_held_out"], b.arrays()["pred_held_out"])


def _parser():
    parser = ArgumentParser(prog="smallinit llm")
    register_anchor_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_anchor_and_scan(tmp_path, capsys):
    runs = str(tmp_path / "runs")
    args = _parser().parse_args(["anchor", "--gamma", "0.5,1.0", "--layers", "1",
                                 "--runs-dir", runs, *TINY])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "gamma:0.5" in out and "gamma:1 " in out and "inferential" in out
    assert len(list(RunStore(runs).runs(KIND))) == 2
    table = tmp_path / "scan.json"
    args = _parser().parse_args(["anchor-scan", "--gammas", "0.5,1.0", "--layers", "1",
                                 "--weight-decays", "0.01", "--runs-dir", runs,
                                 "--json", str(table), *TINY, "scan.wd_layers=1",
                                 "scan.seeds=[0]"])
    assert args.func(args) == 0
    rows = json.loads(table.read_text())
    assert {(r["panel"], r["gamma"]) for r in rows} == {
        (p, g) for p in ("depth", "wd") for g in (0.5, 1.0)}
    # the (γ, depth) cells at the base λ = 0.01 are the (γ, λ) cells at depth 1: reused
    assert len(list(RunStore(runs).runs(KIND))) == 2
    assert "seen/test" in capsys.readouterr().out


def test_cli_rejects_bad_values():
    with pytest.raises(SystemExit) as err:
        _parser().parse_args(["anchor", "--gamma", "abc"])
    assert err.value.code == 2
    args = _parser().parse_args(["anchor", "model.vocab_size=50"])
    with pytest.raises(ConfigError):
        args.func(args)
    assert isinstance(args, argparse.Namespace)
