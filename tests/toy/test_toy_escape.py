"""Escape time from small init (docs/science.md §4): plateau length of L-homogeneous diagonal nets
against theory.escape's scaling ~ln(1/ε) (L = 2) and ~ε^{2−L} (L = 3)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from smallinit.core.store import RunStore  # noqa: E402
from smallinit.toy.escape import EscapeConfig, format_table, run  # noqa: E402

CFG = EscapeConfig()


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return run(CFG, RunStore(tmp_path_factory.mktemp("runs")))


def test_two_homogeneous_plateau_grows_like_log_inverse_eps(result):
    s = result["summary"]["L2"]
    assert s["reached"]
    # dT/d ln(1/ε) → 1/c (theory: T = ln(ρ/ε)/c)
    assert s["slope_T_vs_ln_inv_eps"] == pytest.approx(s["theory_slope_T_vs_ln_inv_eps"], rel=0.05)
    # constant increments per decade (a log law), not growing like a power of 1/ε
    inc = np.diff(result["T_2"])
    assert np.all(inc > 0)
    assert inc[-1] / inc[-2] == pytest.approx(1.0, abs=0.05)
    assert result["summary"]["L2"]["loglog_slope"] > -0.2  # far from any power law


def test_three_homogeneous_plateau_grows_like_inverse_eps(result):
    s = result["summary"]["L3"]
    assert s["reached"]
    assert s["loglog_slope"] == pytest.approx(s["theory_loglog_slope"], abs=0.05)
    # T(ε) − T(ε_max) against theory's (ρ-free) difference, c from the linearization
    assert s["max_rel_err_of_differences"] < 0.03


def test_table_lists_every_eps(result):
    text = format_table(result, CFG)
    assert text.count("\n 2 ") == len(CFG.eps_2) and text.count("\n 3 ") == len(CFG.eps_3)


def test_cli_escape_json_and_diagonal_bad_alpha(tmp_path, capsys):
    import json

    from smallinit.cli import main

    assert main(["-q", "toy", "escape", "--json", "--runs-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["L3"]["loglog_slope"] == pytest.approx(-1.0, abs=0.05)
    assert {r["L"] for r in out["rows"]} == {2, 3}
    assert main(["-q", "toy", "diagonal", "alphas=-1", "--runs-dir", str(tmp_path)]) == 2
