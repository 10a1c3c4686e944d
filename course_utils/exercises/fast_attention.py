"""Exercises of notebook 08 (fast attention): merging two online-softmax blocks, attention's backward pass, a
tile's weights recomputed from the logsumexp as FlashAttention's backward pass does, and that tiled backward pass
in FlashAttention-2's order.

The reference solutions are built from :mod:`course_utils.fast_attention` (08.4's is autograd in float64); each
mistake is one that learners
(and published code) really make: partial sums merged without rescaling, or rescaled upside down (a block that saw
no key guarded, or not), the last block's maximum kept instead of the larger one, NaN for a query that has seen no
key yet; in the backward pass, the softmax's correction Δ forgotten, computed without the weights, along the wrong
axis or without its axis, a product not transposed, the scale missing, doubled or assumed, the weights recomputed
unstably; for a tile, a softmax over the tile alone, the logsumexp broadcast along the keys, the scale missing, the
tile's maximum subtracted instead, exp(L) divided out (inf / inf in float32); in the tiled backward, Δ left out or
taken from the tile, the weights not normalised by L, dq overwritten by each key tile, the scale missing or doubled,
causal tiles skipped one too early, a diagonal tile left unmasked, the diagonal itself masked, the causal
mask aligned top-left.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.fast_attention import Partial, attention_backward, block_partial, merge_partials
from course_utils.masking import causal_mask

__all__ = ["EXERCISES"]

NEG_INF = float("-inf")


# --- 08.1 merge two blocks of an online softmax -----------------------------------------------------


def _merge_solution(
    m1: torch.Tensor, l1: torch.Tensor, o1: torch.Tensor, m2: torch.Tensor, l2: torch.Tensor, o2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(merge_partials(Partial(m1, l1, o1), Partial(m2, l2, o2)))  # (..., T, 1), (..., T, 1), (..., T, Dv)


def _two_blocks(scores: torch.Tensor, v: torch.Tensor, cut: int) -> tuple:
    """The partials (m, l, o) of keys 0 .. cut-1 and cut .. S-1: the six arguments of the exercise."""
    return (*block_partial(scores[..., :cut], v[..., :cut, :]), *block_partial(scores[..., cut:], v[..., cut:, :]))


def _merge_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(17)
    plain = 2.0 * torch.randn(4, 5, generator=g)  # (T, S): maxima of the two blocks in either order
    far = torch.tensor(
        [
            [0.5, 1.0, -120.0, -119.0],  # block 2 far BELOW block 1: exp(m1 - m2) overflows
            [-150.0, -149.5, 3.0, 2.0],  # block 2 far ABOVE block 1
            [1.0, 0.0, 0.5, -0.5],
            [0.5, -1.0, 0.5, 0.25],  # the same maximum in both blocks
        ]
    )
    blocked = torch.randn(2, 4, 6, generator=g)  # (B, T, S) with queries that see nothing
    blocked[0, 1] = NEG_INF  # nothing visible in either block: the partials are (-inf, 0, 0) twice
    blocked[1, 2, :3] = NEG_INF  # nothing visible in the first block only
    blocked[1, 0, 3:] = NEG_INF  # nothing visible in the second block only
    # (B, H, T, S): an empty block beside one whose maximum is below float32's exp underflow (about -88), so that
    # guarding m1, m2 and m for -inf each on its own gives exp(0 - (-119)) = inf times l = 0: NaN
    low = torch.randn(2, 3, 2, 6, generator=g)
    low[0, 0, 0] = torch.tensor([NEG_INF, NEG_INF, NEG_INF, -120.0, -119.0, -121.5])  # the first block empty
    low[1, 2, 1] = torch.tensor([-130.0, -125.0, -127.0, NEG_INF, NEG_INF, NEG_INF])  # the second block empty
    return [
        (_two_blocks(plain, torch.randn(5, 2, generator=g), 2), {}),
        (_two_blocks(far, torch.randn(4, 3, generator=g), 2), {}),
        (_two_blocks(blocked, torch.randn(2, 6, 1, generator=g), 3), {}),
        (_two_blocks(low, torch.randn(2, 3, 6, 4, generator=g), 3), {}),
        (_two_blocks(torch.randn(3, 1, 5, generator=g), torch.randn(3, 5, 2, generator=g), 4), {}),  # T == 1
    ]


def _merge_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [randint(g, 1, 5) for _ in range(randint(g, 0, 3))]  # up to two leading axes (B, H)
        T, S, Dv = randint(g, 1, 41), randint(g, 2, 49), randint(g, 1, 65)
        spread = float(torch.empty(()).uniform_(1.0, 200.0, generator=g))
        scores = spread * torch.randn(*batch, T, S, generator=g)
        scores = scores.masked_fill(torch.rand(*batch, T, S, generator=g) < 0.3, NEG_INF)
        scores = scores.masked_fill(torch.rand(*batch, T, 1, generator=g) < 0.15, NEG_INF)  # rows that see nothing
        cases.append((_two_blocks(scores, torch.randn(*batch, S, Dv, generator=g), randint(g, 1, S)), {}))
    return cases


def _guarded(m: torch.Tensor) -> torch.Tensor:
    return m.masked_fill(m == NEG_INF, 0.0)


def _merge_not_rescaled(m1, l1, o1, m2, l2, o2):
    return torch.maximum(m1, m2), l1 + l2, o1 + o2  # each sum is still relative to its own block's maximum


def _merge_upside_down(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1 = torch.where(m1 == NEG_INF, 0.0, torch.exp(m - m1))  # exp(m_new - m_old): >= 1, grows; a block that saw
    a2 = torch.where(m2 == NEG_INF, 0.0, torch.exp(m - m2))  # no key is guarded, so only the factors are wrong
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


def _merge_upside_down_unguarded(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(_guarded(m) - m1), torch.exp(_guarded(m) - m2)  # exp(m_new - (-inf)) = inf beside 0: NaN
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


def _merge_only_l(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - _guarded(m)), torch.exp(m2 - _guarded(m))
    return m, a1 * l1 + a2 * l2, o1 + o2


def _merge_last_max(m1, l1, o1, m2, l2, o2):
    m = m2  # the newest block's maximum, not the larger of the two
    a1 = torch.exp(m1 - _guarded(m))  # exp(m1 - m2) overflows when block 1 was far higher
    return m, a1 * l1 + l2, a1 * o1 + o2


def _merge_unguarded(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)  # -inf - (-inf) = NaN where neither block saw a key
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


def _merge_normalised(m1, l1, o1, m2, l2, o2):
    m, l, o = _merge_solution(m1, l1, o1, m2, l2, o2)
    return m, l, o / l  # the attention output of the keys so far, not the partial's unnormalised sum


def _merge_normalised_guarded(m1, l1, o1, m2, l2, o2):
    m, l, o = _merge_solution(m1, l1, o1, m2, l2, o2)
    return m, l, o / l.clamp_min(torch.finfo(l.dtype).tiny)  # the same slip, with 0/0 kept at 0 for empty rows


# --- 08.2 the backward pass of attention ------------------------------------------------------------


def _backward_solution(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return attention_backward(q, k, v, o, do, scale)  # (..., T, D), (..., S, D), (..., S, Dv)


def _backward_case(
    g: torch.Generator, batch: list[int], T: int, S: int, D: int, Dv: int, scale: float, spread: float = 1.0
) -> tuple[tuple, dict]:
    """Random q, k, v and do (q and k times ``spread``, do divided by it), and o the true output of the call."""
    q = spread * torch.randn(*batch, T, D, generator=g)
    k = spread * torch.randn(*batch, S, D, generator=g)
    v = torch.randn(*batch, S, Dv, generator=g)
    o = torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1) @ v  # (..., T, Dv)
    do = torch.randn(*batch, T, Dv, generator=g) / spread
    return (q, k, v, o, do, scale), {}


def _backward_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(18)
    return [
        _backward_case(g, [], 6, 6, 4, 3, 0.5),  # T == S first: a slip that breaks shapes only when T != S
        _backward_case(g, [2], 3, 7, 5, 6, 1 / math.sqrt(5)),  # T != S, D != Dv, one leading axis
        _backward_case(g, [2, 3], 1, 5, 4, 2, 0.3),  # one query, (B, H) leading axes
        _backward_case(g, [3], 4, 1, 3, 5, 0.7),  # one key: every weight is 1, dq = dk = 0
        _backward_case(g, [2, 2], 5, 4, 6, 1, 1.3),  # Dv == 1
        _backward_case(g, [2], 6, 5, 8, 4, 0.25, spread=8.0),  # saturated: weights ~1 and ~0, scores past 88
        _backward_case(g, [2], 3, 4, 1, 2, 0.9),  # D == 1
    ]


def _backward_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [randint(g, 1, 5) for _ in range(randint(g, 0, 3))]  # up to two leading axes (B, H)
        T, S, D, Dv = randint(g, 1, 41), randint(g, 1, 41), randint(g, 1, 65), randint(g, 1, 65)
        scale = 1 / math.sqrt(D) if randint(g, 0, 2) else float(torch.empty(()).uniform_(0.05, 1.0, generator=g))
        cases.append(_backward_case(g, batch, T, S, D, Dv, scale))
    return cases


def _weights(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1)  # (..., T, S): P


def _backward_from(q, k, v, o, do, scale, P, delta_of=None, dq_scale=None):
    """The backward pass from weights P, with Δ = delta_of(P, dP) (default rowsum(dO ⊙ O)) and dq, dk scaled by
    dq_scale (default scale): the mistakes below change one step each."""
    dv = P.transpose(-2, -1) @ do  # (..., S, Dv)
    dP = do @ v.transpose(-2, -1)  # (..., T, S)
    delta = (do * o).sum(dim=-1, keepdim=True) if delta_of is None else delta_of(P, dP)
    dS = P * (dP - delta)  # (..., T, S)
    c = scale if dq_scale is None else dq_scale
    return c * dS @ k, c * dS.transpose(-2, -1) @ q, dv


def _bw_dot_t(q, k, v, o, do, scale):
    P = torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1)  # (..., T, S)
    dS = P * (do @ v.transpose(-2, -1) - (do * o).sum(dim=-1, keepdim=True))
    return scale * dS @ k, scale * dS.T @ q, P.T @ do  # .T reverses every axis once there are leading ones


def _bw_no_delta(q, k, v, o, do, scale):
    return _backward_from(q, k, v, o, do, scale, _weights(q, k, scale), lambda P, dP: 0.0)  # dS = P * dP


def _bw_delta_without_p(q, k, v, o, do, scale):
    return _backward_from(q, k, v, o, do, scale, _weights(q, k, scale), lambda P, dP: dP.sum(dim=-1, keepdim=True))


def _bw_delta_over_queries(q, k, v, o, do, scale):
    P = _weights(q, k, scale)
    return _backward_from(q, k, v, o, do, scale, P, lambda P, dP: (P * dP).sum(dim=-2, keepdim=True))  # (..., 1, S)


def _bw_delta_without_keepdim(q, k, v, o, do, scale):
    P = _weights(q, k, scale)
    return _backward_from(q, k, v, o, do, scale, P, lambda P, dP: (do * o).sum(dim=-1))  # (..., T): meets the keys


def _bw_p_not_transposed(q, k, v, o, do, scale):
    P = _weights(q, k, scale)
    dq, dk, _ = _backward_from(q, k, v, o, do, scale, P)
    return dq, dk, P @ do  # (..., T, S) @ (..., T, Dv): runs only when T == S


def _bw_dk_not_transposed(q, k, v, o, do, scale):
    P = _weights(q, k, scale)
    dS = P * (do @ v.transpose(-2, -1) - (do * o).sum(dim=-1, keepdim=True))
    return scale * dS @ k, scale * dS @ q, P.transpose(-2, -1) @ do  # dS @ q runs only when T == S


def _bw_no_scale(q, k, v, o, do, scale):
    return _backward_from(q, k, v, o, do, scale, _weights(q, k, scale), dq_scale=1.0)


def _bw_scale_twice(q, k, v, o, do, scale):
    return _backward_from(q, k, v, o, do, scale, _weights(q, k, scale), dq_scale=scale * scale)


def _bw_weights_unscaled(q, k, v, o, do, scale):
    return _backward_from(q, k, v, o, do, scale, _weights(q, k, 1.0))  # P = softmax(q k^T)


def _bw_scale_from_d(q, k, v, o, do, scale):
    s = 1 / math.sqrt(q.shape[-1])  # the usual scale, not the one given
    return _backward_from(q, k, v, o, do, s, _weights(q, k, s))


def _bw_unstable_weights(q, k, v, o, do, scale):
    e = torch.exp(scale * q @ k.transpose(-2, -1))  # overflows to inf for a score above about 88
    return _backward_from(q, k, v, o, do, scale, e / e.sum(dim=-1, keepdim=True))


# --- 08.3 a tile's weights recomputed from the logsumexp --------------------------------------------


def _tile_weights_solution(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.exp(scale * q @ k.transpose(-2, -1) - lse.unsqueeze(-1))  # (..., T, S): P = exp(s - L), no softmax


def _tile_case(
    g: torch.Generator,
    batch: list[int],
    T: int,
    keys: int,
    tile: tuple[int, int],
    D: int,
    scale: float,
    q_rows: torch.Tensor | None = None,
    k_all: torch.Tensor | None = None,
) -> tuple[tuple, dict]:
    """q (..., T, D), the keys tile[0] .. tile[1] - 1 of ``keys`` keys, and each query's logsumexp over all of them."""
    q = torch.randn(*batch, T, D, generator=g) if q_rows is None else q_rows
    k_all = torch.randn(*batch, keys, D, generator=g) if k_all is None else k_all
    lse = torch.logsumexp(scale * q.double() @ k_all.double().transpose(-2, -1), dim=-1).float()  # (..., T)
    return (q, k_all[..., tile[0] : tile[1], :].clone(), lse, scale), {}


def _tile_extreme(g: torch.Generator) -> tuple[tuple, dict]:
    """Scores past float32's exp overflow (about 88.7) and far below its underflow (about -104), in rows of their
    own: exp(s) / exp(L) is inf / inf or 0 / 0 there, while exp(s - L) is of order 1."""
    direction = torch.tensor([1.0, 0.5, -0.5])
    k_all = direction + 0.03 * torch.randn(2, 7, 3, generator=g)  # every key close to one direction
    size = torch.tensor([[105.0, -118.0, 2.0, 60.0], [-125.0, 115.0, -1.5, 30.0]])  # each query's q . direction
    q = size[..., None] * direction / direction.dot(direction) / 0.25 + 0.2 * torch.randn(2, 4, 3, generator=g)
    return _tile_case(g, [2], 4, 7, (1, 5), 3, 0.25, q_rows=q, k_all=k_all)


def _tile_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(21)
    return [
        _tile_case(g, [], 5, 9, (2, 7), 4, 0.5),  # T == S first: lse on the wrong axis is named by its values
        _tile_case(g, [2], 3, 10, (4, 10), 3, 1 / math.sqrt(3)),  # T != S, the last tile, one leading axis
        _tile_case(g, [2, 3], 1, 7, (0, 4), 5, 0.3),  # one query, (B, H) leading axes
        _tile_case(g, [3], 4, 6, (5, 6), 2, 0.8),  # a tile of one key
        _tile_extreme(g),  # exp(s) overflows, or underflows with exp(L)
        _tile_case(g, [2], 3, 6, (1, 4), 1, 0.6),  # D == 1
    ]


def _tile_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [randint(g, 1, 5) for _ in range(randint(g, 0, 3))]  # up to two leading axes (B, H)
        T, keys, D = randint(g, 1, 41), randint(g, 2, 49), randint(g, 1, 65)
        j0 = randint(g, 0, keys)
        j1 = randint(g, j0 + 1, keys + 1 if j0 > 0 else keys)  # a strict subset of the keys: rows do not sum to 1
        scale = 1 / math.sqrt(D) if randint(g, 0, 2) else float(torch.empty(()).uniform_(0.05, 1.0, generator=g))
        cases.append(_tile_case(g, batch, T, keys, (j0, j1), D, scale))
    return cases


def _tile_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    return scale * q @ k.transpose(-2, -1)  # (..., T, S)


def _tw_tile_softmax(q, k, lse, scale):
    return torch.softmax(_tile_scores(q, k, scale), dim=-1)  # normalised over the tile's keys alone


def _tw_lse_along_keys(q, k, lse, scale):
    return torch.exp(_tile_scores(q, k, scale) - lse.unsqueeze(-2))  # (..., 1, T) meets the keys' axis


def _tw_lse_scaled(q, k, lse, scale):
    return torch.exp(scale * (q @ k.transpose(-2, -1) - lse.unsqueeze(-1)))  # L as if over the unscaled scores


def _tw_no_scale(q, k, lse, scale):
    return torch.exp(q @ k.transpose(-2, -1) - lse.unsqueeze(-1))


def _tw_tile_max(q, k, lse, scale):
    s = _tile_scores(q, k, scale)
    return torch.exp(s - s.amax(dim=-1, keepdim=True))  # the tile's own maximum, L unused


def _tw_exp_ratio(q, k, lse, scale):
    return torch.exp(_tile_scores(q, k, scale)) / torch.exp(lse).unsqueeze(-1)  # inf / inf, 0 / 0 at the extremes


# --- 08.4 the tiled backward pass, in FlashAttention-2's order --------------------------------------


def _visible_keys(T: int, S: int, is_causal: bool) -> torch.Tensor | None:
    return causal_mask(T, S) if is_causal else None  # (T, S) bottom-right, as is_causal reads it, or None


def _flash_backward_autograd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    dout: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    q_tile: int,
    kv_tile: int,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Autograd through plain attention, in float64, returned in q's dtype: the tiling changes nothing. Run in a
    graph of its own, as the check may call it under inference mode."""
    with torch.inference_mode(False), torch.enable_grad():
        leaves = [x.detach().to(torch.float64, copy=True).requires_grad_() for x in (q, k, v)]  # not inference tensors
        mask = _visible_keys(q.shape[-2], k.shape[-2], is_causal)
        o = F.scaled_dot_product_attention(*leaves, attn_mask=mask, scale=scale)  # (..., T, Dv)
        grads = torch.autograd.grad(o, leaves, dout.detach().to(torch.float64, copy=True))
    return tuple(g.to(q.dtype) for g in grads)  # dq (..., T, D), dk (..., S, D), dv (..., S, Dv)


def _flash_backward_solution(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    """The tiled loop (:func:`_flash_loop` without a slip) in float64, returned in q's dtype. It equals
    :func:`_flash_backward_autograd` to 1e-10 on every fixed and drawn case (tests/test_exercises.py), and, being
    tiled, passes the check's limit on the largest tensor, which autograd through the whole matrix would not."""
    wide = (x.to(torch.float64) for x in (q, k, v, out, dout, lse))
    return tuple(g.to(q.dtype) for g in _flash_loop(*wide, scale, q_tile, kv_tile, is_causal))


def _flash_case(
    g: torch.Generator,
    batch: list[int],
    T: int,
    S: int,
    D: int,
    Dv: int,
    tiles: tuple[int, int],
    is_causal: bool,
    scale: float | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[tuple, dict]:
    """Random q, k, v and dout, with out and lse (..., T) those of the forward pass, in ``dtype``."""
    q, k = (
        torch.randn(*batch, T, D, generator=g, dtype=torch.float64),
        torch.randn(*batch, S, D, generator=g, dtype=torch.float64),
    )
    v, dout = (
        torch.randn(*batch, S, Dv, generator=g, dtype=torch.float64),
        torch.randn(*batch, T, Dv, generator=g, dtype=torch.float64),
    )
    scale = 1 / math.sqrt(D) if scale is None else scale
    scores = scale * q @ k.transpose(-2, -1)  # (..., T, S)
    visible = _visible_keys(T, S, is_causal)
    if visible is not None:
        scores = scores.masked_fill(~visible, NEG_INF)
    out = torch.softmax(scores, dim=-1) @ v  # (..., T, Dv)
    lse = torch.logsumexp(scores, dim=-1)  # (..., T)
    return tuple(x.to(dtype) for x in (q, k, v, out, dout, lse)) + (scale, *tiles, is_causal), {}


def _flash_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(28)
    return [
        _flash_case(g, [], 8, 8, 4, 3, (4, 4), False),  # T == S, tiles that divide it
        _flash_case(g, [], 8, 8, 4, 3, (4, 3), True),  # causal; a key tile starting at a query tile's last row
        _flash_case(g, [2], 7, 11, 5, 2, (3, 4), True),  # T != S causal (offset 4), neither tile divides its length
        _flash_case(g, [2], 9, 6, 3, 4, (4, 2), False, scale=0.7),  # T > S, a scale other than 1/sqrt(D)
        _flash_case(g, [2, 3], 5, 6, 4, 3, (8, 8), True),  # one tile each way, (B, H) leading axes
        _flash_case(g, [2], 6, 7, 2, 3, (2, 3), True, dtype=torch.float32),  # float32; S = 7 leaves a 1-key tile
        _flash_case(g, [3], 1, 5, 3, 2, (1, 2), True),  # one query: it sees every key
    ]


def _flash_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [randint(g, 1, 5) for _ in range(randint(g, 0, 3))]  # up to two leading axes (B, H)
        is_causal = bool(randint(g, 0, 2))
        T = randint(g, 1, 17)
        S = randint(g, T if is_causal else 1, 21)  # is_causal needs T <= S
        tiles = (randint(g, 1, 13), randint(g, 1, 13))  # one tile only, at times
        scale = None if randint(g, 0, 2) else float(torch.empty(()).uniform_(0.1, 1.0, generator=g))
        dtype = torch.float64 if randint(g, 0, 3) else torch.float32
        cases.append(_flash_case(g, batch, T, S, randint(g, 1, 9), randint(g, 1, 9), tiles, is_causal, scale, dtype))
    return cases


def _largest_tile_work(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal) -> int:
    """The most elements one tensor of a tiled backward may hold: any of its inputs or outputs (with the leading
    axes broadcast), a tile's scores times the feature width (a tile's product spelt as a broadcast product summed
    over D or Dv, ``(q_t[..., :, None, :] * k_t[..., None, :, :]).sum(-1)``, is a tiled answer too), a strip of
    scores; one element fewer than the whole (..., T, S) matrix. The fixed cases whose tiles times the width are
    under T * S (2, 3, 4 and 6) refuse the whole matrix."""
    T, S = q.shape[-2], k.shape[-2]
    lead = math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    widths = (q.shape[-1], v.shape[-1], 1)
    tile = min(q_tile, T) * min(kv_tile, S)
    return max(lead * max(T, S) * max(widths), lead * tile * max(widths), lead * T * S - 1)


def _flash_loop(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal, slip=""):
    """The tiled backward pass with one named slip (the mistakes below); "" is the right answer."""
    T, S = q.shape[-2], k.shape[-2]
    offset = 0 if slip == "top-left" else S - T  # query i sits at position offset + i
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (dout * out).sum(dim=-1, keepdim=True)  # (..., T, 1)
    dq_scale = {"no scale": 1.0, "scale twice": scale * scale}.get(slip, scale)
    for j0 in range(0, S, kv_tile):
        k_t, v_t = k[..., j0 : j0 + kv_tile, :], v[..., j0 : j0 + kv_tile, :]  # (..., Sk, D), (..., Sk, Dv)
        for i0 in range(0, T, q_tile):
            last_query = offset + i0 + (0 if slip == "skip early" else q_tile - 1)
            if is_causal and j0 > last_query:
                continue
            q_t, do_t = q[..., i0 : i0 + q_tile, :], dout[..., i0 : i0 + q_tile, :]  # (..., Tq, D), (..., Tq, Dv)
            s = scale * q_t @ k_t.transpose(-2, -1)  # (..., Tq, Sk)
            if is_causal and slip != "unmasked":
                rows = torch.arange(i0, i0 + s.shape[-2])[:, None] + offset  # (Tq, 1)
                cols = torch.arange(j0, j0 + s.shape[-1])  # (Sk,) key positions
                s = s.masked_fill(cols >= rows if slip == "diagonal masked" else cols > rows, NEG_INF)
            p = torch.exp(s if slip == "no lse" else s - lse[..., i0 : i0 + q_tile, None])  # (..., Tq, Sk)
            dp = do_t @ v_t.transpose(-2, -1)  # (..., Tq, Sk)
            d = {"no delta": 0.0, "tile delta": (p * dp).sum(dim=-1, keepdim=True)}.get(
                slip, delta[..., i0 : i0 + q_tile, :]
            )
            ds = p * (dp - d)  # (..., Tq, Sk)
            dv[..., j0 : j0 + kv_tile, :] += p.transpose(-2, -1) @ do_t
            dk[..., j0 : j0 + kv_tile, :] += dq_scale * ds.transpose(-2, -1) @ q_t
            if slip == "dq overwritten":
                dq[..., i0 : i0 + q_tile, :] = dq_scale * ds @ k_t
            else:
                dq[..., i0 : i0 + q_tile, :] += dq_scale * ds @ k_t
    return dq, dk, dv


def _slip(name: str):
    def wrong(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
        return _flash_loop(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal, slip=name)

    return wrong


EXERCISES = (
    Exercise(
        key="08.1",
        domain=Domain(leading={"m1": 2, "l1": 2, "o1": 2, "m2": 2, "l2": 2, "o2": 2}, views=True),
        title="merge two blocks of an online softmax",
        signature="merge_blocks(m1, l1, o1, m2, l2, o2) -> (m, l, o): m, l (..., T, 1), o (..., T, Dv)",
        solution=_merge_solution,
        cases=_merge_cases,
        draw=_merge_draw,
        edges={
            "no leading axes": lambda m1, l1, o1, m2, l2, o2: m1.dim() == 2,
            "one leading axis": lambda m1, l1, o1, m2, l2, o2: m1.dim() == 3,
            "two leading axes": lambda m1, l1, o1, m2, l2, o2: m1.dim() == 4,
            "T == 1": lambda m1, l1, o1, m2, l2, o2: m1.shape[-2] == 1,
            "Dv == 1": lambda m1, l1, o1, m2, l2, o2: o1.shape[-1] == 1,
            "the first block's maximum the larger": lambda m1, l1, o1, m2, l2, o2: bool((m1 > m2).any()),
            "the second block's maximum the larger": lambda m1, l1, o1, m2, l2, o2: bool((m2 > m1).any()),
            "the same finite maximum in both blocks": lambda m1, l1, o1, m2, l2, o2: bool(
                ((m1 == m2) & m1.isfinite()).any()
            ),
            "maxima more than a hundred apart, either way": lambda m1, l1, o1, m2, l2, o2: bool(
                (m1 - m2 > 100).any() and (m2 - m1 > 100).any()
            ),
            "a query that saw no key in either block": lambda m1, l1, o1, m2, l2, o2: bool(
                ((m1 == NEG_INF) & (m2 == NEG_INF)).any()
            ),
            "an empty first block beside a seen second": lambda m1, l1, o1, m2, l2, o2: bool(
                ((m1 == NEG_INF) & m2.isfinite()).any()
            ),
            "an empty second block beside a seen first": lambda m1, l1, o1, m2, l2, o2: bool(
                ((m2 == NEG_INF) & m1.isfinite()).any()
            ),
            "an empty block beside one whose maximum is below -88": lambda m1, l1, o1, m2, l2, o2: bool(
                ((m1 == NEG_INF) & m2.isfinite() & (m2 < -88)).any()
                or ((m2 == NEG_INF) & m1.isfinite() & (m1 < -88)).any()
            ),
        },
        mistakes=(
            Mistake(
                "sums added without rescaling",
                "Each block's l and o were summed relative to that block's own maximum; once the maximum "
                "is the larger of the two, the block whose maximum was smaller must shrink by the gap "
                "before the sums can be added.",
                _merge_not_rescaled,
                fix="a1, a2 = exp(m1 - m), exp(m2 - m); l = a1 * l1 + a2 * l2; o = a1 * o1 + a2 * o2",
            ),
            Mistake(
                "rescaled upside down",
                "The factor that moves a sum from its old maximum to the new, larger one is at most 1: a "
                "block whose maximum was lower counts for less, not more.",
                _merge_upside_down,
                fix="exp(m_old - m_new), not exp(m_new - m_old)",
            ),
            Mistake(
                "rescaled upside down, and NaN beside a block that saw no key",
                "The factor that moves a sum from its old maximum to the new, larger one is at most 1: a block "
                "whose maximum was lower counts for less, not more. The right factor is also 0 for a block that "
                "saw no key; the upside-down one is infinite there, and infinity times a sum of 0 is not a number.",
                _merge_upside_down_unguarded,
                fix="a1, a2 = exp(m1 - m_safe), exp(m2 - m_safe): exp(m_old - m_new), not exp(m_new - m_old)",
            ),
            Mistake(
                "o added without rescaling",
                "l is rescaled, but o was summed relative to the same old maximum as l, so it needs the same factor.",
                _merge_only_l,
                fix="o = a1 * o1 + a2 * o2 with the factors used for l",
            ),
            Mistake(
                "kept the second block's maximum",
                "The running maximum is the larger of the two maxima. Keeping the newest block's one "
                "makes the factor for the first block exponentially large when that block scored higher: "
                "it overflows.",
                _merge_last_max,
                fix="m = torch.maximum(m1, m2)",
            ),
            Mistake(
                "NaN for a query that saw no key in either block",
                "A query whose keys were all blocked in both blocks has maximum -inf twice, and "
                "-inf minus -inf is not a number. Subtract something finite for such rows (they have "
                "nothing to rescale) so that they stay (-inf, 0, 0).",
                _merge_unguarded,
                fix="m_safe = m.masked_fill(m == float('-inf'), 0.0), then exp(m1 - m_safe) and exp(m2 - m_safe)",
            ),
            *(
                Mistake(
                    name,
                    "A partial keeps o unnormalised, the weighted sum of v with weights exp(s - m), so that the next "
                    "block can still be merged into it; only the last step, after every block, divides by l.",
                    wrong,
                    fix="return m, l, a1 * o1 + a2 * o2 (no division by l)",
                )
                for name, wrong in (
                    ("o divided by l", _merge_normalised),
                    ("o divided by l, guarded against 0 / 0", _merge_normalised_guarded),
                )
            ),
        ),
    ),
    Exercise(
        key="08.2",
        core=False,
        domain=Domain(leading={"q": 2, "k": 2, "v": 2, "o": 2, "do": 2}, views=True),
        title="the backward pass of attention",
        signature=(
            "attention_backward(q, k, v, o, do, scale) -> (dq, dk, dv): q (..., T, D), k (..., S, D), "
            "v (..., S, Dv), o and do (..., T, Dv); dq, dk, dv the shapes of q, k, v"
        ),
        solution=_backward_solution,
        cases=_backward_cases,
        draw=_backward_draw,
        edges={
            "T == S": lambda q, k, v, o, do, scale: q.shape[-2] == k.shape[-2],
            "T != S": lambda q, k, v, o, do, scale: q.shape[-2] != k.shape[-2],
            "T == 1": lambda q, k, v, o, do, scale: q.shape[-2] == 1,
            "S == 1": lambda q, k, v, o, do, scale: k.shape[-2] == 1,
            "D == 1": lambda q, k, v, o, do, scale: q.shape[-1] == 1,
            "Dv == 1": lambda q, k, v, o, do, scale: v.shape[-1] == 1,
            "D != Dv": lambda q, k, v, o, do, scale: q.shape[-1] != v.shape[-1],
            "no leading axes": lambda q, k, v, o, do, scale: q.dim() == 2,
            "one leading axis": lambda q, k, v, o, do, scale: q.dim() == 3,
            "two leading axes": lambda q, k, v, o, do, scale: q.dim() == 4,
            "a scale other than 1/sqrt(D)": lambda q, k, v, o, do, scale: not math.isclose(scale, q.shape[-1] ** -0.5),
            "a score past exp's float32 overflow (weights ~1 and ~0)": lambda q, k, v, o, do, scale: bool(
                (scale * q @ k.transpose(-2, -1) > 89).any()
            ),
        },
        minutes=15,
        autograd=False,  # the statement asks for the formulas: backward() cannot help here
        atol=1e-4,  # where the weights saturate (or S == 1) dS is ~0, and Δ's float32 rounding is all that is left
        mistakes=(
            Mistake(
                "Δ forgotten",
                "The softmax couples every weight of a row: raising one score lowers all the other weights of "
                "that row. Its backward pass therefore subtracts, from each dP, one number per query, Δ (the "
                "weighted mean of that query's dP), before multiplying by P.",
                _bw_no_delta,
                fix="dS = P * (dP - (do * o).sum(dim=-1, keepdim=True))",
            ),
            Mistake(
                "Δ summed without the weights",
                "Δ is the weighted mean of a query's dP, with the query's weights P as the weights, not their "
                "plain sum; section 5 shows it equals the sum over the output's width of dO ⊙ O.",
                _bw_delta_without_p,
                fix="delta = (do * o).sum(dim=-1, keepdim=True), or (P * dP).sum(dim=-1, keepdim=True)",
            ),
            Mistake(
                "the softmax's Jacobian taken along the queries",
                "Each query's weights are a softmax over the keys, so Δ is one number per query, summed over "
                "the keys of that query's row; summed over the queries of a key's column, it belongs to no "
                "softmax of the forward pass.",
                _bw_delta_over_queries,
                fix="delta = (P * dP).sum(dim=-1, keepdim=True): over the keys, one number per query",
            ),
            Mistake(
                "Δ lost its query axis",
                "Δ holds one number per query and is subtracted from that query's row of dP. Summed without "
                "keeping the summed axis, it lines up with the keys instead: when T == S it is subtracted from "
                "the wrong entries, and for most other shapes it cannot be subtracted at all.",
                _bw_delta_without_keepdim,
                fix="delta = (do * o).sum(dim=-1, keepdim=True), shape (..., T, 1)",
            ),
            Mistake(
                "P not transposed for dv",
                "Each value row j reaches the output through the column j of the weights, one weight per "
                "query: dv sums dO over the queries, weighted by that column, an (S, T) by (T, Dv) product.",
                _bw_p_not_transposed,
                fix="dv = P.transpose(-2, -1) @ do",
            ),
            Mistake(
                "dk from dS, not its transpose",
                "Key j meets every query through the column j of the scores, so its gradient sums the queries "
                "weighted by that column of dS, an (S, T) by (T, D) product.",
                _bw_dk_not_transposed,
                fix="dk = scale * dS.transpose(-2, -1) @ q",
            ),
            Mistake(
                "scale missing from dq and dk",
                "The scores are scale times q kᵀ, so by the chain rule their gradient reaches q and k "
                "multiplied by that scale.",
                _bw_no_scale,
                fix="dq = scale * dS @ k; dk = scale * dS.transpose(-2, -1) @ q",
            ),
            Mistake(
                "scale applied twice",
                "The scale enters the scores once, so dq and dk carry it once: dS is the gradient of the "
                "scaled scores and has no scale of its own.",
                _bw_scale_twice,
                fix="dS = P * (dP - delta), no scale; dq = scale * dS @ k; dk = scale * dS.transpose(-2, -1) @ q",
            ),
            Mistake(
                "weights recomputed without the scale",
                "The weights of the backward pass must be the forward pass's own: the softmax of the scaled scores.",
                _bw_weights_unscaled,
                fix="P = torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1)",
            ),
            Mistake(
                "the scale taken as 1/sqrt(D)",
                "The call's scale is an argument and need not be one over the square root of the head "
                "width: use the one given, in the weights and in dq and dk.",
                _bw_scale_from_d,
                fix="use the argument scale, not 1 / math.sqrt(q.shape[-1])",
            ),
            Mistake(
                "weights recomputed without subtracting the maximum",
                "A score above about 88 makes its exponential overflow float32 to infinity, and infinity over "
                "infinity is not a number. Subtract each row's largest score first (the result is the same), "
                "as the softmax of notebook 02 does.",
                _bw_unstable_weights,
                fix="P = torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1)",
            ),
            Mistake(
                ".T where the matrices have leading axes",
                "Section 5's demo has no leading axes, where the transpose shorthand swaps the last two axes; on a "
                "(..., T, S) tensor it reverses every axis. Swap only the last two.",
                _bw_dot_t,
                fix="P.transpose(-2, -1) (or P.mT) wherever the demo writes P.T; the same for dS",
            ),
        ),
    ),
    Exercise(
        key="08.3",
        domain=Domain(leading={"q": 2, "k": 2, "lse": 1}, views=True),
        title="a tile's weights recomputed from the logsumexp",
        signature="tile_weights(q, k, lse, scale) -> P (..., T, S): q (..., T, D), k (..., S, D), lse (..., T)",
        solution=_tile_weights_solution,
        cases=_tile_cases,
        draw=_tile_draw,
        minutes=10,
        edges={
            "T == S": lambda q, k, lse, scale: q.shape[-2] == k.shape[-2],
            "T != S": lambda q, k, lse, scale: q.shape[-2] != k.shape[-2],
            "T == 1": lambda q, k, lse, scale: q.shape[-2] == 1,
            "S == 1": lambda q, k, lse, scale: k.shape[-2] == 1,
            "D == 1": lambda q, k, lse, scale: q.shape[-1] == 1,
            "no leading axes": lambda q, k, lse, scale: q.dim() == 2,
            "one leading axis": lambda q, k, lse, scale: q.dim() == 3,
            "two leading axes": lambda q, k, lse, scale: q.dim() == 4,
            "a scale other than 1/sqrt(D)": lambda q, k, lse, scale: not math.isclose(scale, q.shape[-1] ** -0.5),
            "every row below 1 (the tile a strict subset)": lambda q, k, lse, scale: bool(
                (_tile_weights_solution(q, k, lse, scale).sum(-1) < 1 - 1e-3).all()
            ),
            "a row of scores past exp's float32 overflow": lambda q, k, lse, scale: bool(
                (_tile_scores(q, k, scale) > 89).all(-1).any()
            ),
            "a row whose exp(s) and exp(L) underflow to 0": lambda q, k, lse, scale: bool(
                ((_tile_scores(q, k, scale) < -105).all(-1) & (lse < -105)).any()
            ),
        },
        mistakes=(
            Mistake(
                "a softmax over the tile",
                "The tile holds only some of each query's keys. Its weights are the forward pass's own, whose "
                "denominator counts every key: that denominator is exp(L), so the tile's rows need not sum to 1.",
                _tw_tile_softmax,
                fix="P = torch.exp(scale * q @ k.transpose(-2, -1) - lse.unsqueeze(-1)), no softmax",
            ),
            Mistake(
                "the logsumexp broadcast along the keys",
                "L holds one number per query and is subtracted from that query's row of scores. Without an axis "
                "for the keys it lines up with the keys instead: when T == S it is subtracted from the wrong "
                "entries, and for most other shapes it cannot be subtracted at all.",
                _tw_lse_along_keys,
                fix="scores - lse.unsqueeze(-1): lse as (..., T, 1)",
            ),
            Mistake(
                "scale missing",
                "L is the logsumexp of the scaled scores of the forward pass, so the tile's scores must be "
                "scaled the same way before L is subtracted.",
                _tw_no_scale,
                fix="scores = scale * q @ k.transpose(-2, -1)",
            ),
            Mistake(
                "L taken as the logsumexp of the unscaled scores",
                "L is the logsumexp of the scaled scores, scale times q k, as the forward pass computed it: "
                "scale the scores, then subtract L as it is. Scaling L too treats it as the unscaled scores' own.",
                _tw_lse_scaled,
                fix="P = torch.exp(scale * q @ k.transpose(-2, -1) - lse.unsqueeze(-1)): L is not scaled again",
            ),
            Mistake(
                "the tile's maximum subtracted instead of the logsumexp",
                "Subtracting a row's maximum keeps the exponentials finite, but it is the softmax's trick, "
                "followed by a division by the sum. Here L does both at once: exp(s - L) is the weight itself, "
                "and L is given.",
                _tw_tile_max,
                fix="P = torch.exp(scores - lse.unsqueeze(-1))",
            ),
            Mistake(
                "exp(L) divided out instead of L subtracted",
                "Mathematically exp(s) over exp(L) is the weight, but in float32 a score above about 88 makes "
                "its exponential infinite, and one below about -104 makes it zero, and so does L: infinity over "
                "infinity, or zero over zero, is not a number. Subtract first, then take one exponential.",
                _tw_exp_ratio,
                fix="P = torch.exp(scores - lse.unsqueeze(-1))",
            ),
        ),
    ),
    Exercise(
        key="08.4",
        core=False,
        domain=Domain(
            leading={"q": 2, "k": 2, "v": 2, "out": 2, "dout": 2, "lse": 1},
            views=True,
            float64=("q", "k", "v", "out", "dout", "lse"),
        ),
        title="the tiled backward pass, in FlashAttention-2's order",
        signature=(
            "flash_backward(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal) -> (dq, dk, dv): "
            "q (..., T, D), k (..., S, D), v (..., S, Dv), out and dout (..., T, Dv), lse (..., T); dq, dk, dv "
            "the shapes of q, k, v"
        ),
        solution=_flash_backward_solution,
        cases=_flash_cases,
        draw=_flash_draw,
        minutes=20,
        autograd=False,  # the statement asks for the tiled loop: autograd cannot help here
        largest=_largest_tile_work,  # nor may the whole (T, S) matrix appear
        largest_why=(
            "at least as many elements as the whole (..., T, S) score matrix, which the tiled backward never needs. "
            "Compute each tile's scores, weights and mask inside the loop over tiles and add each tile's share "
            "into dq, dk and dv as you go (a mask for the whole matrix, autograd on it, or every tile's share kept "
            "and stacked builds as much)"
        ),
        atol=1e-4,  # float32 cases: the tiled sums round differently from autograd's (float64 ones: 1e-10)
        edges={
            "T == S": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: q.shape[-2] == k.shape[-2],
            "T < S": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: q.shape[-2] < k.shape[-2],
            "T > S": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: q.shape[-2] > k.shape[-2],
            "T == 1": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: q.shape[-2] == 1,
            "T not a multiple of q_tile": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: (
                q.shape[-2] % q_tile != 0
            ),
            "S not a multiple of kv_tile": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: (
                k.shape[-2] % kv_tile != 0
            ),
            "one tile (q_tile >= T and kv_tile >= S)": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, c: (
                q_tile >= q.shape[-2] and kv_tile >= k.shape[-2]
            ),
            "q_tile != kv_tile": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: q_tile != kv_tile,
            "causal": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: is_causal,
            "causal with T < S": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: (
                is_causal and q.shape[-2] < k.shape[-2]
            ),
            "not causal": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: not is_causal,
            "a scale other than 1/sqrt(D)": lambda q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal: (
                not math.isclose(scale, q.shape[-1] ** -0.5)
            ),
        },
        mistakes=(
            Mistake(
                "Δ left out",
                "The softmax couples the weights of a row, so its backward pass subtracts one number per query, "
                "Δ = rowsum(dO ⊙ O), from dP before multiplying by P.",
                _slip("no delta"),
                fix="delta = (dout * out).sum(dim=-1, keepdim=True) once, then ds = p * (dp - delta[rows])",
            ),
            Mistake(
                "Δ taken from the tile",
                "Δ sums P ⊙ dP over ALL of a query's keys; one tile holds only some of them. That whole-row sum "
                "equals rowsum(dO ⊙ O), which needs no tile: compute it once, before the loop.",
                _slip("tile delta"),
                fix="delta = (dout * out).sum(dim=-1, keepdim=True) before the loop, not (p * dp).sum(-1) per tile",
            ),
            Mistake(
                "weights not normalised by the logsumexp",
                "exp(scores) alone is not a weight: the forward pass divided by the row's sum of exponentials, "
                "and L = lse is its logarithm. Subtract it before the exponential.",
                _slip("no lse"),
                fix="p = torch.exp(s - lse[..., rows, None])",
            ),
            Mistake(
                "dq overwritten instead of accumulated",
                "Each query's dq gets a share from every tile of keys, and the key tiles are the outer loop: add "
                "each tile's share to dq, do not replace what the earlier key tiles left there.",
                _slip("dq overwritten"),
                fix="dq[..., rows, :] += scale * ds @ k_t",
            ),
            Mistake(
                "scale missing from dq and dk",
                "The scores are scale times q kᵀ, so their gradient reaches q and k multiplied by that scale.",
                _slip("no scale"),
                fix="dq += scale * ds @ k_t; dk_t += scale * ds.transpose(-2, -1) @ q_t",
            ),
            Mistake(
                "scale applied twice",
                "The scale enters the scores once, so dq and dk carry it once.",
                _slip("scale twice"),
                fix="dq += scale * ds @ k_t, with ds = p * (dp - delta) unscaled",
            ),
            Mistake(
                "causal skipping one tile too early",
                "A tile of keys may be skipped only when it lies after the LAST query of the query tile; judged "
                "from the first query, the tile on the diagonal is skipped though its later queries see some of "
                "its keys.",
                _slip("skip early"),
                fix="skip when j0 > S - T + i0 + q_tile - 1 (the last query's position)",
            ),
            Mistake(
                "a tile on the diagonal left unmasked",
                "Skipping the tiles after the diagonal is not enough: a tile the diagonal crosses holds keys after "
                "some of its queries, and those must be masked with -inf before the exponential, as in the forward.",
                _slip("unmasked"),
                fix="s.masked_fill(key positions > query positions, float('-inf')) in the tiles that are computed",
            ),
            Mistake(
                "the diagonal masked too",
                "A query sees the keys up to AND including its own position: mask the keys after it, not the key "
                "at it. Masking that one too leaves each query's own key out of P (and the first query with none).",
                _slip("diagonal masked"),
                fix="s.masked_fill(key positions > query positions, float('-inf')), strictly greater",
            ),
            Mistake(
                "the causal mask aligned top-left",
                "With T < S the queries are the LAST T positions (causal_mask(T, S), bottom-right): query i sits at "
                "S - T + i and sees the keys up to it, not up to i.",
                _slip("top-left"),
                fix="query positions torch.arange(i0, i0 + Tq) + S - T",
            ),
        ),
    ),
)
