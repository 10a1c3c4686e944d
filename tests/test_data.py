"""course_utils.data: loading and checking text, the character tokenizer, the split, batches.

The making of the corpus (download, verify, clean) is course_utils._corpus and its command line
course_tools.corpus, both tested in tests/test_corpus.py. Everything here runs offline.
"""

import re
from pathlib import Path

import pytest
import torch

from course_utils import data
from course_utils.data import (
    CharTokenizer,
    ChecksumError,
    corpus_info,
    get_batch,
    iter_eval_batches,
    load_corpus,
    load_text,
    split_data,
)

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------------
# load_text
# --------------------------------------------------------------------------------------------------


def test_load_text_reads_utf8_and_normalises_line_endings(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffa\r\nb\rcé\n".encode("utf-8"))
    assert load_text(path) == "a\nb\ncé\n"


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
            with pytest.raises(
                ChecksumError,
                match=rf"{re.escape(str(path))} is named like the course corpus but its "
                rf"sha256 is {digest[:16]}\.\.\., expected {data.CORPUS_SHA256[:16]}"
                r"\.\.\.: .* `python -m course_tools.corpus fetch --force`",
            ):
                read(path)
    own = tmp_path / "mine.txt"
    own.write_text("my own words\n")
    assert not data.is_course_corpus(own) and load_corpus(own) == "my own words\n", "a learner's own text, as is"


@pytest.mark.parametrize("context_length", [1, 8, 32, 256])
def test_min_characters_is_the_fewest_that_split_into_two_windows(context_length):
    n = data.min_characters(context_length)
    for size, fits in ((n, True), (n - 1, False)):
        train, val = split_data("x" * size)
        assert (min(len(train), len(val)) >= context_length + 1) is fits
    data.check_text_size(n, context_length)


# --------------------------------------------------------------------------------------------------
# CharTokenizer
# --------------------------------------------------------------------------------------------------


def test_tokenizer_round_trip_and_sorted_vocabulary():
    text = "To be, or not to be:\nthat is the question."
    tok = CharTokenizer.from_text(text)
    assert tok.chars == tuple(sorted(set(text)))
    assert tok.vocab_size == len(set(text))
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert tok.decode(ids) == text
    assert tok.decode(ids.tolist()) == text
    assert tok.encode("").shape == (0,)


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


# --------------------------------------------------------------------------------------------------
# get_batch and iter_eval_batches
# --------------------------------------------------------------------------------------------------


def test_get_batch_shapes_and_shift():
    ids = torch.arange(100)
    x, y = get_batch(ids, batch_size=4, context_length=8, generator=torch.Generator().manual_seed(0), device="cpu")
    assert x.shape == y.shape == (4, 8) and x.dtype == y.dtype == torch.long and x.device.type == y.device.type == "cpu"
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
# Every message a learner can meet here: (call, given tmp_path; exception; what the message must say, {tmp} = tmp_path)
# --------------------------------------------------------------------------------------------------


def _file(folder: Path, name: str, content: bytes) -> Path:
    (folder / name).write_bytes(content)
    return folder / name


AB = CharTokenizer.from_text("ab")
MESSAGES = [
    (lambda tmp: load_text(tmp / "nope.txt"), FileNotFoundError,
     r"no text file at .*nope\.txt: pass the path of an existing UTF-8"),
    (lambda tmp: load_text(_file(tmp, "latin1.txt", "caf\u00e9 au lait".encode("latin-1"))), ValueError,
     r"latin1\.txt is not UTF-8 text: byte 0xe9 at offset 3 .*convert the file to UTF-8"),
    (lambda tmp: load_text(tmp), ValueError, "is a folder, expected a UTF-8 text file"),
    # Before: /dev/urandom was read until the machine ran out of memory
    (lambda tmp: load_text("/dev/urandom"), ValueError, r"/dev/urandom is not a regular file \(a device or a pipe\)"),
    (lambda tmp: load_text(_file(tmp, "empty.txt", b"")), ValueError, "empty.txt is empty, expected some text"),
    (lambda tmp: load_text(None), TypeError, "path must be a str or os.PathLike, got NoneType"),
    (lambda tmp: data.is_course_corpus(None), TypeError, "path must be a str or os.PathLike, got NoneType"),
    (lambda tmp: load_corpus(datasets_dir=tmp, download=False), FileNotFoundError,
     r"is not there yet: run `python -m course_tools.corpus --datasets-dir {tmp} fetch`.*--data PATH"),
    # a str such as "no" is truthy: refused before any download starts (tmp holds no corpus, so one would)
    (lambda tmp: load_corpus(datasets_dir=tmp, download="no"), TypeError,
     r"download must be True or False, got 'no' \(str\)"),
    # after `--datasets-dir X`, the command it suggests fetches into X too (it fetched into the default before)
    (lambda tmp: load_corpus(datasets_dir=tmp / "my data", download=False), FileNotFoundError,
     r"run `python -m course_tools.corpus --datasets-dir '.*my data' fetch`"),
    (lambda tmp: data.check_text_size(120, 32, source="notes.txt"), ValueError,
     r"notes.txt has 120 characters; training with context_length 32 needs at "
     r"least 321 \(a window of 33 in the last 10% for validation"),
    (lambda tmp: data.min_characters(0), ValueError, "context_length must be a positive int, got 0"),
    (lambda tmp: corpus_info(123), TypeError, "text must be a str, got int"),
    (lambda tmp: CharTokenizer.from_text("abc ").encode("aézaé"), ValueError,
     r"never seen 2 characters in this text: 'é' \(U\+00E9\) at positions 1, 4; "
     r"'z' \(U\+007A\) at position 2\. Build the tokenizer"),
    (lambda tmp: CharTokenizer.from_text("a").encode("b" * 9 + "cdefgh"), ValueError,
     r"at positions 0, 1, 2, 3, 4, \.\.\. \(9 in all\).*; and 2 more\. Build"),
    (lambda tmp: CharTokenizer(["ab", "c"]), ValueError, "must be a single character"),
    (lambda tmp: CharTokenizer(["a", "b", "a"]), ValueError, r"lists some characters twice: \['a'\]"),
    (lambda tmp: CharTokenizer.from_text(""), ValueError, "the vocabulary is empty"),
    (lambda tmp: CharTokenizer.from_text(b"abc"), TypeError, "text must be a str, got bytes"),
    (lambda tmp: AB.encode(["a"]), TypeError, "text must be a str, got list"),
    (lambda tmp: AB.decode([0, 2, -1]), ValueError, r"token ids \[2, -1\] are outside the vocabulary \(0 to 1\)"),
    (lambda tmp: AB.decode(torch.zeros(1, 2, dtype=torch.long)), ValueError,
     r"decode takes a 1-D sequence of ids, got shape \(1, 2\)"),
    (lambda tmp: AB.decode("abc"), TypeError, "decode takes a list or 1-D tensor of int token ids, got str"),
    (lambda tmp: AB.decode(torch.tensor([0.0, 1.0])), TypeError,
     "decode takes integer token ids, got a tensor of dtype torch.float32"),
    (lambda tmp: AB.decode([True, False]), TypeError, r"decode takes int token ids, got True \(bool\)"),
    (lambda tmp: split_data(torch.arange(10), 1.0), ValueError,
     r"train_fraction must be between 0 and 1 \(exclusive\), got 1.0"),
    (lambda tmp: split_data(torch.arange(10), train_fraction="0.9"), TypeError,
     r"train_fraction must be a number between 0 and 1 \(exclusive\), got '0.9'"),
    (lambda tmp: split_data(torch.arange(1)), ValueError,
     "data of length 1 is too short to split 90% / 10%: one part would be empty"),
    (lambda tmp: get_batch([1, 2, 3], 1, 1), TypeError, r"data must be a \(N,\) torch.Tensor of token ids, got list"),
    (lambda tmp: get_batch(torch.zeros(2, 5, dtype=torch.long), 1, 1), TypeError,
     r"data must be a \(N,\) long tensor of token ids, got shape \(2, 5\) and dtype torch.int64"),
    (lambda tmp: get_batch(torch.zeros(5), 1, 1), TypeError, r"got shape \(5,\) and dtype torch.float32"),
    (lambda tmp: get_batch(torch.arange(10), 0, 4), ValueError, "batch_size must be at least 1, got 0"),
    (lambda tmp: get_batch(torch.arange(8), 2, 8), ValueError,
     r"data has 8 tokens, too few for context_length 8: a window needs context_length \+ 1 = 9"),
    (lambda tmp: get_batch(torch.arange(50), 2, 8, generator=1), TypeError,
     "generator must be a torch.Generator .* or None, got int"),
    (lambda tmp: get_batch(torch.arange(50), 2.0, 8), TypeError, "batch_size must be an int, got float"),
    (lambda tmp: get_batch(torch.arange(50), 2, "8"), TypeError, "context_length must be an int, got str"),
    (lambda tmp: next(iter_eval_batches(torch.arange(10), 2, 0)), ValueError,
     "context_length must be at least 1, got 0"),
    (lambda tmp: list(iter_eval_batches(torch.arange(50), 2, 8, drop_last="no")), TypeError,
     r"drop_last must be True or False, got 'no' \(str\)"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, match", MESSAGES, ids=[re.sub(r"\\(.)", r"\1", m)[:60] for *_, m in MESSAGES])
def test_each_bad_input_gets_its_message(tmp_path, monkeypatch, call, error, match):
    def no_network(*args, **kwargs):
        raise AssertionError("a bad input reached the download")

    monkeypatch.setattr(data, "fetch_corpus", no_network)  # no row may fetch, even with its check broken
    with pytest.raises(error, match=match.format(tmp=re.escape(str(tmp_path)))):
        call(tmp_path)


# --------------------------------------------------------------------------------------------------
# What a learner sees: the module teaches; the corpus plumbing lives in course_utils._corpus and course_tools.corpus
# --------------------------------------------------------------------------------------------------

PLUMBING = (
    "fetch",
    "verify",
    "download_sdist",
    "read_plays",
    "strip_gutenberg",
    "clean_text",
    "build_corpus",
    "main",
    "SDIST_REQUIREMENT",
    "SDIST_SHA256",
    "PLAYS",
)


def test_tab_completion_shows_what_the_module_teaches_not_the_corpus_plumbing():
    from course_tools import corpus

    shown = {name for name in dir(data) if not name.startswith("_")}
    assert {
        "load_text",
        "load_corpus",
        "CharTokenizer",
        "split_data",
        "get_batch",
        "iter_eval_batches",
        "corpus_path",
        "corpus_info",
        "ChecksumError",
        "DownloadError",
    } <= shown
    assert not shown & set(PLUMBING), shown & set(PLUMBING)
    assert set(data.__all__) <= shown and not set(data.__all__) & set(PLUMBING)
    for name in PLUMBING:  # they live in the tools, and only there
        assert hasattr(corpus, name) and not hasattr(data, name), name


@pytest.mark.parametrize("name", ["10_tiny_gpt.py", "11_inside_the_gpt.py"])
def test_the_gpt_notebooks_imports_keep_working(name):
    source = (Path(__file__).resolve().parent.parent / "course_source" / name).read_text()
    line = next(ln for ln in source.splitlines() if ln.startswith("from course_utils.data import"))
    namespace: dict = {}
    exec(line, namespace)  # the notebook's own import line
    assert {"CharTokenizer", "load_corpus", "get_batch"} <= set(namespace)


def test_a_package_installed_outside_a_course_folder_keeps_its_data_out_of_site_packages(tmp_path, monkeypatch):
    """A wheel in site-packages has no course folder: datasets/ there would become an importable package named
    `datasets` (transformers then believes Hugging Face datasets is installed) and outlive an uninstall."""
    from course_utils._files import course_folder

    checkout, site_packages = tmp_path / "course", tmp_path / "site-packages"
    (checkout / "course_utils").mkdir(parents=True)
    (checkout / "course.py").write_text("")
    (site_packages / "course_utils").mkdir(parents=True)
    monkeypatch.delenv("COURSE_HOME", raising=False)
    assert course_folder(checkout / "course_utils") == checkout
    assert course_folder(site_packages / "course_utils") == Path.home() / "attention-step-by-step"
    monkeypatch.setenv("COURSE_HOME", str(tmp_path / "mine"))
    assert course_folder(site_packages / "course_utils") == tmp_path / "mine"
    assert course_folder(checkout / "course_utils") == checkout  # a course folder is used as it is
    assert course_folder() == Path(data.__file__).resolve().parent.parent  # this checkout


def test_course_home_is_fixed_when_read_and_a_machine_without_home_still_imports(tmp_path, monkeypatch):
    from course_utils._files import course_folder

    outside = tmp_path / "site-packages" / "course_utils"
    outside.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COURSE_HOME", "relative")
    assert course_folder(outside) == tmp_path / "relative"  # not a path that follows later changes of folder
    monkeypatch.delenv("COURSE_HOME")

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert course_folder(outside) == tmp_path / "attention-step-by-step"
