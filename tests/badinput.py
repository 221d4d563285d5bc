"""The bad-input battery: every case is something a careless or hostile user may type.

Each case runs in its own process and is *clean* when it

* exits with status 2 (a Python-API case: raises one documented exception type, a subclass
  of ``smallinit.core.errors.SmallinitError``, ``ValueError`` or — for a value of the wrong
  type — ``TypeError``),
* prints exactly one line on stderr (``smallinit: error: ...``, or argparse's
  ``smallinit GROUP COMMAND: error: ...``; for the API, one message line)
  and no traceback,
* finishes within ``TIME_LIMIT`` seconds (else: *hang*),
* never holds more than ``MEMORY_LIMIT`` bytes resident (else: *blow-up*; the process also
  runs under an address-space cap so that a real blow-up cannot take the machine down).

``python tests/badinput.py`` runs the whole battery and prints the counts
(tried / clean / tracebacks / hangs / blow-ups / other); ``tests/cli/test_bad_input.py`` asserts
that every case is clean.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from smallinit.core.runs import config_key

TIME_LIMIT = 30.0  # seconds; generous for a 2-core machine running torch imports in parallel
MEMORY_LIMIT = 2 * 1024**3  # resident bytes
ADDRESS_CAP = 16 * 1024**3  # RLIMIT_AS of a case (protects the machine; jax reserves a lot)

TINY_TRAIN = [
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.context=16",
    "model.vocab_size=300",
    "train.steps=4",
    "train.log_every=2",
    "train.checkpoint_every=0",
    "train.eval_every=0",
    "train.warmup=0",
    "train.batch_size=4",
    "data.synthetic_items=200",
    "data.synthetic_val_items=50",
    "eval.answer_items=4",
    "eval.token_windows=2",
]


TINY_MODEL = (
    "import torch\nfrom smallinit.llm import Transformer, ModelConfig\n"
    "m = Transformer(ModelConfig(d_model=16, n_heads=2, vocab_size=64, context=8, "
    "n_layers=1))\n"
)


@dataclasses.dataclass(frozen=True)
class Case:
    """A CLI case (``argv`` after ``smallinit``) or a Python-API case (``code``)."""

    name: str
    argv: tuple[str, ...] = ()
    code: str = ""
    env: tuple[tuple[str, str], ...] = ()

    @property
    def api(self) -> bool:
        return bool(self.code)


def cli(name: str, *argv: str, **env: str) -> Case:
    return Case(name, argv=tuple(argv), env=tuple(env.items()))


def api(name: str, code: str) -> Case:
    return Case(name, code=code)


# ----------------------------------------------------------------------------- the cases
# Placeholders filled by the fixture: {tmp} scratch folder, {file} a regular file, {dir} an
# existing folder, {nodir} a path below a regular file (cannot be created), {runs} the store
# holding one tiny finished run, {run} that run's folder, {cache} its data cache, and damaged
# copies of the run: {run_badmodel} (model.pt only, truncated), {run_badsafetensors},
# {run_badtok} (its stored tokenizer.json damaged),
# {run_mismatch}, {run_gated} (its config says gated attention); {badtok_cache} a cache
# whose tokenizer is corrupt; {bigjsonl} a benchmark JSONL with one 50 MB line; {notrun} a
# folder that is not a run; {task_badjson}, {task_nofield}, {task_nogold} custom task files
# with a broken line, an item of no kind, a multiple-choice item without its gold index
# ({task_good}: one well-formed item).
# Hostile files (:func:`make_hostile_files`): {deep_toml} {deep_inline_toml}
# {deep_header_toml} {mid_toml} TOML nested 100,000 / 100,000 / 5,000 / 300 levels,
# {deep_json} JSON nested 100,000 levels, {task_deep} {task_deep_obj} {task_mid} custom tasks
# whose line nests 100,000 / 50,000 / 500 levels, {hf_deep} an HF folder whose config.json
# nests, {groups_deep} a deep groups TOML, {run_deepstatus} {run_deepconfig}
# {run_fifostatus} run copies with a deep status.json / config.json / a FIFO status.json;
# special files {fifo} {fifo_jsonl} {fifo_groups} (FIFOs), {socket} (a Unix socket),
# {loop} (a symlink loop), {zero_jsonl} (a link to /dev/zero), {corpus_fifo} (a corpus
# folder holding a FIFO .txt), {lic_fifo} {lic_deep} (data folders whose licenses.json is a
# FIFO / nests deeply).
CASES: list[Case] = [
    # -- theory: values out of range, hangs
    cli(
        "theory classify huge gamma",
        "theory",
        "classify",
        "--gamma",
        "1e100000000",
        "--gamma-prime",
        "0",
    ),
    cli("theory classify nan", "theory", "classify", "--gamma", "nan", "--gamma-prime", "0"),
    cli("theory classify inf", "theory", "classify", "--gamma", "inf", "--gamma-prime", "0"),
    cli("theory classify text", "theory", "classify", "--gamma", "abc", "--gamma-prime", "0"),
    cli("theory classify missing", "theory", "classify", "--gamma", "1"),
    cli("theory schemes huge param", "theory", "schemes", "--param", "1e100000000"),
    cli("theory schemes text param", "theory", "schemes", "--param", "x"),
    cli(
        "theory transformer gamma 1e308",
        "theory",
        "transformer",
        "--d-model",
        "64",
        "--scheme",
        "gamma:1e308",
    ),
    cli("theory transformer d_model 0", "theory", "transformer", "--d-model", "0", "--gamma", "1"),
    cli(
        "theory transformer d_model huge",
        "theory",
        "transformer",
        "--d-model",
        "10**9",
        "--gamma",
        "1",
    ),
    cli(
        "theory transformer heads not dividing",
        "theory",
        "transformer",
        "--d-model",
        "64",
        "--n-heads",
        "5",
        "--gamma",
        "1",
    ),
    cli(
        "theory transformer unknown scheme",
        "theory",
        "transformer",
        "--d-model",
        "64",
        "--scheme",
        "bogus",
    ),
    cli(
        "theory transformer bad override",
        "theory",
        "transformer",
        "--d-model",
        "64",
        "--gamma",
        "1",
        "--override",
        "nopart=1",
    ),
    cli(
        "theory transformer negative gamma",
        "theory",
        "transformer",
        "--d-model",
        "64",
        "--gamma",
        "-1e308",
    ),
    cli("theory eps zero", "theory", "eps", "--d-model", "256", "--eps", "0"),
    cli("theory eps negative", "theory", "eps", "--d-model", "256", "--eps", "-1"),
    cli("theory eps d_model 1", "theory", "eps", "--d-model", "1"),
    cli("theory eps huge gamma", "theory", "eps", "--d-model", "256", "--gamma", "1e308"),
    # -- toy: sizes, overflows, memory
    cli(
        "toy scan width 1e9",
        "toy",
        "scan",
        "gammas=1",
        "gamma_primes=0",
        "widths=1000000000,2000000000",
        "seeds=1",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "toy scan seeds 1e9",
        "toy",
        "scan",
        "gammas=1",
        "gamma_primes=0",
        "widths=4,8",
        "seeds=1000000000",
        "--runs-dir",
        "{runs}",
    ),
    cli("toy scan odd width", "toy", "scan", "widths=5,8", "--runs-dir", "{runs}"),
    cli("toy scan one width", "toy", "scan", "widths=8", "--runs-dir", "{runs}"),
    cli("toy scan negative tol", "toy", "scan", "tol=-1", "--runs-dir", "{runs}"),
    cli("toy scan nan gamma", "toy", "scan", "gammas=nan", "--runs-dir", "{runs}"),
    cli("toy scan zero steps", "toy", "scan", "max_steps=0", "--runs-dir", "{runs}"),
    cli("toy scan unknown key", "toy", "scan", "gamma=1", "--runs-dir", "{runs}"),
    cli("toy scan removed flag", "toy", "scan", "--gammas", "1", "--runs-dir", "{runs}"),
    cli("toy scan bad profile", "toy", "scan", "--profile", "huge", "--runs-dir", "{runs}"),
    cli("toy condense width 1e9", "toy", "condense", "width=1000000000", "--runs-dir", "{runs}"),
    cli(
        "toy condense gamma 100",
        "toy",
        "condense",
        "gammas=100",
        "gamma_primes=0",
        "width=20",
        "--runs-dir",
        "{runs}",
    ),
    cli("toy condense odd width", "toy", "condense", "width=7", "--runs-dir", "{runs}"),
    cli(
        "toy condense config is a folder",
        "toy",
        "condense",
        "--config",
        "{dir}",
        "--runs-dir",
        "{runs}",
    ),
    cli("toy diagonal alpha overflow", "toy", "diagonal", "alphas=1e200", "--runs-dir", "{runs}"),
    cli("toy diagonal alpha tiny", "toy", "diagonal", "alphas=1e-200", "--runs-dir", "{runs}"),
    cli("toy diagonal alpha zero", "toy", "diagonal", "alphas=0", "--runs-dir", "{runs}"),
    cli("toy diagonal depth 1", "toy", "diagonal", "depth=1", "--runs-dir", "{runs}"),
    cli("toy diagonal depth huge", "toy", "diagonal", "depth=100000", "--runs-dir", "{runs}"),
    cli("toy escape unknown key", "toy", "escape", "order=2", "--runs-dir", "{runs}"),
    # -- store and output locations
    cli("runs-dir is a file", "toy", "escape", "--runs-dir", "{file}"),
    cli("runs-dir below a file", "toy", "escape", "--runs-dir", "{nodir}"),
    cli("SMALLINIT_RUNS is a file", "toy", "escape", SMALLINIT_RUNS="{file}"),
    cli("SMALLINIT_RUNS below a file", "toy", "escape", SMALLINIT_RUNS="{nodir}"),
    cli("runs-dir unwritable", "toy", "escape", "--runs-dir", "/proc/smallinit-runs"),
    cli("llm train runs-dir is a file", "llm", "train", *TINY_TRAIN, "--runs-dir", "{file}"),
    cli("figs out below a file", "figs", "--only", "1", "--out", "{nodir}", "--runs-dir", "{runs}"),
    cli("figs out is a file", "figs", "--only", "1", "--out", "{file}", "--runs-dir", "{runs}"),
    cli(
        "anchor-scan json takes no file",
        "llm",
        "anchor-scan",
        "--json",
        "{nodir}/t.json",
        "scan.gammas=0.5",
        "scan.layers=1",
        "scan.weight_decays=0",
        "scan.seeds=[0]",
        "train.steps=1",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "anchor-scan unknown scan key",
        "llm",
        "anchor-scan",
        "scan.gamma=0.5",
        "--runs-dir",
        "{runs}",
    ),
    cli("figs unknown number", "figs", "--only", "99"),
    cli("figs bad profile", "figs", "--profile", "enormous"),
    cli("claims bad profile", "claims", "--profile", "quick", "enormous"),
    cli("claims unknown rules", "claims", "--rules", "14", "--runs-dir", "{runs}"),
    cli(
        "figs plan spread file missing",
        "figs",
        "--plan",
        "--only",
        "6",
        "--spread",
        "{runs}/absent.json",
    ),
    # -- profile overlays (--config FILE and key=value laid over --profile)
    cli("figs overlay unknown key", "figs", "--plan", "llm-sweeps.plan.sedes=[0]"),
    cli("figs overlay unknown table", "figs", "--plan", "--only", "7", "llm-sweep.seeds=[0]"),
    cli("figs overlay value for a table", "figs", "--plan", "anchor.train=5"),
    cli("figs overlay key below a value", "figs", "--plan", "anchor.seed.x=1"),
    cli("figs overlay nan", "figs", "--plan", "anchor.train.lr=nan"),
    cli(
        "figs overlay file extends another profile", "figs", "--plan", "--config", "{overlay_other}"
    ),
    cli("figs overlay file is a FIFO", "figs", "--plan", "--config", "{fifo}"),
    cli("figs overlay file nested too deeply", "figs", "--plan", "--config", "{deep_toml}"),
    cli("figs overlay config empty", "figs", "--plan", "--config", ""),
    cli("figs overlay key empty", "figs", "--plan", "=1"),
    cli(
        "llm sweep overlay unknown key",
        "llm",
        "sweep",
        "--experiment",
        "gamma-sweep",
        "llm-sweeps.plan.seedz=[0]",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sweep overlay bad value",
        "llm",
        "sweep",
        "--experiment",
        "gamma-sweep",
        "llm-sweeps.plan.seeds=x",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sweep overlay file extends another profile",
        "llm",
        "sweep",
        "--experiment",
        "gamma-sweep",
        "--config",
        "{overlay_other}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "claims overlay over two profiles",
        "claims",
        "--profile",
        "quick",
        "medium",
        "anchor.train.steps=3",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "claims overlay without a profile", "claims", "anchor.train.steps=3", "--runs-dir", "{runs}"
    ),
    cli(
        "claims overlay unknown key",
        "claims",
        "--profile",
        "quick",
        "anchor.trian.steps=3",
        "--runs-dir",
        "{runs}",
    ),
    api(
        "profiles.derive unknown key",
        "from smallinit.core import profiles\n"
        "profiles.derive('quick', overrides={'anchor.train.stepz': 1})",
    ),
    api(
        "profiles.derive unknown base",
        "from smallinit.core import profiles\nprofiles.derive('enormous')",
    ),
    api(
        "profiles.derive overrides not a mapping",
        "from smallinit.core import profiles\n"
        "profiles.derive('quick', overrides=['anchor.train.steps=1'])",
    ),
    # -- configs
    cli(
        "llm train config is a folder", "llm", "train", "--config", "{dir}", "--runs-dir", "{runs}"
    ),
    cli(
        "llm train config missing",
        "llm",
        "train",
        "--config",
        "{tmp}/none.toml",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm train config not toml", "llm", "train", "--config", "{file}", "--runs-dir", "{runs}"),
    cli("llm train unknown key", "llm", "train", "model.nope=1", "--runs-dir", "{runs}"),
    cli("llm train override without =", "llm", "train", "model.d_model", "--runs-dir", "{runs}"),
    cli("llm train wrong type", "llm", "train", "model.d_model=wide", "--runs-dir", "{runs}"),
    cli("llm train d_model huge", "llm", "train", "model.d_model=1000000", "--runs-dir", "{runs}"),
    cli("llm train d_ff huge", "llm", "train", "model.d_ff=1000000000", "--runs-dir", "{runs}"),
    cli(
        "llm train batch huge", "llm", "train", "train.batch_size=100000000", "--runs-dir", "{runs}"
    ),
    cli("llm train context 1e7", "llm", "train", "model.context=10000000", "--runs-dir", "{runs}"),
    cli("llm train layers 1e6", "llm", "train", "model.n_layers=1000000", "--runs-dir", "{runs}"),
    cli(
        "llm train vocab too big", "llm", "train", "model.vocab_size=70000", "--runs-dir", "{runs}"
    ),
    cli("llm train heads not dividing", "llm", "train", "model.n_heads=3", "--runs-dir", "{runs}"),
    cli(
        "llm train init gamma 1e308",
        "llm",
        "train",
        *TINY_TRAIN,
        "init=gamma:1e308",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train init gamma no value",
        "llm",
        "train",
        *TINY_TRAIN,
        "init=gamma",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm train init unknown", "llm", "train", "init=bogus:1", "--runs-dir", "{runs}"),
    cli("llm train negative lr", "llm", "train", "train.lr=-1", "--runs-dir", "{runs}"),
    cli("llm train nan lr", "llm", "train", "train.lr=nan", "--runs-dir", "{runs}"),
    cli(
        "llm train corpus missing file",
        "llm",
        "train",
        *TINY_TRAIN,
        "data.corpus=text:{tmp}/no-such-file.txt",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train corpus kind unknown", "llm", "train", "data.corpus=ftp:x", "--runs-dir", "{runs}"
    ),
    cli(
        "llm train device cuda without cuda",
        "llm",
        "train",
        *TINY_TRAIN,
        "train.device=cuda",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm init-table layers 1e6", "llm", "init-table", "model.n_layers=1000000"),
    cli("llm init-table unknown init", "llm", "init-table", "--init", "bogus"),
    cli("llm init-table gamma 1e308", "llm", "init-table", "--init", "gamma:1e308"),
    cli("llm init-table qk beside q", "llm", "init-table", "--init", "gamma:0.5,qk=1,q=2"),
    cli("llm coord-check one width", "llm", "coord-check", "--widths", "64", "--out", "{tmp}/cc"),
    cli(
        "llm coord-check width not dividing heads",
        "llm",
        "coord-check",
        "--widths",
        "30,64",
        "--out",
        "{tmp}/cc",
    ),
    cli("llm coord-check widths not numbers", "llm", "coord-check", "--widths", "a,b"),
    cli("llm coord-check width zero", "llm", "coord-check", "--widths", "0,64"),
    cli(
        "llm coord-check width huge",
        "llm",
        "coord-check",
        "--widths",
        "32,10000000",
        "--out",
        "{tmp}/cc",
    ),
    cli(
        "llm coord-check unknown scheme",
        "llm",
        "coord-check",
        "--init",
        "bogus:1",
        "--out",
        "{tmp}/cc",
    ),
    cli(
        "llm coord-check gamma 1e308",
        "llm",
        "coord-check",
        "--init",
        "gamma:1e308",
        "--out",
        "{tmp}/cc",
    ),
    cli("llm coord-check negative steps", "llm", "coord-check", "--steps", "-1"),
    cli("llm coord-check out is a file", "llm", "coord-check", "--out", "{file}"),
    cli("llm coord-check out below a file", "llm", "coord-check", "--out", "{nodir}/cc"),
    cli(
        "llm train tensorboard is a file",
        "llm",
        "train",
        *TINY_TRAIN,
        "--tensorboard",
        "{file}",
        "--runs-dir",
        "{tmp}/tbruns",
    ),
    cli(
        "llm train SMALLINIT_TENSORBOARD is a file",
        "llm",
        "train",
        *TINY_TRAIN,
        "--runs-dir",
        "{tmp}/tbruns",
        SMALLINIT_TENSORBOARD="{file}",
    ),
    cli("llm anchor huge sigma", "llm", "anchor", "init=gamma:-100", "--runs-dir", "{runs}"),
    cli(
        "llm anchor scan gamma not positive",
        "llm",
        "anchor-scan",
        "scan.gammas=0.5,-1",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm anchor init typo", "llm", "anchor", "init=gama:1", "--runs-dir", "{runs}"),
    cli("llm anchor unknown profile", "llm", "anchor", "--profile", "nope", "--runs-dir", "{runs}"),
    cli(
        "llm anchor seq longer than context",
        "llm",
        "anchor",
        "model.context=2",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sweep unknown experiment",
        "llm",
        "sweep",
        "--experiment",
        "nope",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sweep zero workers",
        "llm",
        "sweep",
        "--experiment",
        "gamma-sweep",
        "--workers",
        "0",
        "--runs-dir",
        "{runs}",
    ),
    cli("compare one width", "compare", "widths=64", "--runs-dir", "{runs}"),
    cli("compare nan gamma", "compare", "gammas=nan", "--runs-dir", "{runs}"),
    cli("compare widths huge", "compare", "widths=1000000,2000000", "--runs-dir", "{runs}"),
    cli("compare config is a fifo", "compare", "--config", "{fifo}", "--runs-dir", "{runs}"),
    # -- runs given by reference
    cli("llm eval not a run", "llm", "eval", "{notrun}", "--runs-dir", "{runs}"),
    cli("llm eval absolute non-run", "llm", "eval", "/etc", "--runs-dir", "{runs}"),
    cli("llm eval glob key", "llm", "eval", "*", "--runs-dir", "{runs}"),
    cli("llm eval dotdot key", "llm", "eval", "../..", "--runs-dir", "{runs}"),
    cli("llm eval unknown key", "llm", "eval", "ffffffffffff", "--runs-dir", "{runs}"),
    cli("llm eval corrupt model.pt", "llm", "eval", "{run_badmodel}", "--runs-dir", "{runs}"),
    cli(
        "llm eval config does not match weights",
        "llm",
        "eval",
        "{run_mismatch}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm eval corrupt tokenizer",
        "llm",
        "eval",
        "{run}",
        "--runs-dir",
        "{runs}",
        SMALLINIT_CACHE="{badtok_cache}",
    ),
    cli(
        "llm downstream absolute non-run",
        "llm",
        "downstream",
        "/etc",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream device bogus",
        "llm",
        "downstream",
        "{run}",
        "--device",
        "bogus",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream device cuda",
        "llm",
        "downstream",
        "{run}",
        "--device",
        "cuda",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream device mps",
        "llm",
        "downstream",
        "{run}",
        "--device",
        "mps",
        "--tasks",
        "{task_good}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample device mps", "llm", "sample", "{run}", "--device", "mps", "--runs-dir", "{runs}"
    ),
    cli(
        "llm downstream unknown task",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "nope",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream limit 0",
        "llm",
        "downstream",
        "{run}",
        "--limit",
        "0",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream 50 MB line",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "arc_easy",
        "--data-dir",
        "{bigjsonl}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm export unknown run",
        "llm",
        "export",
        "ffffffffffff",
        "{tmp}/export-new",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm export into a non-empty folder",
        "llm",
        "export",
        "{run}",
        "{notrun}",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm export onto a file", "llm", "export", "{run}", "{file}", "--runs-dir", "{runs}"),
    cli("llm export below a file", "llm", "export", "{run}", "{nodir}", "--runs-dir", "{runs}"),
    cli(
        "llm export gated attention",
        "llm",
        "export",
        "{run_gated}",
        "{tmp}/export-gated",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm export corrupt model.safetensors",
        "llm",
        "export",
        "{run_badsafetensors}",
        "{tmp}/export-bad",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream --hf a file",
        "llm",
        "downstream",
        "--hf",
        "{file}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream --hf a run, not an HF folder",
        "llm",
        "downstream",
        "--hf",
        "{run}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream RUN and --hf",
        "llm",
        "downstream",
        "{run}",
        "--hf",
        "{dir}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm eval corrupt model.safetensors",
        "llm",
        "eval",
        "{run_badsafetensors}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task malformed line",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{task_badjson}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task no kind",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{task_nofield}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task missing gold",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{task_nogold}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task absent",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{tmp}/absent.jsonl",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm sample not a run", "llm", "sample", "{notrun}", "--runs-dir", "{runs}"),
    cli("llm sample unknown key", "llm", "sample", "ffffffffffff", "--runs-dir", "{runs}"),
    cli(
        "llm sample negative temperature",
        "llm",
        "sample",
        "{run}",
        "--temperature",
        "-1",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample nan temperature",
        "llm",
        "sample",
        "{run}",
        "--temperature",
        "nan",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm sample top-k 0", "llm", "sample", "{run}", "--top-k", "0", "--runs-dir", "{runs}"),
    cli(
        "llm sample seed huge",
        "llm",
        "sample",
        "{run}",
        "--seed",
        "1" + "0" * 30,
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample max-new-tokens 0",
        "llm",
        "sample",
        "{run}",
        "--max-new-tokens",
        "0",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample max-new-tokens 1e12",
        "llm",
        "sample",
        "{run}",
        "--max-new-tokens",
        "1000000000000",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample num-samples 1e9",
        "llm",
        "sample",
        "{run}",
        "--num-samples",
        "1000000000",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample device bogus",
        "llm",
        "sample",
        "{run}",
        "--device",
        "bogus",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm sample corrupt model.pt", "llm", "sample", "{run_badmodel}", "--runs-dir", "{runs}"),
    cli(
        "llm sample corrupt stored tokenizer",
        "llm",
        "sample",
        "{run_badtok}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream-compare non-runs",
        "llm",
        "downstream-compare",
        "/etc",
        "/usr",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream-compare bootstrap huge",
        "llm",
        "downstream-compare",
        "{run}",
        "{run}",
        "--bootstrap",
        "1000000000000",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream-compare bad groups",
        "llm",
        "downstream-compare",
        "{run}",
        "{run}",
        "--groups",
        "a==",
        "--runs-dir",
        "{runs}",
    ),
    # -- runs as objects, classify's tolerance
    cli("runs show unknown key", "runs", "show", "abcdef123", "--runs-dir", "{runs}"),
    cli("runs show not a key", "runs", "show", "../../etc", "--runs-dir", "{runs}"),
    cli("runs show unknown kind", "runs", "show", "nokind/abc", "--runs-dir", "{runs}"),
    # --profile: every profile's plan is built in seconds unloaded, too near the 30 s bound
    cli(
        "runs show --command unknown key",
        "runs",
        "show",
        "abcdef123",
        "--command",
        "--profile",
        "quick",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "runs show --command not a key",
        "runs",
        "show",
        "../../etc",
        "--command",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "runs show --command unknown kind",
        "runs",
        "show",
        "nokind/abc",
        "--command",
        "--profile",
        "quick",
        "--runs-dir",
        "{runs}",
    ),
    cli("runs show --command KEY blank", "runs", "show", " ", "--command", "--runs-dir", "{runs}"),
    cli(
        "runs show --command ambiguous prefix",
        "runs",
        "show",
        "0",
        "--command",
        "--profile",
        "h200",
        "--runs-dir",
        "{runs}",
    ),
    cli("runs ls unknown kind", "runs", "ls", "--kind", "nokind", "--runs-dir", "{runs}"),
    cli("runs ls root is a file", "runs", "ls", "--runs-dir", "{file}"),
    cli("runs ls root below a file", "runs", "ls", "--runs-dir", "{nodir}"),
    cli("claims runs-dir is a file", "claims", "--profile", "quick", "--runs-dir", "{file}"),
    cli("claims runs-dir below a file", "claims", "--runs-dir", "{nodir}"),
    cli("claims runs-dir /etc/passwd", "claims", "--runs-dir", "/etc/passwd"),
    api(
        "claims.table of a store that is a file",
        "from smallinit.study import claims\n"
        "from smallinit.core.store import RunStore\n"
        "claims.table(['quick'], RunStore('{file}'))",
    ),
    cli(
        "theory classify negative tol",
        "theory",
        "classify",
        "--gamma",
        "1",
        "--gamma-prime",
        "0",
        "--tol=-1",
    ),
    cli(
        "theory classify huge tol",
        "theory",
        "classify",
        "--gamma",
        "1",
        "--gamma-prime",
        "0",
        "--tol",
        "0.7",
    ),
    cli(
        "theory classify nan tol",
        "theory",
        "classify",
        "--gamma",
        "1",
        "--gamma-prime",
        "0",
        "--tol",
        "nan",
    ),
    # -- the Python API
    api(
        "apply_init None",
        "from smallinit.llm import apply_init, Transformer, ModelConfig\n"
        "apply_init(Transformer(ModelConfig(d_model=16, n_heads=2, vocab_size=64,"
        " context=8, n_layers=1)), None)",
    ),
    api(
        "apply_init gamma 1e308",
        "from smallinit.llm import apply_init, Transformer,"
        " ModelConfig\napply_init(Transformer(ModelConfig(d_model=16, n_heads=2,"
        " vocab_size=64, context=8, n_layers=1)), 'gamma:1e308')",
    ),
    api(
        "apply_init unknown model",
        "import torch\nfrom smallinit.llm import apply_init\n"
        "apply_init(torch.nn.Conv2d(3, 3, 3), 'gamma:1')",
    ),
    api(
        "load_run unknown key",
        "import smallinit\nsmallinit.load_run('abcdef12', runs_dir='{runs}')",
    ),
    api("classify tol text", "from smallinit.theory import classify\nclassify(1, 0, tol='x')"),
    api(
        "apply_init unknown 1-D parameter",
        "import torch\nfrom smallinit.llm import "
        "apply_init, Transformer, ModelConfig\nm = Transformer(ModelConfig(d_model=16, "
        "n_heads=2, vocab_size=64, context=8, n_layers=1))\nm.register_parameter('scale', "
        "torch.nn.Parameter(torch.ones(3)))\napply_init(m, 'gamma:1')",
    ),
    api(
        "register_family unknown role",
        "from smallinit.llm import register_family\n"
        "register_family('x', lambda m: False, matrices={'w$': 'attn.z'})",
    ),
    api("ModelConfig d_model 0", "from smallinit.llm import ModelConfig\nModelConfig(d_model=0)"),
    api("RunConfig bad init", "from smallinit.llm import RunConfig\nRunConfig(init='x:1')"),
    api(
        "parse_scheme empty",
        "from smallinit.theory.init_rules import parse_scheme\nparse_scheme('')",
    ),
    api("classify nan", "from smallinit.theory import phase\nphase.classify(float('nan'), 0)"),
    api(
        "RunStore on a file",
        "from smallinit.core.store import RunStore\n"
        "RunStore('{file}').get_or_run('k', {'a': 1}, lambda run: {})",
    ),
    api(
        "load_config unknown key",
        "from smallinit.core.config import load_config\n"
        "from smallinit.llm import RunConfig\nload_config(RunConfig, None, ['zzz=1'])",
    ),
    api(
        "cosine_gram 3-d of wrong kind",
        "from smallinit.kernels import cosine_gram\ncosine_gram('abc')",
    ),
    api(
        "relative_distance shape mismatch",
        "import numpy as np\n"
        "from smallinit.kernels import relative_distance\n"
        "relative_distance(np.ones(3), np.ones(4))",
    ),
    # -- deep nesting: configs, overrides, store files, task files, HF configs
    cli(
        "llm train config nested 100000 arrays",
        "llm",
        "train",
        "--config",
        "{deep_toml}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train config nested inline tables",
        "llm",
        "train",
        "--config",
        "{deep_inline_toml}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train config nested table headers",
        "llm",
        "train",
        "--config",
        "{deep_header_toml}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train config nested 300 arrays",
        "llm",
        "train",
        "--config",
        "{mid_toml}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm anchor config nested",
        "llm",
        "anchor",
        "--config",
        "{deep_toml}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm coord-check config nested",
        "llm",
        "coord-check",
        "--config",
        "{deep_inline_toml}",
        "--out",
        "{tmp}/cc",
    ),
    cli(
        "llm train override nested 60000 arrays",
        "llm",
        "train",
        "model.d_model=" + "[" * 60000,
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train override nested 200 arrays",
        "llm",
        "train",
        "model.d_model=" + "[" * 200 + "1" + "]" * 200,
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train override 5000 dotted parts",
        "llm",
        "train",
        "model." + "a." * 5000 + "b=1",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "compare override nested tables",
        "compare",
        "llm." + "x." * 3000 + "y=1",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm eval run with nested status.json",
        "llm",
        "eval",
        "{run_deepstatus}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm eval run with nested config.json",
        "llm",
        "eval",
        "{run_deepconfig}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample run with nested config.json",
        "llm",
        "sample",
        "{run_deepconfig}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm export run with nested status.json",
        "llm",
        "export",
        "{run_deepstatus}",
        "{tmp}/export-deep",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task nested arrays",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{task_deep}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task nested objects",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{task_deep_obj}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task nested 500",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{task_mid}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream licenses.json nested",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "arc_easy",
        "--data-dir",
        "{lic_deep}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream --hf config.json nested",
        "llm",
        "downstream",
        "--hf",
        "{hf_deep}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream-compare groups file nested",
        "llm",
        "downstream-compare",
        "{run}",
        "{run}",
        "--groups",
        "{groups_deep}",
        "--runs-dir",
        "{runs}",
    ),
    api(
        "load_config file nested",
        "from smallinit.core.config import load_config\n"
        "from smallinit.llm import RunConfig\nload_config(RunConfig, '{deep_toml}')",
    ),
    api(
        "load_config override nested",
        "from smallinit.core.config import load_config\n"
        "from smallinit.llm import RunConfig\n"
        "load_config(RunConfig, None, ['seed=' + '[' * 100000])",
    ),
    api(
        "config_key of a nested dict config",
        "from smallinit.core.runs import config_key\n"
        "x = []\nfor _ in range(5000):\n    x = [x]\nconfig_key('k', {'a': x}, '1')",
    ),
    api(
        "read_json nested store file",
        "from smallinit.core.atomic import read_json\nread_json('{deep_json}')",
    ),
    api(
        "load_trained nested config.json",
        "from smallinit.llm import load_trained\nload_trained('{run_deepconfig}')",
    ),
    # -- files that are not regular files, wherever the CLI reads a user-given file
    cli("llm train config is a FIFO", "llm", "train", "--config", "{fifo}", "--runs-dir", "{runs}"),
    cli(
        "llm train config is /dev/zero",
        "llm",
        "train",
        "--config",
        "/dev/zero",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train config is /dev/urandom",
        "llm",
        "train",
        "--config",
        "/dev/urandom",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train config is a socket",
        "llm",
        "train",
        "--config",
        "{socket}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train config is a symlink loop",
        "llm",
        "train",
        "--config",
        "{loop}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm anchor config is a FIFO", "llm", "anchor", "--config", "{fifo}", "--runs-dir", "{runs}"
    ),
    cli(
        "llm coord-check config is /dev/zero",
        "llm",
        "coord-check",
        "--config",
        "/dev/zero",
        "--out",
        "{tmp}/cc",
    ),
    cli(
        "llm downstream custom task is a FIFO",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{fifo_jsonl}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream custom task is /dev/zero",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "{zero_jsonl}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream licenses.json is a FIFO",
        "llm",
        "downstream",
        "{run}",
        "--tasks",
        "arc_easy",
        "--data-dir",
        "{lic_fifo}",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm downstream-compare groups file is a FIFO",
        "llm",
        "downstream-compare",
        "{run}",
        "{run}",
        "--groups",
        "{fifo_groups}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train corpus is a FIFO",
        "llm",
        "train",
        *TINY_TRAIN,
        "data.corpus=text:{fifo}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train corpus is /dev/zero",
        "llm",
        "train",
        *TINY_TRAIN,
        "data.corpus=text:/dev/zero",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm train corpus folder holds a FIFO",
        "llm",
        "train",
        *TINY_TRAIN,
        "data.corpus=text:{corpus_fifo}",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm eval run with a FIFO status.json",
        "llm",
        "eval",
        "{run_fifostatus}",
        "--runs-dir",
        "{runs}",
    ),
    # -- empty paths (an empty path would be the current folder)
    cli("runs ls runs-dir empty", "runs", "ls", "--runs-dir", ""),
    cli("toy escape runs-dir empty", "toy", "escape", "--runs-dir", ""),
    cli("llm train runs-dir empty", "llm", "train", *TINY_TRAIN, "--runs-dir", ""),
    cli("claims runs-dir empty", "claims", "--runs-dir", ""),
    cli("llm train config empty", "llm", "train", "--config", "", "--runs-dir", "{runs}"),
    cli(
        "llm train tensorboard empty",
        "llm",
        "train",
        *TINY_TRAIN,
        "--tensorboard",
        "",
        "--runs-dir",
        "{runs}",
    ),
    cli("figs out empty", "figs", "--only", "1", "--out", "", "--runs-dir", "{runs}"),
    cli("llm coord-check out empty", "llm", "coord-check", "--out", ""),
    cli("llm export out empty", "llm", "export", "{run}", "", "--runs-dir", "{runs}"),
    cli(
        "llm downstream data-dir empty",
        "llm",
        "downstream",
        "{run}",
        "--data-dir",
        "",
        "--no-fetch",
        "--runs-dir",
        "{runs}",
    ),
    cli("llm sample RUN empty", "llm", "sample", "", "--runs-dir", "{runs}"),
    cli("runs show KEY blank", "runs", "show", " ", "--runs-dir", "{runs}"),
    # -- sampling edges
    cli(
        "llm sample temperature 1e-300",
        "llm",
        "sample",
        "{run}",
        "--temperature",
        "1e-300",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample temperature 1e-5",
        "llm",
        "sample",
        "{run}",
        "--temperature",
        "1e-5",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample temperature 1e300",
        "llm",
        "sample",
        "{run}",
        "--temperature",
        "1e300",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample temperature inf",
        "llm",
        "sample",
        "{run}",
        "--temperature",
        "inf",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample max-new-tokens 1e6",
        "llm",
        "sample",
        "{run}",
        "--max-new-tokens",
        "1000000",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample max-new-tokens just over the cap",
        "llm",
        "sample",
        "{run}",
        "--max-new-tokens",
        "10001",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample num-samples over the cap",
        "llm",
        "sample",
        "{run}",
        "--num-samples",
        "1001",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample prompt byte 0xff",
        "llm",
        "sample",
        "{run}",
        "--prompt",
        "ab\udcff",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample prompt cut UTF-8 sequence",
        "llm",
        "sample",
        "{run}",
        "--prompt",
        "caf\udcc3",
        "--runs-dir",
        "{runs}",
    ),
    cli(
        "llm sample prompt encoded surrogate",
        "llm",
        "sample",
        "{run}",
        "--prompt",
        "x\udced\udca0\udc80",
        "--runs-dir",
        "{runs}",
    ),
    # -- token ids and sampling through the Python API
    api("generate id outside the vocabulary", TINY_MODEL + "m.generate(torch.tensor([[64]]), 3)"),
    api("generate negative id", TINY_MODEL + "m.generate(torch.tensor([[-1]]), 3)"),
    api("forward id outside the vocabulary", TINY_MODEL + "m(torch.tensor([[1, 64]]))"),
    api("forward negative id", TINY_MODEL + "m(torch.tensor([[-1, 2]]))"),
    api("forward id 0xFFFF with targets", TINY_MODEL + "x = torch.tensor([[1, 0xFFFF]])\nm(x, x)"),
    api(
        "token_losses id outside the vocabulary",
        TINY_MODEL + "x = torch.tensor([[1, 64]])\nm.token_losses(x, x)",
    ),
    api("generate float ids", TINY_MODEL + "m.generate(torch.tensor([[1.0, 2.0]]), 3)"),
    api("generate bool ids", TINY_MODEL + "m.generate(torch.tensor([[True]]), 3)"),
    api("generate numpy ids", TINY_MODEL + "import numpy as np\nm.generate(np.array([[1, 2]]), 3)"),
    api("generate list ids", TINY_MODEL + "m.generate([[1, 2]], 3)"),
    api("generate 1-d ids", TINY_MODEL + "m.generate(torch.tensor([1, 2]), 3)"),
    api(
        "generate temperature 1e-300",
        TINY_MODEL + "m.generate(torch.tensor([[1]]), 3, temperature=1e-300)",
    ),
    api("generate max_new_tokens float", TINY_MODEL + "m.generate(torch.tensor([[1]]), 2.5)"),
    api("generate max_new_tokens bool", TINY_MODEL + "m.generate(torch.tensor([[1]]), True)"),
    api("generate top_k float", TINY_MODEL + "m.generate(torch.tensor([[1]]), 3, top_k=2.0)"),
    api("forward float ids", TINY_MODEL + "m(torch.tensor([[1.0, 2.0]]))"),
    api("forward bool ids", TINY_MODEL + "m(torch.tensor([[True, False]]))"),
    api(
        "sample_texts prompt bytes",
        "from smallinit.llm.training.sample import sample_texts\n"
        "sample_texts(None, None, b'hello')",
    ),
    api(
        "sample_texts lone surrogate",
        "from smallinit.llm.training.sample import "
        "sample_texts\nsample_texts(None, None, 'a\\udcff')",
    ),
    api(
        "sample_texts max_new_tokens over the cap",
        "from smallinit.llm.training.sample "
        "import sample_texts\nsample_texts(None, None, 'a', max_new_tokens=10**6)",
    ),
    # -- misspelled enum values and wrong types in config dataclasses
    api(
        "ModelConfig norm typo",
        "from smallinit.llm import ModelConfig\nModelConfig(norm='rmsnrom')",
    ),
    api(
        "ModelConfig mlp typo", "from smallinit.llm import ModelConfig\nModelConfig(mlp='swigelu')"
    ),
    api(
        "ModelConfig positions typo",
        "from smallinit.llm import ModelConfig\nModelConfig(positions='rotary')",
    ),
    api(
        "ModelConfig gate_kind typo",
        "from smallinit.llm import ModelConfig\nModelConfig(gate_kind='head-wise')",
    ),
    api(
        "ModelConfig norm_position typo",
        "from smallinit.llm import ModelConfig\nModelConfig(norm_position='middle')",
    ),
    api(
        "TrainConfig precision typo",
        "from smallinit.llm import TrainConfig\nTrainConfig(precision='fp16')",
    ),
    api(
        "TrainConfig device typo",
        "from smallinit.llm import TrainConfig\nTrainConfig(device='gpu')",
    ),
    api(
        "ScanConfig step_rule typo",
        "from smallinit.toy import ScanConfig\nScanConfig(step_rule='Gram')",
    ),
    api(
        "InitialCondensationConfig optimizer typo",
        "from smallinit.toy import "
        "InitialCondensationConfig\nInitialCondensationConfig(optimizer='sgd')",
    ),
    api(
        "TrainSettings activation typo",
        "from smallinit.toy import TrainSettings\nTrainSettings(activation='ReLU')",
    ),
    api(
        "RunConfig model given as a string",
        "from smallinit.llm import RunConfig\nRunConfig(model='small')",
    ),
    api(
        "ModelConfig d_model bool",
        "from smallinit.llm import ModelConfig\nModelConfig(d_model=True)",
    ),
    api(
        "ModelConfig d_model fraction",
        "from smallinit.llm import ModelConfig\nModelConfig(d_model=64.5)",
    ),
    api(
        "ScanConfig widths string with a word",
        "from smallinit.toy import ScanConfig\nScanConfig(widths='250,wide')",
    ),
    api(
        "CondenseConfig gammas a dict",
        "from smallinit.toy import CondenseConfig\nCondenseConfig(gammas={'a': 1})",
    ),
    cli("llm train precision typo", "llm", "train", "train.precision=fp16", "--runs-dir", "{runs}"),
    api("run_scan given a profile name", "from smallinit import toy\ntoy.run_scan('quick')"),
    api("run_condense given a dict", "from smallinit import toy\ntoy.run_condense({'width': 10})"),
    api(
        "run_scan store given as a string",
        "from smallinit import toy\ntoy.run_scan(toy.ScanConfig(), store='{runs}')",
    ),
    api(
        "train given a ModelConfig",
        "from smallinit.llm import train, ModelConfig\ntrain(ModelConfig())",
    ),
]


# ----------------------------------------------------------------------------- fixture
def _run_smallinit(args: list[str], env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "smallinit", "-q", *args],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def make_fixture(root: Path) -> dict[str, str]:
    """Build every placeholder's target under ``root``; returns the placeholder map."""
    root.mkdir(parents=True, exist_ok=True)
    places = {"tmp": str(root)}
    regular = root / "regular.txt"
    regular.write_text("not a folder, not TOML: [[[\n")
    places["file"] = str(regular)
    places["nodir"] = str(regular / "below")
    (root / "folder").mkdir(exist_ok=True)
    places["dir"] = str(root / "folder")
    notrun = root / "notrun"
    notrun.mkdir(exist_ok=True)
    (notrun / "readme.txt").write_text("hello")
    places["notrun"] = str(notrun)
    runs, cache = root / "runs", root / "cache"
    places["runs"], places["cache"] = str(runs), str(cache)
    env = {**os.environ, "SMALLINIT_CACHE": str(cache), "SMALLINIT_RUNS": str(runs)}
    kind_dir = runs / "llm-train"
    if not kind_dir.is_dir() or not any(kind_dir.iterdir()):
        _run_smallinit(["llm", "train", *TINY_TRAIN], env)
    run = sorted(p for p in kind_dir.iterdir() if (p / "model.pt").is_file())[0]
    places["run"] = str(run)
    # damaged copies outside the store, each in a folder named by its key (a valid run
    # directory apart from the damage, so the damage itself is what gets reported)
    outside = root / "outside"
    if outside.exists():
        shutil.rmtree(outside)
    badmodel = outside / "badmodel" / run.name  # a run from before model.safetensors
    shutil.copytree(run, badmodel)
    (badmodel / "model.safetensors").unlink(missing_ok=True)
    model = badmodel / "model.pt"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 3])
    places["run_badmodel"] = str(badmodel)
    badst = outside / "badsafetensors" / run.name
    shutil.copytree(run, badst)
    weights = badst / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    places["run_badsafetensors"] = str(badst)
    badtok_run = outside / "badtok" / run.name  # the tokenizer stored with the run, damaged
    shutil.copytree(run, badtok_run)
    (badtok_run / "tokenizer.json").write_text('{"model": ')
    places["run_badtok"] = str(badtok_run)
    for place, edit in (
        ("run_mismatch", {"d_model": 32}),
        ("run_gated", {"gated_attention": True}),
    ):
        meta = json.loads((run / "config.json").read_text())
        meta["config"]["model"].update(edit)
        meta["key"] = config_key("llm-train", meta["config"], str(meta["version"]))
        copy = outside / place / meta["key"]
        shutil.copytree(run, copy)
        (copy / "config.json").write_text(json.dumps(meta))
        places[place] = str(copy)
    badtok = root / "badtok-cache"
    if badtok.exists():
        shutil.rmtree(badtok)
    shutil.copytree(cache, badtok)
    for tok in badtok.rglob("*.json"):
        if "token" in tok.name:
            tok.write_text('{"model": ')
    places["badtok_cache"] = str(badtok)
    big = root / "bigjsonl"
    big.mkdir(exist_ok=True)
    with open(big / "arc_easy.jsonl", "w") as fh:
        fh.write('{"query": "' + "x" * (50 * 1024**2) + '"}\n')
    places["bigjsonl"] = str(big)
    tasks = root / "custom-tasks"
    tasks.mkdir(exist_ok=True)
    good = '{"id": "a", "query": "Q:", "choices": [" x", " y"], "gold": 0}\n'
    for name, text in (
        ("task_good", good),
        ("task_badjson", good + '{"id": "b", "query": \n'),
        ("task_nofield", '{"id": "a", "query": "Q:"}\n'),
        ("task_nogold", good + '{"id": "b", "query": "Q:", "choices": [" x", " y"]}\n'),
    ):
        (tasks / f"{name}.jsonl").write_text(text)
        places[name] = str(tasks / f"{name}.jsonl")
    places.update(make_hostile_files(root / "hostile", run))
    return places


def _nested(depth: int, open_: str = "[", close: str = "]", inner: str = "") -> str:
    return open_ * depth + inner + close * depth


def make_hostile_files(root: Path, run: Path) -> dict[str, str]:
    """Deeply nested files and special files (FIFOs, a socket, a symlink loop) under
    ``root``, and damaged copies of the finished ``run``; returns their placeholders."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    places: dict[str, str] = {}

    def write(place: str, name: str, text: str) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        places[place] = str(path.parent if "/" in name else path)

    write("deep_toml", "deep.toml", "a = " + _nested(100_000) + "\n")
    write("overlay_other", "overlay-other.toml", 'extends = "full"\n[anchor.train]\nsteps = 3\n')
    write("deep_inline_toml", "deep-inline.toml", "a = " + _nested(100_000, "{b = ", "}", "1"))
    write("deep_header_toml", "deep-header.toml", "[" + ".".join(["a"] * 5000) + "]\nb = 1\n")
    write("mid_toml", "mid.toml", "a = " + _nested(300) + "\n")
    write("deep_json", "deep.json", _nested(100_000))
    write("task_deep", "task-deep.jsonl", _nested(100_000) + "\n")
    write("task_deep_obj", "task-deep-obj.jsonl", _nested(50_000, '{"a": ', "}", "1") + "\n")
    write(
        "task_mid",
        "task-mid.jsonl",
        '{"id": "a", "query": "Q:", "choices": [" x", " y"], '
        '"gold": 0, "extra": ' + _nested(500) + "}\n",
    )
    write("groups_deep", "groups-deep.toml", "[groups]\nx = " + _nested(100_000) + "\n")
    good = '{"id": "a", "query": "Q:", "choices": [" x", " y"], "gold": 0}\n'
    write("lic_deep", "lic-deep/arc_easy.jsonl", good)
    (root / "lic-deep" / "licenses.json").write_text(_nested(100_000))
    write("lic_fifo", "lic-fifo/arc_easy.jsonl", good)
    os.mkfifo(root / "lic-fifo" / "licenses.json")
    write("hf_deep", "hf-deep/config.json", _nested(100_000))
    (root / "hf-deep" / "model.safetensors").write_bytes(b"\0" * 16)
    write("corpus_fifo", "corpus-fifo/a.txt", "some text\n" * 100)
    os.mkfifo(root / "corpus-fifo" / "b.txt")
    for name in ("pipe.toml", "task-pipe.jsonl", "groups-pipe.toml"):
        os.mkfifo(root / name)
    places.update(
        fifo=str(root / "pipe.toml"),
        fifo_jsonl=str(root / "task-pipe.jsonl"),
        fifo_groups=str(root / "groups-pipe.toml"),
    )
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock.toml"))  # the socket file stays after the socket closes
    sock.close()
    places["socket"] = str(root / "sock.toml")
    os.symlink("loop.toml", root / "loop.toml")
    places["loop"] = str(root / "loop.toml")
    os.symlink("/dev/zero", root / "zero.jsonl")
    places["zero_jsonl"] = str(root / "zero.jsonl")
    for place, name, make in (
        ("run_deepstatus", "status.json", lambda f: f.write_text(_nested(100_000))),
        ("run_deepconfig", "config.json", lambda f: f.write_text(_nested(100_000))),
        ("run_fifostatus", "status.json", os.mkfifo),
    ):
        copy = root / place / run.name
        shutil.copytree(run, copy)
        (copy / name).unlink()
        make(copy / name)
        places[place] = str(copy)
    return places


# ----------------------------------------------------------------------------- running
@dataclasses.dataclass
class Outcome:
    case: Case
    status: int | None
    stderr: str
    seconds: float
    max_rss: int

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr

    @property
    def hang(self) -> bool:
        return self.status is None

    @property
    def blowup(self) -> bool:
        return self.max_rss > MEMORY_LIMIT or "MemoryError" in self.stderr

    @property
    def lines(self) -> list[str]:
        """stderr lines that are not progress log records (``INFO name: ...``)."""
        return [
            ln
            for ln in self.stderr.splitlines()
            if ln.strip() and not ln.startswith(("INFO ", "DEBUG "))
        ]

    @property
    def clean(self) -> bool:
        if self.hang or self.traceback or self.blowup or len(self.lines) != 1:
            return False
        if self.case.api:
            return self.status == 0 and self.lines[0].startswith("API-ERROR ")
        line = self.lines[0]
        return self.status == 2 and line.startswith("smallinit") and ": error: " in line

    @property
    def verdict(self) -> str:
        for name in ("hang", "blowup", "traceback"):
            if getattr(self, name):
                return name
        return "clean" if self.clean else "other"


API_WRAPPER = """\
import sys
from smallinit.core.errors import SmallinitError
try:
{body}
except (SmallinitError, ValueError, TypeError) as err:
    text = str(err)
    sys.stderr.write("API-ERROR " + type(err).__name__ + ": " + text + "\\n")
    sys.exit(0)
sys.stderr.write("API-NO-ERROR\\n")
sys.exit(1)
"""


def _fill(text: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        text = text.replace("{" + key + "}", value)
    return text


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_CAP, ADDRESS_CAP))


def run_case(case: Case, places: dict[str, str]) -> Outcome:
    env = {
        **os.environ,
        "SMALLINIT_CACHE": places["cache"],
        "SMALLINIT_RUNS": places["runs"],
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("SMALLINIT_DEBUG", None)
    env.update({k: _fill(v, places) for k, v in case.env})
    if case.api:
        body = "\n".join("    " + ln for ln in _fill(case.code, places).splitlines())
        argv = [sys.executable, "-c", API_WRAPPER.format(body=body)]
    else:
        argv = [sys.executable, "-m", "smallinit", *(_fill(a, places) for a in case.argv)]
    with tempfile.TemporaryFile() as err_file:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            env=env,
            cwd=places["tmp"],
            preexec_fn=_limit_memory,
            start_new_session=True,
        )
        status, rss = _wait_with_usage(proc.pid, t0 + TIME_LIMIT)
        seconds = time.monotonic() - t0
        proc.returncode = -9 if status is None else status  # reaped here, not by Popen
        err_file.seek(0)
        err = err_file.read().decode(errors="replace")
    return Outcome(case, status, err, seconds, rss)


def _wait_with_usage(pid: int, deadline: float) -> tuple[int | None, int]:
    """Exit status (None: killed at the deadline) and peak resident bytes of child ``pid``."""
    while True:
        got, status, usage = os.wait4(pid, os.WNOHANG)
        if got:
            return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024
        if time.monotonic() > deadline:
            os.killpg(pid, 9)
            _, _, usage = os.wait4(pid, 0)
            return None, usage.ru_maxrss * 1024
        time.sleep(0.05)


def run_battery(
    places: dict[str, str], cases: list[Case] | None = None, workers: int = 2
) -> list[Outcome]:
    cases = CASES if cases is None else cases
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda c: run_case(c, places), cases))


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    out = {"tried": len(outcomes)}
    for verdict in ("clean", "traceback", "hang", "blowup", "other"):
        out[verdict] = sum(o.verdict == verdict for o in outcomes)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python tests/badinput.py [WORD ...]``: run the cases whose name contains any WORD
    (all cases without one); ``BADINPUT_DIR`` keeps the fixture between calls."""
    words = sys.argv[1:] if argv is None else argv
    keep = os.environ.get("BADINPUT_DIR")
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="smallinit-badinput-"))
    places = make_fixture(root)
    cases = [c for c in CASES if not words or any(w in c.name for w in words)]
    outcomes = run_battery(places, cases)
    for o in outcomes:
        if o.verdict != "clean":
            last = o.lines[-1] if o.lines else ""
            print(
                f"{o.verdict:<9} {o.case.name:<40} status={o.status} "
                f"{o.seconds:5.1f}s rss={o.max_rss / 1e6:6.0f}MB  {last[:150]}"
            )
    print(json.dumps(counts(outcomes)))
    records = [
        {
            "case": o.case.name,
            "verdict": o.verdict,
            "status": o.status,
            "seconds": round(o.seconds, 2),
            "max_rss": o.max_rss,
            "stderr_tail": o.lines[-1][:300] if o.lines else "",
        }
        for o in outcomes
    ]
    (root / "outcomes.json").write_text(json.dumps(records, indent=1))
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
