"""Turning a language model's logits into text (notebook 09): sampling filters, the generation loop (with a KV
cache), beam search. The model: ``forward(idx, cache=None) -> logits (B, T, V)``, ``context_length``, ``new_cache()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import torch
from torch import nn

from course_utils._validate import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_fraction,
    check_generator,
    check_int,
    check_number,
    check_token_ids,
)

__all__ = [
    "top_k_filter",
    "top_p_keep",
    "sample_next_token",
    "generate_stream",
    "generate",
    "beam_search",
    "distinct_ngrams",
]


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row (ties at the k-th too), set the others to -inf.

    Shape: logits (..., V) -> (..., V). Taught in notebook 09.
    """
    check_float_tensor("logits", logits)
    check_int("top_k", top_k)
    return _top_k_filter(logits, top_k)


def _top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """:func:`top_k_filter` without its checks."""
    k = min(top_k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest logit
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_keep(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus of each row: the fewest most likely tokens whose probabilities sum to at least ``top_p``.

    Shape: probs (..., V) -> keep bool (..., V). Taught in notebook 09.
    """
    check_float_tensor("probs", probs)
    check_fraction("top_p", top_p, one_allowed=True, zero_allowed=False)
    if probs.numel() and probs.device.type != "meta":  # one read of the device, at the public entry only
        total = probs.sum(dim=-1, dtype=torch.float64)
        low, total_error = torch.stack([probs.min().double(), (total - 1).abs().max()]).tolist()
        if not (low >= 0 and total_error <= (1e-3 if probs.element_size() >= 4 else 2e-2)):  # NaN fails both
            raise ValueError(
                f"probs must be rows of probabilities (each >= 0, each row summing to 1; pass "
                f"torch.softmax(logits, dim=-1), or sample_next_token(logits, top_p=p)), got min {low:.4g} "
                f"and a row sum off from 1 by {total_error:.4g}"
            )
    return _top_p_keep(probs, top_p)


def _top_p_keep(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """:func:`top_p_keep` without its checks."""
    if top_p >= 1.0:
        return torch.ones_like(probs, dtype=torch.bool)  # cumulative sums may round to just above 1
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # (..., V)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (..., V): mass of the tokens strictly before
    keep_sorted = before < top_p  # (..., V), always True for the first token
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One next token per row: the argmax (``greedy``), or a sample after temperature, top-k and top-p.

    Shape: logits (B, V) -> tokens (B,) int64. Taught in notebook 09.
    """
    check_float_tensor("logits", logits, min_dim=2)
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise ValueError(f"logits must be (B, V) with V >= 1 tokens, got {tuple(logits.shape)}")
    temperature, top_p = check_sampling(temperature, top_k, top_p, greedy, generator)
    return _sample(logits, temperature, top_k, top_p, greedy, generator)


def check_sampling(
    temperature: object, top_k: object, top_p: object, greedy: object, generator: object
) -> tuple[float, float | None]:
    """The settings of :func:`sample_next_token`, checked once: by it, or before a generation loop. Returns the
    temperature and top_p as floats (a Fraction or a NumPy number would otherwise reach torch)."""
    if top_k is not None:
        check_int("top_k", top_k, expected="an int or None")
    if top_p is not None:
        top_p = check_fraction("top_p", top_p, one_allowed=True, zero_allowed=False)
    t = 1.0  # unused by the argmax
    if not check_bool("greedy", greedy):
        t = check_number("temperature", temperature, "a number > 0 (use greedy=True for the argmax)")
        if not t > 0:
            raise ValueError(f"temperature must be > 0 (use greedy=True for the argmax), got {temperature}")
        if t == float("inf"):
            raise ValueError(
                "temperature must be finite: an infinite one makes every token equally likely "
                "(sample uniformly instead), got inf"
            )
    check_generator("generator", generator)
    return t, top_p


def _sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    greedy: bool,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """:func:`sample_next_token` without its checks (the loop checks its settings once)."""
    if greedy:
        if logits.isnan().any():  # argmax would return a NaN's index as the largest
            _refuse_nan(logits)
        return logits.argmax(dim=-1)  # (B,)
    given, logits = logits, logits / temperature  # (B, V)
    if top_k is not None:
        logits = _top_k_filter(logits, top_k)
    if top_p is not None:  # the nucleus of the filtered softmax; the rest -inf
        logits = logits.masked_fill(~_top_p_keep(torch.softmax(logits.float(), dim=-1), top_p), float("-inf"))
    probs = torch.softmax(logits.float(), dim=-1)  # (B, V), renormalised over the kept tokens
    try:
        return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (B,)
    except RuntimeError:  # find out why only when it failed: valid logits pay nothing
        if logits.isnan().any():
            _refuse_nan(logits)
        dead_rows = (logits == float("-inf")).all(dim=-1).nonzero().flatten().tolist()
        if dead_rows:
            raise ValueError(
                f"every logit of row(s) {dead_rows[:10]} is -inf, so no token can be sampled: the "
                "logits (or a mask applied to them) rule out the whole vocabulary"
            ) from None
        if (given == float("inf")).any():  # before the temperature: not its fault
            raise ValueError("logits must be finite or -inf, got +inf in the logits given") from None
        if (logits == float("inf")).any():
            raise ValueError(
                f"logits / temperature must be finite or -inf, got +inf (temperature={temperature}; too small a "
                "temperature overflows finite logits): softmax of +inf is NaN"
            ) from None
        raise


def _refuse_nan(logits: torch.Tensor) -> None:
    rows = logits.isnan().any(dim=-1).nonzero().flatten().tolist()
    raise ValueError(
        f"logits must be numbers, got NaN in row(s) {rows[:10]}: the model's output is "
        "broken (a diverged training run, or a fully masked row upstream)"
    ) from None


OnFull = Literal["error", "shift"]
_ON_FULL = ("error", "shift")


def check_generation(
    model: nn.Module, idx: object, max_new_tokens: object, use_cache: object, shift: bool = False
) -> int:
    """Raise unless ``idx`` is a prompt (B, T >= 1), ``max_new_tokens`` an int >= 0 and ``model`` follows the
    protocol, its cache large enough unless it ``shift``s; return its ``context_length``."""
    check_token_ids("idx", idx, vocab_size=0, values=False)  # the type, dtype and shape; the values are the model's
    if idx.shape[1] < 1:
        raise ValueError("idx must hold at least one token (the prompt)")
    if idx.shape[0] < 1:
        raise ValueError(f"idx must hold at least one prompt (B >= 1), got an empty batch of shape {tuple(idx.shape)}")
    if callable(getattr(model, "for_generation", None)):  # one check for both paths, before any step runs
        raise TypeError(
            f"got a {type(model).__name__}, whose forward returns (logits, loss): pass model.for_generation(), "
            "whose forward is (idx, cache) -> logits"
        )
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    context_length = getattr(model, "context_length", None)
    check_int("context_length", context_length, expected="an int attribute of the model")
    if check_bool("use_cache", use_cache) and not callable(getattr(model, "new_cache", None)):
        raise TypeError(f"{type(model).__name__} has no new_cache() method: pass use_cache=False")
    if use_cache and not shift and idx.shape[1] + max(max_new_tokens - 1, 0) > context_length:
        raise ValueError(
            f"prompt ({idx.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) - 1 exceeds the model's "
            f"context_length ({context_length}): the KV cache cannot hold them (the last token is never fed "
            "back); shorten them or pass use_cache=False, which crops to the last context_length tokens"
        )
    return context_length


@torch.no_grad()
def generate_stream(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    *,
    on_full: OnFull = "error",
    keep_on_shift: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Generate one token at a time, yielding ``(tokens (B,), logits (B, V))`` as soon as each is chosen.

    Without a cache each step recomputes the last ``context_length`` tokens. With ``use_cache``,
    ``on_full="error"`` needs ``prompt + max_new_tokens - 1 <= context_length``; ``"shift"`` starts a new cache
    from the last ``keep_on_shift`` tokens (default ``context_length // 2``). Puts the model in eval mode.
    Shape: idx (B, T) -> pairs of tokens (B,) int64, logits (B, V). Notebooks 09, 10.
    """
    check_choice("on_full", on_full, _ON_FULL)
    context_length = check_generation(model, idx, max_new_tokens, use_cache, shift=on_full == "shift")
    temperature, top_p = check_sampling(temperature, top_k, top_p, greedy, generator)
    if keep_on_shift is not None and on_full != "shift":
        raise ValueError(f"keep_on_shift applies only with on_full='shift', got on_full={on_full!r}")
    if keep_on_shift is not None:
        check_int("keep_on_shift", keep_on_shift, minimum=1, maximum=context_length, expected="an int or None")
    keep = None  # on_full="error": a full cache raises
    if on_full == "shift":  # a full cache starts again from the last `keep` tokens
        keep = max(1, context_length // 2) if keep_on_shift is None else int(keep_on_shift)
    model.eval()
    cache = model.new_cache() if use_cache else None
    cached = 0  # positions held by the current cache
    seq = idx
    step_input = idx[:, -context_length:]  # with a cache: the prompt first (cropped), then one token at a time
    for _ in range(max_new_tokens):
        if cache is None:
            logits = model(seq[:, -context_length:])[:, -1]  # (B, T, V) -> (B, V)
        else:
            if cached + step_input.shape[1] > context_length:  # only with on_full="shift" (checked above)
                cache, cached = model.new_cache(), 0
                step_input = seq[:, -keep:]  # (B, keep): re-prefill; the newest token is the last of them
            logits = model(step_input, cache)[:, -1]  # (B, T_new, V) -> (B, V)
            cached += step_input.shape[1]
        token = _sample(logits, temperature, top_k, top_p, greedy, generator)  # (B,), settings checked above
        yield token, logits
        step_input = token[:, None]  # (B, 1)
        seq = torch.cat([seq, step_input], dim=1)  # (B, T + 1)


def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    callback: Callable[[torch.Tensor], None] | None = None,
    return_logits: bool = False,
    *,
    on_full: OnFull = "error",
    keep_on_shift: int | None = None,
):
    """The prompt followed by ``max_new_tokens`` generated tokens (and their logits with ``return_logits``).

    ``callback(tokens (B,))`` runs after every step; the other settings are :func:`generate_stream`'s.
    Shape: idx (B, T) -> (B, T + N), logits (B, N, V). Taught in notebook 09.
    """
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function of the new tokens (B,), or None, got {type(callback).__name__}")
    tokens, all_logits = [], []
    for token, logits in generate_stream(
        model,
        idx,
        max_new_tokens,
        temperature,
        top_k,
        top_p,
        greedy,
        use_cache,
        generator,
        on_full=on_full,
        keep_on_shift=keep_on_shift,
    ):
        tokens.append(token)
        all_logits.append(logits)
        if callback is not None:
            callback(token)
    new = torch.stack(tokens, dim=1) if tokens else idx[:, :0]  # (B, N)
    out = torch.cat([idx, new], dim=1)  # (B, T + N)
    if not return_logits:
        return out
    V = all_logits[0].shape[-1] if all_logits else 0
    return out, torch.stack(all_logits, dim=1) if all_logits else idx.new_zeros(idx.shape[0], 0, V).float()


@torch.no_grad()
def beam_search(
    model: nn.Module, idx: torch.Tensor, beam_width: int, max_new_tokens: int, use_cache: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the ``beam_width`` most likely continuations at every step (no end token, no length penalty).

    Shape: idx (1, T) -> sequences (W, T + N), scores (W,) log-probabilities of the N new tokens, best first
    (W = beam_width, fewer if the vocabulary allows fewer distinct beams). Taught in notebook 09.
    """
    context_length = check_generation(model, idx, max_new_tokens, use_cache)
    if idx.shape[0] != 1:
        raise ValueError(f"beam_search takes one prompt, idx of shape (1, T), got {tuple(idx.shape)}")
    check_int("beam_width", beam_width)
    model.eval()
    cache = model.new_cache() if use_cache else None
    seqs = idx  # (n, T'): n live beams, 1 at the start
    scores = torch.zeros(1, device=idx.device)  # (n,)
    step_input = idx
    for _ in range(max_new_tokens):
        if cache is None:
            logits = model(seqs[:, -context_length:])[:, -1]  # (n, V)
        else:
            logits = model(step_input, cache)[:, -1]  # (n, V)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (n, V)
        n, V = logp.shape
        total = (scores[:, None] + logp).flatten()  # (n * V,): every one-token extension of every beam
        scores, flat = total.topk(min(beam_width, n * V))  # (W,), sorted descending
        beam, token = flat // V, flat % V  # which beam each winner extends, and with which token
        seqs = torch.cat([seqs[beam], token[:, None]], dim=1)  # (W, T' + 1)
        if cache is not None:
            cache.reorder(beam)  # each new beam carries the keys and values of the beam it extends
        step_input = token[:, None]  # (W, 1)
    return seqs, scores


def distinct_ngrams(text: str, n: int = 4) -> float:
    """The share of a text's n-grams (runs of ``n`` characters) that are distinct: 1.0 when none repeats, near 0
    for a text that loops. Taught in notebook 10."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (decode the ids first), got {type(text).__name__}")
    check_int("n", n)
    if len(text) < n:
        raise ValueError(f"text must hold at least n = {n} characters to have an n-gram, got {len(text)}")
    grams = [text[i : i + n] for i in range(len(text) - n + 1)]
    return len(set(grams)) / len(grams)
