"""Exercises of notebook 13 (linear attention as a memory): one step of gated linear attention, one step of the
delta rule, one chunk of the chunkwise form, and the recurrent step of linear attention with its normaliser (07.4
before it moved here with the section that teaches it).

Each reference solution is built from :mod:`course_utils.linear_attention`; each mistake is one the forms invite:
the decay applied after the update (the new token forgets itself), the gate on the wrong side (on the new write,
not the old state), the delta computed from the already updated state, the chunk's own tokens counted twice (read
from the state the chunk hands on, then added again by the quadratic part), and the state read before the write;
for 13.4, linear attention without its normaliser, reading the state
before the token joins it, or with the feature map on the values or off the query.
"""

from __future__ import annotations

import torch

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.linear_attention import (
    delta_rule_step,
    elu_feature_map,
    gated_linear_attention_chunk,
    gated_linear_attention_step,
    linear_attention_step,
)

__all__ = ["EXERCISES"]


def _case(
    g: torch.Generator,
    lead: tuple[int, ...],
    D: int,
    Dv: int,
    C: int | None,
    *,
    seen: int,
    low: float = 0.5,
    high: float = 1.0,
):
    """A state left by ``seen`` earlier tokens (zeros when 0), then one token (C None) or a chunk of C tokens, each
    with a gate (or a beta) in [low, high] (exactly 1 when both are 1)."""
    k_past = torch.randn(*lead, seen, D, generator=g) / D**0.5  # (..., seen, D)
    state = k_past.transpose(-2, -1) @ torch.randn(*lead, seen, Dv, generator=g)  # (..., D, Dv)
    steps = () if C is None else (C,)
    q, k = (torch.randn(*lead, *steps, D, generator=g) for _ in range(2))  # (..., [C,] D)
    v = torch.randn(*lead, *steps, Dv, generator=g)  # (..., [C,] Dv)
    rate = low + (high - low) * torch.rand((*lead, *steps), generator=g)  # (..., [C])
    return state, q, k, v, rate


def _non_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The same values laid out last axis outermost, as a transpose returns them."""
    order = list(reversed(range(x.dim())))
    return x.permute(order).contiguous().permute(order)


def _views(args: tuple) -> tuple:
    return tuple(_non_contiguous(a) if a.dim() >= 2 else a for a in args)


def _holds_views(*args) -> bool:
    return any(isinstance(a, torch.Tensor) and a.dim() >= 2 and not a.is_contiguous() for a in args)


# --- 13.1 one step of gated linear attention ------------------------------------------------------------------


def _gla_solution(state, q_t, k_t, v_t, gate_t):
    return gated_linear_attention_step(state, q_t, k_t, v_t, gate_t)  # out_t (..., Dv), state (..., D, Dv)


def _gla_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(131)
    return [
        (_case(g, (), 3, 3, None, seen=4), {}),  # no leading axes, D == Dv (first: v k^T runs here, then raises)
        (_case(g, (2,), 4, 3, None, seen=0), {}),  # the first token: the state is zero
        (_case(g, (2, 3), 5, 2, None, seen=6), {}),  # two leading axes
        (_case(g, (2, 1, 2), 3, 1, None, seen=3), {}),  # three leading axes, Dv == 1
        (_case(g, (3,), 4, 2, None, seen=5, low=1.0), {}),  # every gate 1: nothing forgotten
        (_case(g, (4,), 2, 5, None, seen=8, low=0.001, high=0.04), {}),  # small gates: most of the past gone
        (_views(_case(g, (2, 3), 4, 3, None, seen=5)), {}),  # non-contiguous views, as a transpose returns
        (_case(g, (2,), 3, 2, None, seen=6, low=1e-6, high=1e-4), {}),  # gates near 0 (a clamp at 0.02 shows)
        (_case(g, (2,), 1, 3, None, seen=4), {}),  # D == 1
    ]


def _gla_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        lead = tuple(randint(g, 1, 6) for _ in range(randint(g, 0, 4)))  # 0 to 3 leading axes, sizes up to 5
        D, Dv, seen = randint(g, 1, 33), randint(g, 1, 33), randint(g, 0, 60)
        cases.append((_case(g, lead, D, Dv, None, seen=seen, low=0.05), {}))
    return cases


def _gla_decay_after_update(state, q_t, k_t, v_t, gate_t):
    state = gate_t[..., None, None] * (state + k_t[..., :, None] * v_t[..., None, :])  # token t forgets itself too
    return (q_t[..., None, :] @ state)[..., 0, :], state


def _gla_gate_on_the_write(state, q_t, k_t, v_t, gate_t):
    state = state + gate_t[..., None, None] * k_t[..., :, None] * v_t[..., None, :]  # the old state kept whole
    return (q_t[..., None, :] @ state)[..., 0, :], state


def _gla_read_before_write(state, q_t, k_t, v_t, gate_t):
    out = (q_t[..., None, :] @ (gate_t[..., None, None] * state))[..., 0, :]  # without token t
    return out, gate_t[..., None, None] * state + k_t[..., :, None] * v_t[..., None, :]


def _gla_read_old_state(state, q_t, k_t, v_t, gate_t):
    out = (q_t[..., None, :] @ state)[..., 0, :]  # the state as given: neither forgotten nor written
    return out, gate_t[..., None, None] * state + k_t[..., :, None] * v_t[..., None, :]


def _gla_value_key_outer(state, q_t, k_t, v_t, gate_t):
    state = gate_t[..., None, None] * state + v_t[..., :, None] * k_t[..., None, :]  # v k^T: (Dv, D), not (D, Dv)
    return (q_t[..., None, :] @ state)[..., 0, :], state


# --- 13.2 one step of the delta rule -----------------------------------------------------------------------------


def _delta_solution(state, q_t, k_t, v_t, beta_t):
    return delta_rule_step(state, q_t, k_t, v_t, beta_t)  # out_t (..., Dv), state (..., D, Dv)


def _delta_case(g, lead, D, Dv, seen, beta=None, unit=False):
    state, q, k, v, rate = _case(g, lead, D, Dv, None, seen=seen, low=0.0)
    if unit:
        k = torch.nn.functional.normalize(k, dim=-1)
    return state, q, k, v, rate if beta is None else torch.full_like(rate, beta)


def _delta_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(132)
    return [
        (_delta_case(g, (2,), 4, 3, seen=0), {}),  # the first token: the state is zero
        (_delta_case(g, (2, 3), 5, 2, seen=6), {}),  # two leading axes
        (_delta_case(g, (), 3, 3, seen=4), {}),  # no leading axes, D == Dv
        (_delta_case(g, (2, 1, 2), 3, 1, seen=3), {}),  # three leading axes, Dv == 1
        (_delta_case(g, (3,), 4, 2, seen=5, beta=1.0, unit=True), {}),  # beta 1, unit keys: an exact overwrite
        (_delta_case(g, (3,), 4, 2, seen=5, beta=0.0), {}),  # beta 0: nothing written
        (_views(_delta_case(g, (2, 3), 4, 3, seen=5)), {}),  # non-contiguous views
        (_delta_case(g, (2,), 1, 3, seen=4), {}),  # D == 1
    ]


def _delta_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        lead = tuple(randint(g, 1, 6) for _ in range(randint(g, 0, 4)))  # 0 to 3 leading axes, sizes up to 5
        cases.append((_delta_case(g, lead, randint(g, 1, 33), randint(g, 1, 33), seen=randint(g, 0, 60)), {}))
    return cases


def _read(state, x):
    return (x[..., None, :] @ state)[..., 0, :]  # (..., 1, D) @ (..., D, Dv) -> (..., Dv)


def _delta_from_updated_state(state, q_t, k_t, v_t, beta_t):
    b = beta_t[..., None, None]
    state = state + b * k_t[..., :, None] * v_t[..., None, :]  # the write first
    stored = _read(state, k_t)  # ... so what it removes already holds the new value
    state = state - b * k_t[..., :, None] * stored[..., None, :]
    return _read(state, q_t), state


def _delta_additive(state, q_t, k_t, v_t, beta_t):
    state = state + beta_t[..., None, None] * k_t[..., :, None] * v_t[..., None, :]  # nothing removed
    return _read(state, q_t), state


def _delta_stored_read_by_query(state, q_t, k_t, v_t, beta_t):
    stored = _read(state, q_t)  # what is stored under the query, not under the key being written
    state = state + beta_t[..., None, None] * k_t[..., :, None] * (v_t - stored)[..., None, :]
    return _read(state, q_t), state


def _delta_beta_on_value_only(state, q_t, k_t, v_t, beta_t):
    stored = _read(state, k_t)
    state = state + k_t[..., :, None] * (beta_t[..., None] * v_t - stored)[..., None, :]  # the old value all erased
    return _read(state, q_t), state


def _delta_read_before_write(state, q_t, k_t, v_t, beta_t):
    out = _read(state, q_t)
    state = state + beta_t[..., None, None] * k_t[..., :, None] * (v_t - _read(state, k_t))[..., None, :]
    return out, state


# --- 13.3 one chunk of the chunkwise form -----------------------------------------------------------------------


def _chunk_solution(state, q, k, v, gate):
    return gated_linear_attention_chunk(state, q, k, v, gate)  # out (..., C, Dv), state (..., D, Dv)


def _chunk_case(g, lead, D, Dv, C, seen, low=0.5):
    return _case(g, lead, D, Dv, C, seen=seen, low=low)


def _chunk_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(133)
    return [
        (_chunk_case(g, (2,), 4, 3, 5, seen=0), {}),  # the first chunk: the state is zero
        (_chunk_case(g, (2, 3), 5, 2, 4, seen=6), {}),  # two leading axes
        (_chunk_case(g, (), 3, 3, 6, seen=4), {}),  # no leading axes, D == Dv
        (_chunk_case(g, (2, 1, 2), 3, 1, 3, seen=3), {}),  # three leading axes, Dv == 1
        (_chunk_case(g, (3,), 4, 2, 1, seen=5), {}),  # a chunk of one token (C == 1)
        (_chunk_case(g, (2,), 4, 2, 7, seen=5, low=1.0), {}),  # every gate 1
        (_chunk_case(g, (2,), 3, 4, 32, seen=9), {}),  # a long chunk: b_C down to 0.5^32
        (_views(_chunk_case(g, (2, 3), 4, 3, 5, seen=5)), {}),  # non-contiguous views
        (_chunk_case(g, (2,), 1, 3, 4, seen=5), {}),  # D == 1
    ]


def _chunk_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        lead = tuple(randint(g, 1, 6) for _ in range(randint(g, 0, 4)))  # 0 to 3 leading axes, sizes up to 5
        D, Dv, C, seen = randint(g, 1, 33), randint(g, 1, 33), randint(g, 1, 65), randint(g, 0, 60)
        cases.append((_chunk_case(g, lead, D, Dv, C, seen), {}))
    return cases


def _chunk_parts(q, k, gate):
    b = gate.cumprod(dim=-1)  # (..., C): decay from the chunk's start to token i
    C = gate.shape[-1]
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    M = torch.where(causal, b[..., :, None] / b[..., None, :], 0.0)  # (..., C, C)
    return b, M, (q @ k.transpose(-2, -1)) * M  # (..., C, C)


def _chunk_own_tokens_twice(state, q, k, v, gate):
    b, M, scores = _chunk_parts(q, k, gate)
    new_state = b[..., -1, None, None] * state + (k * (b[..., -1:] / b)[..., None]).transpose(-2, -1) @ v
    out = q @ new_state + scores @ v  # the state at the chunk's end already holds the chunk's tokens
    return out, new_state


def _chunk_own_tokens_twice_decayed(state, q, k, v, gate):
    b, M, scores = _chunk_parts(q, k, gate)
    new_state = b[..., -1, None, None] * state + (k * (b[..., -1:] / b)[..., None]).transpose(-2, -1) @ v
    out = b[..., :, None] * (q @ new_state) + scores @ v  # section 5's formula, read from the state handed on
    return out, new_state


def _chunk_past_not_decayed(state, q, k, v, gate):
    b, M, scores = _chunk_parts(q, k, gate)
    out = q @ state + scores @ v  # the past read without its decay b_i
    return out, b[..., -1, None, None] * state + (k * (b[..., -1:] / b)[..., None]).transpose(-2, -1) @ v


def _chunk_old_state_kept_whole(state, q, k, v, gate):
    b, M, scores = _chunk_parts(q, k, gate)
    out = b[..., :, None] * (q @ state) + scores @ v
    return out, state + (k * (b[..., -1:] / b)[..., None]).transpose(-2, -1) @ v  # S_0 handed on undecayed


def _chunk_causal_mask_only(state, q, k, v, gate):
    b, M, _ = _chunk_parts(q, k, gate)
    C = gate.shape[-1]
    scores = (q @ k.transpose(-2, -1)) * torch.ones(C, C).tril()  # inside the chunk, nothing forgotten
    out = b[..., :, None] * (q @ state) + scores @ v
    return out, b[..., -1, None, None] * state + (k * (b[..., -1:] / b)[..., None]).transpose(-2, -1) @ v


def _chunk_own_gate_in_the_handover(state, q, k, v, gate):
    b, M, scores = _chunk_parts(q, k, gate)
    out = b[..., :, None] * (q @ state) + scores @ v
    to_end = b[..., -1:] / b * gate  # token j's own gate counted too: b_C / b_{j-1}
    return out, b[..., -1, None, None] * state + (k * to_end[..., None]).transpose(-2, -1) @ v


# --- 13.4 the recurrent step of linear attention with its normaliser (from notebook 07) -------------------------


def _step_solution(state, normaliser, q_t, k_t, v_t):
    return linear_attention_step(state, normaliser, q_t, k_t, v_t)  # out (..., Dv), state, normaliser


def _step_case(
    g: torch.Generator, lead: tuple[int, ...], D: int, Dv: int, seen: int, scale: float = 1.0, shift: float = 0.0
):
    """A step after ``seen`` earlier tokens: the state and normaliser those tokens leave, then token t.

    ``shift`` moves the keys and the query down: their features phi are then small, and so is phi(q_t) . z_t.
    """
    k_past = scale * torch.randn(*lead, seen, D, generator=g) + shift  # (..., seen, D)
    v_past = scale * torch.randn(*lead, seen, Dv, generator=g)  # (..., seen, Dv)
    fk = elu_feature_map(k_past)
    state = fk.transpose(-2, -1) @ v_past  # (..., D, Dv): sum of phi(k_j) v_j^T; zeros when seen == 0
    normaliser = fk.sum(dim=-2)  # (..., D)
    q_t, k_t = (scale * torch.randn(*lead, D, generator=g) + shift for _ in range(2))  # (..., D)
    v_t = scale * torch.randn(*lead, Dv, generator=g)  # (..., Dv)
    return (state, normaliser, q_t, k_t, v_t), {}


def _step_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(74)
    return [
        _step_case(g, (1,), 4, 3, seen=0),  # the first token (T == 1): state and normaliser are zeros
        _step_case(g, (2, 3), 5, 1, seen=6),  # Dv == 1, leading axes (B, H)
        _step_case(g, (), 3, 3, seen=4),  # no leading axes, D == Dv
        _step_case(g, (2,), 2, 6, seen=40, scale=2.0),  # a long past: the state is large
        _step_case(g, (3,), 1, 2, seen=2),  # D == 1
        _step_case(g, (2,), 3, 2, seen=1, shift=-2.0),  # small features: phi(q_t) . z_t far below 1
        # keys and query near -10: phi(q_t) . z_t about 1e-8, where an eps added to the denominator takes over
        _step_case(g, (2,), 3, 2, seen=2, scale=0.1, shift=-10.0),
    ]


def _step_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        lead = tuple(randint(g, 1, 5) for _ in range(randint(g, 0, 3)))  # 0, 1 or 2 leading axes
        cases.append(_step_case(g, lead, randint(g, 1, 33), randint(g, 1, 33), seen=randint(g, 0, 100)))
    return cases


def _phi(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.elu(x) + 1


def _step_no_normaliser(state, normaliser, q_t, k_t, v_t):
    state = state + _phi(k_t)[..., :, None] * v_t[..., None, :]
    out = (_phi(q_t)[..., :, None] * state).sum(dim=-2)  # never divided by phi(q) . z
    return out, state, normaliser + _phi(k_t)


def _step_read_before_update(state, normaliser, q_t, k_t, v_t):
    fq = _phi(q_t)
    out = (fq[..., :, None] * state).sum(dim=-2) / (fq * normaliser).sum(dim=-1, keepdim=True)  # without token t
    return out, state + _phi(k_t)[..., :, None] * v_t[..., None, :], normaliser + _phi(k_t)


def _step_phi_on_values(state, normaliser, q_t, k_t, v_t):
    state = state + _phi(k_t)[..., :, None] * _phi(v_t)[..., None, :]  # the values mapped too
    normaliser = normaliser + _phi(k_t)
    out = (_phi(q_t)[..., :, None] * state).sum(dim=-2) / (_phi(q_t) * normaliser).sum(dim=-1, keepdim=True)
    return out, state, normaliser


def _step_raw_query(state, normaliser, q_t, k_t, v_t):
    state = state + _phi(k_t)[..., :, None] * v_t[..., None, :]
    normaliser = normaliser + _phi(k_t)
    out = (q_t[..., :, None] * state).sum(dim=-2) / (q_t * normaliser).sum(dim=-1, keepdim=True)  # q without phi
    return out, state, normaliser


def _zero_state(state, *_):
    return not bool(state.any())


def _lead(n):
    return lambda state, *_: state.dim() - 2 == n


_GATE_ONE = "every gate 1 (nothing forgotten)"

EXERCISES = (
    Exercise(
        key="13.1",
        title="one step of gated linear attention",
        signature="my_gla_step(state, q_t, k_t, v_t, gate_t) -> (out_t (..., Dv), new_state (..., D, Dv))",
        solution=_gla_solution,
        cases=_gla_cases,
        draw=_gla_draw,
        minutes=8,
        domain=Domain(leading={"state": 2, "q_t": 1, "k_t": 1, "v_t": 1, "gate_t": 0}, views=True),
        results=("out_t", "new_state"),
        edges={
            "the first token (state zero)": _zero_state,
            "no leading axes": _lead(0),
            "two leading axes": _lead(2),
            "three leading axes": _lead(3),
            "D == Dv": lambda state, *_: state.shape[-2] == state.shape[-1],
            "Dv == 1": lambda state, *_: state.shape[-1] == 1,
            _GATE_ONE: lambda *a: bool((a[4] == 1).all()),
            "gates near 0 (every gate below 1e-3)": lambda *a: bool((a[4] < 1e-3).all()),
            "D == 1": lambda state, *_: state.shape[-2] == 1,
            "non-contiguous views": _holds_views,
        },
        mistakes=(
            Mistake(
                "decay applied after the update",
                "The gate says how much of the past survives into step t; token t itself is written after the "
                "forgetting, whole. Decaying after the write makes the new token forget itself.",
                _gla_decay_after_update,
                fix="new_state = gate_t[..., None, None] * state + k_t[..., :, None] * v_t[..., None, :]",
            ),
            Mistake(
                "the gate on the wrong side",
                "The gate scales what the memory already holds (the old state), not the new token's write: "
                "with it on the write, the old state is never forgotten.",
                _gla_gate_on_the_write,
                fix="gate_t[..., None, None] * state + k_t[..., :, None] * v_t[..., None, :] (the gate on state)",
            ),
            Mistake(
                "state read before token t is written",
                "out_t reads the state that already holds token t: forget, write, then read.",
                _gla_read_before_write,
                fix="compute new_state first, then out_t = (q_t[..., None, :] @ new_state)[..., 0, :]",
            ),
            Mistake(
                "state read before the gate and the write",
                "out_t reads the state after this step: the old state forgotten by gate_t, then token t written. "
                "Reading the state you were given leaves out both.",
                _gla_read_old_state,
                fix="compute new_state first, then out_t = (q_t[..., None, :] @ new_state)[..., 0, :]",
            ),
            Mistake(
                "value-key outer product (v k^T)",
                "The state is (D, Dv): rows indexed by key features, so a query reads it as q^T S. "
                "The write is k_t v_t^T, keys on the rows.",
                _gla_value_key_outer,
                fix="k_t[..., :, None] * v_t[..., None, :] (D, Dv), not v_t[..., :, None] * k_t[..., None, :]",
            ),
        ),
    ),
    Exercise(
        key="13.2",
        title="one step of the delta rule",
        signature="my_delta_step(state, q_t, k_t, v_t, beta_t) -> (out_t (..., Dv), new_state (..., D, Dv))",
        solution=_delta_solution,
        cases=_delta_cases,
        draw=_delta_draw,
        minutes=8,
        domain=Domain(leading={"state": 2, "q_t": 1, "k_t": 1, "v_t": 1, "beta_t": 0}, views=True),
        results=("out_t", "new_state"),
        edges={
            "the first token (state zero)": _zero_state,
            "no leading axes": _lead(0),
            "two leading axes": _lead(2),
            "three leading axes": _lead(3),
            "Dv == 1": lambda state, *_: state.shape[-1] == 1,
            "D == 1": lambda state, *_: state.shape[-2] == 1,
            "beta 1 and unit keys (an exact overwrite)": lambda *a: bool(
                (a[4] == 1).all() and torch.allclose(a[2].norm(dim=-1), torch.ones(()))
            ),
            "beta 0 (nothing written)": lambda *a: bool((a[4] == 0).all()),
            "non-contiguous views": _holds_views,
        },
        mistakes=(
            Mistake(
                "the delta computed from the updated state",
                "The delta rule compares the new value with what the memory held under k_t before this step; "
                "once the write is in, the state already holds (part of) v_t and the correction is wrong.",
                _delta_from_updated_state,
                fix="stored = (k_t[..., None, :] @ state)[..., 0, :] from the old state, then "
                "state + beta_t[..., None, None] * k_t[..., :, None] * (v_t - stored)[..., None, :]",
            ),
            Mistake(
                "additive write (no delta)",
                "That is plain linear attention's write: it adds v_t on top of what is stored under k_t. The "
                "delta rule first takes away what the memory returns for k_t.",
                _delta_additive,
                fix="write v_t - stored, with stored = what the old state returns for k_t",
            ),
            Mistake(
                "stored value read with the query",
                "The value to correct is the one stored under the key being written, k_t; the query only reads "
                "the result.",
                _delta_stored_read_by_query,
                fix="stored = (k_t[..., None, :] @ state)[..., 0, :], not q_t",
            ),
            Mistake(
                "beta on the new value only",
                "beta is how far the stored value moves towards v_t: it scales the whole difference, so "
                "with beta 0 nothing changes.",
                _delta_beta_on_value_only,
                fix="beta_t[..., None, None] * k_t[..., :, None] * (v_t - stored)[..., None, :]",
            ),
            Mistake(
                "state read before token t is written",
                "out_t reads the state after this step's correction: update, then read.",
                _delta_read_before_write,
                fix="compute new_state first, then out_t = (q_t[..., None, :] @ new_state)[..., 0, :]",
            ),
        ),
    ),
    Exercise(
        key="13.3",
        title="one chunk of the chunkwise form",
        signature="my_chunk(state, q, k, v, gate) -> (out (..., C, Dv), new_state (..., D, Dv))",
        solution=_chunk_solution,
        cases=_chunk_cases,
        draw=_chunk_draw,
        minutes=12,
        domain=Domain(leading={"state": 2, "q": 2, "k": 2, "v": 2, "gate": 1}, views=True),
        results=("out", "new_state"),
        # float32 over a chunk of up to 60 tokens: a right answer in another order of sums (a token loop, log
        # space) differs from the reference by a few 1e-5, relative, near a cancellation; float64 stays at 1e-9.
        atol=1e-4,
        rtol=1e-3,
        edges={
            "the first chunk (state zero)": _zero_state,
            "no leading axes": _lead(0),
            "two leading axes": _lead(2),
            "three leading axes": _lead(3),
            "Dv == 1": lambda state, *_: state.shape[-1] == 1,
            "C == 1": lambda state, q, *_: q.shape[-2] == 1,
            "D == 1": lambda state, *_: state.shape[-2] == 1,
            "a long chunk (C >= 32)": lambda state, q, *_: q.shape[-2] >= 32,
            _GATE_ONE: lambda *a: bool((a[4] == 1).all()),
            "non-contiguous views": _holds_views,
        },
        mistakes=(
            Mistake(
                "the chunk's own tokens counted twice",
                "The past comes from the state the chunk was given, S_0; the chunk's own tokens come from the "
                "masked quadratic part. The state at the chunk's end already holds them, so reading it adds "
                "them a second time.",
                _chunk_own_tokens_twice,
                fix="out = b[..., :, None] * (q @ state) + ((q @ k.mT) * M) @ v with the state given, not the new one",
            ),
            Mistake(
                "the chunk's own tokens counted twice (the new state read, decayed)",
                "b_i (q S) is the past only when S is the state the chunk was given, S_0. The state the chunk "
                "hands on already holds the chunk's own tokens, so reading it, decayed or not, adds them a second "
                "time to the masked quadratic part.",
                _chunk_own_tokens_twice_decayed,
                fix="out = b[..., :, None] * (q @ state) + ((q @ k.mT) * M) @ v with the state given, not the new one",
            ),
            Mistake(
                "past read without its decay",
                "Token i of the chunk sees S_0 after i more gates: the past's contribution is b_i q_i S_0 with "
                "b_i the product of the gates from the chunk's start to i.",
                _chunk_past_not_decayed,
                fix="b = gate.cumprod(-1); out = b[..., :, None] * (q @ state) + ...",
            ),
            Mistake(
                "old state handed on undecayed",
                "The state at the chunk's end has been through every gate of the chunk: S_0 comes out "
                "multiplied by b_C, the product of all of them.",
                _chunk_old_state_kept_whole,
                fix="new_state = b[..., -1, None, None] * state + ...",
            ),
            Mistake(
                "plain causal mask inside the chunk",
                "Inside the chunk the quadratic form needs the decay matrix M[i, j] = b_i / b_j, not the 0/1 "
                "causal mask: token j has been through the gates j+1 .. i when token i reads it.",
                _chunk_causal_mask_only,
                fix="M = torch.where(causal, b[..., :, None] / b[..., None, :], 0.0)",
            ),
            Mistake(
                "token's own gate in the hand-over",
                "Token j is written after its own gate: what is left of it at the chunk's end is "
                "b_C / b_j, the gates after j only.",
                _chunk_own_gate_in_the_handover,
                fix="(k * (b[..., -1:] / b)[..., None]).mT @ v for the chunk's tokens in the new state",
            ),
        ),
    ),
    Exercise(
        key="13.4",
        minutes=8,
        domain=Domain(leading={"state": 2, "normaliser": 1, "q_t": 1, "k_t": 1, "v_t": 1}, views=True),
        results=("out_t", "new_state", "new_normaliser"),
        title="the recurrent step of causal linear attention",
        signature="my_linear_attention_step(state, normaliser, q_t, k_t, v_t) -> (out_t (..., Dv), state "
        "(..., D, Dv), normaliser (..., D))",
        solution=_step_solution,
        cases=_step_cases,
        draw=_step_draw,
        edges={
            "the first token (state and normaliser zero)": lambda state, *_: not bool(state.any()),
            "no leading axes": lambda state, normaliser, *_: normaliser.dim() == 1,
            "two leading axes": lambda state, normaliser, *_: normaliser.dim() == 3,
            "D != Dv": lambda state, *_: state.shape[-2] != state.shape[-1],
            "Dv == 1": lambda state, *_: state.shape[-1] == 1,
            "D == 1": lambda state, *_: state.shape[-2] == 1,
            "phi(q_t) . z_t below 1 (small features)": lambda state, normaliser, q_t, k_t, *_: bool(
                ((elu_feature_map(q_t) * (normaliser + elu_feature_map(k_t))).sum(-1) < 1).all()
            ),
            "a long past (normaliser above 40)": lambda state, normaliser, *_: bool((normaliser > 40).any()),
            "phi(q_t) . z_t below 1e-6 (an eps in the denominator would take over)": lambda s, z, q_t, k_t, *_: bool(
                ((elu_feature_map(q_t) * (z + elu_feature_map(k_t))).sum(-1) < 1e-6).all()
            ),
        },
        mistakes=(
            Mistake(
                "normaliser forgotten",
                "phi(q_t) . S_t is a weighted sum of the values whose weights phi(q_t) . phi(k_j) do not sum "
                "to 1; dividing by the same weights summed, phi(q_t) . z_t, makes it a weighted average.",
                _step_no_normaliser,
                fix="out = (phi_q[..., :, None] * state).sum(dim=-2) / (phi_q * normaliser).sum(dim=-1, keepdim=True)",
            ),
            Mistake(
                "state read before token t is added",
                "In causal attention token t attends to itself: the state it reads must already hold its own "
                "key and value. Reading first leaves it out (and the first token divides 0 by 0).",
                _step_read_before_update,
                fix="update state and normaliser with phi(k_t) and v_t first, then compute out from the new ones",
            ),
            Mistake(
                "feature map applied to the values",
                "The feature map replaces the exponential of the scores, so it acts on queries and keys only; "
                "the values are averaged as they are.",
                _step_phi_on_values,
                fix="state + phi_k[..., :, None] * v_t[..., None, :] (v_t itself, not F.elu(v_t) + 1)",
            ),
            Mistake(
                "feature map missing on the query",
                "Both sides of the score phi(q) . phi(k) go through the feature map; with the raw query the "
                "weights can be negative and the denominator can cross 0.",
                _step_raw_query,
                fix="phi_q = F.elu(q_t) + 1, used in the numerator and the denominator",
            ),
        ),
    ),
)
