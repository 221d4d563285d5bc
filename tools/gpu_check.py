"""The prepared GPU check: one command, one JSON, within 9 minutes on one GPU.

``smallinit gpu-check OUT_DIR [--dry]`` (or ``python -m smallinit.tools.gpu_check``, the
same options) runs the parts of :mod:`smallinit.tools.gpu_parts` in order — environment
(what the verdict reads about the machine), then the parts that carry the speed goals
(kernels, throughput, compiled), then step_profile (where the step's time goes), gpu_tests
and full_run — each in a process of its own with a time limit of its own (:data:`LIMITS`),
all within ``--budget`` seconds (default 540: a machine that ends a command at 10 minutes
leaves the check a minute to spare; dry: the sum of :data:`DRY_LIMITS`). A part starts only
while the budget left holds its whole limit; one that does not fit is recorded as ``skipped:
budget`` and a later, shorter part may still run. ``OUT_DIR/gpu_check.json`` is rewritten
(atomically) after every part, so a check killed from outside keeps every part that
finished; SIGTERM (``timeout 570`` sends it) kills the running part's process group, records
that part as ``killed``, writes the JSON and exits 143. A part that raises, dies (a CUDA
fault poisons its own process only) or runs past its limit is recorded with its status, time
and the tail of its output; the others still run. This module itself imports nothing but the
standard library: the check starts on any Python, and only the parts need torch, CuPy and
the project's packages.

The JSON holds ``dry``, the start and end times, the budget, and per part ``status``
(``ok``, ``error``, ``timeout``, ``died``, ``killed``, ``skipped: budget`` or ``not run``),
``wall_s``, ``limit_s`` and its ``result`` (or ``error`` and ``output_tail``); then
``goals`` (each goal with its measured value, its sense and whether it was met: grouped
step ≥ 3× a per-network torch loop and ≥ 1.2× a padded ``torch.bmm``; the cosine Gram, by
the path its dispatch chose, ≥ 0.9× cuBLAS's throughput on every shape in float32, float64
and bf16 each; MFU on an H200 ≥ 50% compiled and ≥ 35% eager; the output layer and loss ≤
8% of the compiled step) and ``verdict`` (``ok`` and the problems found); ``stopped_by``
names the signal when one stopped the check. A goal missed is a finding, not a failure of
the check: the verdict fails on goals left unmeasured.

On a GPU (not ``--dry``) the check **fails loudly** — exit status 1 and a line starting
``GPU CHECK FAILED`` on stderr — when the CuPy backend of the kernels is not live, when
torch sees no CUDA device, when every GPU test skipped (a broken CuPy would otherwise give
a green check), when a goal was not measured or a kernel benchmark failed (each is caught
inside the kernels part, which still finishes), or when any part did not finish.
``--dry`` walks the same parts on the CPU at toy sizes (:mod:`smallinit.tools.gpu_parts`),
judges no goal, and fails only when a part did not finish.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the parts in the order they run, each with its time limit in seconds on a GPU
LIMITS = {
    "environment": 90,
    "kernels": 150,
    "throughput": 120,
    "compiled": 180,
    "step_profile": 150,
    "gpu_tests": 150,
    "full_run": 240,
}
DRY_LIMITS = {
    "environment": 60,
    "kernels": 120,
    "throughput": 120,
    "compiled": 300,
    "step_profile": 300,
    "gpu_tests": 300,
    "full_run": 300,
}
BUDGET = 540
DRY_BUDGET = sum(DRY_LIMITS.values())
SKIPPED = "skipped: budget"
GOALS = {
    "grouped_vs_loop": 3.0,
    "grouped_vs_padded": 1.2,
    "gram_float32": 0.9,
    "gram_float64": 0.9,
    "gram_bfloat16": 0.9,
    "mfu_compiled": 0.50,
    "mfu_eager": 0.35,
    "head_loss_share": 0.08,
}
#: the goals met at or below their value (the others at or above)
AT_MOST = frozenset({"head_loss_share"})
FAILED = "GPU CHECK FAILED"
#: the variable through which ``--loss-chunk`` reaches the parts (``train.loss_chunk`` of the
#: throughput model's steps; 0 or unset: the plain loss)
LOSS_CHUNK_ENV = "SMALLINIT_GPU_CHECK_LOSS_CHUNK"


@dataclass
class Stop:
    """What :func:`main`'s SIGTERM handler shares with the parts' loop: the running part's
    process (None between parts) and the signal, once one came."""

    proc: subprocess.Popen | None = None
    signum: int | None = None


STOP = Stop()


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL to ``proc``'s process group (the part and every process it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _on_sigterm(signum: int, frame: Any) -> None:
    """Kill the running part's process group and mark the check stopped; the loop then
    records the part as killed, starts no other and writes the JSON."""
    STOP.signum = signum
    if STOP.proc is not None:
        _kill(STOP.proc)


def _write(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON at ``path``, replaced atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else ""


def part_command(name: str, out: Path, dry: bool, limit: float) -> list[str]:
    """The command that runs part ``name`` and writes its result to ``out``."""
    cmd = [
        sys.executable,
        "-m",
        "smallinit.tools.gpu_parts",
        name,
        str(out),
        "--limit",
        f"{limit:g}",
    ]
    return [*cmd, "--dry"] if dry else cmd


def _run(cmd: list[str], dry: bool, limit: float, log: Path) -> tuple[int, str | None]:
    """``cmd`` in its own process group, its output into ``log``; the group is killed at
    ``limit`` seconds, at SIGTERM (:func:`_on_sigterm`) or when waiting raises. The exit
    code, and ``"timeout"`` or ``"killed"`` (by the SIGTERM handler) when it was killed."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if dry:
        env["SMALLINIT_FASTPATH"] = "0"  # the ops a GPU runs, not the CPU fast path
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        STOP.proc = proc
        try:
            if STOP.signum is not None:  # came while the part was starting
                _kill(proc)
            code, status = proc.wait(timeout=limit), None
        except subprocess.TimeoutExpired:
            _kill(proc)
            code, status = proc.wait(), "timeout"
        except BaseException:
            _kill(proc)
            raise
        finally:
            STOP.proc = None
    if status is None and STOP.signum is not None and code == -signal.SIGKILL:
        status = "killed"
    return code, status


def _record(status: str | None, code: int, out: Path, limit: float) -> dict[str, Any]:
    """The status and result (or error) of a part that ended with ``code``."""
    if status == "killed":
        name = signal.Signals(STOP.signum).name
        return {
            "status": status,
            "error": f"the check was sent {name} while this part ran; its process group was killed",
        }
    if status == "timeout":
        return {"status": status, "error": f"ran past its limit of {limit:g} s and was killed"}
    try:
        reported = json.loads(out.read_text())
    except (OSError, ValueError):
        return {
            "status": "died",
            "error": f"the part's process ended with code {code} and no result",
        }
    if reported["ok"]:
        return {"status": "ok", "result": reported["result"]}
    return {"status": "error", "error": reported["error"]}


def run_part(name: str, dry: bool, limit: float, workdir: Path) -> dict[str, Any]:
    """Part ``name`` in its own process group, killed (with every process it started) at
    ``limit`` seconds; its record (module docstring)."""
    out, log = workdir / f"{name}.json", workdir / f"{name}.log"
    t0 = time.perf_counter()
    code, status = _run(part_command(name, out, dry, limit), dry, limit, log)
    record = {
        **_record(status, code, out, limit),
        "limit_s": round(limit, 1),
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    if record["status"] != "ok":
        record["output_tail"] = _tail(log)
    return record


def goals(parts: dict[str, Any]) -> dict[str, Any]:
    """Each goal of the module docstring: its target, the measured value, met or not."""

    def result(name: str) -> dict:
        part = parts.get(name, {})
        return part.get("result", {}) if isinstance(part, dict) else {}

    kern = result("kernels")
    grouped = kern.get("grouped_step", {})
    gram = kern.get("cosine_gram", [])
    gram = gram if isinstance(gram, list) else []

    def gram_ratio(dtype: str) -> float | None:
        return min(
            (
                r["chosen_ratio"]
                for r in gram
                if r.get("dtype") == dtype and r.get("chosen_ratio") is not None
            ),
            default=None,
        )

    measured = {
        "grouped_vs_loop": grouped.get("speedup_vs_loop"),
        "grouped_vs_padded": grouped.get("speedup_vs_padded"),
        **{f"gram_{t}": gram_ratio(t) for t in ("float32", "float64", "bfloat16")},
        "mfu_compiled": result("compiled").get("mfu"),
        "mfu_eager": result("throughput").get("mfu"),
        "head_loss_share": result("compiled").get("head_loss", {}).get("share_of_step"),
    }
    return {
        k: {
            "goal": GOALS[k],
            "sense": _sense(k),
            "measured": v,
            "met": None if v is None else bool(v <= GOALS[k] if k in AT_MOST else v >= GOALS[k]),
        }
        for k, v in measured.items()
    }


def _sense(name: str) -> str:
    return "≤" if name in AT_MOST else "≥"


def _environment_problems(env: dict[str, Any]) -> list[str]:
    found = []
    kernels = env.get("kernels", {})
    if kernels.get("backend") != "cupy":
        found.append(
            f"the CuPy backend of the kernels is not live "
            f"({kernels.get('cupy_unusable') or kernels.get('backend')})"
        )
    if not env.get("cuda_available"):
        found.append("torch sees no CUDA device")
    return found


def _test_problems(tests: dict[str, Any]) -> list[str]:
    counts = (
        f"{tests.get('passed', 0)} passed, {tests.get('failed', 0)} failed, "
        f"{tests.get('errors', 0)} errors, {tests.get('skipped', 0)} skipped"
    )
    if tests.get("timed_out"):
        return [f"the GPU tests {tests['error']} ({counts} of those that finished)"]
    if tests.get("error"):
        return [f"the GPU tests did not run: {tests['error']}"]
    if tests.get("passed", 0) == 0:
        return [
            f"every GPU test skipped ({tests.get('skipped', 0)} of "
            f"{tests.get('tests', 0)}): nothing ran on the GPU"
        ]
    if tests.get("failed") or tests.get("errors"):
        return [f"{tests['failed']} GPU tests failed, {tests['errors']} errors"]
    return []


def _kernel_problems(kern: dict[str, Any]) -> list[str]:
    """A benchmark that failed inside the kernels part (each is caught on its own)."""
    found = (
        [f"the kernel benchmarks did not start: {_last_line(kern['error'])}"]
        if kern.get("error")
        else []
    )
    return found + [
        f"kernel benchmark {key} failed: {_last_line(entry['error'])}"
        for key, entry in kern.items()
        if isinstance(entry, dict) and entry.get("error")
    ]


def _goal_problems(parts: dict[str, Any]) -> list[str]:
    return [
        f"goal {name} ({goal['sense']} {goal['goal']:g}) was not measured"
        for name, goal in goals(parts).items()
        if goal["measured"] is None
    ]


def problems(parts: dict[str, Any], dry: bool) -> list[str]:
    """Why the check fails: parts that did not finish; on a GPU also a CuPy backend that is
    not live, no CUDA device for torch, GPU tests that all skipped (or none ran, or ran
    past their time), a kernel benchmark that failed and a goal that was not measured."""
    found = [
        f"part {name} {part['status']}"
        + (f": {_last_line(part['error'])}" if part.get("error") else "")
        for name, part in parts.items()
        if part["status"] != "ok"
    ]
    if dry:
        return found
    readers = {
        "environment": _environment_problems,
        "gpu_tests": _test_problems,
        "kernels": _kernel_problems,
    }
    for name, read in readers.items():
        part_result = parts.get(name, {}).get("result")
        if part_result is not None:
            found += read(part_result)
    return found + _goal_problems(parts)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _next_part(name: str, limit: float, left: float, dry: bool, tmp: Path) -> dict[str, Any]:
    """Part ``name``'s record: run when ``left`` seconds of the budget hold its ``limit``,
    else skipped."""
    if left < limit:
        return {
            "status": SKIPPED,
            "limit_s": limit,
            "error": f"its limit of {limit:g} s is more than the {left:.0f} s left",
        }
    print(f"gpu_check: {name} (limit {limit:g} s)", file=sys.stderr, flush=True)
    record = run_part(name, dry, limit, tmp)
    print(
        f"gpu_check: {name} {record['status']} in {record['wall_s']:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return record


def check(
    out_dir: Path, dry: bool, budget: float | None = None, parts: list[str] | None = None
) -> dict[str, Any]:
    """Run the parts (module docstring) and return the JSON written to
    ``out_dir/gpu_check.json`` after each of them."""
    limits = DRY_LIMITS if dry else LIMITS
    budget = (DRY_BUDGET if dry else BUDGET) if budget is None else budget
    names = list(limits) if parts is None else parts
    path = out_dir / "gpu_check.json"
    started = time.perf_counter()
    result: dict[str, Any] = {
        "dry": dry,
        "python": sys.executable,
        "budget_s": budget,
        "loss_chunk": int(os.environ.get(LOSS_CHUNK_ENV) or 0),
        "started": _now(),
        "parts": {name: {"status": "not run"} for name in names},
    }
    _write(path, result)
    with tempfile.TemporaryDirectory(prefix="smallinit-gpu-check-") as tmp:
        for name in names:
            if STOP.signum is not None:
                break
            left = budget - (time.perf_counter() - started)
            result["parts"][name] = _next_part(name, limits[name], left, dry, Path(tmp))
            result["wall_s"] = round(time.perf_counter() - started, 1)
            _write(path, result)
    if STOP.signum is not None:
        result["stopped_by"] = signal.Signals(STOP.signum).name
    if not dry:
        result["goals"] = goals(result["parts"])
    found = problems(result["parts"], dry)
    result["verdict"] = {"ok": not found, "problems": found}
    result["finished"] = _now()
    _write(path, result)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The check's options, for ``python -m smallinit.tools.gpu_check`` and ``smallinit
    gpu-check`` alike."""
    parser.add_argument(
        "out",
        nargs="?",
        default=os.environ.get("OUT", "bench-results/gpu"),
        help="folder for gpu_check.json (default $OUT or bench-results/gpu)",
    )
    parser.add_argument(
        "--dry",
        action="store_true",
        help="the same parts on the CPU at toy sizes (bf16 autocast, no fast "
        "path, torch.compile, the full profile's first run, the kernels "
        "through their emulation); no goal judged",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds for the whole check (default {BUDGET}, dry "
        f"{DRY_BUDGET}); a part starts only if its own limit fits",
    )
    parser.add_argument(
        "--parts",
        default=None,
        help="comma-separated parts to run, in the order given (default all: "
        + ", ".join(LIMITS)
        + ")",
    )
    parser.add_argument(
        "--loss-chunk",
        type=int,
        default=0,
        help="train.loss_chunk of the throughput model's steps: tokens whose "
        "logits the loss builds at a time (default 0: the plain loss)",
    )


def chosen_parts(args: argparse.Namespace) -> list[str] | None:
    """The parts ``--parts`` names (None: all), after checking every option's value;
    ``ValueError`` naming a bad one and what is allowed."""
    chosen = None
    if args.parts is not None:
        chosen = [p.strip() for p in args.parts.split(",") if p.strip()]
        bad = [p for p in chosen if p not in LIMITS]
        if bad or not chosen:
            raise ValueError(f"--parts {args.parts!r}: choose from {', '.join(LIMITS)}")
    if args.budget is not None and args.budget <= 0:
        raise ValueError(f"--budget {args.budget:g}: give a positive number of seconds")
    if args.loss_chunk < 0:
        raise ValueError(
            f"--loss-chunk {args.loss_chunk}: give 0 (the plain loss) or a "
            "positive number of tokens"
        )
    return chosen


def run(args: argparse.Namespace, chosen: list[str] | None) -> int:
    """The check of ``args`` (:func:`add_arguments`) over the ``chosen`` parts: the JSON
    written, the summary printed; the exit status (:func:`_report`)."""
    os.environ[LOSS_CHUNK_ENV] = str(args.loss_chunk)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    STOP.signum = None
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = check(out, args.dry, args.budget, chosen)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _report(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m smallinit.tools.gpu_check", description=__doc__.split("\n\n")[0]
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        chosen = chosen_parts(args)
    except ValueError as err:
        parser.error(str(err))
    return run(args, chosen)


def _report(result: dict[str, Any]) -> int:
    """The brief summary on stdout, the loud line on stderr; the exit status (143 after
    SIGTERM, 1 when the verdict is not ok)."""
    brief = {
        name: {k: v for k, v in part.items() if k in ("status", "wall_s", "error")}
        for name, part in result["parts"].items()
    }
    print(
        json.dumps(
            {
                "dry": result["dry"],
                "parts": brief,
                "goals": result.get("goals"),
                "verdict": result["verdict"],
            },
            indent=2,
            default=str,
        )
    )
    if not result["verdict"]["ok"]:
        print(f"{FAILED}: " + "; ".join(result["verdict"]["problems"]), file=sys.stderr)
    if "stopped_by" in result:
        return 128 + signal.Signals[result["stopped_by"]].value
    return 0 if result["verdict"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
