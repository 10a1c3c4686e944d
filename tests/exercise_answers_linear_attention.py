"""Answers to exercises 13.1-13.4 written independently of the course's own: right ones in other styles, wrong ones
learners write, and common mistakes written another way (each with the name the check must give it).

``tests/test_exercises.py`` adds ``RIGHT``, ``WRONG`` and ``NAMED`` to its tables.
"""

from __future__ import annotations

import torch

# --- right answers, written differently ---------------------------------------------------------------------


def _gla_einsum(state, q_t, k_t, v_t, gate_t):
    new_state = torch.einsum("...,...de->...de", gate_t, state) + torch.einsum("...d,...e->...de", k_t, v_t)
    return torch.einsum("...d,...de->...e", q_t, new_state), new_state


def _gla_unsqueeze(state, q_t, k_t, v_t, gate_t):
    decayed = state * gate_t.unsqueeze(-1).unsqueeze(-1)
    new_state = decayed + k_t.unsqueeze(-1) @ v_t.unsqueeze(-2)  # (..., D, 1) @ (..., 1, Dv)
    return (new_state * q_t.unsqueeze(-1)).sum(dim=-2), new_state


def _delta_einsum(state, q_t, k_t, v_t, beta_t):
    stored = torch.einsum("...d,...de->...e", k_t, state)
    new_state = state + torch.einsum("...,...d,...e->...de", beta_t, k_t, v_t - stored)
    return torch.einsum("...d,...de->...e", q_t, new_state), new_state


def _delta_projection(state, q_t, k_t, v_t, beta_t):
    # S_t = (I - beta k k^T) S + beta k v^T: the form Gated DeltaNet's paper writes
    D = k_t.shape[-1]
    eye = torch.eye(D, dtype=state.dtype)
    kk = k_t.unsqueeze(-1) @ k_t.unsqueeze(-2)  # (..., D, D)
    b = beta_t[..., None, None]
    new_state = (eye - b * kk) @ state + b * (k_t.unsqueeze(-1) @ v_t.unsqueeze(-2))
    return (q_t.unsqueeze(-2) @ new_state).squeeze(-2), new_state


def _chunk_token_loop(state, q, k, v, gate):
    # the chunk computed as the recurrence, token by token: the same numbers in another order
    outs, S = [], state
    for i in range(q.shape[-2]):
        S = gate[..., i, None, None] * S + k[..., i, :, None] * v[..., i, None, :]
        outs.append((q[..., i, None, :] @ S)[..., 0, :])
    return torch.stack(outs, dim=-2), S


def _chunk_log_space(state, q, k, v, gate):
    C = q.shape[-2]
    log_b = torch.log(gate).cumsum(-1)
    future = torch.triu(torch.ones(C, C, dtype=torch.bool), diagonal=1)
    M = (log_b.unsqueeze(-1) - log_b.unsqueeze(-2)).masked_fill(future, float("-inf")).exp()
    out = torch.exp(log_b).unsqueeze(-1) * torch.matmul(q, state) + torch.matmul(q @ k.mT * M, v)
    w = torch.exp(log_b[..., -1:] - log_b)
    return out, torch.exp(log_b[..., -1:]).unsqueeze(-1) * state + torch.einsum("...cd,...c,...ce->...de", k, w, v)


def _step_einsum(state, normaliser, q_t, k_t, v_t):
    phi_q, phi_k = torch.nn.functional.elu(q_t) + 1, torch.nn.functional.elu(k_t) + 1
    state = state + torch.einsum("...d,...e->...de", phi_k, v_t)
    normaliser = normaliser + phi_k
    return (
        torch.einsum("...d,...de->...e", phi_q, state) / torch.einsum("...d,...d->...", phi_q, normaliser)[..., None],
        state,
        normaliser,
    )


def _step_matmul_piecewise_phi(state, normaliser, q_t, k_t, v_t):
    def phi(x):
        return torch.where(x > 0, x + 1, torch.exp(x))  # elu(x) + 1 written out

    phi_q, phi_k = phi(q_t), phi(k_t)
    new_state = state + phi_k.unsqueeze(-1) @ v_t.unsqueeze(-2)  # (..., D, 1) @ (..., 1, Dv)
    new_z = normaliser + phi_k
    num = (phi_q.unsqueeze(-2) @ new_state).squeeze(-2)  # (..., 1, D) @ (..., D, Dv)
    return num / (phi_q.unsqueeze(-2) @ new_z.unsqueeze(-1)).squeeze(-1), new_state, new_z


RIGHT = {
    "13.1": [_gla_einsum, _gla_unsqueeze],
    "13.2": [_delta_einsum, _delta_projection],
    "13.3": [_chunk_token_loop, _chunk_log_space],
    "13.4": [_step_einsum, _step_matmul_piecewise_phi],
}


# --- wrong answers learners write ---------------------------------------------------------------------------


def _gla_bmm_one_leading_axis(state, q_t, k_t, v_t, gate_t):
    new_state = gate_t[:, None, None] * state + torch.bmm(k_t[:, :, None], v_t[:, None, :])  # exactly (B, ...)
    return torch.bmm(q_t[:, None, :], new_state)[:, 0, :], new_state


def _gla_in_place(state, q_t, k_t, v_t, gate_t):
    state.mul_(gate_t[..., None, None]).add_(k_t[..., :, None] * v_t[..., None, :])  # writes into the argument
    return (q_t[..., None, :] @ state)[..., 0, :], state


def _gla_view_flatten(state, q_t, k_t, v_t, gate_t):
    D, Dv = state.shape[-2:]
    flat = state.view(-1, D, Dv)  # breaks on a non-contiguous state
    new = gate_t.reshape(-1, 1, 1) * flat + (k_t.reshape(-1, D, 1) * v_t.reshape(-1, 1, Dv))
    new_state = new.view(state.shape)
    return (q_t[..., None, :] @ new_state)[..., 0, :], new_state


def _delta_normalised_keys(state, q_t, k_t, v_t, beta_t):
    k_t = torch.nn.functional.normalize(k_t, dim=-1)  # the statement does not ask for unit keys
    stored = (k_t[..., None, :] @ state)[..., 0, :]
    new_state = state + beta_t[..., None, None] * k_t[..., :, None] * (v_t - stored)[..., None, :]
    return (q_t[..., None, :] @ new_state)[..., 0, :], new_state


def _delta_scalar_beta(state, q_t, k_t, v_t, beta_t):
    b = beta_t.reshape(-1)[0]  # one beta for every leading index
    stored = (k_t[..., None, :] @ state)[..., 0, :]
    new_state = state + b * k_t[..., :, None] * (v_t - stored)[..., None, :]
    return (q_t[..., None, :] @ new_state)[..., 0, :], new_state


def _chunk_unmasked(state, q, k, v, gate):
    b = gate.cumprod(-1)
    M = b[..., :, None] / b[..., None, :]  # the future left in: b_i / b_j above the diagonal too
    out = b[..., :, None] * (q @ state) + ((q @ k.mT) * M) @ v
    return out, b[..., -1, None, None] * state + (k * (b[..., -1:] / b)[..., None]).mT @ v


def _chunk_mask_transposed(state, q, k, v, gate):
    C = q.shape[-2]
    b = gate.cumprod(-1)
    M = torch.tril(b[..., None, :] / b[..., :, None].expand(*b.shape, C))  # b_j / b_i: the decay upside down
    out = b[..., :, None] * (q @ state) + ((q @ k.mT) * M) @ v
    return out, b[..., -1, None, None] * state + (k * (b[..., -1:] / b)[..., None]).mT @ v


def _chunk_size_from_axis_1(state, q, k, v, gate):
    C = q.shape[1]  # the chunk's length read from a fixed axis, right only with one leading axis
    b = gate.cumprod(-1)
    M = torch.where(torch.ones(C, C, dtype=torch.bool).tril(), b[..., :, None] / b[..., None, :], 0.0)
    out = b[..., :, None] * (q @ state) + ((q @ k.mT) * M) @ v
    return out, b[..., -1, None, None] * state + (k * (b[..., -1:] / b)[..., None]).mT @ v


def _step_in_place(state, normaliser, q_t, k_t, v_t):
    phi_k, phi_q = torch.nn.functional.elu(k_t) + 1, torch.nn.functional.elu(q_t) + 1
    state += phi_k[..., :, None] * v_t[..., None, :]  # writes into the caller's state
    normaliser += phi_k
    return (phi_q[..., :, None] * state).sum(-2) / (phi_q * normaliser).sum(-1, keepdim=True), state, normaliser


def _step_normaliser_of_raw_keys(state, normaliser, q_t, k_t, v_t):
    phi_k, phi_q = torch.nn.functional.elu(k_t) + 1, torch.nn.functional.elu(q_t) + 1
    state = state + phi_k[..., :, None] * v_t[..., None, :]
    normaliser = normaliser + k_t  # the keys without the feature map
    return (phi_q[..., :, None] * state).sum(-2) / (phi_q * normaliser).sum(-1, keepdim=True), state, normaliser


def _step_output_only(state, normaliser, q_t, k_t, v_t):
    phi_k, phi_q = torch.nn.functional.elu(k_t) + 1, torch.nn.functional.elu(q_t) + 1
    state = state + phi_k[..., :, None] * v_t[..., None, :]
    return (phi_q[..., :, None] * state).sum(-2) / (phi_q * (normaliser + phi_k)).sum(-1, keepdim=True)


def _step_denominator_clamped_at_1(state, normaliser, q_t, k_t, v_t):
    """A guard against a zero denominator that clamps at 1: wrong wherever phi(q_t) . z_t < 1 (a review found it)."""
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    fk, fq = phi(k_t), phi(q_t)
    state = state + fk[..., :, None] * v_t[..., None, :]
    normaliser = normaliser + fk
    out = (fq[..., :, None] * state).sum(-2) / (fq * normaliser).sum(-1, keepdim=True).clamp(min=1)
    return out, state, normaliser


WRONG = {
    "13.1": [_gla_bmm_one_leading_axis, _gla_in_place, _gla_view_flatten],
    "13.2": [_delta_normalised_keys, _delta_scalar_beta],
    "13.3": [_chunk_unmasked, _chunk_mask_transposed, _chunk_size_from_axis_1],
    "13.4": [_step_in_place, _step_normaliser_of_raw_keys, _step_output_only, _step_denominator_clamped_at_1],
}


# --- catalogued mistakes written another way: (key, answer, the name the check must give) -----------------------


def _gla_decay_after_einsum(state, q_t, k_t, v_t, gate_t):
    new_state = torch.einsum("...,...de->...de", gate_t, state + torch.einsum("...d,...e->...de", k_t, v_t))
    return torch.einsum("...d,...de->...e", q_t, new_state), new_state


def _gla_gate_on_write_unsqueeze(state, q_t, k_t, v_t, gate_t):
    new_state = state + (gate_t.unsqueeze(-1) * k_t).unsqueeze(-1) @ v_t.unsqueeze(-2)
    return (new_state * q_t.unsqueeze(-1)).sum(-2), new_state


def _delta_after_write_einsum(state, q_t, k_t, v_t, beta_t):
    written = state + torch.einsum("...,...d,...e->...de", beta_t, k_t, v_t)
    stored = torch.einsum("...d,...de->...e", k_t, written)
    new_state = written - torch.einsum("...,...d,...e->...de", beta_t, k_t, stored)
    return torch.einsum("...d,...de->...e", q_t, new_state), new_state


def _chunk_twice_token_loop(state, q, k, v, gate):
    S = state
    for i in range(q.shape[-2]):  # the state handed on, by the recurrence
        S = gate[..., i, None, None] * S + k[..., i, :, None] * v[..., i, None, :]
    b = gate.cumprod(-1)
    C = q.shape[-2]
    M = torch.where(torch.ones(C, C, dtype=torch.bool).tril(), b[..., :, None] / b[..., None, :], 0.0)
    return q @ S + ((q @ k.mT) * M) @ v, S  # ... then read for the past: the chunk counted twice


def _gla_read_first(state, q_t, k_t, v_t, gate_t):
    out_t = torch.einsum("...d,...de->...e", q_t, state)  # read what was given, then update
    return out_t, gate_t.unsqueeze(-1).unsqueeze(-1) * state + torch.einsum("...d,...e->...de", k_t, v_t)


NAMED = [
    ("13.1", _gla_decay_after_einsum, "decay applied after the update"),
    ("13.1", _gla_gate_on_write_unsqueeze, "the gate on the wrong side"),
    ("13.2", _delta_after_write_einsum, "the delta computed from the updated state"),
    ("13.3", _chunk_twice_token_loop, "the chunk's own tokens counted twice"),
    ("13.1", _gla_read_first, "state read before the gate and the write"),
]
