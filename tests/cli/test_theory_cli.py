"""``smallinit theory ...``: tables, JSON, one-line errors with exit 2 (docs/science.md §2-§5)."""

import json
import subprocess
import sys

import pytest

from smallinit.cli import main


def run(args, capsys):
    code = main(["theory", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(args, capsys):
    code, out, _ = run([*args, "--json"], capsys)
    assert code == 0
    return json.loads(out)


def test_classify_table_and_json(capsys):
    code, out, _ = run(["classify", "--gamma", "1/2", "--gamma-prime", "0"], capsys)
    assert code == 0
    assert "regime: linear" in out and "Δ = γ − 1 − max(γ', 0) = -1/2" in out
    assert "≤ -1/2" in out
    data = run_json(["classify", "--gamma", "1.75", "--gamma-prime=-0.5"], capsys)
    assert data["regime"] == "condensed" and data["delta"] == "3/4"
    assert data["slope_lo"] == "3/8" and data["slope_hi_value"] is None
    assert (
        run_json(["classify", "--gamma", "1.1", "--gamma-prime", "0.1"], capsys)["regime"]
        == "critical"
    )


def test_schemes_table_and_json(capsys):
    code, out, _ = run(["schemes"], capsys)
    assert code == 0
    for label in ("LeCun", "He", "Xavier", "NTK", "mean field", "E et al.", "γ-rule FFN"):
        assert label in out
    assert "linear: gamma < 1/2; critical: gamma = 1/2; condensed: gamma > 1/2" in out
    rows = {r["name"]: r for r in run_json(["schemes"], capsys)}
    assert (rows["xavier"]["gamma"], rows["xavier"]["gamma_prime"]) == ("1", "0")
    assert rows["xavier"]["regime"] == "critical"
    assert (
        rows["gamma_ffn_proportional"]["gamma"],
        rows["gamma_ffn_proportional"]["gamma_prime"],
    ) == ("2*gamma", "0")
    at = {r["name"]: r for r in run_json(["schemes", "--param", "3/4"], capsys)}
    assert at["gamma_ffn_proportional"]["gamma"] == "3/2"
    assert at["gamma_ffn_proportional"]["regime"] == "condensed"
    assert at["gamma_ffn_fixed"]["regime"] == "linear"


def test_transformer_gamma_rule(capsys):
    code, out, _ = run(["transformer", "--d-model", "256", "--gamma", "1", "--mlp", "gelu"], capsys)
    assert code == 0
    assert "blocks.*.mlp.down" in out and "mlp_out" in out and "1024" in out
    assert "d ∝ m" in out and "condensed" in out and "γ_ε(d=256" in out
    rep = run_json(
        [
            "transformer",
            "--d-model",
            "256",
            "--gamma",
            "1/2",
            "--d-ff",
            "1024",
            "--n-heads",
            "4",
            "--n-layers",
            "2",
            "--vocab",
            "100",
        ],
        capsys,
    )
    ffn = rep["ffn"][0]
    assert (ffn["width_law"]["fixed"]["gamma"], ffn["width_law"]["fixed"]["gamma_prime"]) == (
        "1/2",
        "1/2",
    )
    assert ffn["width_law"]["proportional"]["regime"] == "critical"
    assert rep["shape"]["vocab"] == 100 and rep["shape"]["n_layers"] == 2


def test_transformer_named_scheme_and_overrides(capsys):
    rep = run_json(["transformer", "--d-model", "768", "--scheme", "nanogpt"], capsys)
    emb = next(r for r in rep["matrices"] if r["name"] == "embedding")
    assert emb["sigma"] == 0.02 and emb["gamma_eff_value"] == pytest.approx(0.589, abs=1e-3)
    rep = run_json(
        [
            "transformer",
            "--d-model",
            "256",
            "--gamma",
            "0.5",
            "--override",
            "mlp_out=1",
            "--mlp",
            "gelu",
        ],
        capsys,
    )
    point = rep["ffn"][0]["width_law"]["proportional"]
    assert (point["gamma"], point["gamma_prime"]) == ("3/2", "1/2")  # (g_down+g_up, g_down−g_up)


def test_eps_command(capsys):
    data = run_json(["eps", "--d-model", "256,512,2048", "--eps", "1e-5"], capsys)
    values = [t["gamma_eps"] for t in data["thresholds"]]
    assert values == pytest.approx([1.0381, 0.9228, 0.7550], abs=1e-4)
    data = run_json(["eps", "--d-model", "256", "--gamma", "1", "--match-d-model", "2048"], capsys)
    assert data["points"][0]["match_eps"] == pytest.approx(1e-5 * 8**2)
    code, out, _ = run(["eps", "--d-model", "512"], capsys)
    assert code == 0 and "0.9228" in out and "saturated" in out


def test_multiplicity_command(capsys):
    rows = {r["activation"]: r for r in run_json(["multiplicity"], capsys)}
    assert rows["x2tanh"]["p"] == 3 and rows["relu"]["covered"] is False


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["classify", "--gamma", "abc", "--gamma-prime", "0"], "'abc' is not a number"),
        (["classify", "--gamma", "nan", "--gamma-prime", "0"], "'nan' is not a number"),
        (["transformer", "--d-model", "0", "--gamma", "1"], "must be a positive integer"),
        (["transformer", "--d-model", "-8", "--gamma", "1"], "--d-model"),
        (["transformer", "--d-model", "64", "--gamma", "x"], "'x' is not a number"),
        (["transformer", "--d-model", "64"], "give --gamma G"),
        (["transformer", "--d-model", "64", "--gamma", "1", "--scheme", "nanogpt"], "not both"),
        (["transformer", "--d-model", "64", "--scheme", "glorot"], "not known"),
        (["transformer", "--d-model", "64", "--gamma", "1", "--override", "ffn=1"], "ffn"),
        (["transformer", "--d-model", "96", "--n-heads", "5", "--gamma", "1"], "does not divide"),
        (["eps", "--d-model", "256", "--eps", "0"], "must be a positive number"),
        (["eps", "--d-model", "256", "--eps=-1e-5"], "must be a positive number"),
        (["eps", "--d-model", "1", "--eps", "1e-5"], "d=1"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, fragment, capsys):
    try:
        code = main(["theory", *args])
    except SystemExit as exit_:  # argparse rejects the value itself
        code = exit_.code
    out = capsys.readouterr()
    assert code == 2
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0]


def test_exit_status_of_the_real_command():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "smallinit",
            "theory",
            "classify",
            "--gamma",
            "abc",
            "--gamma-prime",
            "0",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_help_does_not_import_sympy():
    code = (
        "import sys; from smallinit.cli import build_parser; build_parser(); "
        "print('sympy' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False", (
        "building the CLI parser imported sympy: keep sympy inside the command handlers so "
        "that `smallinit --help` stays fast"
    )
