"""Every local core by default, and Ray as the engine for clusters: the worker count comes
from the cores and the threads per run, and neither the count nor the executor changes a
stored number."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_core_jobs import BodySpec
from test_core_jobs import job as square_job

from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import (
    RunSpec,
    chosen_executor,
    chosen_workers,
    default_workers,
    local_cores,
    run_specs,
    run_threads,
)
from smallinit.core.store import RunStore
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.train_spec import TrainSpec

HERE = Path(__file__).resolve().parent
TINY = [
    "model.vocab_size=300",
    "model.context=16",
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "data.synthetic_items=300",
    "data.synthetic_val_items=60",
    "data.synthetic_facts=10",
    "train.steps=6",
    "train.batch_size=4",
    "train.warmup=2",
    "train.log_every=2",
    "train.eval_every=0",
    "train.checkpoint_every=2",
    "train.threads=1",
    "train.device=cpu",
    "eval.answer_items=5",
    "eval.token_windows=2",
]


def tiny_sweep(cache: Path) -> list[TrainSpec]:
    """Three tiny transformer runs at different γ (one torch thread each)."""
    return [
        TrainSpec(
            load_config(RunConfig, None, [*TINY, f"data.cache_dir={cache}", f"init=gamma:{g}"]),
            {"gamma": g},
        )
        for g in (0.5, 0.75, 1.0)
    ]


def stored_numbers(results) -> list[tuple[str, list, dict]]:
    """Each run's key, logged metrics (wall-clock fields dropped) and summary."""
    out = []
    for _, run in results:
        assert run.done, run.status()
        metrics = [
            {k: v for k, v in r.items() if "time" not in k and not k.endswith("_s")}
            for r in run.metrics()
        ]
        summary = {k: v for k, v in run.summary.items() if "time" not in k and not k.endswith("_s")}
        out.append((run.key, metrics, summary))
    return out


def test_workers_default_to_every_core_over_the_threads_per_run(monkeypatch):
    monkeypatch.delenv("SMALLINIT_WORKERS", raising=False)
    one = RunSpec({"train": None})
    two = TrainSpec(load_config(RunConfig, None, ["train.threads=2"]))
    assert run_threads(one) is None and run_threads(two) == 2
    assert default_workers([two], cores=16) == 8  # 16 cores // 2 threads per run
    assert default_workers([two], cores=3) == 1
    assert default_workers([one, two], cores=16) == 1  # a run without a count takes them all
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere os.cpu_count()
    assert local_cores() == (len(affinity(0)) if affinity else os.cpu_count())
    assert chosen_workers(None) is None and chosen_workers(3) == 3
    monkeypatch.setenv("SMALLINIT_WORKERS", "5")
    assert chosen_workers(None) == 5 and chosen_workers(2) == 2  # explicit beats the env
    monkeypatch.setenv("SMALLINIT_WORKERS", "many")
    with pytest.raises(ConfigError, match="SMALLINIT_WORKERS='many'"):
        chosen_workers(None)
    with pytest.raises(ConfigError, match="workers=0"):
        chosen_workers(0)
    assert chosen_executor(None) == "local"
    monkeypatch.setenv("SMALLINIT_EXECUTOR", "slurm")
    with pytest.raises(ConfigError, match="SMALLINIT_EXECUTOR='slurm' is not allowed"):
        chosen_executor(None)


def test_a_sweep_stores_the_same_numbers_with_one_or_two_workers(tmp_path):
    jobs = tiny_sweep(tmp_path / "cache")
    serial = run_specs(jobs, RunStore(tmp_path / "one"), workers=1)
    side_by_side = run_specs(jobs, RunStore(tmp_path / "two"), workers=2)
    pids = {r.status()["pid"] for r in side_by_side.runs if "pid" in r.status()}
    assert os.getpid() not in pids  # really computed in worker processes
    assert stored_numbers(serial) == stored_numbers(side_by_side)


def test_ray_executor_without_ray_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"smallinit\[ray\]"):
        run_specs([square_job(1)], RunStore(tmp_path), executor="ray")


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray cluster of 2 CPUs (workers find the tests' modules on PYTHONPATH)."""
    ray = pytest.importorskip("ray")
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), path) if p)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path


@dataclass
class FlakySpec(BodySpec):
    """A run that raises on its first attempt (a marker file remembers it), then works."""

    def body(self, run) -> dict:
        marker = Path(self.config["marker"])
        if not marker.exists():
            marker.write_text("failed once")
            raise OSError("transient: the node lost its mount")
        return {"square": self.config["i"] ** 2}


@pytest.mark.slow
def test_ray_gives_the_serial_results_and_retries_failures(tmp_path, local_ray, monkeypatch):
    jobs = tiny_sweep(tmp_path / "cache")
    serial = run_specs(jobs, RunStore(tmp_path / "serial"), workers=1)
    on_ray = run_specs(jobs, RunStore(tmp_path / "ray"), executor="ray")
    assert stored_numbers(serial) == stored_numbers(on_ray)

    monkeypatch.setenv("SMALLINIT_RAY_RETRIES", "1")
    store = RunStore(tmp_path / "faults")
    flaky = FlakySpec({"i": 5, "marker": str(tmp_path / "marker")}, {"i": 5})
    results = run_specs([square_job(3), square_job(4, die=True), flaky], store, executor="ray")
    ok, dead, retried = results.runs
    assert ok.summary["square"] == 9
    assert retried.summary["square"] == 25  # failed once, retried by Ray, then done
    status = dead.status()  # killed on both attempts: a retryable failure with its reason
    assert status["state"] == "failed" and status["final"] is False
    assert "failed on Ray after 2 attempts" in status["reason"]
    assert not list((store.root / ".executor").iterdir())  # the probe file is gone


@pytest.mark.slow
def test_ray_refuses_a_store_its_nodes_cannot_see(tmp_path, local_ray, monkeypatch):
    import smallinit.core.jobs as jobs_mod

    real = jobs_mod._ray_task

    def elsewhere(job, root, force, probe):  # as on a node that mounts another file system
        return real(job, root, force, probe + ".missing")

    monkeypatch.setattr(jobs_mod, "_ray_task", elsewhere)
    with pytest.raises(ConfigError, match="not visible from Ray node .* every node mounts"):
        run_specs([square_job(1)], RunStore(tmp_path / "runs"), executor="ray")


def test_cli_sweep_commands_take_workers_and_executor():
    from smallinit.cli import build_parser

    parser = build_parser()
    for argv in (
        ["llm", "sweep", "--experiment", "gamma-sweep"],
        ["llm", "anchor-scan"],
        ["compare"],
        ["figs"],
    ):
        args = parser.parse_args([*argv, "--workers", "3", "--executor", "ray"])
        assert (args.workers, args.executor) == (3, "ray")
        assert parser.parse_args(argv).workers is None  # every core unless given


def test_ray_tasks_ask_for_their_threads_and_a_gpu_when_they_train_on_one():
    from smallinit.core.jobs import _ray_resources

    class FakeRay:  # ray.nodes() of a cluster: two nodes of 16 CPUs, one with 8 GPUs
        def __init__(self, gpus: float):
            self.gpus = gpus

        def nodes(self):
            return [
                {"Alive": True, "Resources": {"CPU": 16.0, "GPU": self.gpus}},
                {"Alive": True, "Resources": {"CPU": 16.0}},
                {"Alive": False, "Resources": {"CPU": 1.0}},
            ]

    def cfg(*extra):
        return load_config(RunConfig, None, list(extra))

    quick = TrainSpec(cfg("train.threads=1", "train.device=cpu"))
    gpu = TrainSpec(cfg("train.threads=0", "train.device=auto"))
    toy = RunSpec({"widths": [250]})
    assert _ray_resources(FakeRay(8.0), quick) == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert _ray_resources(FakeRay(8.0), gpu) == {"num_cpus": 2.0, "num_gpus": 1.0}
    assert _ray_resources(FakeRay(0.0), gpu) == {"num_cpus": 16.0, "num_gpus": 0.0}
    assert _ray_resources(FakeRay(8.0), toy) == {"num_cpus": 16.0, "num_gpus": 0.0}
