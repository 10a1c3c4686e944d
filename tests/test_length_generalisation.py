"""Tests for course_utils.length_generalisation: the "last letter" data, the tiny model, the training loop."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest
import torch

from course_utils.length_generalisation import (
    POSITIONS,
    LengthGenConfig,
    TinyPositionalModel,
    accuracy_by_length,
    evaluate,
    make_batch,
    train_model,
)


def test_make_batch_answers_are_the_most_recent_letter():
    config = LengthGenConfig.tiny()
    tokens, targets = make_batch(config, 8, 20, torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (8, 20)
    for row, ans in zip(tokens.tolist(), targets.tolist()):
        last = None
        for tok, a in zip(row, ans):
            if tok < config.num_letters:
                last = tok
            assert a == last
    assert (tokens[:, 0] < config.num_letters).all()
    assert (tokens >= config.num_letters).any()  # there are fillers


def test_make_batch_is_reproducible():
    config = LengthGenConfig.tiny()
    a = make_batch(config, 4, 10, torch.Generator().manual_seed(3))
    b = make_batch(config, 4, 10, torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("positions", POSITIONS)
def test_every_kind_of_positions_gives_logits_and_runs_beyond_the_training_length(positions):
    config = LengthGenConfig.tiny()
    torch.manual_seed(0)
    model = TinyPositionalModel(config, positions)
    for B, T in ((2, config.train_length), (1, config.context_length)):
        assert model(torch.zeros(B, T, dtype=torch.long)).shape == (B, T, config.num_letters)


def test_training_is_deterministic_and_learns():
    config = dataclasses.replace(LengthGenConfig.tiny(), max_steps=60, eval_lengths=(8, 24))
    m1, losses1 = train_model(config, "alibi")
    _, losses2 = train_model(config, "alibi")
    assert losses1 == losses2
    assert sum(losses1[-10:]) < sum(losses1[:10])
    acc = accuracy_by_length(m1, config.eval_lengths)
    assert set(acc) == {8, 24} and all(0.0 <= a <= 1.0 for a in acc.values())
    loss, a = evaluate(m1, 8)
    assert loss > 0 and a == acc[8]


def test_config_names_are_train_configs():
    config = LengthGenConfig.tiny()
    assert (config.max_steps, config.learning_rate, config.eval_batch_size) == (400, 3e-3, 64)
    assert config.context_length == 128  # the longest of train_length and eval_lengths
    assert inspect.signature(LengthGenConfig).parameters["max_steps"].default == 400  # tab completion reads this


TINY = LengthGenConfig.tiny()
MODEL = TinyPositionalModel(TINY, "none")
MESSAGES = [  # (call; exception; what the message must say)
    (lambda: TinyPositionalModel(TINY, "learned")(torch.zeros(1, TINY.context_length + 1, dtype=torch.long)),
     ValueError, "beyond context_length"),  # the learned table stops at context_length
    (lambda: LengthGenConfig(embed_dim=12, num_heads=4), ValueError,
     r"embed_dim \(12\) must be divisible by 2 \* num_heads \(8\)"),
    (lambda: LengthGenConfig(embed_dim=10, num_heads=4), ValueError,
     r"^embed_dim \(10\) must be divisible by num_heads \(4\)$"),
    (lambda: LengthGenConfig(letter_prob=1.5), ValueError, "letter_prob must be in"),
    (lambda: LengthGenConfig(max_steps=0), ValueError, "max_steps must be at least 1, got 0"),
    (lambda: TinyPositionalModel(TINY, "xpos"), ValueError, "positions must be one of"),
    (lambda: LengthGenConfig(letter_prob="0.3"), TypeError,
     r"letter_prob must be a number in \(0, 1\), got '0.3' \(str\)"),
    (lambda: LengthGenConfig(learning_rate=-0.01), ValueError,
     "learning_rate must be a positive finite number, got -0.01"),
    (lambda: LengthGenConfig(learning_rate="3e-3"), TypeError,
     r"learning_rate must be a positive number, got '3e-3' \(str\)"),
    (lambda: LengthGenConfig(seed="0"), TypeError, "seed must be an int, got str"),
    (lambda: LengthGenConfig(max_steps=True), TypeError, "max_steps must be an int, got bool"),
    (lambda: LengthGenConfig(batch_size=32.0), TypeError, "batch_size must be an int, got float"),
    (lambda: LengthGenConfig(eval_lengths=(8.5, 16)), TypeError, r"eval_lengths\[0\] must be an int, got float"),
    (lambda: LengthGenConfig(eval_lengths=(8, 0)), ValueError, r"eval_lengths\[1\] must be at least 1, got 0"),
    (lambda: LengthGenConfig(eval_lengths=16), TypeError, "eval_lengths must be a tuple of positive ints, got int"),
    (lambda: TinyPositionalModel(TINY, "learned")(torch.tensor([[1, 16]])), ValueError,
     r"tokens must be token ids in \[0, vocab_size=16\), got 16 at position \(0, 1\)"),
    (lambda: TinyPositionalModel(TINY, "learned")(torch.tensor([[1.0, 2.0]])), TypeError,
     r"tokens must hold integer token ids \(torch.long\), got dtype torch.float32"),
    (lambda: train_model({"max_steps": 1}, "rope"), TypeError,
     r"config must be a LengthGenConfig \(LengthGenConfig.tiny\(\), say\), got dict"),
    (lambda: evaluate(MODEL, 0), ValueError, "T must be at least 1, got 0"),
    (lambda: make_batch(TINY, 4, 0, torch.Generator()), ValueError, "T must be at least 1, got 0"),
    (lambda: accuracy_by_length(MODEL, 16), TypeError,
     r"lengths must be a list of sequence lengths, e.g. \[16, 32\], got 16"),
    (lambda: evaluate(torch.nn.Linear(2, 2), 16), TypeError, "model must be a TinyPositionalModel"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, match", MESSAGES, ids=[re.sub(r"\\(.)", r"\1", m)[:60] for *_, m in MESSAGES])
def test_each_bad_input_gets_its_message(call, error, match):
    with pytest.raises(error, match=match):
        call()
