"""course_utils.data: loading and checking text, the character tokenizer, the split, batches.

The making of the corpus (download, verify, clean) is course_utils._corpus and its command line
course_tools.corpus, both tested in tests/test_corpus.py. Everything here runs offline.
"""

import re
from pathlib import Path

import pytest
import torch

from course_utils import data
from course_utils._files import write_atomic
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


def test_load_text_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no text file at .*nope\.txt: pass the path of an existing UTF-8"):
        load_text(tmp_path / "nope.txt")


def test_load_text_not_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    with pytest.raises(
        ValueError, match=r"latin1\.txt is not UTF-8 text: byte 0xe9 at offset 3 .*convert the file to UTF-8"
    ):
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
    with pytest.raises(
        FileNotFoundError,
        match=rf"is not there yet: run `python -m course_tools.corpus --datasets-dir {tmp_path} fetch`.*--data PATH",
    ):
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
            with pytest.raises(
                ChecksumError,
                match=rf"{re.escape(str(path))} is named like the course corpus but its "
                rf"sha256 is {digest[:16]}\.\.\., expected {data.CORPUS_SHA256[:16]}"
                r"\.\.\.: .* `python -m course_tools.corpus fetch --force`",
            ):
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
    with pytest.raises(
        ValueError,
        match=r"notes.txt has 120 characters; training with context_length 32 needs at "
        r"least 321 \(a window of 33 in the last 10% for validation",
    ):
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
    with pytest.raises(
        ValueError,
        match=r"never seen 2 characters in this text: 'é' \(U\+00E9\) at positions 1, 4; "
        r"'z' \(U\+007A\) at position 2\. Build the tokenizer",
    ):
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
    with pytest.raises(
        TypeError, match=r"data must be a \(N,\) long tensor of token ids, got shape \(2, 5\) and dtype torch.int64"
    ):
        get_batch(torch.zeros(2, 5, dtype=torch.long), 1, 1)
    with pytest.raises(TypeError, match="got shape \\(5,\\) and dtype torch.float32"):
        get_batch(torch.zeros(5), 1, 1)
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        get_batch(torch.arange(10), 0, 4)
    with pytest.raises(ValueError, match="context_length must be at least 1, got 0"):
        next(iter_eval_batches(torch.arange(10), 2, 0))
    with pytest.raises(
        ValueError, match=r"data has 8 tokens, too few for context_length 8: a window needs context_length \+ 1 = 9"
    ):
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
# Atomic writes (the tokenizer's save)
# --------------------------------------------------------------------------------------------------


def test_write_atomic_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_bytes(b"old contents")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, b"new contents")
    assert target.read_bytes() == b"old contents"  # the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # and no temporary file is left


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


def test_the_missing_corpus_message_names_the_folder_it_was_asked_for(tmp_path):
    """After `--datasets-dir X`, the command it suggests fetches into X too (it fetched into the default before)."""
    folder = tmp_path / "my data"
    with pytest.raises(
        FileNotFoundError, match=r"run `python -m course_tools.corpus --datasets-dir '.*my data' fetch`"
    ):
        load_corpus(datasets_dir=folder, download=False)


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
