"""Benchmark comparison: groups, pairing, paired bootstrap; and the whole path from two
trained runs to a stored comparison through the CLI handlers."""

import json

import numpy as np
import pytest

from smallinit.cli.util import ArgumentParser
from smallinit.core.errors import ConfigError
from smallinit.llm.downstream import report as br


def test_groups_default_string_and_toml(tmp_path):
    assert br.parse_groups(None)["reasoning"][:2] == ("gsm8k", "arc_challenge")
    assert br.parse_groups("r=gsm8k, arc_challenge; c=piqa") == {
        "r": ("gsm8k", "arc_challenge"),
        "c": ("piqa",),
    }
    f = tmp_path / "g.toml"
    f.write_text('[groups]\nreasoning = ["gsm8k"]\nknowledge = ["mmlu", "triviaqa"]\n')
    assert br.parse_groups(str(f)) == {"reasoning": ("gsm8k",), "knowledge": ("mmlu", "triviaqa")}
    with pytest.raises(ConfigError, match="'gsm9k' is not known"):
        br.parse_groups("r=gsm9k")
    with pytest.raises(ConfigError, match="NAME=task"):
        br.parse_groups("gsm8k")


def test_pairing_aligns_items_by_id():
    a = [{"id": "x", "correct": 1}, {"id": "y", "correct": 0}, {"id": "z", "correct": 1}]
    b = [{"id": "z", "correct": 0}, {"id": "x", "correct": 1}]
    p = br.pair_records("t", a, b)
    assert p.ids == ["x", "z"] and list(p.a) == [1, 1] and list(p.b) == [1, 0]
    assert "paired on 2 shared items" in p.notes[0]
    with pytest.raises(ConfigError, match="share no scored items"):
        br.pair_records("t", a, [{"id": "w", "correct": 1}])


def test_pairing_reads_old_and_new_record_names_on_the_headline_metric():
    old = [
        {"id": "x", "correct": 1, "correct_raw": 0, "chars": [3, 4]},
        {"id": "y", "correct": 0, "correct_raw": 1, "chars": [3, 4]},
    ]
    new = [
        {"id": "x", "acc": 1, "acc_norm": 0, "chars": [3, 4]},
        {"id": "y", "acc": 1, "acc_norm": 1, "chars": [3, 4]},
    ]
    p = br.pair_records("arc_easy", old, new)
    assert p.metric == "acc_norm" and list(p.a) == [1, 0] and list(p.b) == [0, 1]
    raw = br.pair_records("arc_easy", old, new, metric="acc")
    assert list(raw.a) == [0, 1] and list(raw.b) == [1, 1]
    gen = br.pair_records("gsm8k", [{"id": "g", "correct": 1}], [{"id": "g", "exact_match": 0}])
    assert gen.metric == "exact_match" and (list(gen.a), list(gen.b)) == ([1], [0])


def _paired(task, a, b):
    ids = [str(i) for i in range(len(a))]
    return br.Paired(task, ids, np.asarray(a, float), np.asarray(b, float))


def test_bootstrap_degenerate_cases_are_exact():
    groups = {"g": ("arc_easy", "hellaswag"), "empty": ("mmlu",)}
    paired = {
        "arc_easy": _paired("arc_easy", [1] * 20, [0] * 20),
        "hellaswag": _paired("hellaswag", [1, 0] * 10, [1, 0] * 10),
    }
    rep = br.compare_paired(paired, groups, n_boot=200)
    t = rep["tasks"]
    assert (t["arc_easy"]["diff"], t["arc_easy"]["lo"], t["arc_easy"]["hi"]) == (1, 1, 1)
    assert (t["hellaswag"]["diff"], t["hellaswag"]["lo"], t["hellaswag"]["hi"]) == (0, 0, 0)
    assert t["hellaswag"]["p"] == 1.0 and t["arc_easy"]["p"] == pytest.approx(1 / 200)
    g = rep["groups"]["g"]
    assert g["acc_a"] == pytest.approx(0.75) and g["acc_b"] == pytest.approx(0.25)
    assert (g["diff"], g["lo"], g["hi"]) == pytest.approx((0.5, 0.5, 0.5))
    assert rep["groups"]["empty"] == {"tasks": [], "missing": ["mmlu"]}


def test_bootstrap_interval_matches_the_paired_normal_approximation():
    rng = np.random.default_rng(1)
    base = rng.random(2000) < 0.5
    a = (base | (rng.random(2000) < 0.1)).astype(float)  # A = B plus ~5% extra right
    p = _paired("piqa", a, base.astype(float))
    rep = br.compare_paired({"piqa": p}, {"c": ("piqa",)}, n_boot=2000, seed=3)
    d = a - base
    se = d.std(ddof=1) / np.sqrt(d.size)
    t = rep["tasks"]["piqa"]
    assert t["lo"] < t["diff"] < t["hi"]
    assert (t["hi"] - t["lo"]) == pytest.approx(2 * 1.96 * se, rel=0.15)
    # pairing matters: the unpaired interval would be several times wider
    unpaired = np.sqrt(a.var(ddof=1) / a.size + base.var(ddof=1) / base.size)
    assert (t["hi"] - t["lo"]) < 0.6 * 2 * 1.96 * unpaired
    assert rep == br.compare_paired({"piqa": p}, {"c": ("piqa",)}, n_boot=2000, seed=3)


# ----------------------------------------------------------------------------- end to end
def _cli(argv):
    from smallinit.cli.llm_downstream import register_downstream_commands

    parser = ArgumentParser(prog="smallinit llm")
    register_downstream_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _train(init, runs):
    from smallinit.core.config import load_config
    from smallinit.llm.run_config import RunConfig
    from smallinit.llm.training.train import train

    cfg = load_config(
        RunConfig,
        None,
        [
            f"init={init}",
            "model.d_model=32",
            "model.n_layers=1",
            "model.n_heads=2",
            "model.vocab_size=320",
            "model.context=64",
            "train.steps=8",
            "train.batch_size=4",
            "data.synthetic_items=100",
            "data.synthetic_val_items=20",
            "train.eval_every=0",
            "train.checkpoint_every=0",
            "eval.answer_items=4",
            "eval.token_windows=2",
        ],
    )
    return train(cfg, runs_dir=runs)


def test_two_trained_runs_benchmarked_stored_and_compared(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SMALLINIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SMALLINIT_QUIET", "1")
    runs = tmp_path / "runs"
    run_a, run_b = _train("gamma:1.0", runs), _train("gamma:0.5", runs)
    assert run_a.done and run_b.done
    data = tmp_path / "bench"
    data.mkdir()
    rows = {
        "arc_easy": [
            {
                "id": f"a{i}",
                "query": f"Question: {i} plus one?\nAnswer:",
                "choices": [" red", " a blue one", " green"],
                "gold": i % 3,
            }
            for i in range(6)
        ],
        "hellaswag": [
            {
                "id": f"h{i}",
                "query": "A man walks. He",
                "choices": [" sits.", " runs.", " eats.", " sleeps."],
                "gold": i % 4,
            }
            for i in range(5)
        ],
        "gsm8k": [
            {"id": f"g{i}", "query": f"Question: {i} + 1?\nAnswer:", "answers": [str(i + 1)]}
            for i in range(3)
        ],
    }
    for task, items in rows.items():
        (data / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    common = [
        "--tasks",
        "arc_easy,hellaswag,gsm8k",
        "--data-dir",
        str(data),
        "--no-fetch",
        "--runs-dir",
        str(runs),
        "--max-new-tokens",
        "6",
        "--batch-size",
        "4",
    ]
    assert _cli(["downstream", str(run_a.path), *common]) == 0
    assert _cli(["downstream", run_b.key[:6], *common]) == 0
    out = capsys.readouterr().out
    assert out.count("local") == 6

    bench = sorted((runs / "llm-downstream").iterdir())
    assert len(bench) == 6
    by_task = {}
    for d in bench:
        summary = json.loads((d / "summary.json").read_text())
        lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        assert summary["n"] == len(lines) == len(rows[summary["task"]])
        metric = summary["primary"]
        assert metric == ("exact_match" if summary["task"] == "gsm8k" else "acc_norm")
        assert summary[metric] == pytest.approx(np.mean([r[metric] for r in lines]))
        if metric == "acc_norm":
            assert summary["acc"] == pytest.approx(np.mean([r["acc"] for r in lines]))
        assert summary["source"] == "local" and summary["truncated"] == 0
        by_task.setdefault(summary["task"], []).append(summary)
    assert set(by_task) == set(rows)

    before = {d.name: (d / "status.json").stat().st_mtime_ns for d in bench}
    assert _cli(["downstream", run_a.key, *common]) == 0  # reused, not recomputed
    assert before == {
        d.name: (d / "status.json").stat().st_mtime_ns
        for d in sorted((runs / "llm-downstream").iterdir())
    }

    assert _cli(["downstream", run_a.key, *common[:-4], "--limit", "2"]) == 0
    limited = [
        d
        for d in (runs / "llm-downstream").iterdir()
        if json.loads((d / "config.json").read_text())["config"]["limit"] == 2
    ]
    assert len(limited) == 3

    capsys.readouterr()
    assert (
        _cli(
            [
                "downstream-compare",
                run_a.key,
                run_b.key,
                "--runs-dir",
                str(runs),
                "--bootstrap",
                "50",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    reports = list((runs / "llm-downstream-compare").glob("*/report.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    assert report["groups"]["reasoning"]["tasks"] == ["gsm8k"]
    assert report["groups"]["commonsense"]["tasks"] == ["hellaswag", "arc_easy"]
    assert report["groups"]["knowledge"]["tasks"] == []
    assert report["tasks"]["arc_easy"]["n"] == 6  # the full runs, not the --limit 2 ones
    assert report["tasks"]["arc_easy"]["metric"] == "acc_norm"
    assert report["tasks"]["gsm8k"]["metric"] == "exact_match"
    assert "commonsense" in printed and "missing: mmlu, triviaqa, nq_open" in printed

    # a custom task file, JSON output, and the truncation warning (context is 64 tokens)
    custom = data / "long_mc.jsonl"
    custom.write_text(
        json.dumps(
            {"id": "short", "query": "A man walks. He", "choices": [" sits.", " runs."], "gold": 0}
        )
        + "\n"
        + json.dumps(
            {
                "id": "long",
                "query": "the man walks. " * 60,
                "choices": [" sits.", " runs."],
                "gold": 1,
            }
        )
        + "\n"
    )
    assert _cli(["downstream", run_a.key, "--tasks", f"{custom},gsm8k", "--json", *common[2:]]) == 0
    captured = capsys.readouterr()
    results = json.loads(captured.out)
    assert [r["task"] for r in results] == ["long_mc", "gsm8k"]
    mine = results[0]
    assert (mine["source"], mine["n"], mine["truncated"], mine["primary"]) == (
        "file",
        2,
        1,
        "acc_norm",
    )
    assert {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr"} <= set(mine)
    assert "exact_match_stderr" in results[1] and "acc" not in results[1]
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "long_mc 1/2" in warnings[0]
    assert "gsm8k" not in warnings[0]


def test_run_references_are_checked(tmp_path):
    from smallinit.llm.downstream.run import resolve_run

    with pytest.raises(ConfigError, match="matches no trained runs"):
        resolve_run("abc", tmp_path)
    other = tmp_path / "toy-scan" / "k1"
    other.mkdir(parents=True)
    (other / "config.json").write_text(json.dumps({"kind": "toy-scan", "key": "k1"}))
    with pytest.raises(ConfigError, match="kind 'toy-scan', not 'llm-train'"):
        resolve_run(str(other))


def test_results_table_shows_raw_and_normalized_accuracy_and_the_cut_items():
    from smallinit.cli.llm_downstream import format_results, truncation_warning

    results = [
        {
            "task": "arc_easy",
            "n": 4,
            "acc": 0.25,
            "acc_stderr": 0.25,
            "acc_norm": 0.75,
            "acc_norm_stderr": 0.25,
            "chance": 0.25,
            "truncated": 1,
            "source": "local",
            "result": "runs/llm-downstream/k1",
        },
        {
            "task": "gsm8k",
            "n": 3,
            "exact_match": 1 / 3,
            "exact_match_stderr": 0.3333,
            "truncated": 0,
            "source": "file",
            "result": "runs/llm-downstream/k2",
        },
        {"task": "piqa", "failed": "diverged"},
    ]
    lines = format_results(results).splitlines()
    assert lines[0].split()[:6] == ["task", "n", "metric", "value", "stderr", "chance"]
    assert lines[1].split()[:8] == [
        "arc_easy",
        "4",
        "acc",
        "0.2500",
        "0.2500",
        "0.250",
        "1",
        "local",
    ]
    assert lines[2].split() == ["arc_easy", "4", "acc_norm", "0.7500", "0.2500"]
    assert lines[3].split()[:4] == ["gsm8k", "3", "exact_match", "0.3333"]
    assert lines[4].startswith("piqa") and "failed: diverged" in lines[4]
    warning = truncation_warning(results)
    assert warning.startswith("warning:") and "arc_easy 1/4" in warning
    assert "gsm8k" not in warning and "\n" not in warning
    assert truncation_warning(results[1:]) is None
