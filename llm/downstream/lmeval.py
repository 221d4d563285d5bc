"""A local multiple-choice JSONL task (schema: docs/usage.md, Custom benchmark tasks) as an
lm-evaluation-harness task.

lm-evaluation-harness (Gao et al., EleutherAI, ``lm-eval`` ≥ 0.4) reads a task from a YAML
file in an ``--include_path`` folder. :func:`write_task_yaml` writes one for a JSONL file of
``{"id", "query", "choices", "gold"}`` objects so that ::

    lm_eval run --model hf --model_args pretrained=OUT --tasks NAME --include_path DIR

scores an exported run (``smallinit llm export``) on the same items as ``smallinit llm
benchmark``, offline (the data is read by ``datasets``' ``json`` builder from the local
file). The correspondence: lm-eval's ``acc`` is argmax_i ℓ_i (our raw rule) and its
``acc_norm`` argmax_i ℓ_i / |c_i| with |c_i| the characters of the continuation (our
length-normalized rule, :mod:`smallinit.llm.downstream.scoring`); the continuation is the choice
exactly as stored (``target_delimiter: ""``: the choices carry their leading space).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from smallinit.core.atomic import atomic_write_text
from smallinit.core.errors import ConfigError

TASK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def write_task_yaml(jsonl: str | Path, folder: str | Path, name: str) -> Path:
    """Write ``<folder>/<name>.yaml``, an lm-eval multiple-choice task over ``jsonl``
    (absolute path); returns the YAML's path. Refuses a task name lm-eval cannot use and a
    file whose first item is not multiple choice."""
    if not TASK_NAME.fullmatch(name):
        raise ConfigError(
            f"task name {name!r} is not allowed; use a letter then letters, "
            "digits or _ (at most 64)"
        )
    jsonl = Path(jsonl).resolve()
    try:
        first = json.loads(jsonl.read_text().splitlines()[0])
    except (OSError, IndexError, ValueError) as err:
        raise ConfigError(f"{jsonl}: not a JSONL file of benchmark items ({err})") from None
    if not (
        isinstance(first, dict)
        and isinstance(first.get("choices"), list)
        and isinstance(first.get("gold"), int)
    ):
        raise ConfigError(
            f"{jsonl}: its items are not multiple choice (query, choices, "
            "gold); only those are written as lm-eval tasks"
        )
    text = "\n".join(
        [
            f"task: {name}",
            "dataset_path: json",
            "dataset_kwargs:",
            "  data_files:",
            f"    test: {json.dumps(str(jsonl))}",
            "test_split: test",
            "output_type: multiple_choice",
            "doc_to_text: query",
            "doc_to_choice: choices",
            "doc_to_target: gold",
            'target_delimiter: ""',
            "metric_list:",
            "  - metric: acc",
            "    aggregation: mean",
            "    higher_is_better: true",
            "  - metric: acc_norm",
            "    aggregation: mean",
            "    higher_is_better: true",
            "",
        ]
    )
    path = Path(folder) / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


__all__ = ["write_task_yaml"]
