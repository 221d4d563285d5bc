"""Multi-node training: two torchrun launchers on this host stand for two machines
(``--nnodes 2 --node_rank 0/1``, c10d rendezvous, gloo, one process each) and train the
same run as one process, to the same losses (the Trainer splits every global batch over
the ranks, whichever node they are on)."""

from __future__ import annotations

import json

import pytest
from launch import run_torchrun_nodes
from test_llm_train import TINY, losses, tiny

from smallinit.core.store import RunStore
from smallinit.llm.training.train import KIND, VERSION, train

NODE_SCRIPT = """
import json, os, sys
from pathlib import Path
from smallinit.cli import main
keys = ("RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_RANK")
Path(sys.argv[1], "rank" + os.environ["RANK"] + ".json").write_text(
    json.dumps({k: int(os.environ[k]) for k in keys}))
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow  # ~35 s on 2 cores: two launchers, a rendezvous and a reference run
def test_two_nodes_match_one_process(tmp_path):
    cache = str(tmp_path / "cache")
    extra = ["train.steps=20", "train.checkpoint_every=10", "train.eval_every=0"]
    single = train(tiny(cache, *extra), runs_dir=tmp_path / "one")
    # both "nodes" see one run store, as nodes of a cluster share a file system
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    run_torchrun_nodes(
        2,
        [
            "--nproc_per_node",
            "1",
            str(script),
            str(tmp_path),
            "-q",
            "llm",
            "train",
            "--runs-dir",
            str(tmp_path / "nodes"),
            *TINY,
            f"data.cache_dir={cache}",
            *extra,
        ],
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["WORLD_SIZE"] for r in ranks] == [2, 2]  # one job over both nodes
    assert sorted(r["GROUP_RANK"] for r in ranks) == [0, 1]  # one process on each node
    assert [r["LOCAL_RANK"] for r in ranks] == [0, 0]
    two = RunStore(tmp_path / "nodes").run(KIND, tiny(cache, *extra), version=VERSION)
    assert two.state == "done"
    a, b = losses(single), losses(two)
    assert [s for s, _ in a] == [s for s, _ in b] and len(a) == 4
    for (_, la), (_, lb) in zip(a, b, strict=True):
        assert abs(la - lb) < 1e-3 * la  # same global batches; only reduction order differs
    assert abs(two.summary["val_loss"] - single.summary["val_loss"]) < 1e-3
