"""Bad input to theory, toy, the run store and configs: one documented exception with one
line naming the value and what is allowed, raised before anything large is allocated."""

import json
import math
import time
from dataclasses import dataclass

import numpy as np
import pytest
import sympy as sp

from smallinit.core.atomic import atomic_write_json, finite_json
from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError, StoreError
from smallinit.core.store import RunStore
from smallinit.theory import phase
from smallinit.theory import transformer as T
from smallinit.theory.exact import GAMMA_LIMIT, to_exact
from smallinit.theory.init_rules import (
    InitScheme,
    effective_gamma_expr,
    matrix_std,
    parse_scheme,
)


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ----------------------------------------------------------------------------- theory
@pytest.mark.parametrize("text", ["gamma:1e308", "gamma:500", "gamma:-1e308"])
def test_sigma_outside_floats_names_scheme_d_in_and_sigma(text):
    with pytest.raises(ValueError) as err:
        matrix_std(parse_scheme(text), "mlp", 64, 256, n_layers=2)
    msg = one_line(err)
    assert "d_in=64" in msg and "σ=" in msg and text.split(":")[0] in msg


def test_sigma_underflow_depends_on_the_width():
    scheme = InitScheme("gamma", gamma=100.0)
    assert matrix_std(scheme, "mlp", 64, 64, n_layers=1) == pytest.approx(64.0**-100)
    with pytest.raises(ValueError, match="d_in=10000"):
        matrix_std(scheme, "mlp", 10_000, 64, n_layers=1)  # 1e-400: underflows to 0


@pytest.mark.parametrize("gamma", [1e308, -1e5, 100.5])
def test_phase_rates_are_bounded(gamma):
    with pytest.raises(ValueError, match=f"at most {GAMMA_LIMIT}"):
        phase.classify(gamma, 0)
    assert phase.classify(GAMMA_LIMIT, 0) == "condensed"


def test_classify_rejects_nan():
    with pytest.raises(ValueError, match="finite"):
        phase.classify(float("nan"), 0)


def test_huge_decimal_exponent_is_refused_fast():
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="exponent"):
        to_exact("1e100000000", "gamma")
    assert time.perf_counter() - t0 < 1


def test_transformer_report_with_long_decimal_gamma_is_fast_and_exact():
    # simplify() on d_in^(-7/10^8) with a non-prime-power d_in used to run for hours
    t0 = time.perf_counter()
    rep = T.report(T.TransformerShape(d_model=64), "gamma:0.00000007")
    assert time.perf_counter() - t0 < 10
    assert all(r["gamma_eff_value"] == pytest.approx(7e-8) for r in rep["matrices"])
    assert effective_gamma_expr(sp.Integer(192) ** -sp.Rational(7, 10**8), 192) == sp.Rational(
        7, 10**8
    )


@pytest.mark.parametrize("text", ["gamma:1e308", "gamma:-1e308"])
def test_transformer_report_refuses_huge_gamma(text):
    with pytest.raises(ValueError):
        T.report(T.TransformerShape(d_model=64), text)


@pytest.mark.parametrize("gamma", [1e308, 100, -100])
def test_rmsnorm_saturation_outside_floats_is_a_value_error(gamma):
    with pytest.raises(ValueError) as err:
        T.saturation_ratio(256, gamma, 1e-5)
        T.rmsnorm_output_rms(256, gamma, 1e-5)
    one_line(err)


def test_saturation_ratio_from_logs_matches_the_power():
    assert T.saturation_ratio(256, 1.0, 1e-5) == pytest.approx(256.0**-2 / 1e-5)
    assert T.matching_eps(256, 2048, 1.0, 1e-5) == pytest.approx(1e-5 * 8.0**2)


# ----------------------------------------------------------------------------- toy
def test_condense_refuses_scales_that_underflow():
    from smallinit.toy.condense import CondenseConfig

    with pytest.raises(ConfigError) as err:
        CondenseConfig(gammas=(100.0,), gamma_primes=(0.0,), width=20)
    msg = one_line(err)
    assert "gamma=100" in msg and "width 20" in msg


def test_scan_and_condense_memory_refused_before_allocation(monkeypatch):
    from smallinit.toy.condense import CondenseConfig
    from smallinit.toy.scan import ScanConfig

    monkeypatch.setenv("SMALLINIT_MEMORY_LIMIT", "1G")
    cfg = ScanConfig(gammas=(1.0,), gamma_primes=(0.0,), widths=(4, 8), seeds=10**9)
    with pytest.raises(ConfigError, match="seeds=1000000000.*limit of 1.0 GiB"):
        cfg.check_memory()
    with pytest.raises(ConfigError, match="width=1000000000"):
        CondenseConfig(width=10**9).check_memory()
    ScanConfig(gammas=(1.0,), gamma_primes=(0.0,), widths=(4, 8), seeds=2).check_memory()


def test_scan_memory_estimate_grows_with_the_batch():
    from smallinit.toy.limits import network_bytes, scan_bytes

    small = scan_bytes(1, 1, (4, 8), 10)
    assert scan_bytes(1, 10, (4, 8), 10) == pytest.approx(10 * small)
    assert scan_bytes(1, 1, (4, 8), 10, grouped=True) - small == pytest.approx(network_bytes(4))


@pytest.mark.parametrize(
    "changes",
    [
        {"alphas": (1e200,)},
        {"alphas": (1e-200,)},
        {"depth": 100000},
        {"alphas": (float("nan"),)},
        {"depth": 1},
    ],
)
def test_diagonal_refuses_scales_it_cannot_hold(changes):
    from smallinit.toy.diagonal import DiagonalConfig

    with pytest.raises(ConfigError) as err:
        DiagonalConfig(**changes)
    one_line(err)


# ----------------------------------------------------------------------------- store
@dataclass
class Cfg:
    a: int = 1


def test_store_on_a_file_or_below_one_is_a_store_error(tmp_path):
    regular = tmp_path / "file"
    regular.write_text("x")
    for root in (regular, regular / "below"):
        with pytest.raises(StoreError, match=str(root)):
            RunStore(root).get_or_run("k", Cfg(), lambda run: {})


def test_nan_is_written_as_null(tmp_path):
    store = RunStore(tmp_path)

    def body(run):
        run.log({"loss": float("nan"), "rd": np.float32("inf"), "ok": 1.5})
        run.write_json("points.json", [{"S_w": float("nan")}, {"S_w": -math.inf}])
        return {"slope": float("nan")}

    run = store.get_or_run("k", Cfg(), body)
    for name in ("metrics.jsonl", "points.json", "status.json"):
        text = (run.path / name).read_text()
        assert "NaN" not in text and "Infinity" not in text
    assert run.metrics() == [{"loss": None, "rd": None, "ok": 1.5}]
    assert run.read_json("points.json") == [{"S_w": None}, {"S_w": None}]
    assert run.summary == {"slope": None}
    atomic_write_json(tmp_path / "x.json", {"v": (1.0, float("nan"))})
    assert json.loads((tmp_path / "x.json").read_text()) == {"v": [1.0, None]}
    assert finite_json({"a": [np.float64("nan"), 2]}) == {"a": [None, 2]}


def test_config_error_in_a_new_run_leaves_no_directory(tmp_path):
    store = RunStore(tmp_path)

    def body(run):
        raise ConfigError("init=gamma:1e308 is not allowed")

    with pytest.raises(ConfigError):
        store.get_or_run("k", Cfg(), body)
    run = store.run("k", Cfg())
    assert not run.path.exists() and run.state == "absent"
    assert store.get_or_run("k", Cfg(), lambda r: {"x": 1}).summary == {"x": 1}


def test_other_errors_still_record_a_retryable_failure(tmp_path):
    store = RunStore(tmp_path)

    def body(run):
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        store.get_or_run("k", Cfg(), body)
    status = store.run("k", Cfg()).status()
    assert status["state"] == "failed" and not status["final"]


# ----------------------------------------------------------------------------- config
@dataclass
class Grid:
    widths: tuple[int, ...] = (4, 8)
    maybe: tuple[float, ...] | None = None
    either: int | tuple[int, ...] = 3


def test_a_scalar_fills_a_tuple_field():
    cfg = load_config(Grid, None, ["widths=64", "maybe=0.5", "either=7"])
    assert cfg.widths == (64,) and cfg.maybe == (0.5,) and cfg.either == 7
    assert load_config(Grid, None, ["either=[1, 2]"]).either == (1, 2)


def test_one_width_reaches_the_scan_check():
    from smallinit.toy.scan import ScanConfig

    with pytest.raises(ConfigError, match="at least two widths"):
        load_config(ScanConfig, None, ["widths=64"])


def test_unknown_key_names_the_allowed_ones():
    with pytest.raises(ConfigError) as err:
        load_config(Grid, None, ["zzz=1"])
    assert "zzz" in one_line(err) and "widths" in str(err.value)


def test_figs_output_below_a_file(tmp_path):
    from smallinit.study.figs import prepare_out_dir

    regular = tmp_path / "f"
    regular.write_text("x")
    for out in (regular, regular / "below"):
        with pytest.raises(ConfigError, match=str(out)):
            prepare_out_dir(out)
    assert prepare_out_dir(tmp_path / "new" / "dir").is_dir()


def test_json_output_has_no_nan_tokens(capsys):
    """The one JSON printer of every command (toy, theory, llm, compare, figs --plan)."""
    from smallinit.cli.util import print_json

    print_json({"score": np.float64("nan"), "a": np.array([1.0, np.inf]), "n": np.int64(3)})
    assert json.loads(capsys.readouterr().out) == {"score": None, "a": [1.0, None], "n": 3}


def test_value_error_after_work_keeps_the_run_as_a_retryable_failure(tmp_path):
    store = RunStore(tmp_path)

    def body(run):
        run.log({"step": 1})
        raise ValueError("late")

    with pytest.raises(ValueError):
        store.get_or_run("k", Cfg(), body)
    run = store.run("k", Cfg())
    assert run.status()["state"] == "failed" and run.metrics() == [{"step": 1}]


def test_theory_value_error_in_a_new_run_leaves_no_directory(tmp_path):
    store = RunStore(tmp_path)

    def body(run):
        matrix_std(parse_scheme("gamma:1e308"), "mlp", 16, 16, n_layers=1)

    with pytest.raises(ValueError, match="d_in=16"):
        store.get_or_run("k", Cfg(), body)
    assert not store.run("k", Cfg()).path.exists()


def test_theory_orders_and_alpha_powers_are_bounded():
    from smallinit.theory import condensation, escape, lazy_rich

    X, y, _ = lazy_rich.planted_sparse_problem()
    cases = [
        (lambda: lazy_rich.solve_q_alpha(X, y, 1e-200), "alpha=1e-200"),
        (lambda: lazy_rich.Q_alpha([1.0], 1e200), "alpha=1e\\+200"),
        (lambda: lazy_rich.h_D(0.5, 100000), "depth=100000"),
        (lambda: escape.escape_time(1e308), "L=1e\\+308"),
        (lambda: condensation.direction_polynomial([1, 2], [1, 1], 10**6), "p=1000000"),
    ]
    for call, named in cases:
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=named):
            call()
        assert time.perf_counter() - t0 < 2
    assert lazy_rich.Q_alpha([0.0], 1.0, depth=3) == 0.0  # in range: still computed


def test_a_finished_run_is_read_from_a_read_only_store(tmp_path, monkeypatch):
    import os

    store = RunStore(tmp_path / "store")
    store.get_or_run("k", Cfg(), lambda run: {"x": 1})
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as if read-only (root
    # ignores permission bits, so chmod cannot show it here)
    assert store.get_or_run("k", Cfg(), lambda run: {"x": 2}).summary == {"x": 1}
    with pytest.raises(StoreError, match="not writable"):
        store.get_or_run("k", Cfg(a=2), lambda run: {"x": 3})
