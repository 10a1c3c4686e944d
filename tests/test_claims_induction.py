"""Every measurable sentence notebook 11 says about induction heads, checked on the shipped checkpoint
(checkpoints/induction.pt, made by ``python -m course_utils.induction checkpoints/induction.pt``, seed 0) and on a
short re-run of the same training: the gap between the two repeats, the previous-token head and the induction
heads with their scores, the two-step circuit (the layer-0 head feeds the layer-1 heads' keys), what ablating each
head does, and what the Shakespeare GPT shows on repeated text (issue #19).

Numbers come from the models, never typed in as results; the thresholds are the ones the notebook states.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from course_utils.induction import (
    InductionConfig,
    ablate_heads,
    ablation_losses,
    head_scores,
    key_query_ablation,
    load_induction_model,
    repeat_losses,
    repeated_tokens,
    train_induction,
)
from course_utils.train import load_model

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT = ROOT / "checkpoints" / "induction.pt"
SHAKESPEARE = ROOT / "checkpoints" / "shakespeare_cpu.pt"
PREV_HEAD = (0, 1)  # the previous-token head of the shipped model: found by the scores below, not assumed
EVAL_SEED = 1000  # the notebook's evaluation batch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def shipped():
    torch.manual_seed(0)
    model, state = load_induction_model(CHECKPOINT)
    N, V = model.config.seq_len, model.config.vocab_size
    tokens = repeated_tokens(256, N, V, torch.Generator().manual_seed(EVAL_SEED))  # (256, 2N)
    return model, state, tokens


def _uniform_scores(N: int) -> tuple[float, float]:
    """What a head spreading its weight evenly over the keys it may see scores (previous-token, induction)."""
    T = 2 * N
    return sum(1 / (i + 1) for i in range(1, T)) / (T - 1), sum(1 / (i + 1) for i in range(N, T)) / N


def test_the_checkpoint_is_what_its_provenance_and_the_readme_say(shipped):
    model, state, _ = shipped
    prov = state["provenance"]
    assert model.config == InductionConfig()  # the defaults, as the command uses them
    assert prov["command"] == "python -m course_utils.induction checkpoints/induction.pt"
    assert (prov["seed"], prov["steps"]) == (0, 600)  # the record's "steps" is --max-steps: its key stays
    readme = (ROOT / "checkpoints" / "README.md").read_text()
    assert prov["command"] in readme and f"{prov['train_s']} s" in readme and prov["date"] in readme
    # the stored history belongs to these weights: its last record is the held-out loss of this model
    held_out = repeated_tokens(256, model.config.seq_len, model.config.vocab_size, torch.Generator().manual_seed(0))
    first, second = repeat_losses(model, held_out, model.config.seq_len)
    last = state["history"][-1]
    assert last["step"] == 600
    assert first == pytest.approx(last["first"], abs=1e-4) and second == pytest.approx(last["second"], abs=1e-4)


def test_the_loss_drops_suddenly_on_the_second_repeat_only(shipped):
    """'The second-repeat loss falls from above 4 to below 0.5 within 150 steps; the first repeat stays above
    ln V.'"""
    _, state, _ = shipped
    hist = state["history"]
    V = InductionConfig().vocab_size
    assert hist[0]["second"] > 4.0 and hist[-1]["second"] < 0.5
    above = max(h["step"] for h in hist if h["second"] > 3.5)
    below = min(h["step"] for h in hist if h["second"] < 0.5)
    assert 100 <= above and below - above <= 150, (above, below)
    assert all(h["first"] > math.log(V) - 0.1 for h in hist)


def test_second_repeat_loss_gap(shipped):
    """'First repeat above 4 nats (no better than guessing), second repeat below 0.5.'"""
    model, _, tokens = shipped
    first, second = repeat_losses(model, tokens, model.config.seq_len)
    assert first > 4.0 and second < 0.5 and first - second > 3.5
    V = model.config.vocab_size
    assert first > math.log(V), "'The first ends slightly above ln V'"


def test_scores_find_one_previous_token_head_and_induction_heads_in_layer_1(shipped):
    model, _, tokens = shipped
    N = model.config.seq_len
    prev, ind = head_scores(model, tokens, N)
    uniform_prev, uniform_ind = _uniform_scores(N)
    assert divmod(int(prev.argmax()), prev.shape[1]) == PREV_HEAD
    assert prev[PREV_HEAD].item() > 0.4 and prev[PREV_HEAD].item() > 5 * uniform_prev
    assert (ind[1] > 0.5).all() and (ind[1] > 10 * uniform_ind).all()  # every layer-1 head
    assert (ind[0] < 0.1).all() and (prev[1] < 0.1).all()  # and the layers do not swap jobs


def test_the_layer_0_head_feeds_the_layer_1_heads_through_their_keys(shipped):
    """'Ablating the previous-token head for the keys only: every induction score below 0.2; for the queries
    only: all above 0.5.' Ablating it outright does the same to the scores as the keys-only ablation."""
    model, _, tokens = shipped
    N = model.config.seq_len
    s = key_query_ablation(model, tokens, N, [PREV_HEAD], layer=1)
    assert (s["intact"] > 0.5).all() and (s["keys"] < 0.2).all() and (s["queries"] > 0.5).all()
    with ablate_heads(model, [PREV_HEAD]):
        _, ind = head_scores(model, tokens, N)
    assert (ind[1] < 0.2).all()


def test_ablation_table(shipped):
    """'Ablating the previous-token head sends the second-repeat loss back to within 10% of the first-repeat
    loss; any other layer-0 head leaves it below 0.5; any one layer-1 head alone below 1 (they share the work),
    all four together above the first-repeat loss's 90%.'"""
    model, _, tokens = shipped
    N = model.config.seq_len
    first, second = repeat_losses(model, tokens, N)
    table = ablation_losses(model, tokens, N)  # (L, H)
    assert table[PREV_HEAD].item() > 0.9 * first
    others = [table[0, h].item() for h in range(table.shape[1]) if (0, h) != PREV_HEAD]
    assert max(others) < 0.5
    assert (table[1] > second).all() and (table[1] < 1.0).all()
    with ablate_heads(model, [(1, h) for h in range(table.shape[1])]):
        assert repeat_losses(model, tokens, N)[1] > 0.9 * first


def test_the_shakespeare_gpt_shows_no_induction_on_repeated_text():
    """'The shipped Shakespeare model: no head above an induction score of 0.1, on random characters or on a
    repeated line, and its second-repeat loss is no lower than the first.'"""
    model, tokenizer, _ = load_model(SHAKESPEARE)
    model.eval()
    N = model.config.context_length // 2
    random_chars = repeated_tokens(64, N, model.config.vocab_size, torch.Generator().manual_seed(0))
    text = "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun."
    lines = torch.stack([tokenizer.encode(text[i : i + N]) for i in range(32)])  # (32, N)
    for tokens in (random_chars, torch.cat([lines, lines], dim=1)):
        prev, ind = head_scores(model, tokens, N)
        assert (ind < 0.1).all()
        first, second = repeat_losses(model, tokens, N)
        assert second > first - 0.05
    assert (prev > 0.3).any()  # it has heads that read the previous character


def test_the_same_code_still_makes_the_sudden_drop():
    """A shorter re-run of the checkpoint's command (same seed, 300 of its 600 steps): the drop has happened by
    step 300 here too. It is the same run up to floating-point rounding, which another CPU's kernels change and
    training may amplify, so only the claim is compared, with room for the drop to come 50 steps later."""
    _, history = train_induction(InductionConfig(), max_steps=300, seed=0, eval_interval=150)
    assert [h["step"] for h in history] == [0, 150, 300]
    assert history[0]["second"] > 4.0
    assert history[-1]["first"] > 4.0 and history[-1]["second"] < 1.5


def test_with_one_fixed_period_a_layer_0_head_copies_by_position_and_no_circuit_forms():
    """'If every training sequence repeats after exactly N tokens, a single layer-0 head reads position
    i - N + 1 by its position alone, and no induction head forms.' Trained with min_len = N (one period)."""
    config = InductionConfig()
    N = config.seq_len
    model, history = train_induction(config, max_steps=150, seed=0, eval_interval=150, min_len=N)
    assert history[-1]["second"] < 0.5  # it does learn to predict the second repeat
    tokens = repeated_tokens(64, N, config.vocab_size, torch.Generator().manual_seed(EVAL_SEED))
    prev, ind = head_scores(model, tokens, N)
    assert ind[0].max() > 0.5  # a layer-0 head looks N - 1 back: it cannot know the tokens, only positions
    assert (prev < 0.2).all() and (ind[1] < 0.1).all()  # no previous-token head, no layer-1 induction head
