"""Export to Hugging Face and back: same logits, stored tokenizer and
safetensors weights, ``llm downstream --hf`` scoring an export like the run itself, and
lm-evaluation-harness reading an export offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from smallinit.core.errors import ConfigError
from smallinit.llm.run_config import ModelConfig

tf = pytest.importorskip("transformers")

from smallinit.llm.model import export as ex  # noqa: E402
from smallinit.llm.model.transformer import Transformer  # noqa: E402

TOL = 1e-4  # float32 logits, max abs difference


def randomized(cfg: ModelConfig, seed: int = 0) -> Transformer:
    """A model of ``cfg`` with *every* parameter random (norm gains and biases too), so a
    mapping that drops or swaps any tensor shows in the logits."""
    torch.manual_seed(seed)
    model = Transformer(cfg, "gamma:0.5", seed=seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(
                    (1.0 if "norm" in name and name.endswith("weight") else 0.0)
                    + 0.3 * torch.randn_like(p)
                )
    return model.eval()


SMALL = {"vocab_size": 97, "context": 24, "d_model": 32, "n_layers": 2, "n_heads": 4}
VARIANTS = {
    "llama": {},
    "llama tied": {"tie_embeddings": True},
    "llama bias, rope base 500, d_ff 40": {"bias": True, "rope_base": 500.0, "d_ff": 40},
    "gpt2 tied with bias": {
        "norm": "layernorm",
        "positions": "learned",
        "mlp": "gelu",
        "tie_embeddings": True,
        "bias": True,
    },
    "gpt2 untied without bias": {"norm": "layernorm", "positions": "learned", "mlp": "gelu"},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_hf_model_computes_our_logits(variant):
    cfg = ModelConfig(**SMALL, **VARIANTS[variant])
    model = randomized(cfg)
    hf_model = ex.to_hf(model)
    expected = "gpt2" if cfg.norm == "layernorm" else "llama"
    assert ex.hf_family(cfg) == expected
    idx = torch.randint(
        0, cfg.vocab_size, (3, cfg.context), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        ours = model(idx)
        theirs = hf_model(input_ids=idx).logits
    assert ours.abs().max() > 1.0  # logits that are not ~0, so agreement means something
    assert float((ours - theirs).abs().max()) < TOL
    n_ours = sum(p.numel() for p in model.parameters())
    n_hf = sum(p.numel() for p in hf_model.parameters())
    if cfg.bias or cfg.norm == "rmsnorm":  # GPT-2 without our biases gains zero biases
        assert n_hf == n_ours


def test_a_wrong_convention_is_caught():
    """The logit check has teeth: interleaved RoPE pairs (permuting q, k rows within each
    head) or GPT-2's tanh GELU change the logits by far more than the tolerance."""
    cfg = ModelConfig(**SMALL)
    model = randomized(cfg)
    hf_model = ex.to_hf(model)
    hd, d = cfg.head_dim, cfg.d_model
    perm = torch.cat(
        [torch.arange(h * hd, (h + 1) * hd).view(2, -1).t().reshape(-1) for h in range(cfg.n_heads)]
    )  # (x0, x_{h/2}, x1, ...) per head
    assert not torch.equal(perm, torch.arange(d))
    with torch.no_grad():
        for layer in hf_model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                proj.weight.copy_(proj.weight[perm])
    assert ex.max_logit_difference(model, hf_model) > 100 * TOL

    gcfg = ModelConfig(**SMALL, **VARIANTS["gpt2 tied with bias"])
    gmodel = randomized(gcfg)
    ghf = ex.to_hf(gmodel)
    assert ex.max_logit_difference(gmodel, ghf) < TOL
    ghf.config.activation_function = "gelu_new"
    tanh = tf.GPT2LMHeadModel(ghf.config)
    tanh.load_state_dict(ghf.state_dict())
    assert ex.max_logit_difference(gmodel, tanh.eval()) > 2 * TOL


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"gated_attention": True}, "model.gated_attention=true"),
        ({"gated_attention": True, "gate_kind": "headwise"}, "gate_kind=headwise"),
        ({"positions": "learned"}, "model.positions=learned"),
        ({"norm": "layernorm"}, "model.norm=layernorm"),
        ({"norm": "layernorm", "positions": "learned", "mlp": "swiglu"}, "model.mlp=swiglu"),
    ],
)
def test_features_without_an_exact_hf_match_are_refused(fields, named):
    with pytest.raises(ConfigError) as err:
        ex.hf_family(ModelConfig(**SMALL, **fields))
    message = str(err.value)
    assert named in message and "\n" not in message


# ----------------------------------------------------------------------------- a trained run
TINY = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=2",
    "model.vocab_size=320",
    "model.context=32",
    "train.steps=6",
    "train.batch_size=4",
    "train.log_every=2",
    "data.synthetic_items=200",
    "data.synthetic_val_items=20",
    "train.eval_every=0",
    "train.checkpoint_every=0",
    "eval.answer_items=4",
    "eval.token_windows=2",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run store with one tiny finished run (a few seconds on CPU)."""
    from smallinit.core.config import load_config
    from smallinit.llm.run_config import RunConfig
    from smallinit.llm.training.train import train

    base = tmp_path_factory.mktemp("export")
    mp = pytest.MonkeyPatch()
    mp.setenv("SMALLINIT_CACHE", str(base / "cache"))
    mp.setenv("SMALLINIT_RUNS", str(base / "runs"))
    mp.setenv("SMALLINIT_QUIET", "1")
    cfg = load_config(RunConfig, None, TINY)
    run = train(cfg, runs_dir=base / "runs")
    assert run.done
    yield base, run
    mp.undo()


def test_a_run_stores_its_tokenizer_and_safetensors_weights(trained):
    from safetensors.torch import load_file

    from smallinit.llm.data import corpus as corpus_mod
    from smallinit.llm.data.tokenizer import load_tokenizer
    from smallinit.llm.training.checkpoint import safe_load
    from smallinit.llm.training.trained import load_trained

    base, run = trained
    stored = load_tokenizer(run.path / "tokenizer.json")
    cfg, model = load_trained(run.path)
    folder = corpus_mod.prepare(cfg.data, cfg.model.vocab_size)
    assert stored.to_str() == load_tokenizer(folder / "tokenizer.json").to_str()
    st, pt = load_file(run.path / "model.safetensors"), safe_load(run.path / "model.pt")
    assert st.keys() == pt.keys() == model.state_dict().keys()
    for name, tensor in pt.items():
        assert torch.equal(st[name], tensor), name
        assert torch.equal(model.state_dict()[name], tensor), name


def test_export_loads_with_from_pretrained_and_gives_the_same_logits(trained, tmp_path):
    from smallinit.llm.training.trained import load_trained

    base, run = trained
    out = tmp_path / "hf"
    path, info = ex.export_run(run.path.name[:8], out)
    assert info["architecture"] == "LlamaForCausalLM" and info["max_abs_logit_diff"] < TOL
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(
        info["files"]
    )
    hf_model = tf.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf_model).__name__ == "LlamaForCausalLM"
    _, model = load_trained(run.path)
    hf_tok = tf.AutoTokenizer.from_pretrained(out)
    text = "Question: 12 plus 30?\nAnswer: 42. the cat sat"
    ids = hf_tok(text, add_special_tokens=False)["input_ids"]
    from smallinit.llm.data.tokenizer import load_tokenizer

    assert ids == load_tokenizer(run.path / "tokenizer.json").encode(text).ids
    assert hf_tok.decode(ids) == text
    idx = torch.tensor([ids[:32]])
    with torch.no_grad():
        diff = (model(idx) - hf_model(input_ids=idx).logits).abs().max()
    assert float(diff) < TOL
    meta = json.loads((out / "config.json").read_text())
    assert meta["smallinit"]["run"] == run.path.parent.name + "/" + run.path.name
    assert meta["smallinit"]["init"] == "gamma:0.5"
    assert (
        meta["eos_token_id"] == hf_tok.eos_token_id == hf_tok.convert_tokens_to_ids("<|endoftext|>")
    )


def test_one_init_record_from_apply_init_and_from_export(trained, tmp_path):
    """The export's config.json and apply_init write the same record under the same name,
    and recorded_scheme reads the run's scheme back after from_pretrained."""
    from smallinit.llm.model.init import apply_init, recorded_scheme

    base, run = trained
    ex.export_run(run.path.name, tmp_path / "hf")
    loaded = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert recorded_scheme(loaded) == "gamma:0.5"
    record = loaded.config.smallinit
    assert record == {"init": "gamma:0.5", "run": f"llm-train/{run.key}", "seed": run.config.seed}
    assert not hasattr(loaded.config, "smallinit_init")
    apply_init(loaded, "GAMMA:1.0, qk=1", seed=3)  # re-initialized: the record is replaced
    assert loaded.config.smallinit == {"init": "gamma:1,qk=1", "seed": 3}
    assert recorded_scheme(loaded) == "gamma:1,qk=1"
    loaded.save_pretrained(tmp_path / "again")
    again = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "again")
    assert recorded_scheme(again) == "gamma:1,qk=1"


def test_a_run_from_before_rebuilds_its_tokenizer_and_reads_model_pt(trained, tmp_path):
    """An older run (no tokenizer.json, no model.safetensors) exports the same folder: the
    tokenizer is rebuilt from the run's corpus config, the weights read from model.pt."""
    base, run = trained
    old = tmp_path / "store" / "llm-train" / run.path.name
    shutil.copytree(run.path, old)
    (old / "tokenizer.json").unlink()
    (old / "model.safetensors").unlink()
    env_cache = os.environ["SMALLINIT_CACHE"]
    shutil.rmtree(env_cache)  # the corpus (and its tokenizer) is rebuilt from the config
    ex.export_run(str(old), tmp_path / "old")
    ex.export_run(run.path.name, tmp_path / "new")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "old" / name).read_bytes() == (tmp_path / "new" / name).read_bytes()


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "smallinit", "-q", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_cli_export_refuses_a_non_empty_folder_unless_forced(trained, tmp_path):
    base, run = trained
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    got = _cli("llm", "export", run.path.name, str(out))
    assert got.returncode == 2 and "not empty" in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1
    got = _cli("llm", "export", run.path.name, str(out), "--force", "--json")
    assert got.returncode == 0, got.stderr
    info = json.loads(got.stdout)
    assert info["max_abs_logit_diff"] < TOL
    assert (out / "notes.txt").read_text() == "mine"  # other files are left alone
    assert (out / "model.safetensors").is_file()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".out.")]  # no temp


def test_gated_model_is_refused_before_anything_is_written(tmp_path):
    from smallinit.llm.data.tokenizer import END_OF_TEXT, train_bpe

    tok = train_bpe(["a b c"] * 4, 300)
    cfg = ModelConfig(**{**SMALL, "vocab_size": 300}, gated_attention=True)
    with pytest.raises(ConfigError, match="gated_attention"):
        ex.write_hf_folder(Transformer(cfg), tok, tmp_path / "g", eot=END_OF_TEXT)
    assert not (tmp_path / "g").exists() and not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- benchmark --hf
MC_ITEMS = [
    {
        "id": f"q{i}",
        "query": f"Question: {a} plus {b}?\nAnswer:",
        "choices": [f" {a + b}", f" {a + b + 1}", f" {a * b}"],
        "gold": 0,
    }
    for i, (a, b) in enumerate([(1, 2), (3, 4), (10, 5), (7, 7), (2, 9), (12, 30)])
]


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench-data")
    with open(folder / "arc_easy.jsonl", "w") as fh:
        for item in MC_ITEMS:
            fh.write(json.dumps(item) + "\n")
    return folder


def test_benchmark_hf_matches_the_run_item_by_item(trained, task_dir, tmp_path):
    from smallinit.llm.downstream.hf_model import hf_model_name, load_lm
    from smallinit.llm.downstream.run import benchmark

    base, run = trained
    out = tmp_path / "hf"
    ex.export_run(run.path.name, out)
    common = {"data_dir": task_dir, "fetch": False, "runs_dir": base / "runs", "batch_size": 4}
    [ours] = benchmark(run.path.name, ["arc_easy"], **common)
    [theirs] = benchmark(None, ["arc_easy"], hf=out, **common)
    assert theirs.config.model == hf_model_name(out) != ours.config.model
    a, b = ours.metrics(), theirs.metrics()
    assert [r["id"] for r in a] == [r["id"] for r in b] == [it["id"] for it in MC_ITEMS]
    for ra, rb in zip(a, b, strict=True):
        assert (ra["pred"], ra["pred_norm"], ra["acc"], ra["acc_norm"]) == (
            rb["pred"],
            rb["pred_norm"],
            rb["acc"],
            rb["acc_norm"],
        )
        assert max(abs(x - y) for x, y in zip(ra["loglik"], rb["loglik"], strict=True)) < 1e-4
    assert ours.summary["acc"] == theirs.summary["acc"]
    assert ours.summary["acc_norm"] == theirs.summary["acc_norm"]
    # the Python loader gives the same scorer for both
    from smallinit.llm.downstream.scoring import score_mc
    from smallinit.llm.downstream.tasks import Item

    items = [Item(it["id"], it["query"], tuple(it["choices"]), it["gold"]) for it in MC_ITEMS]
    via_run = score_mc(load_lm(run.path.name, runs_dir=base / "runs"), items)
    via_hf = score_mc(load_lm(out), items)
    assert [r["pred"] for r in via_run] == [r["pred"] for r in via_hf] == [r["pred"] for r in a]


def test_an_export_generates_what_the_run_generates(trained, tmp_path):
    """Greedy generation (the generative benchmarks' path) through the HF folder gives the
    run's text token for token."""
    from smallinit.llm.downstream.hf_model import load_lm
    from smallinit.llm.downstream.scoring import score_gen
    from smallinit.llm.downstream.tasks import TASKS, Item

    base, run = trained
    out = tmp_path / "hf"
    ex.export_run(run.path.name, out)
    items = [
        Item("a", "Question: 2 plus 3?\nAnswer:", answers=("5",)),
        Item("b", "the cat sat on the", answers=("mat",)),
    ]
    kwargs = {"max_new_tokens": 12}
    via_run = score_gen(
        load_lm(run.path.name, runs_dir=base / "runs"), items, TASKS["gsm8k"], **kwargs
    )
    via_hf = score_gen(load_lm(out), items, TASKS["gsm8k"], **kwargs)
    assert [r["generation"] for r in via_hf] == [r["generation"] for r in via_run]
    assert any(r["generation"] for r in via_run)  # something was generated


def test_benchmark_hf_refuses_what_is_not_a_model_folder(trained, task_dir, tmp_path):
    from smallinit.llm.downstream.run import benchmark

    base, run = trained
    common = {"data_dir": task_dir, "fetch": False, "runs_dir": base / "runs"}
    with pytest.raises(ConfigError, match="no such folder"):
        benchmark(None, ["arc_easy"], hf=tmp_path / "nope", **common)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        benchmark(None, ["arc_easy"], hf=tmp_path / "file", **common)
    with pytest.raises(ConfigError, match="no Hugging Face config.json"):
        benchmark(None, ["arc_easy"], hf=run.path, **common)  # a run, not an HF folder
    with pytest.raises(ConfigError, match="either a RUN or --hf"):
        benchmark(run.path.name, ["arc_easy"], hf=tmp_path, **common)
    with pytest.raises(ConfigError, match="either a RUN or --hf"):
        benchmark(None, ["arc_easy"], **common)


# ----------------------------------------------------------------------------- lm-eval
@pytest.mark.slow  # about a minute: lm-eval's imports (datasets, evaluate, accelerate)
def test_lm_eval_scores_an_export_like_our_scorer(trained, task_dir, tmp_path):
    """``lm_eval run --model hf`` on an export with a local task (offline) gives per choice
    the log-likelihoods our scorer gives, hence the same acc (raw) and acc_norm."""
    pytest.importorskip("lm_eval")
    pytest.importorskip("accelerate")
    from smallinit.llm.downstream.hf_model import load_lm
    from smallinit.llm.downstream.lmeval import write_task_yaml
    from smallinit.llm.downstream.scoring import pick, score_mc
    from smallinit.llm.downstream.tasks import Item

    base, run = trained
    out = tmp_path / "hf"
    ex.export_run(run.path.name, out)
    write_task_yaml(task_dir / "arc_easy.jsonl", tmp_path / "tasks", "smallinit_arith")
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    lm_eval = Path(sys.executable).with_name("lm_eval")
    got = subprocess.run(
        [
            str(lm_eval),
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={out},dtype=float32",
            "--tasks",
            "smallinit_arith",
            "--include_path",
            str(tmp_path / "tasks"),
            "--device",
            "cpu",
            "--batch_size",
            "1",
            "--output_path",
            str(tmp_path / "lm-out"),
            "--log_samples",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    [samples] = (tmp_path / "lm-out").rglob("samples_smallinit_arith_*.jsonl")
    rows = sorted(
        (json.loads(line) for line in samples.read_text().splitlines()), key=lambda r: r["doc_id"]
    )
    [results] = (tmp_path / "lm-out").rglob("results_*.json")
    summary = json.loads(results.read_text())["results"]["smallinit_arith"]

    items = [Item(it["id"], it["query"], tuple(it["choices"]), it["gold"]) for it in MC_ITEMS]
    ours = score_mc(load_lm(run.path.name, runs_dir=base / "runs", batch_size=4), items)
    assert [r["doc"]["id"] for r in rows] == [it.id for it in items]
    raw, norm = [], []
    for row, rec, item in zip(rows, ours, items, strict=True):
        theirs = [float(resp[0]) for resp in row["filtered_resps"]]
        assert max(abs(a - b) for a, b in zip(theirs, rec["loglik"], strict=True)) < 1e-4
        raw.append(pick(rec["loglik"]) == item.gold)
        norm.append(pick(rec["loglik"], [len(c) for c in item.choices]) == item.gold)
        assert (row["acc"], row["acc_norm"]) == (float(raw[-1]), float(norm[-1]))
    assert summary["acc,none"] == pytest.approx(sum(raw) / len(raw))
    assert summary["acc_norm,none"] == pytest.approx(sum(norm) / len(norm))


def test_lm_eval_task_yaml_refuses_bad_names_and_generative_items(task_dir, tmp_path):
    from smallinit.llm.downstream.lmeval import write_task_yaml

    with pytest.raises(ConfigError, match="task name"):
        write_task_yaml(task_dir / "arc_easy.jsonl", tmp_path, "../x")
    gen = tmp_path / "gsm8k.jsonl"
    gen.write_text(json.dumps({"id": "g", "query": "2+3=", "answers": ["5"]}) + "\n")
    with pytest.raises(ConfigError, match="not multiple choice"):
        write_task_yaml(gen, tmp_path, "gen")
    path = write_task_yaml(task_dir / "arc_easy.jsonl", tmp_path, "ok_task")
    text = path.read_text()
    assert "task: ok_task" in text and str((task_dir / "arc_easy.jsonl").resolve()) in text


def test_readme_export_block_runs_as_written(trained, tmp_path):
    """docs/usage.md's export → from_pretrained → benchmark --hf lines, run as a user types
    them in a fresh folder (the run's key filled in; my_task.jsonl a custom task of the
    docs' schema). The lm_eval line runs where lm-evaluation-harness is installed."""
    import re
    import shlex

    base, run = trained
    readme = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    block = next(
        b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "smallinit llm export" in b
    )
    with open(tmp_path / "my_task.jsonl", "w") as fh:
        for item in MC_ITEMS:
            fh.write(json.dumps(item) + "\n")
    env = {
        **os.environ,
        "SMALLINIT_RUNS": str(base / "runs"),
        "SMALLINIT_CACHE": str(base / "cache"),
        "SMALLINIT_QUIET": "1",
    }
    outputs = []
    for line in block.strip().splitlines():
        line = line.replace("llm-train/<key>", f"llm-train/{run.path.name}")
        argv = shlex.split(line, comments=True)
        if argv[0] == "make":  # installs the extra into the checkout's .venv, not this folder
            continue
        if argv[0] == "lm_eval":
            if shutil.which("lm_eval") is None:
                continue
            from smallinit.llm.downstream.lmeval import write_task_yaml

            write_task_yaml(tmp_path / "my_task.jsonl", tmp_path / "tasks", "my_task")
        elif argv[0] == "smallinit":
            argv = [sys.executable, "-m", "smallinit", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        outputs.append(proc.stdout)
    assert (tmp_path / "exported" / "model.safetensors").is_file()
    assert "LlamaForCausalLM" in outputs[1]
    assert re.search(r"my_task\s+\d+\s+acc_norm\s+\d\.\d{4}", outputs[2])
