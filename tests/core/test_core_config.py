"""Configs: dataclasses from TOML with key=value overrides."""

from dataclasses import dataclass, field
from typing import Literal

import pytest

from smallinit.core.config import (
    INT_BOUND,
    MAX_STEPS,
    canonical_json,
    check_fields,
    config_from_dict,
    config_to_dict,
    dotted_items,
    dump_toml,
    load_config,
    override,
    parse_overrides,
)
from smallinit.core.errors import ConfigError


@dataclass
class Model:
    d_model: int = 64
    norm: Literal["rms", "layer"] = "rms"
    eps: float = 1e-5


@dataclass
class Experiment:
    name: str = "demo"
    gammas: tuple[float, ...] = (0.5, 1.0)
    widths: tuple[int, ...] = (64, 128)
    seed: int = 0
    gated: bool = False
    note: str | None = None
    model: Model = field(default_factory=Model)


def test_toml_round_trip(tmp_path):
    cfg = Experiment(
        name="x",
        gammas=(0.3, 0.75),
        seed=7,
        gated=True,
        model=Model(d_model=256, norm="layer", eps=1e-12),
    )
    path = tmp_path / "cfg.toml"
    path.write_text(dump_toml(cfg))
    assert load_config(Experiment, path) == cfg


def test_overrides_take_priority_and_are_typed(tmp_path):
    path = tmp_path / "cfg.toml"
    path.write_text("seed = 3\n[model]\nd_model = 32\n")
    cfg = load_config(
        Experiment, path, ["model.eps=1e-12", "widths=64,128,256", "gated=true", "note=hello world"]
    )
    assert cfg.seed == 3 and cfg.model.d_model == 32
    assert cfg.model.eps == 1e-12
    assert cfg.widths == (64, 128, 256)
    assert cfg.gated is True and cfg.note == "hello world"


@dataclass
class Parent:
    model: Model = field(default_factory=lambda: Model(d_model=512, norm="layer"))


def test_partial_override_keeps_the_parents_nested_defaults():
    cfg = load_config(Parent, None, ["model.eps=1e-6"])
    assert cfg.model == Model(d_model=512, norm="layer", eps=1e-6)


def test_parse_overrides_gives_dotted_paths():
    assert parse_overrides(["a=1", "b.c=x", "b.d=[1, 2]"]) == {"a": 1, "b.c": "x", "b.d": [1, 2]}
    for bad in ("novalue", "=1", "a..b=1", ".a=1"):
        with pytest.raises(ConfigError, match="key=value"):
            parse_overrides([bad])


def test_override_is_one_function_for_dotted_paths_tables_and_plain_tables():
    base = Parent()
    dotted = override(base, {"model.eps": 1e-6, "model.norm": "rms"})
    table = override(base, {"model": {"eps": 1e-6, "norm": "rms"}})
    assert dotted == table == Parent(model=Model(d_model=512, norm="rms", eps=1e-6))
    assert base == Parent()  # the original is left alone
    plain = {"scan": {"gammas": [0.5]}, "seed": 0}
    assert override(plain, {"scan.gammas": [1.0], "scan.seeds": [0, 1]}) == {
        "scan": {"gammas": [1.0], "seeds": [0, 1]},
        "seed": 0,
    }
    assert plain == {"scan": {"gammas": [0.5]}, "seed": 0}
    with pytest.raises(ConfigError, match="override seed.x=1 is not allowed: seed is a value"):
        override(plain, {"seed.x": 1})
    with pytest.raises(ConfigError, match="unknown key config.model.epsilon"):
        override(base, {"model.epsilon": 1.0})
    # applied in order: a later path wins over an earlier table
    assert override(base, {"model": {"eps": 1.0}, "model.eps": 2.0}).model.eps == 2.0


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["sed=1"], "unknown key config.sed; allowed keys: gammas, gated, model"),
        (["seed=1.5"], "config.seed=1.5 is not allowed; it must be an integer"),
        (["model.norm=batch"], "choose one of 'rms', 'layer'"),
        (["widths=64,abc"], r"config.widths\[1\]='abc'"),
        (["gated=maybe"], "true or false"),
    ],
)
def test_bad_values_name_key_and_allowed(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment) as err:
        load_config(Experiment, None, overrides)
    assert "\n" not in str(err.value)


def test_bad_toml_file_is_named(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("seed = = 3\n")
    with pytest.raises(ConfigError, match="broken.toml is not valid TOML"):
        load_config(Experiment, path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Experiment, tmp_path / "missing.toml")


def test_canonical_json_is_order_independent_and_rejects_nan():
    a = config_to_dict(Experiment())
    b = dict(reversed(list(a.items())))
    assert canonical_json(a) == canonical_json(b)
    with pytest.raises(ConfigError, match="finite"):
        canonical_json({"x": float("nan")})
    assert config_from_dict(Experiment, a) == Experiment()


def test_dotted_items_are_the_paths_that_override_applies():
    """The leaves of nested tables as dotted paths, in table order; applying them with
    override to an empty table rebuilds the tables (empty ones aside)."""
    tables = {
        "train": {"lr": 1e-3, "steps": 3},
        "seed": 1,
        "model": {"mlp": {"kind": "relu"}},
        "data": {},
    }
    assert list(dotted_items(tables)) == [
        ("train.lr", 1e-3),
        ("train.steps", 3),
        ("seed", 1),
        ("model.mlp.kind", "relu"),
    ]
    assert override({}, dict(dotted_items(tables))) == {k: v for k, v in tables.items() if v != {}}


@dataclass
class Bounded:
    steps: int = 10
    size: int | None = None
    tol: float = 0.5
    widths: tuple[int, ...] = (64, 128)

    def __post_init__(self):
        check_fields(self, "run", {"steps": (1, MAX_STEPS), "tol": (0, 1)})


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (
            ["steps=1e20"],
            "run.steps=100000000000000000000 is not allowed; it must be an integer "
            f"in [1, {MAX_STEPS}]",
        ),
        (["steps=0"], "run.steps=0 is not allowed"),
        (
            ["size=100000000000"],
            f"run.size=100000000000 is not allowed; it must be an integer in "
            f"[-{INT_BOUND}, {INT_BOUND}]",
        ),
        (["tol=inf"], "run.tol=inf is not allowed; it must be a finite number in [0, 1]"),
        (["tol=-1"], "run.tol=-1.0 is not allowed"),
        (
            ["widths=64,1e20"],
            "run.widths[1]=100000000000000000000 is not allowed; it must be an "
            f"integer in [-{INT_BOUND}, {INT_BOUND}]",
        ),
    ],
)
def test_every_number_has_a_bound_named_in_its_refusal(overrides, fragment):
    with pytest.raises(ConfigError) as caught:
        load_config(Bounded, None, overrides)
    assert fragment in str(caught.value)


def test_bounds_keep_the_values_inside_them():
    cfg = load_config(Bounded, None, [f"steps={MAX_STEPS}", f"size={INT_BOUND}", "tol=0"])
    assert (cfg.steps, cfg.size, cfg.tol) == (MAX_STEPS, INT_BOUND, 0.0)


def test_a_bound_for_no_field_is_a_programming_error():
    @dataclass
    class Typo:
        steps: int = 1

        def __post_init__(self):
            check_fields(self, bounds={"stpes": (1, 2)})

    with pytest.raises(TypeError, match="stpes"):
        Typo()
