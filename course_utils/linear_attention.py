"""Linear attention as a memory (notebook 13): a (D, Dv) state written with keys and values, read with queries;
decay, gates, the delta rule, and the chunkwise-parallel form. The forms without a normaliser (RetNet, gated linear
attention, Mamba-2, DeltaNet); last, the normalised causal linear attention of Katharopoulos et al. (notebooks 07 and
13 section 1): the same forms with every gate 1, read through a feature map phi, the normaliser a last value column.

The recurrence every form computes: S_t = alpha_t S_{t-1} + k_t v_t^T, out_t = S_t^T q_t, from S_0 = 0, with a gate
alpha_t in (0, 1] (1: no forgetting). Shapes: T sequence length, D the width of q and k, Dv of v, C a chunk's length,
``...`` any leading axes, the same for every argument. A gate is a number or a tensor (..., T). Gates and betas are
checked for their range (NaN included); q, k and v are not scanned for NaN.
"""

from __future__ import annotations

import numbers

import torch

from course_utils._validate import (
    broadcast_shapes,
    check_float_tensor,
    check_holds_values,
    check_int,
    check_same_device,
)

__all__ = [
    "gated_linear_attention_step",
    "gated_linear_attention_recurrent",
    "decay_mask",
    "gated_linear_attention",
    "gated_linear_attention_prefix_states",
    "delta_rule_step",
    "delta_rule_recurrent",
    "gated_linear_attention_chunk",
    "gated_linear_attention_chunkwise",
    "chunkwise_cost",
    "elu_feature_map",
    "linear_attention",
    "linear_attention_recurrent",
    "linear_attention_quadratic",
    "linear_attention_step",
]


# --- Checks at the door: the tensors' shapes, and a gate or a beta in its range -----------------------------


def _check_qkv(q: object, k: object, v: object, min_dim: int = 2) -> None:
    """q, k (..., [T,] D) and v (..., [T,] Dv): floating, one dtype and device, one leading shape, D >= 1."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, x, min_dim=min_dim)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    check_same_device(q=q, k=k, v=v)
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1] or q.shape[-1] == 0:
        raise ValueError(
            f"q and k must have one shape (..., T, D) with D >= 1 and v (..., T, Dv) the same leading axes, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )


def _rate(name: str, x: object, shape: torch.Size, like: torch.Tensor, low_open: bool) -> torch.Tensor:
    """``x`` (a gate, low_open: in (0, 1]; a beta: in [0, 1]) as a tensor of ``shape``, once it is checked to be a
    number, or a tensor of ``shape`` with ``like``'s dtype and device. A number is the same for every token."""
    is_tensor = isinstance(x, torch.Tensor) and x.dtype == like.dtype and x.device == like.device
    if isinstance(x, bool) or not (isinstance(x, numbers.Real) or is_tensor):
        got = f"{x.dtype} tensor on {x.device}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a number or a {like.dtype} tensor on {like.device}, got {got}")
    if is_tensor and x.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)} (one per token), got {tuple(x.shape)}")
    if is_tensor:
        check_holds_values(name, x)
    t = torch.as_tensor(x, dtype=torch.float64)
    if not bool((((t > 0) if low_open else (t >= 0)) & (t <= 1)).all()):  # NaN fails both comparisons
        rng = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"{name} must be in {rng}, got values from {t.min().item():g} to {t.max().item():g}")
    if low_open and not is_tensor and float(torch.as_tensor(x, dtype=like.dtype)) == 0:  # a tensor is checked as is
        raise ValueError(
            f"{name} = {x:g} is 0 in {like.dtype}, the dtype it is used in (log 0 = -inf would give NaN): "
            f"use a gate that {like.dtype} can hold, at least {torch.finfo(like.dtype).smallest_normal:g}"
        )
    return torch.as_tensor(x, dtype=like.dtype, device=like.device).expand(shape)  # a view, no copy


def _check_state(state: object, q: torch.Tensor, v: torch.Tensor, lead: torch.Size) -> None:
    """state (..., D, Dv) of q's dtype and device, for q (..., [C,] D) and v (..., [C,] Dv) with ``lead`` = ``...``."""
    check_float_tensor("state", state, min_dim=2)
    want = (*lead, q.shape[-1], v.shape[-1])
    if state.dtype != q.dtype or state.device != q.device or tuple(state.shape) != want:
        raise ValueError(
            f"state must be (..., D, Dv) = {want} ({q.dtype} on {q.device}) for q {tuple(q.shape)} and "
            f"v {tuple(v.shape)}, got {tuple(state.shape)} ({state.dtype} on {state.device})"
        )


# --- 1. The state as a memory: write k_t v_t^T, forget by alpha_t, read with q_t ----------------------------


def gated_linear_attention_step(
    state: torch.Tensor, q_t: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor, gate_t: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: forget, then write, then read. S_t = alpha_t S_{t-1} + k_t v_t^T; out_t = S_t^T q_t.

    Returns ``(out_t, S_t)`` as new tensors. ``gate_t`` is alpha_t in (0, 1]: a number or a tensor (...).
    Shape: state (..., D, Dv), q_t, k_t (..., D), v_t (..., Dv) -> out_t (..., Dv), state (..., D, Dv).
    Taught in notebook 13.
    """
    _check_qkv(q_t, k_t, v_t, min_dim=1)
    _check_state(state, q_t, v_t, q_t.shape[:-1])
    gate_t = _rate("gate_t", gate_t, q_t.shape[:-1], q_t, low_open=True)
    state = gate_t[..., None, None] * state + k_t[..., :, None] * v_t[..., None, :]  # (..., D, Dv)
    return torch.einsum("...d,...de->...e", q_t, state), state  # (..., Dv), (..., D, Dv)


def gated_linear_attention_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence token by token, from a zero state: the reference every other form equals.

    Returns ``(out, S_T)``: the outputs and the final state (zeros when T == 0).
    Shape: q, k (..., T, D), v (..., T, Dv), gate (..., T) or a number -> out (..., T, Dv), state (..., D, Dv).
    Taught in notebook 13.
    """
    _check_qkv(q, k, v)
    gate = _rate("gate", gate, q.shape[:-1], q, low_open=True)
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])  # (..., D, Dv)
    outs = []
    for t in range(q.shape[-2]):
        state = gate[..., t, None, None] * state + k[..., t, :, None] * v[..., t, None, :]  # (..., D, Dv)
        outs.append(torch.einsum("...d,...de->...e", q[..., t, :], state))  # (..., Dv)
    return (torch.stack(outs, dim=-2) if outs else v.new_zeros(v.shape)), state  # (..., T, Dv)


# --- 2. The masked quadratic form: a decay matrix where softmax attention has its causal mask ---------------


def decay_mask(gate: torch.Tensor) -> torch.Tensor:
    """M[i, j] = alpha_{j+1} ... alpha_i for j <= i (1 on the diagonal), 0 above it: how much of token j is left
    at step i. Each entry is the exp of its own sum of log alpha over j < m <= i, not a difference of two
    whole-sequence cumulative sums, which loses float32 digits over long sequences and small gates' gradients.

    Shape: gate (..., T) in (0, 1] -> (..., T, T). Taught in notebook 13.
    """
    check_float_tensor("gate", gate)
    _rate("gate", gate, gate.shape, gate, low_open=True)
    return _decay_mask(gate.log())


def _decay_mask(log_gate: torch.Tensor) -> torch.Tensor:
    T = log_gate.shape[-1]
    after = torch.ones(T, T, dtype=torch.bool, device=log_gate.device).tril(-1)  # (T, T): [m, j] with m > j
    terms = log_gate[..., :, None].expand(*log_gate.shape, T).masked_fill(~after, 0.0)  # (..., T, T): log alpha_m
    segment = terms.cumsum(dim=-2)  # (..., T, T): [i, j] = sum of log alpha_m over j < m <= i (0 for j >= i)
    future = torch.ones(T, T, dtype=torch.bool, device=log_gate.device).triu(1)  # (T, T): j > i
    return segment.masked_fill(future, float("-inf")).exp()  # exp(-inf) = 0: the future, never an inf times 0


def gated_linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """The masked quadratic form: out = ((q k^T) * M) v with M = :func:`decay_mask` (the causal mask when every
    alpha is 1). O(T^2 (D + Dv)) time, a (T, T) matrix; equal to :func:`gated_linear_attention_recurrent`.

    Shape: q, k (..., T, D), v (..., T, Dv), gate (..., T) or a number -> out (..., T, Dv). Taught in notebook 13.
    """
    _check_qkv(q, k, v)
    gate = _rate("gate", gate, q.shape[:-1], q, low_open=True)
    scores = (q @ k.transpose(-2, -1)).tril() * _decay_mask(gate.log())  # (..., T, T); tril: never inf * 0
    return scores @ v  # (..., T, Dv)


def gated_linear_attention_prefix_states(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """Every prefix state S_1 .. S_T at once, by a parallel scan (log2 T doubling steps), then each read.

    Shape: q, k (..., T, D), v (..., T, Dv), gate (..., T) or a number -> out (..., T, Dv). Taught in notebook 13.
    """
    _check_qkv(q, k, v)
    gate = _rate("gate", gate, q.shape[:-1], q, low_open=True)
    states = k[..., :, :, None] * v[..., :, None, :]  # (..., T, D, Dv): token t's write alone
    carry = gate  # (..., T): the decay from the start of each partial sum to t
    T, shift = q.shape[-2], 1
    while shift < T:  # after this step, states[t] holds tokens t - 2 shift + 1 .. t
        older = carry[..., shift:, None, None] * states[..., :-shift, :, :]  # (..., T - shift, D, Dv)
        states = torch.cat([states[..., :shift, :, :], states[..., shift:, :, :] + older], dim=-3)
        carry = torch.cat([carry[..., :shift], carry[..., shift:] * carry[..., :-shift]], dim=-1)
        shift *= 2
    return torch.einsum("...td,...tde->...te", q, states)  # (..., T, Dv)


# --- 3. The delta rule (DeltaNet) and its gated form (Gated DeltaNet): overwrite, not add -------------------


def delta_rule_step(
    state: torch.Tensor,
    q_t: torch.Tensor,
    k_t: torch.Tensor,
    v_t: torch.Tensor,
    beta_t: float | torch.Tensor,
    gate_t: float | torch.Tensor = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the gated delta rule: decay, then move the value stored under k_t towards v_t, then read.

    S' = alpha_t S_{t-1}; S_t = S' + beta_t k_t (v_t - S'^T k_t)^T; out_t = S_t^T q_t. Keys are used as given
    (DeltaNet L2-normalises them). Returns ``(out_t, S_t)``.
    Shape: state (..., D, Dv), q_t, k_t (..., D), v_t (..., Dv), beta_t, gate_t (...) or numbers ->
    out_t (..., Dv), state (..., D, Dv). Taught in notebook 13.
    """
    _check_qkv(q_t, k_t, v_t, min_dim=1)
    _check_state(state, q_t, v_t, q_t.shape[:-1])
    gate_t = _rate("gate_t", gate_t, q_t.shape[:-1], q_t, low_open=True)
    beta_t = _rate("beta_t", beta_t, q_t.shape[:-1], q_t, low_open=False)
    state = _delta_update(state, k_t, v_t, beta_t, gate_t)
    return torch.einsum("...d,...de->...e", q_t, state), state  # (..., Dv), (..., D, Dv)


def _delta_update(state, k_t, v_t, beta_t, gate_t):
    state = gate_t[..., None, None] * state  # (..., D, Dv): forget first
    stored = torch.einsum("...d,...de->...e", k_t, state)  # (..., Dv): what the memory holds under k_t now
    return state + beta_t[..., None, None] * k_t[..., :, None] * (v_t - stored)[..., None, :]  # (..., D, Dv)


def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: float | torch.Tensor,
    gate: float | torch.Tensor = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule token by token from a zero state: :func:`delta_rule_step` over t.

    Returns ``(out, S_T)``.
    Shape: q, k (..., T, D), v (..., T, Dv), beta, gate (..., T) or numbers -> out (..., T, Dv), state (..., D, Dv).
    Taught in notebook 13.
    """
    _check_qkv(q, k, v)
    gate = _rate("gate", gate, q.shape[:-1], q, low_open=True)
    beta = _rate("beta", beta, q.shape[:-1], q, low_open=False)
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])  # (..., D, Dv)
    outs = []
    for t in range(q.shape[-2]):
        state = _delta_update(state, k[..., t, :], v[..., t, :], beta[..., t], gate[..., t])
        outs.append(torch.einsum("...d,...de->...e", q[..., t, :], state))  # (..., Dv)
    return (torch.stack(outs, dim=-2) if outs else v.new_zeros(v.shape)), state


# --- 4. The chunkwise-parallel form: the quadratic form inside a chunk, the state across chunks -------------


def gated_linear_attention_chunk(
    state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of C tokens given the state S_0 left by the chunks before it.

    With b_i = alpha_1 ... alpha_i (the decay from the chunk's start to its token i) and M its
    :func:`decay_mask`: out = b * (q S_0) + ((q k^T) * M) v and S_C = b_C S_0 + sum_j (b_C / b_j) k_j v_j^T.
    Returns ``(out, S_C)``.
    Shape: state (..., D, Dv), q, k (..., C, D), v (..., C, Dv), gate (..., C) or a number ->
    out (..., C, Dv), state (..., D, Dv). Taught in notebook 13.
    """
    _check_qkv(q, k, v)
    _check_state(state, q, v, q.shape[:-2])
    gate = _rate("gate", gate, q.shape[:-1], q, low_open=True)
    return _chunk(state, q, k, v, gate.log())


def _chunk(state, q, k, v, log_gate):
    log_b = log_gate.cumsum(dim=-1)  # (..., C): log b_i
    M = _decay_mask(log_gate)  # (..., C, C): b_i / b_j below the diagonal
    inter = log_b.exp()[..., :, None] * (q @ state)  # (..., C, Dv): the past, decayed to each token
    intra = ((q @ k.transpose(-2, -1)) * M) @ v  # (..., C, C) @ (..., C, Dv): the chunk itself
    if log_b.shape[-1] == 0:
        return inter + intra, state
    to_end = M[..., -1, :]  # (..., C): b_C / b_j, what is left of token j at the chunk's end
    state = log_b[..., -1, None, None].exp() * state + (k * to_end[..., None]).transpose(-2, -1) @ v  # (..., D, Dv)
    return inter + intra, state


def gated_linear_attention_chunkwise(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: float | torch.Tensor = 1.0, chunk_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated linear attention chunk by chunk (:func:`gated_linear_attention_chunk`), the state carried across.

    Equal to :func:`gated_linear_attention_recurrent`; the last chunk is shorter when ``chunk_size`` does not
    divide T. Returns ``(out, S_T)``.
    Shape: q, k (..., T, D), v (..., T, Dv), gate (..., T) or a number -> out (..., T, Dv), state (..., D, Dv).
    Taught in notebook 13.
    """
    _check_qkv(q, k, v)
    gate = _rate("gate", gate, q.shape[:-1], q, low_open=True)
    C = check_int("chunk_size", chunk_size, minimum=1)
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])  # (..., D, Dv)
    outs = []
    for s in range(0, q.shape[-2], C):
        part = slice(s, s + C)
        out, state = _chunk(state, q[..., part, :], k[..., part, :], v[..., part, :], gate[..., part].log())
        outs.append(out)  # (..., C, Dv)
    return (torch.cat(outs, dim=-2) if outs else v.new_zeros(v.shape)), state  # (..., T, Dv)


def chunkwise_cost(T: int, D: int, Dv: int, chunk_size: int) -> dict[str, int]:
    """Multiply-adds of each form for one sequence (one head), counting the matrix products only.

    recurrent 2 T D Dv; quadratic T^2 (D + Dv); chunkwise C_i^2 (D + Dv) per chunk of C_i tokens plus 2 T D Dv.
    Taught in notebook 13.
    """
    T = check_int("T", T, minimum=0)
    D, Dv, C = (check_int(n, x) for n, x in (("D", D), ("Dv", Dv), ("chunk_size", chunk_size)))
    inside = (T // C) * C * C + (T % C) ** 2  # sum of C_i^2 over the chunks: full ones, then the shorter last one
    return {"recurrent": 2 * T * D * Dv, "quadratic": T * T * (D + Dv), "chunkwise": inside * (D + Dv) + 2 * T * D * Dv}


# --- 5. Causal linear attention (Katharopoulos et al. 2020): every gate 1, phi(q) and phi(k), normalised -------


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """The feature map phi(x) = elu(x) + 1 of linear attention: positive everywhere, so every weight is.

    Written as x + 1 for x > 0 and exp(x) otherwise: ``F.elu(x) + 1`` rounds exp(x) - 1 + 1 to 0 for x below
    about -17 (float32), and a query whose features are all 0 divides 0 by 0. exp(x) itself reaches 0 below
    about -103 in float32 (-745 in float64): a query that negative in every feature is still 0 / 0.
    Shape: x (..., D) -> (..., D). Taught in notebook 13 (section 1).
    """
    check_float_tensor("x", x)
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0)))  # the clamp keeps exp's unused branch finite


def _normalised(form, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """out_t = phi(q_t)^T S_t / phi(q_t)^T z_t: ``form`` (gate 1) on phi(q), phi(k) and [v, 1], whose last column
    sums phi(k_j) over j <= t into z_t. The leading axes broadcast. Shape: q, k (..., T, D), v (..., T, Dv) -> out
    (..., T, Dv)."""
    if all(isinstance(x, torch.Tensor) and x.dim() >= 2 for x in (q, k, v)):  # else _check_qkv names what arrived
        try:
            lead = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
            q, k, v = (x.expand(*lead, *x.shape[-2:]) for x in (q, k, v))  # views, no copy
        except RuntimeError:
            pass  # _check_qkv names the three shapes
    _check_qkv(q, k, v)
    out = form(elu_feature_map(q), elu_feature_map(k), torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1))
    out = out[0] if isinstance(out, tuple) else out  # (..., T, Dv + 1)
    return out[..., :-1] / out[..., -1:]


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention in parallel: every prefix state at once (:func:`gated_linear_attention_prefix_states`).

    Shape: q, k (..., T, D), v (..., T, Dv) -> out (..., T, Dv). Taught in notebook 13 (section 1).
    """
    return _normalised(gated_linear_attention_prefix_states, q, k, v)


def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention one token at a time (:func:`gated_linear_attention_recurrent`), a (D, Dv + 1) state.

    Shape: q, k (..., T, D), v (..., T, Dv) -> out (..., T, Dv). Taught in notebook 13 (section 1).
    """
    return _normalised(gated_linear_attention_recurrent, q, k, v)


def linear_attention_quadratic(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention directly: weights phi(q_t) . phi(k_j) for j <= t, each row divided by its sum.

    Shape: q, k (..., T, D), v (..., T, Dv) -> out (..., T, Dv). Taught in notebook 13 (section 1).
    """
    return _normalised(gated_linear_attention, q, k, v)


def linear_attention_step(
    state: torch.Tensor, normaliser: torch.Tensor, q_t: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One token of causal linear attention as a recurrence: add token t to the state, then read it.

    S_t = S_{t-1} + phi(k_t) v_t^T, z_t = z_{t-1} + phi(k_t), out_t = phi(q_t)^T S_t / phi(q_t)^T z_t; start
    from zeros. Returns ``(out_t, S_t, z_t)``; the leading axes broadcast. Taught in notebook 13 (section 1).
    Shape: state (..., D, Dv), normaliser (..., D), q_t, k_t (..., D), v_t (..., Dv) -> out_t (..., Dv), S_t, z_t.
    """
    named = {"state": state, "normaliser": normaliser, "q_t": q_t, "k_t": k_t, "v_t": v_t}
    for name, t in named.items():
        check_float_tensor(name, t, min_dim=2 if name == "state" else 1)
    if len({t.dtype for t in named.values()}) > 1:
        dtypes = ", ".join(str(t.dtype) for t in named.values())
        raise TypeError(f"state, normaliser, q_t, k_t and v_t must share a dtype, got {dtypes}")
    check_same_device(**named)
    D, Dv = state.shape[-2:]
    if D == 0:
        raise ValueError(
            f"state must be (..., D, Dv) with D >= 1 (phi(q_t) . z_t is 0 / 0 without), got {tuple(state.shape)}"
        )
    for name, t, n in (("normaliser", normaliser, D), ("q_t", q_t, D), ("k_t", k_t, D), ("v_t", v_t, Dv)):
        if t.shape[-1] != n:
            raise ValueError(
                f"{name} must end in {n} (state is (..., D, Dv) = {tuple(state.shape)}), got {name} {tuple(t.shape)}"
            )
    try:
        lead = broadcast_shapes(state.shape[:-2], *(t.shape[:-1] for t in (normaliser, q_t, k_t, v_t)))
    except RuntimeError:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in named.items())
        raise ValueError(f"the leading axes of {shapes} do not broadcast") from None
    memory = torch.cat([state.expand(*lead, D, Dv), normaliser[..., None].expand(*lead, D, 1)], dim=-1)  # z: a column
    q_t, k_t = (elu_feature_map(t).expand(*lead, D) for t in (q_t, k_t))  # (..., D)
    v_t = torch.cat([v_t.expand(*lead, Dv), v_t.new_ones(*lead, 1)], dim=-1)  # (..., Dv + 1)
    out, memory = gated_linear_attention_step(memory, q_t, k_t, v_t)  # (..., Dv + 1), (..., D, Dv + 1)
    return out[..., :-1] / out[..., -1:], memory[..., :-1], memory[..., -1]
