"""A finished or failed run records the machine that computed it (smallinit.core.host):
float kernels differ between processors, so a store says where its bits came from."""

import json
import platform
import sys

import numpy as np

from smallinit.core import host
from smallinit.core.errors import RunFailed
from smallinit.core.store import RunStore


def test_done_and_failed_runs_record_their_host(tmp_path):
    store = RunStore(tmp_path)
    done = store.get_or_run("demo", {"seed": 0}, lambda run: {"loss": float(np.float64(1.0))})

    def diverge(run):
        raise RunFailed("NaN loss at step 3")

    failed = store.get_or_run("demo", {"seed": 1}, diverge)
    for run in (done, failed):
        rec = json.loads((run.path / "status.json").read_text())["host"]
        assert rec["machine"] == platform.machine()
        assert rec["python"] == platform.python_version()
        assert rec["libraries"]["numpy"] == np.__version__
        assert rec["cpu"]


def test_only_loaded_libraries_are_recorded(monkeypatch):
    """Nothing is imported to be recorded: a library absent from sys.modules is absent from
    the record, and torch's kernel choice is read only where torch is loaded."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    rec = host.record()
    assert "torch" not in rec["libraries"] and "torch_cpu_capability" not in rec
    assert "torch" not in sys.modules


def test_torch_kernel_choice_is_recorded_where_torch_is_loaded():
    import torch

    rec = host.record()
    assert rec["libraries"]["torch"] == str(torch.__version__)
    assert rec["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_cpu_model_falls_back_without_cpuinfo(monkeypatch, tmp_path):
    monkeypatch.setattr(host, "CPUINFO", tmp_path / "absent")
    assert host._cpuinfo() == {}
    assert host._cpu_model(host._cpuinfo()) == (platform.processor() or "unknown")
    assert host._vector_extensions(host._cpuinfo()) == []


def test_cpuinfo_gives_the_first_processors_model_and_vector_extensions(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\n"
        "flags\t\t: fpu sse2 fma avx avx2 avx512f avx512bw bmi2\n\n"
        "processor\t: 1\nmodel name\t: something else\nflags\t\t: fpu\n"
    )
    monkeypatch.setattr(host, "CPUINFO", info)
    info = host._cpuinfo()
    assert host._cpu_model(info) == "AMD EPYC"
    assert host._vector_extensions(info) == ["avx", "avx2", "avx512bw", "avx512f", "fma"]


def test_a_process_that_never_started_cuda_records_no_gpu():
    """The GPU's name is recorded only where the process used CUDA, and reading the record
    never starts it (here: torch loaded, CUDA never initialised)."""
    import torch

    assert not torch.cuda.is_initialized()
    assert "gpu" not in host.record()
    assert not torch.cuda.is_initialized()
