"""The prepared GPU check (smallinit.tools.gpu_check): its parts in processes of their own
with time limits, the JSON rewritten after each, the loud failure on a GPU machine whose
CuPy is not live, and its CPU dry mode (a quick version here; every part, slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training import throughput
from smallinit.tools import gpu_check, gpu_kernels, gpu_parts


def _parts(tmp_path) -> dict:
    return json.loads((tmp_path / "gpu_check.json").read_text())["parts"]


def test_a_quick_dry_check_writes_each_part_where_tomli_w_is_missing(tmp_path):
    """The GPU machine's image has no tomli_w: the check and its parts run without it
    (here blocked on the import path), each part's result in the JSON."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "tomli_w.py").write_text("raise ImportError('no tomli_w on this image')\n")
    env = dict(os.environ, PYTHONPATH=str(blocker))
    proc = subprocess.run(
        [sys.executable, "-c", "import tomli_w"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and "no tomli_w on this image" in proc.stderr
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "smallinit.tools.gpu_check",
            str(out),
            "--dry",
            "--parts",
            "environment,kernels,throughput",
            "--loss-chunk",
            "24",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["dry"] is True and "goals" not in result and result["verdict"]["ok"]
    assert result["loss_chunk"] == 24
    parts = result["parts"]
    assert [parts[p]["status"] for p in parts] == ["ok"] * 3
    env = parts["environment"]["result"]
    assert env["fastpath"] is False  # a dry part runs the ops a GPU runs
    assert env["host"]["libraries"]["torch"] == torch.__version__  # the child's, as loaded
    assert env["jax"]["devices"] and "jax" in env["host"]["libraries"]  # read after JAX loads
    assert env["kernels"]["backend"] == "cpu" and env["kernels"]["cupy_unusable"]
    kern = parts["kernels"]["result"]
    assert kern["device"] == "CPU emulation"
    assert {r["dtype"] for r in kern["cosine_gram"]} == {"float32", "float64", "bfloat16"}
    # a bf16 input is off by at most 2^-9 relative, so a cosine by about 2·2^-9 ≈ 0.004 at
    # most (< 1e-2); float32 sums of ≤ 33 terms stay within 33·2^-24 ≈ 2e-6 (< 1e-5)
    for key in ("max_abs_diff_vs_float64", "library_max_abs_diff_vs_float64"):
        assert all(
            r[key] < (1e-2 if r["dtype"] == "bfloat16" else 1e-5) for r in kern["cosine_gram"]
        )
    # both paths timed, one chosen per dtype and judged; a dry run writes no choice
    chosen = kern["gram_paths"]["paths"]
    assert set(chosen) == {"float32", "float64", "bfloat16"}
    assert kern["gram_paths"]["written_to"] is None
    for r in kern["cosine_gram"]:
        assert r["chosen_path"] == chosen[r["dtype"]] in ("ours", "library")
        assert r["chosen_ratio"] == r["cublas_s"] / r[f"{r['chosen_path']}_s"]
    assert kern["grouped_step"]["networks"] >= 1
    assert kern["measure_stack"][0]["max_rel_diff"] < 1e-6
    eager = parts["throughput"]["result"]
    assert eager["precision"] == "bf16" and eager["tokens_per_s"] > 0 and eager["mfu"] is None
    assert 0 < eager["head_loss"]["share_of_step"] < 1
    assert eager["loss_chunk"] == 24  # the chunked loss under bf16 autocast, as on a GPU


def test_a_negative_loss_chunk_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_check.main([str(tmp_path), "--dry", "--loss-chunk", "-3"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--loss-chunk -3: give 0 (the plain loss) or a positive number of tokens" in err


def test_a_part_that_fails_dies_or_runs_too_long_is_recorded_and_the_rest_still_run(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SMALLINIT_MEMORY_LIMIT", "1K")  # the full run's preflight refuses
    monkeypatch.setitem(gpu_check.DRY_LIMITS, "throughput", 0.5)
    result = gpu_check.check(tmp_path, dry=True, parts=["full_run", "throughput", "environment"])
    parts = result["parts"]
    assert parts["full_run"]["status"] == "error"
    assert "SMALLINIT_MEMORY_LIMIT" in parts["full_run"]["error"]
    assert parts["throughput"]["status"] == "timeout" and parts["throughput"]["limit_s"] == 0.5
    assert parts["environment"]["status"] == "ok"
    assert _parts(tmp_path) == parts and not result["verdict"]["ok"]
    assert len(result["verdict"]["problems"]) == 2
    died = gpu_check.run_part("no-such-part", True, 60, tmp_path)
    assert died["status"] == "died" and "invalid choice" in died["output_tail"]


def test_on_a_machine_without_a_live_cupy_the_check_fails_loudly(tmp_path, capfd):
    """Not dry, here (no GPU): the kernels' backend is the CPU and every GPU test skips —
    a green check before; now exit status 1 and one line that says why."""
    assert gpu_check.main([str(tmp_path), "--parts", "environment,gpu_tests"]) == 1
    err = capfd.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith(gpu_check.FAILED))
    assert "CuPy backend of the kernels is not live" in line
    assert "torch sees no CUDA device" in line and "every GPU test skipped" in line
    tests = _parts(tmp_path)["gpu_tests"]["result"]
    assert tests["tests"] > 0 and tests["skipped"] == tests["tests"] and tests["all_skipped"]


def _measured() -> dict:
    """A GPU run's parts with every goal measured: the verdict finds nothing."""
    return {
        "environment": {
            "status": "ok",
            "result": {"cuda_available": True, "kernels": {"backend": "cupy"}},
        },
        "gpu_tests": {
            "status": "ok",
            "result": {"tests": 20, "passed": 20, "failed": 0, "errors": 0, "skipped": 0},
        },
        "kernels": {
            "status": "ok",
            "result": {
                "backend": "cupy",
                "device": "NVIDIA H200",
                "grouped_step": {"speedup_vs_loop": 3.5, "speedup_vs_padded": 1.1},
                "cosine_gram": [
                    {"dtype": "float32", "throughput_ratio": 0.9, "chosen_ratio": 0.95},
                    {"dtype": "float32", "throughput_ratio": 0.65, "chosen_ratio": 0.92},
                    {"dtype": "float64", "throughput_ratio": 0.2, "chosen_ratio": 0.85},
                    {"dtype": "bfloat16", "throughput_ratio": 0.1, "chosen_ratio": 1.1},
                ],
                "measure_stack": [{"max_rel_diff": 1e-9}],
            },
        },
        "throughput": {
            "status": "ok",
            "result": {"mfu": 0.36, "head_loss": {"share_of_step": 0.2}},
        },
        "compiled": {"status": "ok", "result": {"mfu": 0.47, "head_loss": {"share_of_step": 0.09}}},
    }


def test_the_verdict_reads_each_failure():
    parts = _measured()
    assert gpu_check.problems(parts, dry=False) == []
    parts["gpu_tests"]["result"].update(passed=18, failed=2)
    assert gpu_check.problems(parts, dry=False) == ["2 GPU tests failed, 0 errors"]
    timed_out = {"status": "timeout", "error": "ran past its limit of 150 s and was killed"}
    assert gpu_check.problems({"kernels": timed_out}, dry=True) == [
        "part kernels timeout: ran past its limit of 150 s and was killed"
    ]


def test_a_gpu_run_that_measured_nothing_is_not_green():
    """Each benchmark's error is caught inside the kernels part, which finishes "ok": on a
    GPU every benchmark that failed and every goal left unmeasured is a problem."""
    parts = _measured()
    boom = "Traceback (most recent call last):\nRuntimeError: CUDA error: illegal access"
    kern = parts["kernels"]["result"]
    for key in ("grouped_step", "cosine_gram", "measure_stack"):
        kern[key] = {"error": boom}
    parts["throughput"]["result"] = parts["compiled"]["result"] = {"mfu": None}
    assert gpu_check.problems(parts, dry=False) == [
        f"kernel benchmark {key} failed: RuntimeError: CUDA error: illegal access"
        for key in ("grouped_step", "cosine_gram", "measure_stack")
    ] + [
        f"goal {name} ({'≤' if name == 'head_loss_share' else '≥'} {goal:g}) was not measured"
        for name, goal in gpu_check.GOALS.items()
    ]
    no_device = {"backend": "cupy", "error": boom}
    assert gpu_check.problems({"kernels": {"status": "ok", "result": no_device}}, dry=False)[
        0
    ].startswith("the kernel benchmarks did not start")
    assert gpu_check.problems(parts, dry=True) == []  # a dry run judges no goal


def test_goals_judge_each_measured_value():
    """The Gram by its chosen path's worst shape in each dtype (≥ 0.9× cuBLAS), MFU compiled
    (≥ 50%) and eager (≥ 35%) apart, the compiled step's output layer and loss at most 8%."""
    g = gpu_check.goals(_measured())
    assert g["grouped_vs_loop"]["met"] and not g["grouped_vs_padded"]["met"]
    assert g["gram_float32"]["measured"] == 0.92 and g["gram_float32"]["met"]
    assert g["gram_float64"]["measured"] == 0.85 and not g["gram_float64"]["met"]
    assert g["gram_bfloat16"]["met"]
    assert g["mfu_compiled"]["measured"] == 0.47 and not g["mfu_compiled"]["met"]
    assert g["mfu_eager"]["measured"] == 0.36 and g["mfu_eager"]["met"]
    share = g["head_loss_share"]
    assert (share["measured"], share["sense"], share["met"]) == (0.09, "≤", False)
    parts = _measured()
    parts["compiled"]["result"]["head_loss"]["share_of_step"] = 0.08
    assert gpu_check.goals(parts)["head_loss_share"]["met"]
    assert gpu_check.goals({})["mfu_compiled"]["met"] is None


def test_the_parts_that_carry_speed_goals_run_first():
    order = list(gpu_check.LIMITS)
    assert order == list(gpu_check.DRY_LIMITS) == list(gpu_parts.PARTS)
    assert order[0] == "environment"
    assert set(order[1:4]) == {"kernels", "throughput", "compiled"}
    assert order.index("compiled") < order.index("full_run")


def _quick_part(name, out, dry, limit):
    """A part that reports an empty result at once."""
    return [
        sys.executable,
        "-c",
        "import json, sys; open(sys.argv[1], 'w').write(json.dumps({'ok': True, 'result': {}}))",
        str(out),
    ]


def test_a_part_whose_limit_does_not_fit_the_budget_left_is_skipped_and_recorded(
    tmp_path, monkeypatch
):
    """No part starts unless the budget left holds its whole limit; a later, shorter part
    still runs, and the JSON holds each."""
    monkeypatch.setattr(gpu_check, "part_command", _quick_part)
    for name, limit in (("environment", 5), ("kernels", 100), ("throughput", 5)):
        monkeypatch.setitem(gpu_check.DRY_LIMITS, name, limit)
    result = gpu_check.check(
        tmp_path, dry=True, budget=20, parts=["environment", "kernels", "throughput"]
    )
    parts = result["parts"]
    assert [p["status"] for p in parts.values()] == ["ok", gpu_check.SKIPPED, "ok"]
    assert parts["kernels"]["limit_s"] == 100 and "s left" in parts["kernels"]["error"]
    assert _parts(tmp_path) == parts
    assert result["verdict"]["problems"] == [
        f"part kernels {gpu_check.SKIPPED}: {parts['kernels']['error']}"
    ]


def test_the_gpu_tests_part_stops_pytest_before_its_own_limit(tmp_path, monkeypatch):
    """The check passes each part its limit; pytest gets that less a margin, so its counts
    come back as a timeout before the part itself is killed."""
    assert gpu_check.part_command("gpu_tests", tmp_path, True, 150)[-3:] == [
        "--limit",
        "150",
        "--dry",
    ]
    monkeypatch.setattr(
        gpu_parts.gpu_kernels, "gpu_tests", lambda dry, timeout: {"dry": dry, "timeout": timeout}
    )
    out = tmp_path / "gpu_tests.json"
    assert gpu_parts.main(["gpu_tests", str(out), "--limit", "150", "--dry"]) == 0
    assert json.loads(out.read_text())["result"] == {
        "dry": True,
        "timeout": 150 - gpu_parts.PYTEST_MARGIN_S,
    }
    assert gpu_parts.pytest_timeout(30) == 15 and gpu_parts.pytest_timeout(None) is None


def test_pytest_stopped_at_its_timeout_reports_the_tests_that_finished(tmp_path):
    target = tmp_path / "test_two.py"
    target.write_text(
        "import time\n\n\ndef test_quick():\n    pass\n\n\ndef test_slow():\n    time.sleep(300)\n"
    )
    t0 = time.perf_counter()
    result = gpu_kernels.run_pytest(str(target), "not slow", timeout=10)
    assert time.perf_counter() - t0 < 10 + gpu_kernels.PYTEST_GRACE_S + 5
    assert result["timed_out"] and "stopped" in result["error"]
    assert result["passed"] == result["tests"] == 1, result["tail"]
    problem = gpu_check.problems({"gpu_tests": {"status": "ok", "result": result}}, dry=False)[0]
    assert problem.startswith("the GPU tests ran past their 10 s and were stopped (1 passed")


_SLOW_PART = (
    "import os, subprocess, sys, time; "
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
    "open(sys.argv[1] + '.tmp', 'w').write(str(p.pid)); "
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(300)"
)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_sigterm_kills_the_running_part_records_it_and_exits_143(tmp_path):
    """``timeout`` sends SIGTERM: the running part's whole process group goes (here a slow
    part and the process it started), the part is recorded as killed, the JSON is written
    and no later part starts."""
    pidfile, out = tmp_path / "grandchild.pid", tmp_path / "out"
    script = (
        "import sys\nfrom smallinit.tools import gpu_check\n"
        f"gpu_check.part_command = lambda *a: [sys.executable, '-c', {_SLOW_PART!r}, "
        f"{str(pidfile)!r}]\n"
        f"sys.exit(gpu_check.main([{str(out)!r}, '--dry', '--parts', "
        "'environment,kernels']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert pidfile.exists(), proc.communicate(timeout=5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 143, stderr[-2000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["stopped_by"] == "SIGTERM" and not result["verdict"]["ok"]
    parts = result["parts"]
    assert parts["environment"]["status"] == "killed"
    assert parts["kernels"] == {"status": "not run"}
    assert gpu_check.FAILED in stderr and "part environment killed" in stderr
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild)


@pytest.mark.slow
def test_the_whole_dry_check_walks_every_gpu_path(tmp_path):
    """Every part on the CPU: the emulated kernel replay, bf16 and compiled steps, and the
    full profile's first run (compiled, bf16) on a tiny corpus through the run store."""
    assert gpu_check.main([str(tmp_path), "--dry", "--budget", "1500"]) == 0
    parts = _parts(tmp_path)
    assert list(parts) == list(gpu_check.DRY_LIMITS)
    assert all(p["status"] == "ok" for p in parts.values())
    tests = parts["gpu_tests"]["result"]
    assert tests["passed"] == tests["tests"] > 100 and not tests["skipped"]
    run = parts["full_run"]["result"]
    assert run["compile"] and run["precision"] == "bf16" and run["state"] == "done"
    assert run["profile_synthetic_items"] == 2_000_000 and run["val_loss"] > 0
    assert parts["compiled"]["result"]["compile"] is True


@pytest.mark.parametrize("tie", [False, True])
def test_flops_per_token_counts_every_matmul_of_the_built_model_once(tie):
    """6 × (every parameter a token is multiplied by: all but the lookup tables, a tied
    table counted once as the head) + 12·L·d·T, the same count as the full profile's plan."""
    cfg = ModelConfig(
        vocab_size=100,
        context=16,
        d_model=32,
        n_layers=2,
        n_heads=2,
        positions="learned",
        tie_embeddings=tie,
    )
    model = Transformer(cfg)
    lookups = model.pos_emb.weight.numel() + (0 if tie else model.tok_emb.weight.numel())
    matmul = model.num_params() - lookups
    assert throughput.flops_per_token(cfg) == 6 * matmul + 12 * 2 * 32 * 16


def _shares_add_up(got: dict) -> None:
    assert abs(sum(got["families"].values()) - 1.0) < 1e-9
    shares = [row["share"] for row in got["top"]]
    assert shares == sorted(shares, reverse=True)
    assert got["families"].get("matmul", 0.0) > 0.05, got["families"]


def test_step_breakdown_shares_add_up_and_name_the_kernel_families():
    """The eager step at the dry size (CPU ops): the family shares sum to one, the top list
    is ordered by share, the step's matrix products are found as such; GPU kernel names of
    each family are told apart."""
    from smallinit.llm.training import throughput as tp

    got = tp.breakdown(gpu_parts.run_config(True), steps=2, warmup=1)
    _shares_add_up(got)
    # the CPU's flash kernel, forward and backward, once a layer and step each
    assert got["sdpa_backends"] == {"flash": 2 * 2 * 2} and got["loss_chunk"] == 0
    ops = {
        "aten::_scaled_dot_product_flash_attention_backward": "flash",
        "aten::_scaled_dot_product_efficient_attention": "efficient",
        "aten::_scaled_dot_product_cudnn_attention": "cudnn",
        "aten::_scaled_dot_product_attention_math": "math",
        "aten::scaled_dot_product_attention": None,
        "aten::mm": None,
    }
    assert {n: tp.sdpa_backend(n) for n in ops} == ops
    names = {
        "sm90_xmma_gemm_bf16bf16_bf16f32": "matmul",
        "nvjet_tst_128x256_64x4": "matmul",
        "pytorch_flash::flash_bwd_dq_dk_dv_loop_kernel": "attention",
        "cunn_SoftMaxForward<4, float>": "loss",
        "aten::logsumexp": "loss",
        "multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0": "norm",
        "elementwise_kernel<128, 2>": "other",
    }
    assert {n: tp.family(n) for n in names} == names


@pytest.mark.slow  # torch.compile of the dry model: minutes on 2 cores
def test_step_profile_part_runs_eager_and_compiled(tmp_path):
    assert gpu_parts.main(["step_profile", str(tmp_path / "p.json"), "--dry"]) == 0
    result = json.loads((tmp_path / "p.json").read_text())["result"]
    for mode in ("eager", "compiled"):
        _shares_add_up(result[mode])
