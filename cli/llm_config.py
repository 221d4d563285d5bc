"""The run config of the ``smallinit llm`` commands: a TOML file or a packaged profile's
``[llm-train]`` table, then ``key=value`` overrides (shared by ``llm train``, ``llm
coord-check`` and the other commands that take ``--config``)."""

from __future__ import annotations

from pathlib import Path

from smallinit.cli.util import user_error

CONFIG_HELP = ("a TOML config file, or the name of a packaged one: quick (CPU minutes) or full "
               "(GPU scale)")


def config_path(name: str | None) -> Path | None:
    """A TOML file given by path (None for a packaged profile name or no config)."""
    if name is None:
        return None
    path = Path(name)
    if path.exists() or path.suffix == ".toml":
        return path
    from smallinit.core import profiles

    if name in profiles.names():
        return None
    raise user_error(f"config {name!r} is neither a file nor a packaged config "
                     f"({', '.join(profiles.names())})")


def load_run_config(args):
    """The run config: a TOML file, or the ``[llm-train]`` table of a packaged profile
    (core/profiles/<name>.toml), then the ``key=value`` overrides."""
    from smallinit.core import profiles
    from smallinit.core.config import load_config, override, parse_overrides, read_toml

    path = config_path(args.config)
    if path is not None:  # a bad file or override is refused before sympy is imported
        read_toml(path)
    parse_overrides(args.overrides)
    from smallinit.llm.run_config import RunConfig

    base = None
    if args.config is not None and path is None:
        base = override(RunConfig(), profiles.section(args.config, "llm-train"),
                        where=f"{args.config}.llm-train")
    return load_config(RunConfig, path, args.overrides, base=base)
