"""``python -m smallinit`` is the same as the ``smallinit`` console script."""

from smallinit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
