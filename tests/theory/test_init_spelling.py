"""One init scheme, one spelling, one run key: every config that takes an init string stores
``init_rules.canonical_scheme`` of it (LLM runs, anchor runs, the comparison's runs)."""

from __future__ import annotations

import pytest

from smallinit.compare.comparison import CompareConfig
from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError
from smallinit.core.runs import config_key
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.anchor import AnchorConfig
from smallinit.theory.init_rules import gamma_scheme, parse_scheme

SAME_GAMMA_1 = ("gamma:1", "gamma:1.0", "gamma:1.00", "gamma:1e0", " Gamma:1.0 ", "gamma:+1")


def key(cfg) -> str:
    return config_key("llm-train", cfg, "1")


def test_spellings_of_one_scheme_give_one_run_key():
    cfgs = [RunConfig(init=text) for text in SAME_GAMMA_1]
    assert {c.init for c in cfgs} == {"gamma:1"}
    assert len({key(c) for c in cfgs}) == 1
    # through a TOML-style override too
    assert key(load_config(RunConfig, None, ["init=gamma:1.00"])) == key(cfgs[0])
    # overrides in any order, numbers in any spelling
    a = RunConfig(init="gamma:0.5,mlp_out=0.80,qk=1.0,depth")
    b = RunConfig(init="gamma:5e-1, qk=1, mlp_out=0.8, depth")
    assert a.init == b.init == "gamma:0.5,qk=1,mlp_out=0.8,depth" and key(a) == key(b)
    assert RunConfig(init="fixed").init == RunConfig(init="fixed:0.020").init == "fixed:0.02"


def test_different_schemes_give_different_keys():
    texts = (
        "gamma:1",
        "gamma:0.5",
        "gamma:0.75",
        "gamma:1.0000001",
        "gamma:1,depth",
        "gamma:1,qk=0.5",
        "nanogpt",
        "fixed:0.02",
        "megatron:0.02",
        "mup:128",
        "mup:256",
    )
    assert len({key(RunConfig(init=t)) for t in texts}) == len(texts)


def test_the_experiments_spelling_of_gamma_is_canonical_and_exact():
    """The experiments write gamma:γ with init_rules.gamma_scheme: already canonical, and
    exact where :g would round (six digits)."""
    for g in (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0, 1.1, 1.3, 2.0, 0.1234567):
        text = gamma_scheme(g)
        assert RunConfig(init=text).init == text == AnchorConfig(init=text).init
        assert parse_scheme(text).describe() == text
    assert gamma_scheme(0.1234567) == "gamma:0.1234567" != f"gamma:{0.1234567:g}"
    assert RunConfig(init="gamma:1").init == "gamma:1"


def test_anchor_config_is_canonical_too():
    cfgs = [AnchorConfig(init=t) for t in SAME_GAMMA_1]
    assert {c.init for c in cfgs} == {"gamma:1"}
    assert len({config_key("llm-anchor", c, "1") for c in cfgs}) == 1
    with pytest.raises(ConfigError, match="init='gamma'"):
        AnchorConfig(init="gamma")


def test_compare_runs_use_the_canonical_spelling():
    cfg = CompareConfig(gammas=(0.3, 1.0, 1.25))
    assert [cfg.llm_run(g, 32).init for g in cfg.gammas] == ["gamma:0.3", "gamma:1", "gamma:1.25"]
    assert key(cfg.llm_run(1.0, 32)) == key(cfg.llm_run(1, 32))


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("gamma", "has no γ"),
        ("gamma:", "has no γ"),
        ("gamma:1,qk=1,qk=2", "given twice"),
    ],
)
def test_bad_init_is_a_one_line_config_error(text, fragment):
    with pytest.raises(ConfigError, match=fragment) as err:
        RunConfig(init=text)
    assert "\n" not in str(err.value)
