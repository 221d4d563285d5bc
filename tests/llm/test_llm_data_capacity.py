"""Every profile's synthetic corpora can be drawn: the held-out capacity of each task-level
against the held-out items asked for, checked before anything is drawn."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from smallinit.core.config import config_to_dict, override
from smallinit.core.errors import ConfigError
from smallinit.llm.data import synthetic
from smallinit.llm.run_config import DataConfig
from smallinit.study import experiments


def synthetic_configs(profile: str) -> list[tuple[DataConfig, int]]:
    """Every distinct synthetic (data config, vocab size) of the profile's jobs."""
    found: dict[str, tuple[DataConfig, int]] = {}

    def walk(obj, vocab):
        if isinstance(obj, DataConfig):
            if obj.corpus == "synthetic":
                found[repr((obj, vocab))] = (obj, vocab)
            return
        if dataclasses.is_dataclass(obj):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            vocab = getattr(fields.get("model"), "vocab_size", vocab)
            for value in fields.values():
                walk(value, vocab)

    for exp in experiments.EXPERIMENTS.values():
        for job in exp.specs(profile) + exp.inner(profile):
            walk(job.config, None)
    return list(found.values())


FULL = synthetic_configs("full")


def test_the_full_profile_draws_synthetic_corpora():
    assert FULL and max(cfg.synthetic_items for cfg, _ in FULL) == 2_000_000


@pytest.mark.parametrize("profile", ["quick", "medium", "full"])
def test_every_profiles_held_out_items_fit_their_capacity(profile):
    for cfg, _ in synthetic_configs(profile):
        synthetic.check_held_out_capacity(
            cfg.synthetic_items, cfg.synthetic_val_items, cfg.synthetic_mix, cfg.synthetic_held_out
        )


def test_the_full_profile_holds_logic_level_1_out_by_partition_and_the_others_as_drawn():
    """The full profile's corpora are the ones large enough to need the partition; quick
    and medium keep the exclusion their stored corpora were drawn with."""
    assert {cfg.synthetic_held_out for cfg, _ in FULL} == {"partition"}
    for profile in ("quick", "medium"):
        assert {cfg.synthetic_held_out for cfg, _ in synthetic_configs(profile)} == {"exclusion"}
    hint = typing.get_type_hints(DataConfig)["synthetic_held_out"]
    assert typing.get_args(hint) == synthetic.HELD_OUT


def test_a_split_that_cannot_be_drawn_is_refused_before_drawing():
    """The full profile's first sweep corpus held out by exclusion (as it was: every
    held-out logic level-1 redraw already in training, found after minutes of drawing) is
    refused at once, naming the way out; and a far larger one."""
    cfg = max((c for c, _ in FULL), key=lambda c: c.synthetic_items)
    with pytest.raises(
        ConfigError,
        match=r"logic level 1 .* 650 prompts.*"
        r"synthetic_held_out='partition'",
    ):
        synthetic.splits(
            cfg.synthetic_items,
            cfg.synthetic_val_items,
            seed=cfg.seed,
            n_facts=cfg.synthetic_facts,
            mix=cfg.synthetic_mix,
        )
    with pytest.raises(ConfigError, match=r"synthetic_items=1,000,000,000"):
        synthetic.check_held_out_capacity(10**9, 4000, (0, 0, 1, 0), "partition")


def test_the_capacity_rule_counts_what_the_draw_meets():
    """Partitioned levels never redraw; a level held out by exclusion redraws the share of
    its prompts training drew, as the draw itself does."""
    rows = synthetic.held_out_capacity(20000, 3000, (0.25, 0.2, 0.2, 0.35))
    by = {(r["task"], r["level"]): r for r in rows}
    assert by["arith", 1]["expected_draws"] == by["arith", 1]["held_out_items"] == 250
    assert by["arith", 1]["fewest_per_answer"] >= 1 and by["anchor", 3]["fewest_per_answer"] >= 1
    train, val = synthetic.splits(20000, 3000, seed=0, n_facts=200, mix=(0.25, 0.2, 0.2, 0.35))
    seen = {it.prompt for it in train if (it.category, it.level) == ("logic", 1)}
    unseen = 1 - len(seen) / 650
    logic1 = by["logic", 1]
    assert logic1["expected_draws"] == pytest.approx(logic1["held_out_items"] / unseen, rel=0.5)
    part = {
        (r["task"], r["level"]): r
        for r in synthetic.held_out_capacity(20000, 3000, (0.25, 0.2, 0.2, 0.35), "partition")
    }
    assert part["logic", 1]["held_out_prompts"] == 72
    assert part["logic", 1]["expected_draws"] == part["logic", 1]["held_out_items"]
    assert all(part[k] == by[k] for k in by if k != ("logic", 1))


def test_the_default_scheme_draws_todays_items_exactly():
    """The scheme is key-neutral at its default because the default draws what every stored
    corpus holds: the same items as a draw that never names a scheme."""
    args = {"seed": 3, "n_facts": 40, "mix": (0.25, 0.2, 0.3, 0.25)}
    assert synthetic.splits(3000, 400, **args) == synthetic.splits(
        3000, 400, **args, scheme="exclusion"
    )
    cfg = DataConfig()
    assert "synthetic_held_out" not in config_to_dict(cfg)
    assert (
        config_to_dict(override(cfg, {"synthetic_held_out": "partition"}))["synthetic_held_out"]
        == "partition"
    )
    with pytest.raises(ConfigError, match="synthetic_held_out='random'"):
        override(cfg, {"synthetic_held_out": "random"})


def test_the_partition_keeps_every_held_out_logic_level_1_prompt_out_of_training():
    """A training split large enough to draw nearly all 578 training-part prompts of logic
    level 1 (where exclusion fails), built by the same generator rules: no training item in
    the held-out part, every held-out item in it, every answer among them."""
    mix = (0.0, 0.0, 1.0, 0.0)
    train, val = synthetic.splits(60000, 900, seed=0, n_facts=10, mix=mix, scheme="partition")
    pairs = {
        (it.prompt.split()[1], it.answer.strip())
        for it in train
        if (it.category, it.level) == ("logic", 1)
    }
    assert len(pairs) >= 0.98 * (650 - 72)
    assert not any(synthetic.logic_held_out(*p) for p in pairs)
    held = [it for it in val if (it.category, it.level) == ("logic", 1)]
    assert held and all(
        synthetic.logic_held_out(it.prompt.split()[1], it.answer.strip()) for it in held
    )
    assert {it.answer.strip() for it in held} == set(synthetic.answer_space("logic", 1))
    seen = {it.text for it in train}
    assert not any(it.text in seen for it in val)
    with pytest.raises(ConfigError):  # the same split held out by exclusion cannot be drawn
        synthetic.splits(60000, 900, seed=0, n_facts=10, mix=mix)
