"""``smallinit llm export RUN OUT``: a trained run as a Hugging Face model folder."""

from __future__ import annotations

import argparse

from smallinit.cli.util import add_command, path_arg, print_json, run_arg


def cmd_export(args: argparse.Namespace) -> int:
    from smallinit.llm.model.export import export_run

    out, info = export_run(
        args.run, args.out, runs_dir=args.runs_dir, force=args.force, trust_data=args.trust_run_data
    )
    if args.json:
        print_json(info, sort_keys=True)
    else:
        print(
            f"exported {info['run']} as {info['architecture']} "
            f"(max |Δlogit| {info['max_abs_logit_diff']:.2g}) to {out}"
        )
    return 0


def register_export_command(commands) -> None:
    """Add ``export`` to the ``llm`` group."""
    from smallinit.cli.llm_downstream import add_trust_option

    p = add_command(
        commands,
        "export",
        cmd_export,
        help="write a trained run as a Hugging Face model folder (from_pretrained loads it)",
        description="Write a finished run's model as a Hugging Face folder: config.json, "
        "model.safetensors and the tokenizer files. The default model (rmsnorm, rope, "
        "swiglu) becomes a LlamaForCausalLM, a GPT-2-style one (layernorm, learned "
        "positions, gelu) a GPT2LMHeadModel; the export is loaded back and its logits "
        "checked against the run's before it is written. Models Hugging Face cannot express "
        "exactly (gated attention, mixed families) are refused.\n\nexample: smallinit llm "
        "export llm-train/<key> exported/ && smallinit llm downstream --hf exported/",
    )
    p.add_argument(
        "run",
        type=run_arg,
        metavar="RUN",
        help="trained run: llm-train/<key> or a key prefix under RUNS_DIR, or a run directory",
    )
    p.add_argument("out", type=path_arg, metavar="OUT", help="folder to write (new or empty)")
    p.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty OUT, replacing the exported files in it",
    )
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.add_argument(
        "--runs-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="run store root (default: $SMALLINIT_RUNS or ./runs)",
    )
    add_trust_option(p)


__all__ = ["register_export_command"]
