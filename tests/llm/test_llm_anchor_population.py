"""The anchor task's trainer as a population: every member equals its single anchor run
(the one Trainer on the anchor task) in float64 to ~1e-10 for each kind of member
difference, a planted difference is caught, members are stored as single anchor runs are,
and the job driver trains anchor runs of one shape together when populations are on (on
the CPU, by default, one at a time)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from test_llm_population import kill_population

from smallinit.core.config import load_config
from smallinit.core.jobs import run_specs
from smallinit.core.store import RunStore
from smallinit.llm.training import population as population_mod
from smallinit.llm.training.anchor import (
    ANCHOR,
    KIND,
    VERSION,
    AnchorConfig,
    AnchorSpec,
    AnchorTask,
    run_anchor,
    run_anchor_population,
)
from smallinit.llm.training.population import train_population
from smallinit.llm.training.train import Dist, Trainer

TOY = [
    "task.n_train=400",
    "task.n_test=40",
    "model.d_model=16",
    "model.n_layers=2",
    "model.n_heads=2",
    "train.steps=20",
    "train.batch_size=16",
    "train.warmup=3",
    "train.log_every=1",
    "train.eval_every=10",
    "train.checkpoint_every=0",
    "train.device=cpu",
    "train.threads=1",
]

#: one member per kind of difference from the first (the reference run)
KINDS = {
    "reference": [],
    "seed": ["seed=1"],
    "gamma_and_part": ["init=gamma:1.0,qk=0.25"],
    "lr_and_schedule": [
        "train.lr=3e-3",
        "train.warmup=6",
        "train.min_lr_ratio=0.3",
        "train.warmup_from=0.1",
    ],
    "weight_decay": ["train.weight_decay=0.5", "train.decay_all=true"],
    "eps": ["model.norm_eps=0.01", "train.adam_eps=1e-6"],
    "clip_and_betas": ["train.grad_clip=0.05", "train.beta1=0.8", "train.beta2=0.99"],
    "arm": ["init=gamma:1.0", "train.weight_decay=1.0"],  # the anchor scan's decay panel
}

F64 = 1e-10  # float64: the two paths differ by rounding only (sums ordered differently)
# the anchor loss is computed in float32 whatever the model's dtype (LastPositionLoss casts
# the logits), and the population sums its batch's cross-entropy in another order: the
# logged losses agree to float32's resolution (observed 2e-7 relative), not to 1e-10; the
# weights, which that loss's gradient moved for 20 steps, still agree to ~1e-16
LOSS = 1e-6
METRICS = ("acc_seen_train", "acc_seen_test", "share_inferential", "share_symmetric")


def toy(*extra: str) -> AnchorConfig:
    return load_config(AnchorConfig, None, [*TOY, *extra])


def single(cfg: AnchorConfig, root, dtype=torch.float64):
    """The anchor run of ``cfg`` through the single-run Trainer (``run_anchor``'s path)."""
    return RunStore(root).get_or_run(
        KIND,
        cfg,
        lambda run: Trainer(cfg, Dist(), AnchorTask, callbacks=[], dtype=dtype).fit(run),
        version=VERSION,
    )


def series_difference(a, b, keys) -> float:
    """The largest relative difference of the logged ``keys`` (same steps in both runs)."""
    worst = 0.0
    for key in keys:
        sa = [(r["step"], r[key]) for r in a.metrics() if key in r]
        sb = [(r["step"], r[key]) for r in b.metrics() if key in r]
        assert [s for s, _ in sa] == [s for s, _ in sb], key
        for (_, x), (_, y) in zip(sa, sb, strict=True):
            worst = max(worst, abs(x - y) / max(abs(y), 1e-12))
    return worst


def difference(a, b) -> float:
    """The largest relative difference between two anchor runs: every logged accuracy and
    share, every final weight (relative to the largest |w| of its tensor) and every stored
    array (predictions and mechanism measurements); the loss apart (:data:`LOSS`)."""
    worst = series_difference(a, b, METRICS)
    wa, wb = load_file(a.path / "model.safetensors"), load_file(b.path / "model.safetensors")
    assert wa.keys() == wb.keys()
    for name in wa:
        scale = float(wb[name].abs().max()) or 1.0
        worst = max(worst, float((wa[name] - wb[name]).abs().max()) / scale)
    xa, xb = a.arrays(), b.arrays()
    assert xa.keys() == xb.keys()
    for name in xa:
        x, y = torch.as_tensor(xa[name]).double(), torch.as_tensor(xb[name]).double()
        scale = float(y.abs().max()) if y.numel() else 1.0
        diff = float((x - y).abs().nan_to_num(0.0).max()) if y.numel() else 0.0
        worst = max(worst, diff / (scale or 1.0))
    return worst


@pytest.fixture(scope="module")
def float64_runs(tmp_path_factory):
    """One float64 anchor population of every kind of member, and each one's single run."""
    root = tmp_path_factory.mktemp("anchor-population-f64")
    cfgs = [toy(*extra) for extra in KINDS.values()]
    members = train_population(
        cfgs, runs_dir=root / "population", dtype=torch.float64, callbacks=[], kind=ANCHOR
    )
    singles = [single(cfg, root / "single") for cfg in cfgs]
    return dict(zip(KINDS, zip(members, singles, strict=True), strict=True))


@pytest.mark.parametrize("kind", list(KINDS))
def test_float64_anchor_member_equals_its_single_run(float64_runs, kind):
    member, alone = float64_runs[kind]
    assert member.key == alone.key and member.state == alone.state == "done"
    assert len([r for r in member.metrics() if "loss" in r]) == 20
    assert difference(member, alone) < F64
    assert series_difference(member, alone, ["loss"]) < LOSS


def test_anchor_members_really_differ(float64_runs):
    """Each kind of difference changes what is trained (else equality proves nothing)."""
    reference = float64_runs["reference"][1]
    for kind, (_, alone) in float64_runs.items():
        if kind != "reference":
            assert difference(alone, reference) > 1e-4, kind


def test_planted_difference_fails_the_anchor_comparison(tmp_path, monkeypatch):
    """Member 1 trained at member 0's learning rate inside the population: the comparison
    with its single run must see it, while member 0 still matches its own."""
    cfgs = [toy(), toy(*KINDS["lr_and_schedule"])]
    honest = population_mod.PopulationAdamW.set_rates

    def planted(self, rates):
        honest(self, [rates[0], rates[0]])

    monkeypatch.setattr(population_mod.PopulationAdamW, "set_rates", planted)
    members = train_population(
        cfgs, runs_dir=tmp_path / "population", dtype=torch.float64, callbacks=[], kind=ANCHOR
    )
    planted_alone = single(cfgs[1], tmp_path / "single")
    assert difference(members[1], planted_alone) > 1e6 * F64
    assert series_difference(members[1], planted_alone, ["loss"]) > 100 * LOSS
    assert difference(members[0], single(cfgs[0], tmp_path / "single")) < F64


def test_anchor_members_are_stored_as_single_anchor_runs(tmp_path):
    """Same key, same files, same config bytes and summary fields as ``run_anchor``'s run;
    the status adds only ``population``."""
    cfgs = [toy("train.steps=4"), toy("train.steps=4", "seed=1")]
    members = run_anchor_population(cfgs, RunStore(tmp_path / "population"))
    alone = run_anchor(cfgs[0], RunStore(tmp_path / "single"))
    member = members[0]
    assert member.key == alone.key and member.state == alone.state == "done"
    assert sorted(p.name for p in member.path.iterdir()) == sorted(
        p.name for p in alone.path.iterdir()
    )
    assert (member.path / "config.json").read_bytes() == (alone.path / "config.json").read_bytes()
    status, status_alone = member.status(), alone.status()
    assert set(status) - set(status_alone) == {"population"}
    assert status["population"]["size"] == 2
    assert status["summary"].keys() == status_alone["summary"].keys()
    assert member.arrays().keys() == alone.arrays().keys()


def test_job_driver_trains_anchor_runs_of_one_shape_together_unless_off(tmp_path):
    def specs(*extras):
        return [AnchorSpec(toy("train.steps=3", "train.eval_every=0", *extra)) for extra in extras]

    same = [[], ["seed=1"], ["init=gamma:1.0"], ["train.lr=3e-3", "train.weight_decay=0.1"]]
    together = run_specs(
        specs(*same, ["model.n_layers=1"]), RunStore(tmp_path / "on"), population="on", workers=1
    )
    places = [r.status().get("population") for _, r in together]
    assert [p["member"] for p in places[:4]] == [0, 1, 2, 3] and places[4] is None
    assert {p["id"] for p in places[:4]} == {places[0]["id"]}
    assert all(r.done for _, r in together)
    alone = run_specs(specs(*same), RunStore(tmp_path / "off"), population="off", workers=1)
    assert all(r.done and "population" not in r.status() for _, r in alone)
    assert [r.key for _, r in alone] == [r.key for _, r in together][:4]


def test_on_the_cpu_the_default_trains_anchor_runs_one_at_a_time(tmp_path, monkeypatch):
    """``--population auto`` (the default) forms no population on a CPU."""
    monkeypatch.delenv("SMALLINIT_POPULATION", raising=False)
    specs = [AnchorSpec(toy("train.steps=2", "train.eval_every=0", f"seed={s}")) for s in range(3)]
    assert all(s.population_key("auto") is None for s in specs)
    assert all(s.population_key("on") == specs[0].population_key("on") for s in specs)
    done = run_specs(specs, RunStore(tmp_path), workers=1)
    assert all(r.done and "population" not in r.status() for _, r in done)


def test_on_cuda_auto_groups_anchor_runs_and_the_plan_shows_them(monkeypatch):
    """Where the runs train on a CUDA device (stood in for here), ``auto`` groups the anchor
    runs of one shape, and ``figs --plan`` says which go together."""
    from smallinit.study.experiments import plan

    monkeypatch.setattr(population_mod, "resolve_device", lambda cfg, dist: torch.device("cuda"))
    specs = [AnchorSpec(toy(f"seed={s}")) for s in range(2)]
    assert specs[0].population_key("auto") == specs[1].population_key("auto") is not None
    rows = [r for r in plan("quick", [6], population="auto") if r["kind"] == KIND]
    groups: dict[str, set] = {}
    for r in rows:
        if r["population"]:
            groups.setdefault(r["population"], set()).add(r["key"])
    assert groups and all(len(keys) >= 2 for keys in groups.values())
    assert all(name.startswith("AnchorSpec:") for name in groups)


def test_killed_anchor_population_resumes_to_the_same_bytes(tmp_path):
    extra = ["train.steps=12", "train.checkpoint_every=4", "train.log_every=2"]
    other = ["seed=1", "train.lr=3e-3"]
    cfgs = [toy(*extra), toy(*extra, *other)]
    straight = train_population(cfgs, runs_dir=tmp_path / "straight", callbacks=[], kind=ANCHOR)
    half = kill_population(
        tmp_path / "killed", 8, ANCHOR, [*TOY, *extra], [*TOY, *extra, *other], cfgs
    )
    # member 0 holds step 8, member 1 only step 4: the population goes back to 4
    assert (
        sorted(p.name for p in (half[1].path / "checkpoints").glob("*.pt"))[-1]
        == "step-00000004.pt"
    )
    resumed = train_population(cfgs, runs_dir=tmp_path / "killed", callbacks=[], kind=ANCHOR)
    for a, b in zip(resumed, straight, strict=True):
        assert a.state == "done" and a.key == b.key
        for name in ("model.safetensors", "arrays.npz"):
            assert (a.path / name).read_bytes() == (b.path / name).read_bytes(), name
        assert a.metrics() == b.metrics()  # no timing field: the anchor logs no tokens/s


def test_float64_members_of_the_authors_recipe_equal_their_single_runs(tmp_path):
    """fair's anchor runs use recipe zhang2024 (post-norm LayerNorm with biases, one head
    of width d/2, a biased head, decay on every parameter, clipping at 1): its members
    equal their single runs as well."""
    cfgs = [
        toy("recipe=zhang2024"),
        toy("recipe=zhang2024", "seed=1", "init=gamma:0.8", "train.lr=3e-3", "model.norm_eps=1e-3"),
    ]
    assert cfgs[0].model.norm == "layernorm" and cfgs[0].model.norm_position == "post"
    members = train_population(
        cfgs, runs_dir=tmp_path / "population", dtype=torch.float64, callbacks=[], kind=ANCHOR
    )
    singles = [single(cfg, tmp_path / "single") for cfg in cfgs]
    for member, alone in zip(members, singles, strict=True):
        assert member.key == alone.key
        assert difference(member, alone) < F64
        assert series_difference(member, alone, ["loss"]) < LOSS
    assert difference(singles[1], singles[0]) > 1e-4
