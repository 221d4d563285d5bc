"""The "From Python" sections run as written: the README's python code blocks (a theory
prediction and a toy run), then those of docs/usage.md (the Hugging Face path and a stored
run), in order, in one namespace, with the run store in a scratch folder, and they compute
what their comments say. The commands and extras docs/usage.md shows beside them, too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"  # the manual: the rest of "From Python", HF, lm-eval


def section_blocks(title: str, doc: Path = README) -> list[str]:
    """The ```python blocks of ``doc``'s section ``## title`` (up to the next ``## ``)."""
    text = doc.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else None]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def from_python_blocks() -> list[str]:
    """The README's From Python blocks, then docs/usage.md's, in reading order."""
    return section_blocks("From Python") + section_blocks("From Python", USAGE)


def test_from_python_section_has_the_five_snippets():
    blocks = from_python_blocks()
    joined = "\n".join(blocks)
    assert len(blocks) == 5
    readme = section_blocks("From Python")
    assert len(readme) == 2 and "theory.PhasePoint.at" in readme[0] and "run_scan(" in readme[1]
    assert sum(len(b.strip().splitlines()) for b in readme) <= 12  # ten lines, give or take
    for needle in (
        "theory.PhasePoint.at",
        "run_scan(",
        "apply_init(",
        "register_family(",
        "smallinit.load_run(",
        "metrics_frame()",
        "UnusedOverrideWarning",
    ):
        assert needle in joined, needle


def run_blocks(indices, tmp_path, monkeypatch) -> dict:
    """Execute the section's blocks ``indices`` in order in one namespace, with the run store
    and the working folder in ``tmp_path``; families they register are forgotten after."""
    from smallinit.llm.model.families import families, unregister_family

    monkeypatch.setenv("SMALLINIT_RUNS", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    blocks = from_python_blocks()
    names = ["README.md"] * len(section_blocks("From Python")) + ["docs/usage.md"] * len(
        section_blocks("From Python", USAGE)
    )
    namespace: dict = {"__name__": "readme"}
    before = set(families())
    try:
        for i in indices:
            exec(compile(blocks[i], f"{names[i]} From Python block {i + 1}", "exec"), namespace)
    finally:
        for name in set(families()) - before:
            unregister_family(name)
    return namespace


def test_from_python_theory_and_hf_snippets(tmp_path, monkeypatch, capsys):
    """Blocks 1 (theory) and 3 (apply_init on GPT-2, GPT-NeoX with a per-part override and
    a registered OPT) print what their comments say."""
    pytest.importorskip("transformers")
    namespace = run_blocks([0, 2], tmp_path, monkeypatch)
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["condensed ≥ 3/8", "critical", "linear"]
    assert out[3] == "gamma:1" == namespace["gpt2"].config.smallinit["init"]
    assert out[4] == f"per_head {128**-1:.4f} {128**-0.5:.4f}"  # NeoX's q and v
    qkv = namespace["neox"].gpt_neox.layers[0].attention.query_key_value.weight.detach()
    per_head = qkv.view(4, 3, 32, 128)  # heads, (q, k, v), head size, d_model
    assert per_head[:, :2].std().item() == pytest.approx(1 / 128, rel=0.05)
    assert per_head[:, 2].std().item() == pytest.approx(128**-0.5, rel=0.05)
    assert out[5] == f"512 {512**-0.5:.4f}"  # fc2's true fan-in d_ff, σ = d_ff^-1/2
    assert namespace["opt"].config.smallinit["init"] == "gamma:0.5,qk=1"
    assert not (tmp_path / "runs").exists()


def test_from_python_hf_refusals_and_warnings(tmp_path, monkeypatch, capsys):
    """Block 5 prints what its comments say: q and k apart on Phi-3's grouped qkv_proj, an
    override of a part Llama lacks warned of and left out of the record, and three
    refusals in one line each, before anything is recorded."""
    pytest.importorskip("transformers")
    from smallinit.llm import recorded_scheme

    namespace = run_blocks([4], tmp_path, monkeypatch)
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["attn.q 128 1.00, attn.k 64 0.75, attn.v 64 0.50", "True gamma:0.5"]
    assert out[2].startswith(
        "init 'gamma:0.5,head=2' sets the head's γ (head=2), but the LM "
        "head of LlamaForCausalLM (lm_head.weight) is tied to the "
        "embedding model.embed_tokens.weight: one matrix, "
    )
    assert out[3].startswith(
        "override qk=1 is the shorthand for q= and k=, and k=2 is given too; give qk= alone, "
    )
    assert out[4].startswith(
        "parameter model.embed_tokens.weight (and 20 more) of LlamaForCausalLM is on the meta "
    )
    assert len(out) == 5
    assert recorded_scheme(namespace["tied"]) is None


def test_from_python_hf_commands_say_what_their_comments_say(capsys):
    """The init-table commands under block 5 (docs/usage.md): the Phi-3 table, the warning
    (exit 0) and the two refusals (exit 2), each in one line."""
    import shlex

    from smallinit.cli import main

    pytest.importorskip("transformers")
    text = USAGE.read_text(encoding="utf-8")
    start = text.index("The same from the command line, on the config's sizes")
    block = text[start : text.index("```\n", text.index("```bash", start) + 7)]
    commands = [
        shlex.split(line.partition("#")[0])
        for line in block.splitlines()
        if line.startswith("smallinit llm init-table")
    ]
    assert len(commands) == 4
    results = []
    for argv in commands:
        status = main(argv[1:])
        captured = capsys.readouterr()
        results.append((status, captured.out, captured.err.splitlines()))
    (phi3, _, none), (warned, _, warning), (tied, _, head), (both, _, qk) = results
    assert phi3 == 0 and not none
    rows = {line.split()[0]: line.split() for line in results[0][1].splitlines()[2:]}
    assert [rows[f"model.layers.0.self_attn.qkv_proj.weight[{p}]"][-1] for p in "qkv"] == [
        "1.000",
        "0.750",
        "0.500",
    ]
    assert (
        warned == 0
        and len(warning) == 1
        and warning[0].startswith(
            "smallinit: warning: init 'gamma:0.5,attn_gate=1': override attn_gate=1 acts on no "
            "matrix of LlamaForCausalLM, "
        )
    )
    assert (
        tied == 2
        and len(head) == 1
        and head[0].startswith(
            "smallinit: error: init 'gamma:0.5,head=1' sets the head's γ (head=1), but "
        )
    )
    assert both == 2 and len(qk) == 1 and "override qk=1 is the shorthand for q= and k=, " in qk[0]


@pytest.mark.slow  # a toy scan (JAX compile) and transformers: ~45 s on 2 busy cores
def test_from_python_snippets_run(tmp_path, monkeypatch, capsys):
    """All four blocks in order: the toy run of block 2 is the stored run block 4 opens."""
    pytest.importorskip("transformers")
    pytest.importorskip("pandas")
    namespace = run_blocks(range(4), tmp_path, monkeypatch)
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["condensed ≥ 3/8", "critical", "linear"]
    # toy: one line per grid point, both graded as theory predicts
    assert out[3].startswith("0.5 linear S_w=-") and out[3].endswith("agrees")
    assert out[4].startswith("1.75 condensed S_w=+") and out[4].endswith("agrees")
    # block 3 (test_from_python_theory_and_hf_snippets checks its lines in detail)
    assert out[5:8] == [
        "gamma:1",
        f"per_head {128**-1:.4f} {128**-0.5:.4f}",
        f"512 {512**-0.5:.4f}",
    ]
    # the stored run, read back
    run = namespace["run"]
    assert out[8] == "toy-scan done [0.5, 1.75] 2"
    assert out[9] == "(2, 1)" and out[10] == "simulated"  # S_w per (γ, γ')
    assert list(namespace["frame"]["event"]) == ["simulated"]
    assert run.path.parent.parent == tmp_path / "runs"


def test_readme_shows_the_lm_eval_extra_and_a_write_task_yaml_call_that_runs(tmp_path, monkeypatch):
    """The export paragraph names the `lmeval` extra as pyproject defines it (lm-eval with
    its [hf] extra) and its write_task_yaml line runs as written: the task file lm_eval's
    --include_path then reads."""
    import json
    import shlex
    import subprocess
    import sys
    import tomllib

    text = USAGE.read_text(encoding="utf-8")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(e.startswith("lm-eval[hf]") for e in extras["lmeval"])
    assert "make extra EXTRA=lmeval" in text and "`lm-eval[hf]`" in text
    (line,) = [
        ln for ln in text.splitlines() if "write_task_yaml(" in ln and ln.startswith("python -c")
    ]
    (tmp_path / "my_task.jsonl").write_text(
        json.dumps(
            {"id": "q1", "query": "Question: 2 + 3?\nAnswer:", "choices": [" 5", " 6"], "gold": 0}
        )
        + "\n"
    )
    subprocess.run([sys.executable, *shlex.split(line)[1:]], cwd=tmp_path, check=True, timeout=120)
    task = (tmp_path / "tasks" / "my_task.yaml").read_text()
    assert "task: my_task" in task and str(tmp_path / "my_task.jsonl") in task
    lm_eval = [ln for ln in text.splitlines() if ln.startswith("lm_eval run")]
    assert lm_eval and "--tasks my_task --include_path tasks/" in lm_eval[0]


def test_readme_shows_the_report_page_and_the_wandb_switch():
    text = USAGE.read_text(encoding="utf-8")
    assert "paper_figs/out/index.html" in text and "**The report page.**" in text
    assert "--wandb my-project" in text and "SMALLINIT_WANDB=my-project" in text
    from smallinit.llm.training.sinks import WANDB_ENV

    assert WANDB_ENV == "SMALLINIT_WANDB"
