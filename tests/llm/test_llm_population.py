"""Populations: every member of a population equals its single run (the one Trainer), in
float64 to ~1e-10 and in float32 to a stated tolerance, for each kind of member difference;
a planted difference is caught; a diverging member fails alone; a killed population resumes
to the same bytes; the stored members are runs like any other."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from smallinit.cli import main
from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError
from smallinit.core.store import RunStore
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training import population as population_mod
from smallinit.llm.training.checkpoint import safe_load
from smallinit.llm.training.population import check_population, train_population
from smallinit.llm.training.train import KIND, VERSION, Dist, Trainer, train

TOY = [
    "model.vocab_size=320",
    "model.context=16",
    "model.d_model=16",
    "model.n_layers=2",
    "model.n_heads=2",
    "data.synthetic_items=400",
    "data.synthetic_val_items=40",
    "data.synthetic_facts=10",
    "train.batch_size=4",
    "train.steps=20",
    "train.warmup=3",
    "train.log_every=1",
    "train.eval_every=10",
    "train.eval_batches=1",
    "train.checkpoint_every=0",
    "train.device=cpu",
    "train.threads=1",
    "eval.answer_items=3",
    "eval.token_windows=2",
]

#: one member per kind of difference from the first (the reference run)
KINDS = {
    "reference": [],
    "seed": ["seed=1"],
    "gamma_and_part": ["init=gamma:1.0,qk=0.25"],
    "lr_and_schedule": [
        "train.lr=1e-3",
        "train.warmup=6",
        "train.min_lr_ratio=0.3",
        "train.warmup_from=0.1",
    ],
    "weight_decay": ["train.weight_decay=0.5", "train.decay_all=true"],
    "eps": ["model.norm_eps=0.01", "train.adam_eps=1e-6"],
    "clip_and_betas": ["train.grad_clip=0.05", "train.beta1=0.8", "train.beta2=0.99"],
    "arm": ["init=gamma:1.0", "train.weight_decay=1.0"],  # the study's weight-decay arm
}

F64 = 1e-10  # float64: the two paths differ by rounding only (observed ~1e-15)
# float32: the population's matrix products are batched GEMMs and its layers PyTorch's
# plain composites, the single run's are per-run GEMMs and the CPU fast path; the sums are
# ordered differently, so each step differs by a few ulps (~1e-7 relative) and 20 AdamW
# steps (whose update m/√v amplifies relative changes of tiny gradients) carry that to
# ~1e-5 in the weights; 1e-4 leaves a margin and still catches any real difference (the
# planted lr moves the numbers by ~7e-2).
F32 = 1e-4


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("population-cache"))


def toy(cache: str, *extra: str) -> RunConfig:
    return load_config(RunConfig, None, [*TOY, f"data.cache_dir={cache}", *extra])


def single(cfg: RunConfig, root, dtype=None):
    """The run of ``cfg`` through the single-run Trainer (the ``llm train`` path)."""
    return RunStore(root).get_or_run(
        KIND,
        cfg,
        lambda run: Trainer(cfg, Dist(), callbacks=[], dtype=dtype).fit(run),
        version=VERSION,
    )


def difference(a, b) -> float:
    """The largest relative difference between two runs: every logged training loss,
    every held-out loss and every final weight (relative to the largest |w| of its
    tensor)."""

    def series(run, key):
        return [(r["step"], r[key]) for r in run.metrics() if key in r]

    worst = 0.0
    for key in ("loss", "val_loss"):
        sa, sb = series(a, key), series(b, key)
        assert [s for s, _ in sa] == [s for s, _ in sb], key
        for (_, x), (_, y) in zip(sa, sb, strict=True):
            worst = max(worst, abs(x - y) / max(abs(y), 1e-12))
    wa, wb = load_file(a.path / "model.safetensors"), load_file(b.path / "model.safetensors")
    assert wa.keys() == wb.keys()
    for name in wa:
        scale = float(wb[name].abs().max()) or 1.0
        worst = max(worst, float((wa[name] - wb[name]).abs().max()) / scale)
    return worst


@pytest.fixture(scope="module")
def float64_runs(cache, tmp_path_factory):
    """One float64 population of every kind of member, and each member's single run."""
    root = tmp_path_factory.mktemp("population-f64")
    cfgs = [toy(cache, *extra) for extra in KINDS.values()]
    members = train_population(
        cfgs, runs_dir=root / "population", dtype=torch.float64, callbacks=[]
    )
    singles = [single(cfg, root / "single", torch.float64) for cfg in cfgs]
    return dict(zip(KINDS, zip(members, singles, strict=True), strict=True))


@pytest.mark.parametrize("kind", list(KINDS))
def test_float64_member_equals_its_single_run(float64_runs, kind):
    member, alone = float64_runs[kind]
    assert member.key == alone.key and member.state == alone.state == "done"
    assert difference(member, alone) < F64


def test_members_really_differ(float64_runs):
    """Each kind of difference changes what is trained (else equality proves nothing)."""
    reference = float64_runs["reference"][1]
    for kind, (_, alone) in float64_runs.items():
        if kind != "reference":
            assert difference(alone, reference) > 1e-4, kind


def test_planted_difference_fails_the_comparison(cache, tmp_path, monkeypatch):
    """Member 1 trained at member 0's learning rate inside the population: the comparison
    with its single run must see it."""
    cfgs = [toy(cache), toy(cache, *KINDS["lr_and_schedule"])]
    honest = population_mod.PopulationAdamW.set_rates

    def planted(self, rates):
        honest(self, [rates[0], rates[0]])

    monkeypatch.setattr(population_mod.PopulationAdamW, "set_rates", planted)
    members = train_population(
        cfgs, runs_dir=tmp_path / "population", dtype=torch.float64, callbacks=[]
    )
    alone = single(cfgs[1], tmp_path / "single", torch.float64)
    assert difference(members[1], alone) > 100 * F32  # measured: 0.07
    assert difference(members[0], single(cfgs[0], tmp_path / "single", torch.float64)) < F64


def test_float32_members_equal_their_single_runs_within_the_stated_tolerance(cache, tmp_path):
    cfgs = [toy(cache), toy(cache, "seed=1", "init=gamma:1.0")]
    members = train_population(cfgs, runs_dir=tmp_path / "population", callbacks=[])
    for member, cfg in zip(members, cfgs, strict=True):
        assert difference(member, single(cfg, tmp_path / "single")) < F32


def test_diverging_member_fails_alone(cache, tmp_path):
    cfgs = [toy(cache), toy(cache, "init=fixed:1e30"), toy(cache, "seed=3")]
    members = train_population(
        cfgs, runs_dir=tmp_path / "population", dtype=torch.float64, callbacks=[]
    )
    bad, bad_alone = members[1].status(), single(cfgs[1], tmp_path / "single").status()
    assert bad["state"] == "failed" and bad["final"]
    assert bad["reason"] == bad_alone["reason"]
    assert "non-finite training loss" in bad["reason"]
    for i in (0, 2):
        assert members[i].state == "done"
        assert difference(members[i], single(cfgs[i], tmp_path / "single", torch.float64)) < F64


KILLER = textwrap.dedent("""
    import os, sys
    from smallinit.core.config import load_config
    from smallinit.llm.training import population as P
    from smallinit.llm.training.anchor import ANCHOR
    original = P.save_checkpoint
    def save_then_die(run, step, model, optimizer):
        path = original(run, step, model, optimizer)
        if step == int(sys.argv[2]):
            os._exit(9)  # a hard kill after the first member's checkpoint of that step
        return path
    P.save_checkpoint = save_then_die
    kind = {k.kind: k for k in (P.PRETRAINING, ANCHOR)}[sys.argv[3]]
    args = sys.argv[4:]
    cut = args.index("--")
    cfgs = [load_config(kind.config, None, args[:cut]),
            load_config(kind.config, None, args[cut + 1:])]
    P.train_population(cfgs, runs_dir=sys.argv[1], callbacks=[], kind=kind)
""")


def kill_population(root, step: int, kind, first: list[str], second: list[str], cfgs):
    """Train the population of two members (``first``, ``second``: their overrides) of
    ``kind`` into ``root`` in a child process killed hard after the first member's
    checkpoint of ``step``; returns the members' half-written runs (both stale)."""
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(root), str(step), kind.kind, *first, "--", *second],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == 9, killed.stderr
    half = [RunStore(root).run(kind.kind, c, version=kind.version) for c in cfgs]
    assert [h.state for h in half] == ["stale", "stale"]
    return half


def untimed(record: dict) -> dict:
    """A metrics record without its wall-clock field."""
    return {k: v for k, v in record.items() if k != "tok_per_s"}


def test_killed_population_resumes_to_the_same_bytes(cache, tmp_path):
    extra = ["train.steps=30", "train.checkpoint_every=10", "train.log_every=5"]
    args = [*TOY, f"data.cache_dir={cache}", *extra]
    cfgs = [toy(cache, *extra), toy(cache, *extra, "seed=1", "train.lr=1e-3")]
    straight = train_population(cfgs, runs_dir=tmp_path / "straight", callbacks=[])
    half = kill_population(
        tmp_path / "killed",
        20,
        population_mod.PRETRAINING,
        args,
        [*args, "seed=1", "train.lr=1e-3"],
        cfgs,
    )
    # member 0 holds step 20, member 1 only step 10: the population goes back to 10
    assert (
        sorted(p.name for p in (half[0].path / "checkpoints").glob("*.pt"))[-1]
        == "step-00000020.pt"
    )
    assert (
        sorted(p.name for p in (half[1].path / "checkpoints").glob("*.pt"))[-1]
        == "step-00000010.pt"
    )
    # a member's checkpoints are its single run's: the single trainer resumes one as well
    shutil.copytree(tmp_path / "killed", tmp_path / "alone")
    alone = Trainer(cfgs[1], Dist(), callbacks=[])
    assert alone._resume(RunStore(tmp_path / "alone").writer(KIND, cfgs[1], version=VERSION)) == 10
    run = train(cfgs[1], runs_dir=tmp_path / "alone", callbacks=[])
    assert difference(run, straight[1]) < F32
    early = [untimed(r) for r in straight[1].metrics() if r["step"] <= 10]
    assert [untimed(r) for r in run.metrics()[: len(early)]] == early  # as the population
    # wrote them
    resumed = train_population(cfgs, runs_dir=tmp_path / "killed", callbacks=[])
    for a, b in zip(resumed, straight, strict=True):
        assert a.state == "done"
        for name in ("model.safetensors", "arrays.npz", "eval.json"):
            assert (a.path / name).read_bytes() == (b.path / name).read_bytes(), name
        # model.pt's zip records the name it was written under (a unique temporary one)
        pa, pb = safe_load(a.path / "model.pt"), safe_load(b.path / "model.pt")
        assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
        assert [untimed(r) for r in a.metrics()] == [untimed(r) for r in b.metrics()]


def test_stored_members_are_runs_like_any_other(cache, tmp_path):
    cfgs = [
        toy(cache, "train.checkpoint_every=10"),
        toy(cache, "train.checkpoint_every=10", "seed=1"),
    ]
    members = train_population(cfgs, runs_dir=tmp_path, callbacks=[])
    alone = single(cfgs[0], tmp_path / "single")
    member = members[0]
    assert member.path.parent.parent == tmp_path and member.key == alone.key
    assert sorted(p.name for p in member.path.iterdir()) == sorted(
        p.name for p in alone.path.iterdir()
    )
    assert (member.path / "config.json").read_bytes() == (alone.path / "config.json").read_bytes()
    status, status_alone = member.status(), alone.status()
    assert set(status) - set(status_alone) == {"population"}
    assert status["population"]["size"] == 2 and status["population"]["member"] == 0
    assert status["summary"].keys() == status_alone["summary"].keys()
    assert [sorted(r) for r in member.metrics()] == [sorted(r) for r in alone.metrics()]
    assert member.arrays().keys() == alone.arrays().keys()
    assert main(["runs", "verify", "--runs-dir", str(tmp_path)]) == 0
    # asked again, the finished members are reused, not trained
    again = train_population(cfgs, runs_dir=tmp_path, callbacks=[])
    assert [r.status()["finished"] for r in again] == [r.status()["finished"] for r in members]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["model.d_model=32"], "model.d_model=32"),
        (["train.steps=21"], "train.steps=21"),
        (["data.synthetic_items=500"], "data.synthetic_items=500"),
    ],
)
def test_members_of_different_shapes_are_refused(cache, extra, message):
    with pytest.raises(ConfigError, match=message):
        check_population([toy(cache), toy(cache, *extra)])
    with pytest.raises(ConfigError, match="same config"):
        check_population([toy(cache), toy(cache)])


def test_population_status_names_its_members(float64_runs):
    ids = {m.status()["population"]["id"] for m, _ in float64_runs.values()}
    assert len(ids) == 1
    places = sorted(m.status()["population"]["member"] for m, _ in float64_runs.values())
    assert places == list(range(len(KINDS)))
    assert (
        json.loads((next(iter(float64_runs.values()))[1].path / "status.json").read_text()).get(
            "population"
        )
        is None
    )


def test_population_bench_measures_both_paths_on_the_same_tokens(cache, capsys):
    from smallinit.tools import population_bench

    assert population_bench.main(["--tiny", "--warmup", "1", "--cache", cache]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["members"] == 4 and result["steps"] == 3 and result["device"] == "cpu"
    tokens = result["members"] * result["steps"] * result["tokens_per_step"]
    assert result["population_tok_per_s"] * result["population_s"] == pytest.approx(tokens)
    assert result["singles_tok_per_s"] * result["singles_s"] == pytest.approx(tokens)
    assert result["ratio"] == pytest.approx(result["singles_s"] / result["population_s"])
    assert population_bench.main(["--members", "0"]) == 2
    assert "--members=0" in capsys.readouterr().err


def test_job_driver_trains_runs_of_one_shape_together_unless_off(cache, tmp_path):
    from smallinit.core.jobs import run_specs
    from smallinit.llm.training.train_spec import TrainSpec

    def specs(*extras):
        return [
            TrainSpec(toy(cache, "train.steps=3", "train.eval_every=0", *extra)) for extra in extras
        ]

    same = [[], ["seed=1"], ["train.lr=1e-3"]]
    together = run_specs(
        specs(*same, ["train.batch_size=2"]), RunStore(tmp_path / "on"), population="on", workers=1
    )
    places = [r.status().get("population") for _, r in together]
    assert [p["member"] for p in places[:3]] == [0, 1, 2] and places[3] is None
    assert {p["id"] for p in places[:3]} == {places[0]["id"]}
    alone = run_specs(specs(*same), RunStore(tmp_path / "off"), population="off", workers=1)
    assert all(r.done and "population" not in r.status() for _, r in alone)
    # on a CPU, auto trains every run alone (a population does not pay there)
    assert all(s.population_key("auto") is None for s in specs(*same))


def test_population_mode_is_checked():
    from smallinit.core.jobs import chosen_population

    with pytest.raises(ConfigError, match="population='sometimes' is not allowed; use auto"):
        chosen_population("sometimes")


def test_plan_shows_which_runs_train_together():
    from smallinit.study.experiments import plan, plan_totals

    on, off = plan("quick", [7], population="on"), plan("quick", [7], population="off")
    groups: dict[str, set] = {}
    for r in on:
        if r["population"]:
            groups.setdefault(r["population"], set()).add(r["key"])
    assert groups and all(len(keys) >= 2 for keys in groups.values())
    assert plan_totals(on)["populations"] == len(groups)
    assert all(r["population"] is None for r in off) and plan_totals(off)["populations"] == 0


def test_a_run_another_writer_holds_is_left_to_it(cache, tmp_path, monkeypatch):
    """A member whose run another writer holds is not waited for inside the population
    (two populations waiting for each other's runs would wait forever): the others train
    together, and that run is asked for alone once the writer lets go."""
    from smallinit.core.lease import RunLock

    cfgs = [
        toy(cache, "train.steps=3"),
        toy(cache, "train.steps=3", "seed=1"),
        toy(cache, "train.steps=3", "seed=2"),
    ]
    held = RunLock(RunStore(tmp_path).run(KIND, cfgs[2], version=VERSION).lock_path)
    assert held.acquire(block=False)
    fit = population_mod.Population.fit

    def release_then_fit(self, settle):  # the other writer lets go as the population starts
        held.release()
        fit(self, settle)

    monkeypatch.setattr(population_mod.Population, "fit", release_then_fit)
    runs = train_population(cfgs, runs_dir=tmp_path, callbacks=[])
    assert [r.state for r in runs] == ["done"] * 3
    assert [r.status().get("population", {}).get("size") for r in runs] == [2, 2, None]
