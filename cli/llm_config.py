"""The run config of the ``smallinit llm`` commands (``llm train``, ``llm init-table``,
``llm coord-check``): the defaults in code, ``--profile``'s ``[llm-train]`` table, then
``--config FILE``, then ``key=value`` overrides (:data:`smallinit.cli.util.PRECEDENCE`)."""

from __future__ import annotations

from pathlib import Path

from smallinit.cli.util import user_error


def profile_alias(args) -> None:
    """``--config NAME`` where NAME is no file but a packaged profile: the older spelling of
    ``--profile NAME`` (``--config`` takes a TOML overlay file, as in every command), kept
    with a warning; a NAME that is neither is refused in one line."""
    from smallinit.core import profiles
    from smallinit.core.errors import SmallinitWarning

    name = args.config
    if name is None or Path(name).exists() or Path(name).suffix == ".toml":
        return
    if name not in profiles.names():
        raise user_error(
            f"config {name!r} is neither a file nor a packaged config "
            f"({', '.join(profiles.names())})"
        )
    given = getattr(args, "profile", None)
    if given not in (None, name):
        raise user_error(
            f"--config {name} names profile {name!r} and --profile {given}; give "
            "one profile (--config takes a TOML file)"
        )
    import warnings

    warnings.warn(
        f"--config {name} names a profile: write --profile {name} (--config takes "
        "a TOML file laid over the profile)",
        SmallinitWarning,
        stacklevel=2,
    )
    args.profile, args.config = name, None


def load_run_config(args, default=None):
    """The run config (:data:`smallinit.cli.util.PRECEDENCE`): the defaults in code with
    ``--profile``'s ``[llm-train]`` table laid over them (without ``--profile``: ``default``,
    else the defaults alone), then ``--config FILE``, then the ``key=value`` overrides."""
    from smallinit.core.config import load_config, parse_overrides, read_toml

    profile_alias(args)
    if args.config is not None:  # a bad file or override is refused before sympy is imported
        read_toml(args.config)
    parse_overrides(args.overrides)
    from smallinit.llm.run_config import RunConfig, profile_config

    profile = getattr(args, "profile", None)
    base = profile_config(profile) if profile is not None else default
    return load_config(RunConfig, args.config, args.overrides, base=base)
