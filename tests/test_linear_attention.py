"""course_utils.linear_attention: every form equal to a direct Python loop over the recurrence, gradients too; the
normalised causal linear attention (every gate 1) against attention written out with its feature map."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import refusals_test

from course_utils.attention import scaled_dot_product_attention
from course_utils.linear_attention import (
    chunkwise_cost,
    decay_mask,
    delta_rule_recurrent,
    delta_rule_step,
    elu_feature_map,
    gated_linear_attention,
    gated_linear_attention_chunk,
    gated_linear_attention_chunkwise,
    gated_linear_attention_prefix_states,
    gated_linear_attention_recurrent,
    gated_linear_attention_step,
    linear_attention,
    linear_attention_quadratic,
    linear_attention_recurrent,
    linear_attention_step,
)
from course_utils.masking import causal_mask

F64 = {"atol": 1e-12, "rtol": 0.0}
F32 = {"atol": 1e-5, "rtol": 1e-4}  # float32 against the float64 loop: the stated float32 tolerance


def _inputs(seed, lead, T, D, Dv, dtype=torch.float64, low=0.3):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(*lead, T, D, generator=g, dtype=dtype) for _ in range(2))
    v = torch.randn(*lead, T, Dv, generator=g, dtype=dtype)
    gate = low + (1 - low) * torch.rand(*lead, T, generator=g, dtype=dtype)  # in [low, 1)
    beta = torch.rand(*lead, T, generator=g, dtype=dtype)
    return q, k, v, gate, beta


def _loop(q, k, v, gate, beta=None):
    """The recurrence written out element by element over every leading index: no batched op to share a slip."""
    lead, T, D, Dv = q.shape[:-2], q.shape[-2], q.shape[-1], v.shape[-1]
    out = torch.zeros(*lead, T, Dv, dtype=q.dtype)
    final = torch.zeros(*lead, D, Dv, dtype=q.dtype)
    for i in itertools.product(*(range(n) for n in lead)):
        S = [[0.0] * Dv for _ in range(D)]
        for t in range(T):
            a = float(gate[i + (t,)])
            S = [[a * S[d][e] for e in range(Dv)] for d in range(D)]
            kt, vt, qt = k[i + (t,)].tolist(), v[i + (t,)].tolist(), q[i + (t,)].tolist()
            if beta is None:
                write = vt
                b = 1.0
            else:
                stored = [sum(kt[d] * S[d][e] for d in range(D)) for e in range(Dv)]
                write = [vt[e] - stored[e] for e in range(Dv)]
                b = float(beta[i + (t,)])
            S = [[S[d][e] + b * kt[d] * write[e] for e in range(Dv)] for d in range(D)]
            for e in range(Dv):
                out[i + (t, e)] = sum(qt[d] * S[d][e] for d in range(D))
        final[i] = torch.tensor(S, dtype=q.dtype)
    return out, final


shapes = st.tuples(
    st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple),  # 0 to 3 leading axes
    st.integers(1, 9),  # T
    st.integers(1, 4),  # D
    st.integers(1, 4),  # Dv
    st.integers(0, 2**16),  # seed
)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 10))
def test_every_gated_form_equals_the_direct_loop_in_float64_and_float32(shape, chunk_size):
    """Each form equals the float64 direct loop to 1e-12 in float64, and within the stated float32 tolerance
    (1e-5 + 1e-4 x |expected|) run in float32 (T = 1 and chunk sizes that do not divide T included); the delta
    rule in float32 with unit keys, as DeltaNet uses it (beta ||k||^2 <= 1)."""
    lead, T, D, Dv, seed = shape
    q, k, v, gate, beta = _inputs(seed, lead, T, D, Dv)
    out, final = _loop(q, k, v, gate)
    for dtype, tol in ((torch.float64, F64), (torch.float32, F32)):
        qd, kd, vd, gated = (x.to(dtype) for x in (q, k, v, gate))
        rec, rec_state = gated_linear_attention_recurrent(qd, kd, vd, gated)
        chunked, chunk_state = gated_linear_attention_chunkwise(qd, kd, vd, gated, chunk_size=chunk_size)
        for got in (
            rec,
            gated_linear_attention(qd, kd, vd, gated),
            gated_linear_attention_prefix_states(qd, kd, vd, gated),
            chunked,
        ):
            torch.testing.assert_close(got, out.to(dtype), **tol)
        for state in (rec_state, chunk_state):
            torch.testing.assert_close(state, final.to(dtype), **tol)
    k = torch.nn.functional.normalize(k, dim=-1)
    out, final = _loop(q, k, v, gate, beta)
    got, state = delta_rule_recurrent(q.float(), k.float(), v.float(), beta.float(), gate.float())
    torch.testing.assert_close(got.double(), out, **F32)
    torch.testing.assert_close(state.double(), final, **F32)


@settings(max_examples=40, deadline=None)
@given(shapes)
def test_the_delta_rule_equals_the_direct_loop_in_float64(shape):
    lead, T, D, Dv, seed = shape
    q, k, v, gate, beta = _inputs(seed, lead, T, D, Dv)
    for g in (gate, 1.0):
        out, final = _loop(q, k, v, gate if g is gate else torch.ones_like(gate), beta)
        got, state = delta_rule_recurrent(q, k, v, beta, g)
        torch.testing.assert_close(got, out, **F64)
        torch.testing.assert_close(state, final, **F64)


def test_float32_forms_agree_to_the_stated_1e_5():
    q, k, v, gate, _ = _inputs(3, (2, 4), 200, 16, 16, dtype=torch.float32, low=0.9)
    ref, _ = gated_linear_attention_recurrent(q, k, v, gate)
    for out in (
        gated_linear_attention(q, k, v, gate),
        gated_linear_attention_chunkwise(q, k, v, gate, chunk_size=32)[0],
        gated_linear_attention_prefix_states(q, k, v, gate),
    ):
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)


def test_a_number_gate_is_a_fixed_decay_and_one_is_plain_linear_attention():
    q, k, v, gate, _ = _inputs(4, (2,), 10, 3, 2)
    torch.testing.assert_close(
        gated_linear_attention(q, k, v, 0.8), gated_linear_attention(q, k, v, torch.full_like(gate, 0.8)), **F64
    )
    plain = (q @ k.transpose(-2, -1) * torch.ones(10, 10, dtype=torch.bool).tril()) @ v
    torch.testing.assert_close(gated_linear_attention(q, k, v), plain, **F64)


def test_the_decay_mask_is_the_product_of_the_gates_between_j_and_i():
    gate = torch.tensor([0.5, 0.25, 0.8, 1.0], dtype=torch.float64)
    M = decay_mask(gate)
    expected = torch.zeros(4, 4, dtype=torch.float64)
    for i in range(4):
        for j in range(i + 1):
            expected[i, j] = torch.prod(gate[j + 1 : i + 1])
    torch.testing.assert_close(M, expected, **F64)


def test_steps_equal_the_recurrence_one_token_at_a_time():
    q, k, v, gate, beta = _inputs(5, (3,), 6, 4, 3)
    state_g = state_d = torch.zeros(3, 4, 3, dtype=torch.float64)
    outs_g, outs_d = [], []
    for t in range(6):
        o, state_g = gated_linear_attention_step(state_g, q[:, t], k[:, t], v[:, t], gate[:, t])
        outs_g.append(o)
        o, state_d = delta_rule_step(state_d, q[:, t], k[:, t], v[:, t], beta[:, t], gate[:, t])
        outs_d.append(o)
    torch.testing.assert_close(torch.stack(outs_g, 1), gated_linear_attention_recurrent(q, k, v, gate)[0], **F64)
    torch.testing.assert_close(torch.stack(outs_d, 1), delta_rule_recurrent(q, k, v, beta, gate)[0], **F64)


def test_one_chunk_hands_on_the_state_the_recurrence_reaches():
    q, k, v, gate, _ = _inputs(6, (2,), 10, 4, 3)
    _, S4 = gated_linear_attention_recurrent(q[:, :4], k[:, :4], v[:, :4], gate[:, :4])
    out, S10 = gated_linear_attention_chunk(S4, q[:, 4:], k[:, 4:], v[:, 4:], gate[:, 4:])
    ref, ref_state = gated_linear_attention_recurrent(q, k, v, gate)
    torch.testing.assert_close(out, ref[:, 4:], **F64)
    torch.testing.assert_close(S10, ref_state, **F64)


def test_the_delta_rule_with_beta_one_and_a_unit_key_replaces_the_stored_value():
    """Notebook 13, section 4: the read returns the new value; the additive read old + new."""
    g = torch.Generator().manual_seed(7)
    D, Dv = 8, 4
    key = torch.nn.functional.normalize(torch.randn(D, generator=g, dtype=torch.float64), dim=0)
    old, new = torch.randn(2, Dv, generator=g, dtype=torch.float64)
    _, S = delta_rule_step(torch.zeros(D, Dv, dtype=torch.float64), key, key, old, 1.0)
    read, S = delta_rule_step(S, key, key, new, 1.0)
    torch.testing.assert_close(read, new, **F64)
    added, _ = gated_linear_attention_step(torch.outer(key, old), key, key, new)  # adding: old + new comes back
    torch.testing.assert_close(added, old + new, **F64)


def test_empty_sequences_give_empty_outputs_and_zero_states():
    q, k, v, gate, beta = _inputs(8, (2,), 0, 3, 2)
    for out, state in (
        gated_linear_attention_recurrent(q, k, v, gate),
        gated_linear_attention_chunkwise(q, k, v, gate, chunk_size=4),
        delta_rule_recurrent(q, k, v, beta),
    ):
        assert out.shape == (2, 0, 2) and state.shape == (2, 3, 2) and not state.any()


@pytest.mark.parametrize("fn, make", [
    (gated_linear_attention, lambda q, k, v, a, b: (q, k, v, a)),
    (gated_linear_attention_prefix_states, lambda q, k, v, a, b: (q, k, v, a)),
    (lambda *x: gated_linear_attention_recurrent(*x)[0], lambda q, k, v, a, b: (q, k, v, a)),
    (lambda *x: gated_linear_attention_chunkwise(*x, chunk_size=2)[0], lambda q, k, v, a, b: (q, k, v, a)),
    (lambda *x: delta_rule_recurrent(*x)[0], lambda q, k, v, a, b: (q, k, v, b, a)),
], ids=["quadratic", "prefix_states", "recurrent", "chunkwise", "delta_rule"])  # fmt: skip
def test_gradients_match_finite_differences(fn, make):
    q, k, v, gate, beta = _inputs(9, (2,), 5, 3, 2, low=0.5)
    beta = 0.2 + 0.6 * beta  # inside (0, 1), so a finite difference never leaves the domain
    args = tuple(x.requires_grad_() for x in make(q, k, v, gate, beta))
    assert torch.autograd.gradcheck(fn, args)


def test_chunkwise_gradients_equal_the_recurrences():
    q, k, v, gate, _ = _inputs(10, (2,), 11, 4, 3)
    grads = []
    for form in (gated_linear_attention_recurrent, lambda *x: gated_linear_attention_chunkwise(*x, chunk_size=4)):
        xs = [x.clone().requires_grad_() for x in (q, k, v, gate)]
        out, state = form(*xs)
        (out.square().sum() + state.sum()).backward()
        grads.append([x.grad for x in xs])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **F64)


@pytest.mark.parametrize("T, C", [(10, 4), (10, 64), (10, 10), (10, 1), (1, 4), (0, 3), (100, 7)])
def test_chunkwise_cost_sums_over_the_actual_chunk_lengths(T, C):
    """The last chunk is shorter when C does not divide T, and C > T is one chunk of T tokens."""
    D, Dv = 4, 6
    lengths = [min(C, T - s) for s in range(0, T, C)]  # the chunks gated_linear_attention_chunkwise cuts
    assert sum(lengths) == T
    direct = sum(n * n * D + n * n * Dv + n * D * Dv + n * D * Dv for n in lengths)  # q k^T, (.) v, q S, k^T v
    assert chunkwise_cost(T, D, Dv, C)["chunkwise"] == direct


def _forms_with_gradients(chunk_size):
    return {
        "quadratic": gated_linear_attention,
        "prefix_states": gated_linear_attention_prefix_states,
        "chunkwise": lambda *x: gated_linear_attention_chunkwise(*x, chunk_size=chunk_size)[0],
        "chunk": lambda q, k, v, g: gated_linear_attention_chunk(
            torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype), q, k, v, g
        )[0],
    }


def _grads(form, q, k, v, gate):
    xs = [x.clone().requires_grad_() for x in (q, k, v, gate)]
    out = form(*xs)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
    return [torch.zeros_like(x) if x.grad is None else x.grad for x in xs]  # None: unused (T = 1 reads no gate)


@settings(max_examples=30, deadline=None)
@given(shapes, st.integers(1, 10), st.floats(-40.0, 0.0))
def test_every_form_has_the_recurrences_gradients_for_any_gate_size_in_float64(shape, chunk_size, log10_low):
    """Gradients of q, k, v and the gate equal the recurrence's (itself gradchecked), with gates down to 1e-40: the
    log-space forms once cancelled an O(1) term against itself in d log(alpha), then divided by alpha, so small
    gates got a gradient wrong by about epsilon / alpha (all gates 1e-40: a gate gradient of 0)."""
    lead, T, D, Dv, seed = shape
    q, k, v, _, _ = _inputs(seed, lead, T, D, Dv)
    g = torch.Generator().manual_seed(seed + 1)
    gate = 10 ** (log10_low * torch.rand(*lead, T, generator=g, dtype=torch.float64))  # in [10^low, 1]
    want = _grads(gated_linear_attention_recurrent_out, q, k, v, gate)
    for name, form in _forms_with_gradients(chunk_size).items():
        for x, a, b in zip("qkvg", _grads(form, q, k, v, gate), want):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-9, msg=lambda m, x=x, name=name: f"{name} d{x}: {m}")


def gated_linear_attention_recurrent_out(q, k, v, gate):
    return gated_linear_attention_recurrent(q, k, v, gate)[0]


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-9), (torch.float32, 1e-3)])
def test_tiny_gates_get_the_recurrences_gate_gradient(dtype, rtol):
    """Every gate 1e-30 (1e-30 is a normal float32): d out / d alpha_t is about q_t . S_{t-1}, of order 1."""
    q, k, v, _, _ = _inputs(11, (2,), 9, 3, 2, dtype=dtype)
    gate = torch.full((2, 9), 1e-30, dtype=dtype)
    want = _grads(gated_linear_attention_recurrent_out, q, k, v, gate)[3]
    assert want.abs().max() > 0.1
    for name, form in _forms_with_gradients(4).items():
        torch.testing.assert_close(_grads(form, q, k, v, gate)[3], want, atol=1e-6, rtol=rtol, msg=name)


# --- causal linear attention (Katharopoulos et al. 2020): the forms above with every gate 1, normalised -------


def test_linear_attention_is_attention_with_exp_replaced_by_the_feature_map():
    """Written out for one query with loops: out_t = sum_{j<=t} phi(q_t).phi(k_j) v_j / sum_{j<=t} phi(q_t).phi(k_j)."""
    q, k, v = _inputs(3, (), 7, 3, 5)[:3]
    phi = lambda x: torch.where(x > 0, x + 1, torch.exp(x))  # noqa: E731  elu(x) + 1, piece by piece
    expected = torch.zeros(7, 5, dtype=torch.float64)
    for t in range(7):
        w = torch.stack([phi(q[t]) @ phi(k[j]) for j in range(t + 1)])  # (t + 1,) positive weights
        expected[t] = (w[:, None] * v[: t + 1]).sum(0) / w.sum()
    torch.testing.assert_close(linear_attention(q, k, v), expected)
    torch.testing.assert_close(elu_feature_map(q), phi(q))
    assert (elu_feature_map(torch.linspace(-10, 10, 101)) > 0).all()
    for dtype, low in ((torch.float32, -103.0), (torch.float64, -745.0)):  # positive down to the docstring's bound
        phi_x = elu_feature_map(torch.tensor([-17.5, low, low - 1.0], dtype=dtype))
        assert phi_x[0] > 0 and phi_x[1] > 0 and phi_x[2] == 0, (dtype, phi_x)


def test_linear_attention_is_causal_and_not_softmax_attention():
    q, k, v = _inputs(5, (2,), 9, 4, 4)[:3]
    out = linear_attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[:, 6:] += 1.0
    v2[:, 6:] -= 2.0
    torch.testing.assert_close(linear_attention(q, k2, v2)[:, :6], out[:, :6])  # changing t >= 6 leaves 0..5
    softmax, _ = scaled_dot_product_attention(q, k, v, causal_mask(9))
    assert (out - softmax).abs().max() > 0.05


def test_linear_attention_step_carries_the_state_of_the_parallel_form():
    """Stepping through the tokens gives the parallel form's outputs and its last prefix state."""
    q, k, v = _inputs(11, (2, 3), 6, 4, 2)[:3]
    state, normaliser = torch.zeros(2, 3, 4, 2, dtype=torch.float64), torch.zeros(2, 3, 4, dtype=torch.float64)
    for t in range(6):
        before = state.clone(), normaliser.clone()
        out, state2, normaliser2 = linear_attention_step(state, normaliser, q[..., t, :], k[..., t, :], v[..., t, :])
        torch.testing.assert_close((state, normaliser), before, rtol=0, atol=0)  # inputs unchanged
        torch.testing.assert_close(out, linear_attention(q, k, v)[..., t, :])
        state, normaliser = state2, normaliser2
    fk = elu_feature_map(k)
    torch.testing.assert_close(state, fk.transpose(-2, -1) @ v)  # sum_j phi(k_j) v_j^T, (D, Dv)
    torch.testing.assert_close(normaliser, fk.sum(-2))
    assert state.shape == (2, 3, 4, 2) and normaliser.shape == (2, 3, 4)


def test_linear_attention_step_broadcasts_a_shared_state_over_leading_axes():
    state, z = torch.rand(4, 3) + 0.1, torch.rand(4) + 0.1  # one state shared by a batch of 5 queries
    q_t, k_t, v_t = torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 3)
    out, new_state, new_z = linear_attention_step(state, z, q_t, k_t, v_t)
    assert out.shape == (5, 3) and new_state.shape == (5, 4, 3) and new_z.shape == (5, 4)
    for b in range(5):
        o, s, n = linear_attention_step(state, z, q_t[b], k_t[b], v_t[b])
        torch.testing.assert_close((o, s, n), (out[b], new_state[b], new_z[b]))


def test_linear_attention_handles_empty_sequences_and_length_one():
    q, k, v = torch.zeros(2, 0, 3), torch.zeros(2, 0, 3), torch.zeros(2, 0, 5)
    for fn in (linear_attention, linear_attention_recurrent, linear_attention_quadratic):
        assert fn(q, k, v).shape == (2, 0, 5)
    q, k, v = _inputs(0, (2,), 1, 3, 5, dtype=torch.float32)[:3]
    for fn in (linear_attention, linear_attention_recurrent, linear_attention_quadratic):
        torch.testing.assert_close(fn(q, k, v), v)  # one token attends only to itself


def test_the_feature_map_stays_positive_where_elu_plus_one_rounds_to_zero():
    # F.elu(x) + 1 computes exp(x) - 1 + 1, which is exactly 0 in float32 below x of about -17: a query whose
    # features are all 0 then divides 0 by 0. Review of #19: phi is computed as exp(x) there instead.
    x = torch.tensor([-80.0, -40.0, -20.0, -1.0, 0.0, 3.0])
    assert (F.elu(x) + 1)[:3].eq(0).all()  # the rounding this test guards against is real
    assert (elu_feature_map(x) > 0).all()
    x64 = x.double()
    torch.testing.assert_close(elu_feature_map(x64), torch.where(x64 > 0, x64 + 1, x64.exp()), rtol=0, atol=0)
    q, k, v = (
        torch.full((1, 3, 2), -20.0),
        torch.full((1, 3, 2), -20.0),
        _inputs(0, (1,), 3, 2, 2, dtype=torch.float32)[2],
    )
    expected = v.cumsum(dim=1) / torch.arange(1, 4).reshape(1, 3, 1)  # equal weights: the running mean
    for fn in (linear_attention, linear_attention_recurrent, linear_attention_quadratic):
        torch.testing.assert_close(fn(q, k, v), expected)


def test_the_feature_map_has_elus_gradient():
    x = torch.tensor([-30.0, -2.0, 0.0, 2.0, 100.0], dtype=torch.float64, requires_grad=True)
    elu_feature_map(x).sum().backward()  # no NaN from exp's unused branch at x = 100
    torch.testing.assert_close(x.grad, torch.tensor([math.exp(-30.0), math.exp(-2.0), 1.0, 1.0, 1.0]).double())
    assert torch.autograd.gradcheck(elu_feature_map, (torch.randn(20, dtype=torch.float64, requires_grad=True),))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_direct_form_keeps_half_precision_dtypes(dtype):
    # It multiplied by a float32 (T, T) mask, so bfloat16 scores became float32 and `@ v` failed.
    q, k, v = (t.to(dtype) for t in _inputs(2, (2,), 6, 3, 4, dtype=torch.float32)[:3])
    out = linear_attention_quadratic(q, k, v)
    assert out.dtype == dtype
    torch.testing.assert_close(out, linear_attention(q, k, v), atol=0.05, rtol=0.05)


def test_an_infinite_future_key_leaves_earlier_outputs_of_every_form_finite():
    # The direct form multiplied the scores by a 0/1 mask: inf * 0 = NaN leaked a future key into the past.
    q, k, v = _inputs(4, (1,), 5, 3, 2, dtype=torch.float32)[:3]
    k[0, 3, 0] = float("inf")
    for fn in (linear_attention, linear_attention_recurrent, linear_attention_quadratic):
        out = fn(q, k, v)
        assert torch.isfinite(out[0, :3]).all(), fn.__name__
        torch.testing.assert_close(out[0, :3], linear_attention(q[:, :3], k[:, :3], v[:, :3])[0])


def _t(*shape, dtype=torch.float64):
    return torch.zeros(*shape, dtype=dtype)


_Q, _K, _V = _t(2, 4, 3), _t(2, 4, 3), _t(2, 4, 2)
_GATE = torch.full((2, 4), 0.5, dtype=torch.float64)
_S = _t(2, 3, 2)
Q, K, V = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)  # D = 4, Dv = 3
ST, Z, Q_T, V_T = torch.zeros(2, 4, 3), torch.zeros(2, 4), torch.randn(2, 4), torch.randn(2, 3)  # one step
LINEAR_FORMS = (linear_attention, linear_attention_recurrent, linear_attention_quadratic)

# (call, exception type, a pattern the message must match): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (lambda: gated_linear_attention([1.0], _K, _V), TypeError,
     r"q must be a torch.Tensor, got list"),
    (lambda: gated_linear_attention(_Q, _K.long(), _V), TypeError, r"k must be a floating-point tensor"),
    (lambda: gated_linear_attention(_Q, _t(3), _V), ValueError, r"k must have at least 2 dimensions"),
    (lambda: gated_linear_attention(_Q, _K, _V.float()), TypeError, r"q, k and v must share a dtype"),
    (lambda: gated_linear_attention(_Q, _t(2, 5, 3), _V), ValueError,
     r"q and k must have one shape"),
    (lambda: gated_linear_attention(_Q, _K, _t(2, 5, 2)), ValueError, r"v \(2, 5, 2\)"),
    (lambda: gated_linear_attention(_t(2, 4, 0), _t(2, 4, 0), _V), ValueError, r"with D >= 1"),
    (lambda: gated_linear_attention(_Q, _K, _V, 1.5), ValueError,
     r"gate must be in \(0, 1\], got values from 1.5"),
    (lambda: gated_linear_attention_recurrent(_Q, _K, _V, 0.0), ValueError, r"gate must be in \(0, 1\]"),
    (lambda: gated_linear_attention_chunkwise(_Q, _K, _V, _GATE * float("nan")), ValueError,
     r"gate must be in"),
    (lambda: gated_linear_attention(_Q, _K, _V, _GATE[:, :3]), ValueError,
     r"gate must have shape \(2, 4\) \(one per token\), got \(2, 3\)"),
    (lambda: gated_linear_attention(_Q, _K, _V, _GATE.float()), TypeError,
     r"gate must be a number or a torch.float64 tensor"),
    (lambda: gated_linear_attention_prefix_states(_Q, _K, _V, "0.5"), TypeError, r"got str"),
    (lambda: gated_linear_attention(_Q, _K, _V, True), TypeError, r"gate must be a number .*got bool"),
    (lambda: delta_rule_recurrent(_Q, _K, _V, -0.1), ValueError, r"beta must be in \[0, 1\]"),
    (lambda: delta_rule_recurrent(_Q, _K, _V, None), TypeError,
     r"beta must be a number .*got NoneType"),
    (lambda: gated_linear_attention_chunkwise(_Q, _K, _V, chunk_size=0), ValueError,
     r"chunk_size must be at least 1, got 0"),
    (lambda: gated_linear_attention_chunkwise(_Q, _K, _V, chunk_size=2.0), TypeError,
     r"chunk_size must be an int, got float"),
    (lambda: gated_linear_attention_step(_t(2, 2, 2), _Q[:, 0], _K[:, 0], _V[:, 0]), ValueError,
     r"state must be \(\.\.\., D, Dv\) = \(2, 3, 2\)"),
    (lambda: delta_rule_step(_S.float(), _Q[:, 0], _K[:, 0], _V[:, 0], 1.0), ValueError,
     r"state must be .*got \(2, 3, 2\) \(torch.float32"),
    (lambda: gated_linear_attention_step(_S, _Q[:, 0], _K[:, 0], _V[:, 0], 2.0), ValueError,
     r"gate_t must be in \(0, 1\]"),
    (lambda: delta_rule_step(_S, _Q[:, 0], _K[:, 0], _V[:, 0], _GATE), ValueError,
     r"beta_t must have shape \(2,\)"),
    (lambda: gated_linear_attention_chunk([0.0], _Q, _K, _V), TypeError,
     r"state must be a torch.Tensor"),
    (lambda: decay_mask(torch.ones(3, dtype=torch.long)), TypeError,
     r"gate must be a floating-point"),
    (lambda: decay_mask(torch.zeros(3)), ValueError, r"gate must be in \(0, 1\]"),
    *(
        (
            lambda fn=fn: fn(
                *((_S.float(),) if fn is gated_linear_attention_chunk else ()),
                _Q.float(),
                _K.float(),
                _V.float(),
                1e-50,
            ),
            ValueError,
            r"gate = 1e-50 is 0 in torch.float32",
        )
        for fn in (gated_linear_attention, gated_linear_attention_chunkwise, gated_linear_attention_chunk)
    ),
    (lambda: decay_mask(torch.rand(5, device="meta")), ValueError, r"gate is on the meta device"),
    *(
        (
            lambda fn=fn: fn(
                *(x.to("meta") for x in (_Q, _K, _V)), *((1.0,) if fn is delta_rule_recurrent else ()), _GATE.to("meta")
            ),
            ValueError,
            r"is on the meta device",
        )
        for fn in (gated_linear_attention_recurrent, delta_rule_recurrent)
    ),
    (lambda: chunkwise_cost(-1, 4, 4, 2), ValueError, r"T must be at least 0, got -1"),
    (lambda: chunkwise_cost(8, 4.0, 4, 2), TypeError, r"D must be an int, got float"),
    # causal linear attention
    (lambda: linear_attention(Q[:, :4], K, V), ValueError, r"got q \(2, 4, 4\), k \(2, 5, 4\), v \(2, 5, 3\)"),
    (lambda: linear_attention_recurrent(Q, K, V[:, :4]), ValueError,
     r"got q \(2, 5, 4\), k \(2, 5, 4\), v \(2, 4, 3\)"),
    (lambda: linear_attention_quadratic(Q, K[..., :3], V), ValueError,
     r"q and k must have one shape \(\.\.\., T, D\) with D >= 1 and v \(\.\.\., T, Dv\) the same leading axes"),
    (lambda: linear_attention_step(ST, Z, Q_T, Q_T, Q_T), ValueError,
     r"v_t must end in 3 \(state is \(\.\.\., D, Dv\) = \(2, 4, 3\)\), got v_t \(2, 4\)"),
    (lambda: linear_attention_step(ST, torch.zeros(2, 3), Q_T, Q_T, V_T), ValueError, r"got normaliser \(2, 3\)"),
    (lambda: linear_attention_step(Z[0], Z, Q_T, Q_T, V_T), ValueError,
     r"state must have at least 2 dimensions, got shape \(4,\)"),
    (lambda: linear_attention_step(ST, Z, torch.randn(3, 4), Q_T, V_T), ValueError,
     r"the leading axes of state \(2, 4, 3\),"),
    (lambda: linear_attention_step(ST, Z, Q_T.to("meta"), Q_T, V_T), ValueError, "q_t on meta"),
    (lambda: linear_attention_step(torch.zeros(0, 2), torch.zeros(0), torch.zeros(0), torch.zeros(0), torch.zeros(2)),
     ValueError, r"state must be \(\.\.\., D, Dv\) with D >= 1 \(phi\(q_t\) \. z_t is 0 / 0 without\), got \(0, 2\)"),
]  # fmt: skip


test_each_bad_input_gets_its_message = refusals_test(MESSAGES, regex=True)
