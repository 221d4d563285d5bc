"""``smallinit data fetch``: every corpus a profile reads, built into the cache ahead of time
(:mod:`smallinit.study.offline`), for nodes without network."""

from __future__ import annotations

import argparse
import os

from smallinit.cli.util import (
    add_command,
    add_group,
    add_json_option,
    dir_path,
    print_json,
    profile_arg,
)

DESCRIPTION = """\
A node without network (a cluster's compute node, a lent GPU machine) cannot download a
profile's corpora. `smallinit data fetch --profile P --cache DIR` builds them into DIR here
(download, tokenizer, token streams); copy DIR to the node and set SMALLINIT_CACHE=DIR there."""


def cmd_fetch(args: argparse.Namespace) -> int:
    if args.cache is not None:  # both the corpora and the downstream data read this variable
        os.environ["SMALLINIT_CACHE"] = str(args.cache.resolve())
    from smallinit.study import offline

    fetched = offline.fetch(args.profile)
    if args.json:
        print_json(
            [
                {
                    "corpus": f.corpus,
                    "key": f.key,
                    "vocab_size": f.vocab_size,
                    "folder": str(f.folder),
                }
                for f in fetched
            ]
        )
        return 0
    for f in fetched:
        print(f"{f.corpus:<12} {f.key} vocab {f.vocab_size:>6}  {f.folder}")
    where = os.environ.get("SMALLINIT_CACHE", "~/.cache/smallinit")
    print(
        f"{len(fetched)} corpora of profile {args.profile} ready in {where}; on a node "
        f"without network set SMALLINIT_CACHE to a copy of that folder"
    )
    return 0


def register(subparsers) -> None:
    commands = add_group(
        subparsers, "data", help="fetch a profile's data ahead of time", description=DESCRIPTION
    )
    p = add_command(
        commands,
        "fetch",
        cmd_fetch,
        help="build every corpus of a profile into the cache",
        description="Download, tokenize and cache every distinct corpus that the "
        "profile's training runs read, as their first run would; a corpus already "
        "cached is opened (and so checked). Nothing is trained.",
    )
    p.add_argument(
        "--profile",
        type=profile_arg,
        default="quick",
        help="the profile whose corpora to fetch (quick, fair, full, ...)",
    )
    p.add_argument(
        "--cache",
        type=dir_path,
        default=None,
        metavar="DIR",
        help="the cache folder (default: $SMALLINIT_CACHE, else ~/.cache/smallinit)",
    )
    add_json_option(p, help="print one JSON record per corpus")
