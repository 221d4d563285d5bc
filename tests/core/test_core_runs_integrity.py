"""Every stored result is what its key says: the config hashes to the key, and a finished
run's files match the manifest (size and SHA-256) recorded when it finished."""

import json
import os
from dataclasses import dataclass

import numpy as np
import pytest

import smallinit
from smallinit.cli import main
from smallinit.core.errors import CorruptRun, RunFailed, StoreError
from smallinit.core.integrity import build_manifest, manifest_problem
from smallinit.core.runs import MANIFEST, SUMMARY_SHA256
from smallinit.core.store import RunStore


@dataclass
class Cfg:
    gamma: float = 0.5
    seed: int = 0


def make(store, cfg=None, calls=None, value=1.0):
    def body(run):
        if calls is not None:
            calls.append(run.key)
        run.log({"step": 1, "loss": value})
        run.save_arrays(w=np.full(64, value))
        run.write_json("extra.json", {"v": value})
        return {"final_loss": value}

    return store.get_or_run("demo", cfg or Cfg(), body)


def flip_a_byte(path, at=-20):
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def edit_summary(run, **values):
    status = run.status()
    status["summary"].update(values)
    run.status_path.write_text(json.dumps(status))


def test_a_finished_run_records_every_file_it_keeps(tmp_path):
    run = make(RunStore(tmp_path))
    manifest = run.status()[MANIFEST]
    assert sorted(manifest) == ["arrays.npz", "config.json", "extra.json", "metrics.jsonl"]
    for name, entry in manifest.items():
        assert entry["bytes"] == (run.path / name).stat().st_size
    assert manifest_problem(run.path, manifest) is None
    assert build_manifest(run.path) == manifest  # status.json itself is left out


def test_a_final_failure_is_proven_like_a_done_run(tmp_path):
    store = RunStore(tmp_path)

    def diverge(run):
        run.log({"step": 1, "loss": float("nan")})
        raise RunFailed("NaN loss at step 1")

    run = store.get_or_run("demo", Cfg(), diverge)
    assert sorted(run.status()[MANIFEST]) == ["config.json", "metrics.jsonl"]


@pytest.mark.parametrize(
    "damage", ["edit config", "truncate arrays", "flip arrays", "delete metrics", "add a file"]
)
def test_a_damaged_run_is_set_aside_and_recomputed(tmp_path, damage, caplog):
    store, calls = RunStore(tmp_path), []
    run = make(store, calls=calls)
    if damage == "edit config":
        meta = json.loads((run.path / "config.json").read_text())
        meta["config"]["gamma"] = 2.0  # what the results were not made with
        (run.path / "config.json").write_text(json.dumps(meta))
    elif damage == "truncate arrays":
        os.truncate(run.arrays_path, 30)
    elif damage == "flip arrays":
        flip_a_byte(run.arrays_path)
    elif damage == "delete metrics":
        run.metrics_path.unlink()
    else:
        (run.path / "notes.txt").write_text("added later")
    problem = "notes.txt is not in its manifest" if damage == "add a file" else None
    if problem:  # an unlisted file is refused only when something reads it
        with pytest.raises(CorruptRun, match=problem):
            run.file("notes.txt")
        return
    assert not run.reusable()
    with caplog.at_level("WARNING", logger="smallinit.core.store"):
        again = make(store, calls=calls)
    assert calls == [run.key, run.key]  # recomputed, not reused
    assert again.reusable() and again.summary == {"final_loss": 1.0}
    kept = list((tmp_path / ".corrupt" / "demo").iterdir())
    assert len(kept) == 1 and kept[0].name.startswith(run.key)
    assert any(
        "recomputing it" in r.getMessage() and str(kept[0]) in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize("read", ["arrays", "metrics", "read_json"])
def test_a_reader_names_the_run_and_the_file_that_differs(tmp_path, read):
    run = make(RunStore(tmp_path))
    name = {"arrays": "arrays.npz", "metrics": "metrics.jsonl", "read_json": "extra.json"}[read]
    flip_a_byte(run.path / name, at=3)
    stored = smallinit.load_run(run.key, runs_dir=tmp_path)
    assert stored.state == "done"  # same size: listing checks sizes only
    with pytest.raises(CorruptRun) as err:
        getattr(stored._run, read)(*(["extra.json"] if read == "read_json" else []))
    message = str(err.value)
    assert f"run demo/{run.key} is corrupt" in message and str(run.path / name) in message
    assert "SHA-256" in message and "\n" not in message


def test_a_renamed_or_copied_folder_is_not_the_run_its_name_says(tmp_path):
    store = RunStore(tmp_path)
    run = make(store)
    other = make(store, Cfg(gamma=1.0), value=2.0)
    copy = run.path.parent / "0123456789abcdef"
    os.rename(other.path, copy)
    listed = {r.key: r for r in smallinit.list_runs(tmp_path)}
    assert listed[run.key].state == "done"  # the rest is listed as usual
    assert listed[copy.name].state == "corrupt"
    assert "renamed or copied" in listed[copy.name].reason


@pytest.mark.parametrize("missing", [MANIFEST, SUMMARY_SHA256])
def test_a_run_stored_before_manifests_is_read_and_gets_one(tmp_path, missing):
    store, calls = RunStore(tmp_path), []
    run = make(store, calls=calls)
    recorded = run.status()
    status = dict(recorded)
    del status[missing]
    run.status_path.write_text(json.dumps(status))
    assert smallinit.load_run(run.key, runs_dir=tmp_path).arrays()["w"][0] == 1.0
    assert make(store, calls=calls).summary == {"final_loss": 1.0}
    assert calls == [run.key]  # reused, not recomputed
    assert run.status()[missing] == recorded[missing]  # written on verification
    assert run.status()[MANIFEST] == build_manifest(run.path)
    edit_summary(run, final_loss=1.234)  # from now on an edit is caught
    assert not run.reusable()


def test_a_read_only_store_is_still_read(tmp_path):
    run = make(RunStore(tmp_path))
    status = run.status()
    del status[MANIFEST]
    run.status_path.write_text(json.dumps(status))
    (tmp_path / ".locks").chmod(0o500)
    try:
        assert smallinit.load_run(run.key, runs_dir=tmp_path).metrics()[0]["loss"] == 1.0
    finally:
        (tmp_path / ".locks").chmod(0o700)


def test_manifest_names_outside_the_folder_are_refused(tmp_path):
    run = make(RunStore(tmp_path))
    status = run.status()
    status[MANIFEST]["../../secret"] = {"bytes": 1, "sha256": "0" * 64}
    run.status_path.write_text(json.dumps(status))
    with pytest.raises(CorruptRun, match="manifest entry '../../secret' is damaged"):
        run.verify()


def test_temp_files_of_a_dead_writer_are_removed_when_the_run_is_next_taken(tmp_path):
    store = RunStore(tmp_path)
    run = store.writer("demo", Cfg())
    run.start()
    (run.path / ".arrays.npz.12345.deadbeef.tmp").write_bytes(b"half")
    (run.path / "partial").mkdir()
    (run.path / "partial" / ".w.npz.12345.cafe.tmp").write_bytes(b"half")
    trash = run.path.parent / f".{run.key}.12345.0011.trash"
    trash.mkdir()
    run._abandon()  # killed: its lock is free and its pid gone
    status = run.status()
    run.status_path.write_text(json.dumps({**status, "pid": 2**22 + 1}))
    make(store)
    assert not list(run.path.rglob("*.tmp")) and not trash.exists()
    assert (run.path / "partial").is_dir()  # the run's own files are kept


def test_runs_verify_checks_keys_sizes_and_hashes(tmp_path, capsys):
    store = RunStore(tmp_path)
    good, bad = make(store), make(store, Cfg(gamma=1.0), value=2.0)
    flip_a_byte(bad.arrays_path, at=3)
    assert main(["runs", "verify", "--quick", "--runs-dir", str(tmp_path)]) == 0
    assert "2 ok, 0 corrupt" in capsys.readouterr().out
    assert main(["runs", "verify", "--runs-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"corrupt  demo/{bad.key}: {bad.arrays_path}" in out and "1 ok, 1 corrupt" in out
    assert main(["runs", "verify", good.key[:6], "--json", "--runs-dir", str(tmp_path)]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert record == {
        "kind": "demo",
        "key": good.key,
        "state": "done",
        "ok": True,
        "problem": None,
        "recorded": False,
    }


def test_a_store_error_is_one_line_on_the_command_line(tmp_path, capsys):
    run = make(RunStore(tmp_path))
    run.status_path.write_text("{" * 10)
    assert main(["runs", "show", run.key, "--runs-dir", str(tmp_path)]) == 0
    assert "status.json is corrupt" in capsys.readouterr().out
    with pytest.raises(StoreError, match="status.json is corrupt"):
        run.status()


# ----------------------------------------------------------------------------- the summary
def test_an_edited_summary_is_caught_on_every_read(tmp_path, capsys):
    store, calls = RunStore(tmp_path), []
    run = make(store, calls=calls)
    edit_summary(run, final_loss=1.234)
    with pytest.raises(CorruptRun, match="summary in .*status.json does not match its SHA-256"):
        print(run.summary)
    [listed] = smallinit.list_runs(tmp_path)
    assert listed.state == "corrupt" and listed.listed_summary == {}
    with pytest.raises(CorruptRun) as caught:  # not {}, which reads as "no metrics"
        print(smallinit.load_run(run.key, runs_dir=tmp_path).summary)
    assert f"run {run.name} is corrupt: the summary in" in str(caught.value)
    assert main(["runs", "ls", "--runs-dir", str(tmp_path)]) == 0
    assert "1.234" not in capsys.readouterr().out
    assert main(["runs", "verify", "--quick", "--runs-dir", str(tmp_path)]) == 1
    assert "0 ok, 1 corrupt" in capsys.readouterr().out
    again = make(store, calls=calls)
    assert calls == [run.key, run.key]  # recomputed, not reused
    assert again.summary == {"final_loss": 1.0}


# ----------------------------------------------------------------------------- links
@pytest.mark.parametrize("link", ["checkpoints", "metrics.jsonl", "run folder"])
def test_a_writer_never_writes_or_deletes_through_a_link(tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel = outside / "sentinel.txt"
    sentinel.write_text("keep me")
    store = RunStore(tmp_path / "store")
    run = store.writer("demo", Cfg())
    run.start()
    run.log({"step": 1, "loss": 1.0})
    run._abandon()  # killed: the next ask takes the run over
    run.status_path.write_text(json.dumps({**run.status(), "pid": 2**22 + 1}))
    if link == "checkpoints":
        (run.path / "checkpoints").symlink_to(outside, target_is_directory=True)
    elif link == "metrics.jsonl":
        run.metrics_path.unlink()
        run.metrics_path.symlink_to(sentinel)
    else:
        os.rename(run.path, outside / "run")
        run.path.symlink_to(outside / "run", target_is_directory=True)
    before = snapshot(outside)

    def body(writer):  # what a resuming trainer does: clear old files, write new ones
        for old in writer.checkpoint_dir.iterdir():
            old.unlink()
        writer.log({"step": 2, "loss": 0.5})
        return {}

    with pytest.raises(StoreError, match="is a symbolic link") as err:
        store.get_or_run("demo", Cfg(), body)
    assert "\n" not in str(err.value)
    named = {
        "checkpoints": run.path / "checkpoints",
        "metrics.jsonl": run.metrics_path,
        "run folder": run.path,
    }[link]
    assert str(named) in str(err.value)
    assert sentinel.read_text() == "keep me" and snapshot(outside) == before


@pytest.mark.parametrize("name", ["status.json", "config.json"])
def test_a_store_file_linking_out_of_the_store_is_corrupt_and_never_followed(
    tmp_path, capsys, name
):
    """A store file that is a symbolic link (here to a copy of itself outside the store, so
    that following it would find a valid run) is corrupt for every reader and is set aside,
    link and all, by the next writer; the file it points to is neither read nor changed."""
    store, calls = RunStore(tmp_path / "store"), []
    run = make(store, calls=calls)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / name
    target.write_bytes((run.path / name).read_bytes())
    (run.path / name).unlink()
    (run.path / name).symlink_to(target)
    before = snapshot(outside)
    with pytest.raises(CorruptRun, match="is a symbolic link"):
        run.verify()
    assert main(["runs", "verify", "--runs-dir", str(store.root)]) == 1
    assert "0 ok, 1 corrupt" in capsys.readouterr().out
    assert main(["runs", "show", run.key, "--runs-dir", str(store.root)]) == 0
    assert "(corrupt: " in capsys.readouterr().out
    again = make(store, calls=calls)
    assert calls == [run.key, run.key]  # recomputed, not reused through the link
    assert again.summary == {"final_loss": 1.0} and not (run.path / name).is_symlink()
    assert snapshot(outside) == before


def snapshot(folder):
    """Every file below ``folder`` (links not followed) with its bytes."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
