"""course_utils.induction: the repeated data, the attention-only model, the repeat losses, the per-head scores
on hand-made attention patterns, head ablation (exactly one head switched off), and the errors."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import one_cpu_thread

from course_utils import induction
from course_utils._start import StopSignals, pasteable
from course_utils.gpt import GPT, GPTConfig
from course_utils.induction import (
    AttentionOnlyTransformer,
    InductionConfig,
    ablate_heads,
    ablation_losses,
    attention_layers,
    copying_score,
    direct_logit_effect,
    head_logits,
    head_scores,
    heads_above,
    induction_score,
    key_query_ablation,
    load_induction_model,
    ov_circuit,
    previous_token_score,
    repeat_losses,
    repeated_tokens,
    residual_stream,
    save_induction_model,
    train_induction,
)
from course_utils.train import CheckpointError, RunSetupError
from course_utils.widgets import induction_explorer, plot_induction_head

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent
SMALL = InductionConfig(vocab_size=11, seq_len=5, embed_dim=12, num_heads=3, num_layers=2)


def _model(config: InductionConfig = SMALL, seed: int = 0) -> AttentionOnlyTransformer:
    torch.manual_seed(seed)
    return AttentionOnlyTransformer(config).eval()


# ---------------------------------------------------------------------------------------------- data


def test_repeated_tokens_are_one_stretch_twice():
    x = repeated_tokens(4, 6, 9, torch.Generator().manual_seed(0))
    assert x.shape == (4, 12) and x.dtype == torch.long
    torch.testing.assert_close(x[:, :6], x[:, 6:])
    assert int(x.min()) >= 0 and int(x.max()) < 9


@given(seed=st.integers(0, 2**31 - 1), N=st.integers(1, 30), min_len=st.integers(1, 30))
@settings(max_examples=40, deadline=None)
def test_with_min_len_each_row_repeats_with_its_own_period(seed, N, min_len):
    min_len = min(min_len, N)
    x = repeated_tokens(8, N, 50, torch.Generator().manual_seed(seed), min_len=min_len)
    assert x.shape == (8, 2 * N)
    for row in x:
        periods = [n for n in range(min_len, N + 1) if torch.equal(row[n:], row[:-n])]
        assert periods, f"row {row.tolist()} repeats with no period in {min_len}..{N}"


def test_periods_vary_from_row_to_row():
    x = repeated_tokens(64, 24, 64, torch.Generator().manual_seed(1), min_len=12)
    first_period = [min(n for n in range(12, 25) if torch.equal(r[n:], r[:-n])) for r in x]
    assert len(set(first_period)) > 5


def test_the_same_generator_state_draws_the_same_tokens_and_none_is_the_global_one():
    a, b = (repeated_tokens(3, 7, 20, torch.Generator().manual_seed(5), min_len=2) for _ in range(2))
    torch.testing.assert_close(a, b)
    torch.manual_seed(3)
    drawn = repeated_tokens(2, 5, 11, None)  # None: torch's global generator, as check_generator's message says
    torch.testing.assert_close(drawn, repeated_tokens(2, 5, 11, torch.Generator().manual_seed(3)))


# ---------------------------------------------------------------------------------------------- the model


def test_model_shapes_weights_causality_and_only_attention():
    model = _model()
    idx = repeated_tokens(2, 5, 11, torch.Generator().manual_seed(0))  # (2, 10)
    logits, maps = model(idx, need_weights=True)
    assert logits.shape == (2, 10, 11)
    assert len(maps) == 2 and all(m.shape == (2, 3, 10, 10) for m in maps)
    for m in maps:
        torch.testing.assert_close(m.sum(-1), torch.ones(2, 3, 10))
        assert (m.triu(1) == 0).all()
    torch.testing.assert_close(model(idx), logits)
    assert all(torch.equal(a, b) for a, b in zip(model.attention_maps(idx), maps))
    changed = idx.clone()
    changed[0, 6] = (changed[0, 6] + 1) % 11
    torch.testing.assert_close(model(idx)[:, :6], model(changed)[:, :6])  # causal
    kinds = {type(m).__name__ for m in model.modules()}
    assert "MLP" not in kinds and len(attention_layers(model)) == SMALL.num_layers


# ---------------------------------------------------------------------------------------------- the scores


def _one_hot_rows(T: int, target: list[int]) -> torch.Tensor:
    """A (1, 1, T, T) pattern whose row i puts all its weight on key target[i]."""
    w = torch.zeros(1, 1, T, T)
    w[0, 0, torch.arange(T), torch.tensor(target)] = 1.0
    return w


INDUCTION = [0] * 6 + list(range(1, 7))  # N = 6: the second repeat reads the token after the first copy
PATTERNS = [  # (the score, row i's one key, the score it must give, to within)
    (previous_token_score, [0] + list(range(8)), 1.0, 0),  # row i reads i - 1 (row 0 reads itself)
    (lambda w: induction_score(w, 6), INDUCTION, 1.0, 0),
    (previous_token_score, INDUCTION, 0.0, 0.2),  # an induction head is not a previous-token head
    (lambda w: induction_score(w, 6), [0] * 6 + list(range(6)), 0.0, 0),  # off by one: the copy itself
]


@pytest.mark.parametrize("score, target, expected, atol", PATTERNS)
def test_hand_made_patterns_score_as_they_should(score, target, expected, atol):
    w = _one_hot_rows(len(target), target)
    torch.testing.assert_close(score(w), torch.tensor([expected]), atol=atol or 1e-6, rtol=0)


@pytest.mark.parametrize("N", [1, 2, 5, 24])
def test_uniform_causal_weights_score_the_expected_values(N):
    T = 2 * N
    w = torch.ones(T, T).tril()
    w = (w / w.sum(-1, keepdim=True)).expand(3, 2, T, T)  # every row spreads evenly over its keys
    prev_expected = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    ind_expected = sum(1 / (i + 1) for i in range(N, T)) / N
    torch.testing.assert_close(previous_token_score(w), torch.full((2,), prev_expected))
    torch.testing.assert_close(induction_score(w, N), torch.full((2,), ind_expected))


def test_scores_average_over_batch_and_keep_heads_apart():
    N = 4
    perfect = _one_hot_rows(2 * N, [0] * N + [i - N + 1 for i in range(N, 2 * N)])[0, 0]
    w = torch.stack([torch.stack([perfect, torch.eye(2 * N)]), torch.stack([torch.eye(2 * N), torch.eye(2 * N)])])
    torch.testing.assert_close(induction_score(w, N), torch.tensor([0.5, 0.0]))  # (B=2, H=2) -> (H,)


def test_head_scores_and_ablation_work_on_the_tiny_gpt_too():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig.preset("tiny", vocab_size=11)).eval()
    idx = repeated_tokens(2, 8, 11, torch.Generator().manual_seed(0))
    prev, ind = head_scores(gpt, idx, 8)
    assert prev.shape == ind.shape == (2, 4)
    maps = gpt.attention_maps(idx)
    torch.testing.assert_close(ind[1], induction_score(maps[1], 8))
    plain = gpt(idx)[0]
    with ablate_heads(gpt, [(1, 3)]):
        assert not torch.allclose(gpt(idx)[0], plain)
    torch.testing.assert_close(gpt(idx)[0], plain)


# ---------------------------------------------------------------------------------------------- losses


def test_repeat_losses_split_the_positions_as_documented():
    model = _model()
    idx = repeated_tokens(3, 5, 11, torch.Generator().manual_seed(2))
    logits = model(idx)
    per = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), idx[:, 1:], reduction="none")
    first, second = repeat_losses(model.train(), idx, 5)
    assert model.training, "the mode is left as it was"
    assert first == pytest.approx(per[:, :4].mean().item(), rel=1e-5)  # targets 1 .. 4
    assert second == pytest.approx(per[:, 5:].mean().item(), rel=1e-5)  # targets 6 .. 9


# ---------------------------------------------------------------------------------------------- ablation


def _merged(attn, x, mask):
    """The layer's output on x and what its out_proj read: the heads side by side, (B, T, C) each."""
    seen = []
    hook = attn.out_proj.register_forward_hook(lambda m, args, out: seen.append(args[0].detach().clone()))
    out = attn(x, mask)
    hook.remove()
    return out, seen[0]  # a forward hook sees the input as the pre-hooks left it


@pytest.mark.parametrize("layer,head", [(0, 0), (0, 2), (1, 1)])
def test_ablation_zeroes_exactly_one_head(layer, head):
    model = _model()
    attn = attention_layers(model)[layer]
    D = attn.head_dim
    x = torch.randn(2, 10, SMALL.embed_dim, generator=torch.Generator().manual_seed(layer + head))
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    plain, before = _merged(attn, x, mask)
    with ablate_heads(model, [(layer, head)]):
        ablated, after = _merged(attn, x, mask)
    own = slice(head * D, (head + 1) * D)
    assert (after[..., own] == 0).all() and before[..., own].abs().min() > 0
    others = torch.ones(SMALL.embed_dim, dtype=torch.bool)
    others[own] = False
    torch.testing.assert_close(after[..., others], before[..., others], rtol=0, atol=0)  # the others untouched
    share = before[..., own] @ attn.out_proj.weight[:, own].T  # (B, T, C): head h's term of the output
    torch.testing.assert_close(ablated, plain - share)  # out_proj is linear: exactly that term goes


def test_ablating_one_layer_leaves_earlier_layers_alone():
    model = _model()
    idx = repeated_tokens(2, 5, 11, torch.Generator().manual_seed(4))
    first = attention_layers(model)[0]
    x0 = model.norms[0](model.pos_emb(model.tok_emb(idx)))
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    plain, _ = _merged(first, x0, mask)
    with ablate_heads(model, [(1, 2)]):
        same, _ = _merged(first, x0, mask)
        assert not torch.allclose(model(idx), _model()(idx))  # the model's output does change
    torch.testing.assert_close(same, plain, rtol=0, atol=0)


def test_hooks_are_removed_after_the_block_even_after_an_error():
    model = _model()
    idx = repeated_tokens(1, 5, 11, torch.Generator().manual_seed(0))
    plain = model(idx)
    with pytest.raises(RuntimeError, match="inside"):
        with ablate_heads(model, [(0, 1), (1, 0)]):
            assert not torch.allclose(model(idx), plain)
            raise RuntimeError("inside")
    torch.testing.assert_close(model(idx), plain)
    assert all(not a.out_proj._forward_pre_hooks for a in attention_layers(model))


def test_ablation_losses_table_matches_one_ablation_at_a_time():
    model = _model()
    idx = repeated_tokens(2, 5, 11, torch.Generator().manual_seed(5))
    table = ablation_losses(model, idx, 5)
    assert table.shape == (2, 3)
    with ablate_heads(model, [(1, 2)]):
        assert table[1, 2].item() == pytest.approx(repeat_losses(model, idx, 5)[1], rel=1e-6)


def test_residual_stream_is_what_each_layer_reads():
    model = _model()
    idx = repeated_tokens(2, 5, 11, torch.Generator().manual_seed(6))
    read = []
    hooks = [n.register_forward_hook(lambda m, args, out: read.append(args[0])) for n in model.norms]
    model(idx)
    for h in hooks:
        h.remove()
    for layer in range(SMALL.num_layers):
        torch.testing.assert_close(residual_stream(model, idx, layer), read[layer])


def test_key_query_ablation_intact_scores_are_the_models_and_nothing_ablated_changes_nothing():
    model = _model()
    idx = repeated_tokens(4, 5, 11, torch.Generator().manual_seed(7))
    _, ind = head_scores(model, idx, 5)
    s = key_query_ablation(model, idx, 5, [], layer=1)
    for name in ("intact", "keys", "queries"):
        torch.testing.assert_close(s[name], ind[1])
    s = key_query_ablation(model, idx, 5, [(0, 0), (0, 1), (0, 2)], layer=1)
    with ablate_heads(model, [(0, 0), (0, 1), (0, 2)]):
        x = residual_stream(model, idx, 1)
    torch.testing.assert_close(x, model.pos_emb(model.tok_emb(idx)) + model.attns[0].out_proj.bias)
    assert not torch.allclose(s["keys"], s["intact"]) and not torch.allclose(s["queries"], s["intact"])


# ---------------------------------------------------------------------------------------------- training


TRAINING = dict(max_steps=6, batch_size=4, eval_interval=3, seed=1)


@pytest.fixture(scope="module")
def trained():
    """SMALL trained for 6 steps (records at 0, 3 and 6), and the events its callback received."""
    events = []
    with one_cpu_thread():
        model, history = train_induction(SMALL, **TRAINING, callback=events.append)
    return model, history, events


def test_training_is_seeded_reports_progress_and_leaves_the_global_random_state_alone(trained):
    a, hist_a, events = trained
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    b, hist_b = train_induction(SMALL, **TRAINING)
    torch.testing.assert_close(torch.rand(3), expected)
    assert [h["step"] for h in hist_a] == [0, 3, 6] and [e["step"] for e in events] == [0, 3, 6]
    assert hist_a == hist_b
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not a.training


def test_save_and_load_round_trip(tmp_path, trained):
    model, history, _ = trained
    path = tmp_path / "m.pt"
    save_induction_model(path, model, history, {"seed": 0})
    loaded, state = load_induction_model(path)
    assert loaded.config == SMALL and state["history"] == history and state["provenance"] == {"seed": 0}
    idx = repeated_tokens(1, 5, 11, torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded(idx), model(idx))


# ---------------------------------------------------------------------------------------------- errors


def enter(context) -> None:
    with context:
        pass


def tokens(N: int = 5) -> torch.Tensor:
    return repeated_tokens(1, N, 11, torch.Generator())  # (1, 2N)


REFUSALS = [  # (the call, given tmp_path; the exception; what its message must say)
    (lambda tmp: InductionConfig(embed_dim=10, num_heads=3), ValueError,
     r"embed_dim \(10\) must be divisible by num_heads \(3\)"),
    (lambda tmp: InductionConfig(seq_len=0), ValueError, "seq_len must be at least 1, got 0"),
    (lambda tmp: InductionConfig(vocab_size=2.0), TypeError, "vocab_size must be an int, got float"),
    (lambda tmp: AttentionOnlyTransformer({}), TypeError, "takes an InductionConfig, got dict"),
    (lambda tmp: _model()(torch.zeros(1, 11, dtype=torch.long)), ValueError,
     "position 10 is beyond context_length = 10"),
    (lambda tmp: _model()(torch.zeros(1, 4)), TypeError, "integer token ids"),
    (lambda tmp: repeated_tokens(1, 5, 11, torch.Generator(), min_len=6), ValueError,
     r"min_len must be in \[1, 5\], got 6"),
    # a seed where the generator goes: torch's own message named randint()
    (lambda tmp: repeated_tokens(1, 5, 11, 0), TypeError, r"generator must be a torch.Generator .*got int"),
    (lambda tmp: repeat_losses(_model(), torch.zeros(1, 8, dtype=torch.long), 5), ValueError,
     r"tokens must have 2 \* seq_len = 10 positions"),
    # the message was about `weights`, which the caller never passed
    (lambda tmp: head_scores(_model(), tokens(), 4), ValueError,
     r"tokens must have 2 \* seq_len = 8 positions \(two repeats\), got \(1, 10\)"),
    (lambda tmp: key_query_ablation(_model(), tokens(), 6, [(0, 0)], layer=1), ValueError,
     r"tokens must have 2 \* seq_len = 12 positions \(two repeats\), got \(1, 10\)"),
    (lambda tmp: previous_token_score(torch.ones(1, 1, 2, 3)), ValueError,
     r"weights must have shape \(B, H, T, T\), got \(1, 1, 2, 3\)"),
    (lambda tmp: induction_score([[1.0]], 2), TypeError, "weights must be a torch.Tensor, got list"),
    (lambda tmp: previous_token_score(torch.ones(1, 1, 3, 3, dtype=torch.long)), TypeError,
     "weights must be a floating-point tensor, got dtype torch.int64"),
    (lambda tmp: induction_score(torch.ones(1, 1, 6, 6), 4), ValueError,
     r"weights must cover 2 \* seq_len = 8 positions, got shape \(1, 1, 6, 6\)"),
    (lambda tmp: previous_token_score(torch.ones(1, 1, 1, 1)), ValueError, "T >= 2 positions"),
    # an empty batch or no head: a mean over nothing would be nan
    *[(lambda tmp, shape=shape, score=score: score(torch.ones(shape)), ValueError,
       r"weights must hold at least one sequence and one head, got shape")
      for shape in ((0, 2, 6, 6), (3, 0, 6, 6)) for score in (previous_token_score, lambda w: induction_score(w, 3))],
    (lambda tmp: enter(ablate_heads(_model(), [(0, 3)])), ValueError, r"head must be in \[0, 2\], got 3"),
    (lambda tmp: enter(ablate_heads(_model(), [(2, 0)])), ValueError, r"layer must be in \[0, 1\], got 2"),
    (lambda tmp: enter(ablate_heads(_model(), [1])), TypeError, r"heads must be \(layer, head\) pairs, got 1"),
    (lambda tmp: attention_layers(torch.nn.Linear(2, 2)), TypeError, "holds no course_utils MultiHeadAttention"),
    (lambda tmp: train_induction(SMALL, max_steps=1, callback=3), TypeError, "callback must be a function"),
    (lambda tmp: key_query_ablation(_model(), tokens(), 5, [(1, 0)], layer=1), ValueError,
     "heads must sit in layers before layer 1"),
    (lambda tmp: residual_stream(_model(), tokens(), 2), ValueError, r"layer must be in \[0, 1\], got 2"),
    # an AttributeError before
    (lambda tmp: residual_stream(GPT(GPTConfig.preset("tiny", vocab_size=11)), tokens(), 0), TypeError,
     "model must be an AttentionOnlyTransformer, got GPT"),
    (lambda tmp: direct_logit_effect(GPT(GPTConfig(vocab_size=11, context_length=10, embed_dim=12, num_heads=3,
                                                   num_layers=1)), tokens(), 5, 0), TypeError,
     "model must be an AttentionOnlyTransformer, got GPT"),
    (lambda tmp: ov_circuit(_model(), 2, 0), ValueError, "layer must be"),
    # N = 1: no query of the second repeat is followed by a token
    (lambda tmp: direct_logit_effect(_model(), repeated_tokens(2, 1, 11, torch.Generator()), 1, 1), ValueError,
     "seq_len must be at least 2"),
    (lambda tmp: heads_above(torch.rand(4), 0.3), ValueError,
     r"scores must have at least 2 dimensions, got shape \(4,\)"),
    (lambda tmp: heads_above(torch.ones(2, 4, dtype=torch.long), 0.3), ValueError,
     r"scores must be a floating-point \(L, H\) tensor, got torch.int64 \(2, 4\)"),
    (lambda tmp: heads_above(torch.rand(2, 4), -1), ValueError, r"threshold must be in \[0, 1\), got -1"),
    # no score in [0, 1] is above 1.5: the answer would always be empty; 40: a percentage
    (lambda tmp: heads_above(torch.rand(2, 4), 1.5), ValueError, r"threshold must be in \[0, 1\), got 1.5"),
    (lambda tmp: heads_above(torch.rand(2, 4), 40), ValueError, r"threshold must be in \[0, 1\), got 40"),
    (lambda tmp: heads_above(torch.tensor([[0.5, float("nan")]]), 0.3), ValueError,
     r"scores must be in \[0, 1\] \(a share of attention weight\), got nan"),
    # ablation losses in nats, say
    (lambda tmp: heads_above(torch.tensor([[0.5, 2.5]]), 0.3), ValueError,
     r"scores must be in \[0, 1\] \(a share of attention weight\), got 2.5"),
    (lambda tmp: heads_above(torch.zeros(0, 4), 0.3), ValueError, r"scores must not be empty, got shape \(0, 4\)"),
    (lambda tmp: copying_score(torch.ones(2, 3)), ValueError,
     r"circuit must be a square floating-point \(V, V\) matrix, got \(2, 3\)"),
    (lambda tmp: copying_score(torch.full((3, 3), float("nan"))), ValueError,
     "circuit must hold finite numbers, got nan"),
    (lambda tmp: copying_score(torch.eye(3) * float("inf")), ValueError, "circuit must hold finite numbers, got inf"),
    (lambda tmp: copying_score(torch.zeros(0, 0)), ValueError, r"circuit must not be empty, got shape \(0, 0\)"),
    (lambda tmp: copying_score(torch.zeros(4, 4)), ValueError,
     "circuit's eigenvalues are all 0: its copying score is undefined"),
    (lambda tmp: induction_explorer(_model(), tokens()[:, :-1]), ValueError,
     r"tokens must be a non-empty \(B, 2N\) tensor.*got shape \(1, 9\)"),
    # no sequence to draw: an IndexError from inside before
    *[(lambda tmp, draw=draw, empty=empty: draw(_model(), tokens()[empty]), ValueError,
       r"tokens must be a non-empty \(B, 2N\) tensor.*got shape")
      for draw in (lambda m, t: plot_induction_head(m, t, 0, 0), induction_explorer)
      for empty in (slice(0), (slice(None), slice(0)))],
    (lambda tmp: load_induction_model(tmp / "missing.pt"), FileNotFoundError, r"no checkpoint file at .*missing.pt"),
    (lambda tmp: load_induction_model(ROOT / "checkpoints" / "shakespeare_cpu.pt"), ValueError,
     r"shakespeare_cpu.pt is not a model written by .*: it holds a GPT exported"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, match", REFUSALS)
def test_bad_input_is_refused_with_a_message_naming_it(tmp_path, call, error, match):
    with pytest.raises(error, match=match):
        call(tmp_path)


def test_the_command_takes_no_abbreviation_and_its_help_names_no_old_flag(tmp_path, capsys):
    """--s once matched both --seed and a hidden --steps: no abbreviation is taken (allow_abbrev=False)."""
    with pytest.raises(SystemExit) as exit_info:
        induction.main([str(tmp_path / "m.pt"), "--s", "5"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --s 5" in err and "--steps" not in err
    with pytest.raises(SystemExit) as exit_info:
        induction.main(["--help"])
    usage = capsys.readouterr().out
    assert exit_info.value.code == 0 and "OUT" in usage and "--max-steps N" in usage and "--steps" not in usage


# ---------------------------------------------------------------------------------------------- review of #19


def test_loading_a_damaged_checkpoint_says_what_is_wrong(tmp_path):
    good = tmp_path / "good.pt"
    save_induction_model(good, _model(), [], {})
    raw = good.read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])  # a download cut short
    (tmp_path / "text.pt").write_text("not a checkpoint")
    torch.save({"format": "other"}, tmp_path / "other.pt")  # a foreign file
    for name in ("cut.pt", "text.pt", "other.pt"):
        with pytest.raises(ValueError, match=rf"{name} is not a model written by .*: damaged, cut short"):
            load_induction_model(tmp_path / name)
    state = torch.load(good, weights_only=True)
    del state["model"]["lm_head.weight"]
    torch.save(state, tmp_path / "weights.pt")
    with pytest.raises(ValueError, match=r"weights.pt is a damaged course-induction-1 checkpoint: .*lm_head.weight"):
        load_induction_model(tmp_path / "weights.pt")
    state = torch.load(good, weights_only=True)
    state["config"]["mlp"] = True
    torch.save(state, tmp_path / "config.pt")
    with pytest.raises(ValueError, match=r"config.pt is a damaged course-induction-1 checkpoint: TypeError: .*'mlp'"):
        load_induction_model(tmp_path / "config.pt")
    torch.save(_model().state_dict(), tmp_path / "bare.pt")
    with pytest.raises(ValueError, match=r"not a model written by save_induction_model \(course-induction-1\): dam"):
        load_induction_model(tmp_path / "bare.pt")


COMMAND_REFUSALS = [  # (OUT, given tmp_path, which holds the file "file"; more flags; the one line)
    ("{tmp}", [], "OUT {tmp} is a folder, expected a file name such as checkpoints/induction.pt"),
    ("{tmp}/new/", [], "OUT {tmp}/new/ is a folder, expected a file name such as checkpoints/induction.pt"),
    # before: "OUT . is a folder"
    ("", [], "OUT is empty (''), expected a file name such as checkpoints/induction.pt (an unset shell variable?)"),
    ("{tmp}/file/m.pt", [], "cannot be created: {tmp}/file is a file, not a folder; choose another OUT"),
    # before: 0 saved an untrained model; a traceback. The ranges are train_cli.check_numbers' (its messages and
    # bounds: tests/test_train.py); one row of each shows this command asks it
    ("{tmp}/m.pt", ["--max-steps", "0"], "--max-steps must be a whole number from 1 to 1,000,000,000 (a billion), "
     "got 0"),
    ("{tmp}/m.pt", ["--seed", "-1"], f"--seed must be a whole number from 0 to 2**63 - 1 ({2**63 - 1}), got -1"),
]  # fmt: skip


@pytest.mark.parametrize("out, flags, line", COMMAND_REFUSALS)
def test_the_command_refuses_a_bad_out_or_number_before_training_in_one_line(tmp_path, capsys, monkeypatch, out,
                                                                              flags, line):  # fmt: skip
    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking OUT")

    monkeypatch.setattr(induction, "train_induction", no_training)
    (tmp_path / "file").write_text("")
    argv = [out.format(tmp=tmp_path), "--max-steps", "1", *flags]
    assert induction.main(argv) == 2  # before: argparse's usage line too
    err = capsys.readouterr().err
    assert line.format(tmp=tmp_path) in err and err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize(
    "step, raised, code, line",
    [  # before: a traceback for each
        ("_check_out", KeyboardInterrupt, 130, "stopped before training; nothing was written to {out}"),
        ("save_induction_model", CheckpointError("could not write {out} (no space left): is its disk full?"), 1,
         "error: could not write {out} (no space left): is its disk full?"),
    ],
)  # fmt: skip
def test_a_stop_while_out_is_read_or_a_failed_save_is_one_line(tmp_path, capsys, monkeypatch, step, raised, code,
                                                              line):  # fmt: skip
    out = tmp_path / "m.pt"

    def fail(*args, **kwargs):
        raise type(raised)(str(raised).format(out=out)) if isinstance(raised, Exception) else raised

    monkeypatch.setattr(induction, step, fail)
    assert induction.main([str(out), "--max-steps", "1"]) == code
    assert capsys.readouterr().err == line.format(out=out) + "\n"


def test_exit_now_keeps_its_code_after_a_caught_keyboard_interrupt_under_dash_m(tmp_path):
    """CPython under -m turns sys.exit(143) into death by SIGINT once a KeyboardInterrupt passed through exec, even
    a caught one (dataclasses exec while torch imports): a stop's 130 or 143 then read as -2 (found by a tester)."""
    (tmp_path / "stopped.py").write_text(
        "from course_utils._start import exit_now\n"
        "try:\n    exec('raise KeyboardInterrupt')\nexcept KeyboardInterrupt:\n    pass\n"
        "exit_now(143)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "stopped"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert done.returncode == 143, done.stderr


def test_an_ablated_head_is_silent_even_when_its_output_is_not_finite():
    # The head was multiplied by 0, and inf * 0 = NaN: a diverged head, ablated, still poisoned the model.
    model = _model()
    attn = attention_layers(model)[0]
    C, D = SMALL.embed_dim, attn.head_dim
    with torch.no_grad():
        attn.qkv_proj.weight[2 * C + D : 2 * C + 2 * D] = float("inf")  # head 1's values: +-inf, then NaN
    idx = repeated_tokens(2, 5, 11, torch.Generator().manual_seed(0))
    assert not torch.isfinite(model(idx)).all()
    with ablate_heads(model, [(0, 1)]):
        assert torch.isfinite(model(idx)).all()


def test_the_command_refuses_another_model_or_another_run_and_rewrites_its_own(tmp_path, capsys):
    """Before: OUT was replaced whatever it held (a trained GPT included), without a question or a copy."""
    gpt = tmp_path / "gpt.pt"
    shutil.copy(ROOT / "checkpoints" / "shakespeare_cpu.pt", gpt)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for there, what in (
        (gpt, "a GPT exported by python -m course_utils.train --export"),
        (notes, "a file that is not a model of this course"),
    ):
        before = there.read_bytes()
        assert induction.main([str(there), "--max-steps", "2"]) == 2
        err = capsys.readouterr().err
        assert err == f"error: OUT {there} already holds {what}: choose another OUT, or move that file away first\n"
        assert there.read_bytes() == before
    out = tmp_path / "induction.pt"
    assert induction.main([str(tmp_path / "one.pt"), "--max-steps", "1"]) == 0
    assert "one.pt: 1 step, seed 0" in capsys.readouterr().out  # before: "1 steps"
    assert induction.main([str(out), "--max-steps", "2"]) == 0
    first = out.read_bytes()
    for argv, seed, steps in ((["--max-steps", "3"], 0, 3), (["--max-steps", "2", "--seed", "1"], 1, 2)):
        assert induction.main([str(out), *argv]) == 2
        assert capsys.readouterr().err == (
            f"error: OUT {out} already holds another run's induction model (--seed 0 --max-steps 2), not --seed {seed} "
            f"--max-steps {steps}: choose another OUT, or move it away\n"
        )
        assert out.read_bytes() == first
    assert induction.main([str(out), "--max-steps", "2"]) == 0  # the same command on its own file: allowed
    assert load_induction_model(out)[1]["provenance"]["steps"] == 2
    out.chmod(0o444)  # before: a 444 file of the same run was replaced and became 644; now refused, bytes and mode kept
    before = out.read_bytes()
    capsys.readouterr()
    assert induction.main([str(out), "--max-steps", "2"]) == 2
    assert capsys.readouterr().err == (
        f"error: OUT {str(out)!r} is read-only: it is not replaced (make it writable, or choose another OUT)\n"
    )
    assert out.read_bytes() == before and out.stat().st_mode & 0o777 == 0o444


def test_ctrl_c_or_sigterm_prints_one_line_and_the_command_that_trains_it_again(tmp_path):
    """Before: a KeyboardInterrupt traceback; SIGTERM printed nothing and the process died by the signal (-15). Now
    one line (the step, OUT unchanged, the command), exit code 130 or 143."""
    again = ["python", "-m", "course_utils.induction", str(tmp_path / "induction.pt"), "--max-steps", "100000"]
    with contextlib.chdir(ROOT):  # this interpreter, as the user can paste it where the command ran (not `python`)
        printed = pasteable("course_utils.induction", again[3:])
    for signum, code, how in ((signal.SIGINT, 130, ""), (signal.SIGTERM, 143, " by SIGTERM")):
        with subprocess.Popen([sys.executable, *again[1:]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as proc:  # fmt: skip
            first = proc.stdout.readline()  # the record at step 0: training has begun
            assert first.startswith("step 0 of 100000: loss "), first + proc.stderr.read()
            second = proc.stdout.readline()  # the record at step 25: steps have been taken, however loaded the machine
            assert second.startswith("step 25 of 100000: loss "), second + proc.stderr.read()
            proc.send_signal(signum)
            _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == code and len(stderr.splitlines()) == 1, stderr
        found = re.fullmatch(
            rf"stopped{how} at step (\d+) of 100000; nothing was written to {re.escape(again[3])} \(this command saves "
            rf"only at "
            rf"the end, a minute or two on a CPU\): {re.escape(printed)} trains it again from the start\n",
            stderr,
        )
        assert found and int(found[1]) > 0 and not Path(again[3]).exists(), stderr
    assert induction.main([*again[3:-1], "3"]) == 0
    assert load_induction_model(again[3])[1]["provenance"]["steps"] == 3


def test_the_documented_command_may_rewrite_the_shipped_file_and_no_other_run():
    """checkpoints/README.md's command, re-run, replaces checkpoints/induction.pt: it holds that same run."""
    shipped = ROOT / "checkpoints" / "induction.pt"
    induction._check_out(shipped, seed=0, max_steps=600)  # no error: the run that made it
    with pytest.raises(RunSetupError, match=r"another run's induction model \(--seed 0 --max-steps 600\)"):
        induction._check_out(shipped, seed=0, max_steps=300)


@pytest.mark.parametrize("existed", [False, True])
def test_ctrl_c_in_the_final_evaluation_names_the_last_step(tmp_path, capsys, monkeypatch, existed):
    """Before: 'stopped at step 0 of 2' when Ctrl+C came during the evaluation after the last step; and "OUT is
    unchanged" when there had been no file at OUT."""
    out = tmp_path / "m.pt"
    if existed:  # this command's own earlier run: it may be replaced
        assert induction.main([str(out), "--max-steps", "2"]) == 0
        capsys.readouterr()
    before = out.read_bytes() if existed else None
    real = induction.repeat_losses
    calls = []

    def ctrl_c_in_the_last(*args):
        calls.append(1)
        if len(calls) == 2:  # step 0's evaluation, then the final one
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(induction, "repeat_losses", ctrl_c_in_the_last)
    assert induction.main([str(out), "--max-steps", "2"]) == 130
    err = capsys.readouterr().err
    kept = f"{out} is unchanged" if existed else f"nothing was written to {out}"
    assert err.startswith(f"stopped at step 2 of 2; {kept} (this command") and len(err.splitlines()) == 1, err
    assert (out.read_bytes() if existed else None) == before


def test_a_signal_while_saving_waits_until_out_is_whole(tmp_path, capsys, monkeypatch):
    """Before: a traceback from os.fsync and exit -2, OUT possibly left as it was after a whole run. Now the save
    finishes, OUT loads, and the one line says so with 130 (143 for SIGTERM)."""

    real = induction.save_induction_model
    for signum, code, how in ((signal.SIGINT, 130, ""), (signal.SIGTERM, 143, " by SIGTERM")):

        def signalled_while_saving(*args, signum=signum):
            os.kill(os.getpid(), signum)  # the handler runs at once, in the middle of the save
            return real(*args)

        monkeypatch.setattr(induction, "save_induction_model", signalled_while_saving)
        out = tmp_path / f"m{code}.pt"
        assert induction.main([str(out), "--max-steps", "2"]) == code
        err = capsys.readouterr().err
        assert err == f"stopped{how} after step 2 of 2, while saving: {out} is saved whole\n"
        assert load_induction_model(out)[1]["provenance"]["steps"] == 2


def test_sigterm_stops_as_ctrl_c_does_a_second_signal_changes_nothing_and_the_handlers_come_back(capsys):
    """Before, Ctrl+C then SIGTERM 50 ms apart gave a traceback, or a second line, exit 143 and the wrong step."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals() as stop:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)  # handled at once: the call returns into the handler
        assert stop.report("at step 3") == 143
    assert capsys.readouterr().err == "stopped by SIGTERM at step 3\n"
    assert {signum: signal.getsignal(signum) for signum in before} == before
    try:
        with StopSignals(restore=False) as stop:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)  # while the first is reported: nothing raised
            assert stop.signal == signal.SIGINT and stop.report("at step 3") == 130
        assert all(signal.getsignal(signum) == signal.SIG_IGN for signum in before)  # until Python exits
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


# ---------------------------------------------------------------------------------------------- notebook 12's additions


def test_training_records_every_heads_scores_beside_the_losses(trained):
    model, history, _ = trained
    held_out = repeated_tokens(256, SMALL.seq_len, SMALL.vocab_size, torch.Generator().manual_seed(1))  # seed 1
    prev, ind = head_scores(model, held_out, SMALL.seq_len)
    last = history[-1]
    assert set(last) == {"step", "first", "second", "prev", "ind"}
    assert all(len(h["prev"]) == SMALL.num_layers and len(h["prev"][0]) == SMALL.num_heads for h in history)
    torch.testing.assert_close(torch.tensor(last["prev"]), prev)  # the record is the trained model's
    torch.testing.assert_close(torch.tensor(last["ind"]), ind)


def test_heads_above_lists_every_head_past_the_threshold_in_order():
    scores = torch.tensor([[0.49, 0.10, 0.45, 0.30], [0.0, 0.8, 0.2, 0.31]])
    assert heads_above(scores, 0.3) == [(0, 0), (0, 2), (1, 1), (1, 3)]  # 0.30 is not above 0.3
    assert heads_above(scores, 0.9) == []
    assert heads_above(scores, 0) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]  # every head above 0


def test_ablating_the_set_silences_every_head_in_it():
    model = _model()
    tokens = repeated_tokens(3, SMALL.seq_len, SMALL.vocab_size, torch.Generator().manual_seed(0))
    pairs = heads_above(torch.tensor([[0.5, 0.4, 0.0], [0.0, 0.0, 0.0]]), 0.3)
    with ablate_heads(model, pairs):
        both = model(tokens)
    with ablate_heads(model, [(0, 0)]), ablate_heads(model, [(0, 1)]):
        one_after_the_other = model(tokens)
    torch.testing.assert_close(both, one_after_the_other)


def test_ov_circuit_is_the_product_of_the_heads_matrices():
    model = _model()
    C, H = SMALL.embed_dim, SMALL.num_heads
    D = C // H
    layer, head = 1, 2
    attn = model.attns[layer]
    centre = torch.eye(C, dtype=torch.float64) - 1.0 / C
    expected = torch.zeros(SMALL.vocab_size, SMALL.vocab_size, dtype=torch.float64)
    for s in range(SMALL.vocab_size):  # token by token: embed, LayerNorm's linear part, value, output, unembed
        x = (model.tok_emb.weight[s].double() @ centre) * model.norms[layer].weight.double()
        v = attn.qkv_proj.weight[2 * C + head * D : 2 * C + (head + 1) * D].double() @ x
        o = attn.out_proj.weight[:, head * D : (head + 1) * D].double() @ v
        expected[s] = model.lm_head.weight.double() @ ((o @ centre) * model.ln_f.weight.double())
    torch.testing.assert_close(ov_circuit(model, layer, head), expected)


def test_copying_score_of_known_matrices():
    assert copying_score(torch.eye(5)) == pytest.approx(1.0)
    assert copying_score(-2 * torch.eye(5)) == pytest.approx(-1.0)
    q = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(0)))[0]
    mixed = q @ torch.diag(torch.tensor([3.0, 1.0, -1.0, -1.0, 0.0, 0.0])) @ q.T  # eigenvalues 3, 1, -1, -1, 0, 0
    assert copying_score(mixed) == pytest.approx(2 / 6, abs=1e-5)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # eigenvalues +-i: neither copies nor suppresses
    assert copying_score(rotation) == pytest.approx(0.0, abs=1e-6)


def test_head_logits_sum_back_to_the_models_logits():
    model = _model()
    tokens = repeated_tokens(2, SMALL.seq_len, SMALL.vocab_size, torch.Generator().manual_seed(1))
    T = tokens.shape[1]
    x = residual_stream(model, tokens, 1) + model.attns[1].out_proj.bias  # everything but layer 1's heads
    final = residual_stream(model, tokens, 1) + model.attns[1](
        model.norms[1](residual_stream(model, tokens, 1)), torch.ones(T, T, dtype=torch.bool).tril()
    )
    scale = (final.var(-1, unbiased=False, keepdim=True) + model.ln_f.eps).rsqrt()
    rest = model.lm_head((x - x.mean(-1, keepdim=True)) * scale * model.ln_f.weight + model.ln_f.bias)
    with torch.no_grad():
        torch.testing.assert_close(rest + head_logits(model, tokens, 1).sum(1), model(tokens), atol=1e-5, rtol=1e-5)
    assert head_logits(model, tokens, 0).shape == (2, SMALL.num_heads, T, SMALL.vocab_size)


def test_direct_logit_effect_reads_the_true_next_token_on_the_second_repeat():
    model = _model()
    N = SMALL.seq_len
    tokens = repeated_tokens(3, N, SMALL.vocab_size, torch.Generator().manual_seed(2))
    logits = head_logits(model, tokens, 1)  # (B, H, 2N, V)
    by_hand = torch.zeros(SMALL.num_heads)
    for b in range(3):
        for i in range(N, 2 * N - 1):
            by_hand += (logits[b, :, i, tokens[b, i + 1]] - logits[b, :, i].mean(-1)) / (3 * (N - 1))
    torch.testing.assert_close(direct_logit_effect(model, tokens, N, 1), by_hand)


def test_the_induction_explorer_draws_each_head_with_its_scores():
    model = _model()
    tokens = repeated_tokens(2, SMALL.seq_len, SMALL.vocab_size, torch.Generator().manual_seed(0))
    ex = induction_explorer(model, tokens)
    ex.control("layer").value, ex.control("head").value = 1, 2
    w = model.attention_maps(tokens[:1])[1][0, 2]
    prev = w.diagonal(offset=-1).mean().item()
    assert ex.caption.startswith(f"layer 1, head 2: previous-token score {prev:.2f}") and ex.renders == 3
    assert plot_induction_head(model, tokens, 0, 1).axes[0].get_title() == "layer 0, head 1"
