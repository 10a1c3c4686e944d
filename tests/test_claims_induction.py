"""Every measurable sentence notebook 12 says about induction heads, checked on the shipped checkpoint
(checkpoints/induction.pt, made by ``python -m course_utils.induction checkpoints/induction.pt``, seed 0) and on a
short re-run of the same training: the gap between the two repeats, the previous-token head and the induction
heads with their scores, the two-step circuit (the layer-0 head feeds the layer-1 heads' keys), what ablating each
head does, and what the Shakespeare GPT shows on repeated text (issue #19).

Numbers come from the models, never typed in as results; the thresholds are the ones the notebook states.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import nbformat
import pytest
import torch

from course_utils.induction import (
    AttentionOnlyTransformer,
    InductionConfig,
    ablate_heads,
    ablation_losses,
    copying_score,
    direct_logit_effect,
    head_scores,
    heads_above,
    key_query_ablation,
    load_induction_model,
    ov_circuit,
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
    assert heads_above(prev[:1], 0.3) == [PREV_HEAD]  # the set above the threshold is the one head here


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


# ---------------------------------------------------------------------------------------------- notebook 12 (issue #26)

SEEDS = ROOT / "benchmarks" / "results" / "induction_seeds_cpu.json"


def _fastest(changes: list[float]) -> int:
    return max(range(len(changes)), key=changes.__getitem__)


def test_the_loss_falls_fastest_in_the_same_25_steps_as_the_heads_form(shipped):
    """'The loss falls fastest in the same 25 steps in which the heads form (175 to 200): the layer-1 induction
    scores, which start at about 0.03 and have crept up to about 0.1-0.2, jump to about 0.5, and the top previous-token
    score (about 0.07 at the start) climbs fastest too, from about 0.2 to 0.3.' Read from the checkpoint's log."""
    _, state, _ = shipped
    hist = state["history"]
    second = [h["second"] for h in hist]
    ind = torch.tensor([h["ind"][1] for h in hist])  # (evaluations, H)
    prev = [max(h["prev"][0]) for h in hist]
    k = _fastest([a - b for a, b in zip(second, second[1:])])
    assert k == _fastest((ind[1:] - ind[:-1]).max(dim=1).values.tolist())
    assert k == _fastest([b - a for a, b in zip(prev, prev[1:])])
    assert (hist[k]["step"], hist[k + 1]["step"]) == (175, 200)
    assert ind[0].max() < 0.05 and 0.4 < ind[k + 1].mean() < 0.6 and abs(prev[0] - 0.07) < 0.02
    assert 0.09 <= ind[k].min() and ind[k].max() <= 0.2  # crept up to about 0.1-0.2 just before the jump
    assert abs(prev[k] - 0.2) < 0.03 and abs(prev[k + 1] - 0.3) < 0.04


def test_the_layer_1_heads_copy_and_the_untrained_ones_do_not(shipped):
    """'Every trained layer-1 head scores about 1 and sends most tokens to themselves; the untrained ones score near
    0; the layer-0 heads score high too.'"""
    model, _, _ = shipped
    V = model.config.vocab_size
    for head in range(model.config.num_heads):
        ov = ov_circuit(model, 1, head)
        assert copying_score(ov) > 0.95
        assert (ov.argmax(dim=1) == torch.arange(V)).sum() > V * 0.85
        assert copying_score(ov_circuit(model, 0, head)) > 0.75
    torch.manual_seed(1)
    untrained = AttentionOnlyTransformer(model.config)
    assert all(abs(copying_score(ov_circuit(untrained, l, h))) < 0.1 for l in range(2) for h in range(4))


def test_the_induction_heads_raise_the_copied_tokens_logit(shipped):
    """'The layer-1 heads push the copied token up by 1 to 3.5 nats each; the layer-0 heads write nothing the
    unembedding reads directly; without the previous-token head the right token's lift falls below 40% of what it
    was (to 35% for the head that keeps the most).' It said 'to a third or less' before, which head 0 (0.35) is not."""
    model, _, tokens = shipped
    N = model.config.seq_len
    lift = [direct_logit_effect(model, tokens, N, layer) for layer in range(2)]
    assert (lift[1] > 1).all() and (lift[1] < 3.5).all() and (lift[0].abs() < 0.1).all()
    with ablate_heads(model, [PREV_HEAD]):
        kept = direct_logit_effect(model, tokens, N, 1) / lift[1]  # (H,): the share of each head's lift left
    assert (kept < 0.4).all() and round(kept.max().item(), 2) == 0.35
    source = (ROOT / "course_source" / "12_induction_heads.py").read_text()
    assert "lift falls below 40% of what it was (to 35% for the head that keeps the most)" in source


def test_one_layer_cannot_copy_but_learns_the_bag_of_seen_tokens():
    """'One layer, 300 steps: the second repeat falls from ln V towards a guess spread over the distinct tokens seen
    (3.0 nats), above 2.5 nats, with no induction head (every score below 0.2); two layers are at 0.4 by then.'
    Read from section 8's printed lines in the committed notebook, which nbval compares with a fresh run of the same
    training (learner copy and solution, under two CPU kernels): it is not trained a third time here."""
    nb = nbformat.read(ROOT / "notebooks" / "12_induction_heads.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "one_first, one_second = " in c.source)
    text = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    numbers = re.search(r"second repeat ([\d.]+) nats \(two layers at step 300: ([\d.]+)\); ln V = ([\d.]+)", text)
    second, two_layers, ln_v = map(float, numbers.groups())
    bag = float(re.search(r"seen so far: ([\d.]+) nats", text).group(1))
    assert ln_v == round(math.log(InductionConfig().vocab_size), 1) and 2.9 < bag < 3.1 and two_layers <= 0.5
    assert 2.5 < second < ln_v - 0.5
    assert "no induction head (every score below 0.2): True" in text and "above 2.5 nats: True" in text


def test_the_five_seed_table_is_a_run_of_this_code_and_says_what_the_notebook_says(shipped):
    """'Every seed learns the task (0.2-0.3 nats); seed 0 has a single previous-token head; in the four others two or
    three layer-0 heads share the job, any of the four can be among them, and ablating the top one alone leaves the
    second repeat at 0.6 to 2.6 nats, far below the first repeat's 4.4; ablating the whole set sends it back above 4
    in every seed; four layer-1 induction heads in four seeds and three in seed 4.'"""
    _, state, _ = shipped
    record = json.loads(SEEDS.read_text())
    meta, runs = record["meta"], record["runs"]
    assert meta["command"].startswith(".venv/bin/python benchmarks/induction_seeds.py") and meta["date"]
    assert meta["machine"]["cpus"] and meta["steps"] == 600 and meta["threshold"] == 0.3
    assert [r["seed"] for r in runs] == [0, 1, 2, 3, 4] and all(r["train_s"] > 0 for r in runs)
    assert runs[0]["history"] == state["history"]  # seed 0 is the shipped run, record for record
    assert all(0.2 <= r["second"] < 0.3 and r["first"] > 4.35 for r in runs)
    assert [len(r["prev_heads"]) for r in runs] == [1, 3, 2, 3, 2]
    assert {h for r in runs for _, h in r["prev_heads"]} == {0, 1, 2, 3}
    for r in runs[1:]:
        assert 0.55 < r["second_top_prev_off"] < 2.65 and r["second_prev_set_off"] > 4.0
    assert runs[0]["second_top_prev_off"] == runs[0]["second_prev_set_off"] > 4.0
    assert [len(r["ind_heads"]) for r in runs] == [4, 4, 4, 4, 3]
    assert {r["last_step_above_3.5"] for r in runs} <= {150, 175} and max(
        r["first_step_below_0.5"] for r in runs
    ) <= 325
