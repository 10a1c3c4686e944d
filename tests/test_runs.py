"""Notebook 10's run sizes, the loss each should reach, and the unigram and bigram baselines."""

from __future__ import annotations

import math
import os
import tempfile

import pytest
import torch
from strategies import refusals_test

from course_utils.runs import (
    RUN_SIZES,
    SIZE_ENV,
    bigram_loss,
    check_expectations,
    choose_size,
    run_folder,
    unigram_loss,
)


def test_choose_size_follows_the_switch_then_the_device():
    assert choose_size("cuda", {}) == "gpu" and choose_size("cuda:1", {}) == "gpu"
    assert choose_size("cpu", {}) == "cpu" and choose_size("mps", {}) == "cpu"
    assert choose_size("cuda", {SIZE_ENV: "ci"}) == "ci"
    assert choose_size("cpu", {SIZE_ENV: "CI"}) == "ci" and choose_size("cuda", {SIZE_ENV: " Cpu "}) == "cpu"


def test_every_size_has_matching_model_and_training():
    for size in RUN_SIZES.values():
        assert size.train_config.batch_size >= 1 and size.model_config.context_length >= 8
    assert RUN_SIZES["gpu"].model_config.num_layers == 6 and RUN_SIZES["gpu"].model_config.embed_dim == 384


def test_unigram_loss_is_the_cross_entropy_of_smoothed_frequencies():
    train = torch.tensor([0, 0, 0, 1])  # counts 3, 1, 0 -> smoothed 4, 2, 1 out of 7
    val = torch.tensor([0, 2])
    expected = -(math.log(4 / 7) + math.log(1 / 7)) / 2
    assert unigram_loss(train, val, 3) == pytest.approx(expected)
    # no model that ignores the context beats the distribution of the data it is scored on
    torch.manual_seed(0)
    ids = torch.multinomial(torch.tensor([0.5, 0.3, 0.15, 0.05]), 20_000, replacement=True)
    p = torch.bincount(ids, minlength=4).double() / len(ids)
    entropy = float(-(p * p.log()).sum())
    assert unigram_loss(ids, ids, 4) == pytest.approx(entropy, abs=1e-3)
    assert unigram_loss(ids, ids, 4) < math.log(4)  # and it beats the uniform guess


def test_bigram_loss_is_the_cross_entropy_of_smoothed_pair_counts():
    train = torch.tensor([0, 1, 0, 1, 1])  # pairs 0->1 twice, 1->0 once, 1->1 once
    val = torch.tensor([0, 1, 1, 0, 0])  # pairs 0->1, 1->1, 1->0, 0->0
    # add-one rows: from 0: counts (0, 2) + 1 -> (1, 3) / 4; from 1: counts (1, 1) + 1 -> (2, 2) / 4
    expected = -(math.log(3 / 4) + math.log(2 / 4) + math.log(2 / 4) + math.log(1 / 4)) / 4
    assert bigram_loss(train, val, 2) == pytest.approx(expected)
    assert bigram_loss(train.int(), val.int(), 2) == pytest.approx(expected)


def test_bigram_beats_the_unigram_on_text_with_structure():
    torch.manual_seed(0)
    ids = torch.arange(5).repeat(400)  # 0 1 2 3 4 0 1 ...: each character fixes the next
    ids[torch.randint(0, len(ids), (100,))] = torch.randint(0, 5, (100,))
    assert bigram_loss(ids, ids, 5) < 0.5 * unigram_loss(ids, ids, 5)


def ids(*values) -> torch.Tensor:
    return torch.tensor(values)


REFUSALS = [  # (the call, the exception, what its message must match)
    (lambda: unigram_loss(ids(0.0, 1.0), ids(0), 2), ValueError,
     "train_ids must be a 1-D tensor of 1 or more integer ids"),
    (lambda: unigram_loss(ids(0, 1), ids([0]), 2), ValueError, "val_ids must be a 1-D tensor of 1 or more"),
    (lambda: unigram_loss(ids(0, 5), ids(0), 3), ValueError, r"train_ids holds ids outside 0 .. 2 \(vocab_size = 3\)"),
    (lambda: unigram_loss([0, 1], ids(0), 2), ValueError, "got list"),
    (lambda: bigram_loss(ids(0.0, 1.0), ids(0, 1), 2), ValueError,
     "train_ids must be a 1-D tensor of 2 or more integer ids"),
    (lambda: bigram_loss(ids(0, 1), ids(0), 2), ValueError,
     r"val_ids must be a 1-D tensor of 2 or more integer ids, .*\(1,\)"),
    (lambda: bigram_loss(ids(0, 5), ids(0, 1), 3), ValueError,
     r"train_ids holds ids outside 0 .. 2 \(vocab_size = 3\)"),
] + [
    (lambda loss=loss, train=train, V=V: loss(train, ids(0, 1, 1), V), error, words)
    for loss in (unigram_loss, bigram_loss)
    for train, V, error, words in [
        (ids(0, 1, 1), 2.0, TypeError, "vocab_size must be an int, got float"),  # was bincount's TypeError
        (ids(0, 1, 1), True, TypeError, "vocab_size must be an int, got bool"),  # was taken as 1
        (ids(0, 1, 1), 0, ValueError, "vocab_size must be at least 1, got 0"),  # was 'outside 0 .. -1'
        (ids(True, False, True), 2, ValueError, r"train_ids must be .* integer ids, got .*torch.bool"),
        (ids(0j, 1j, 1j), 2, ValueError, r"train_ids must be .* integer ids, got .*torch.complex64"),
    ]
] + [
    (lambda: check_expectations({"steps": 1}, "ci"), ValueError, "result lacks 'val_loss'"),
    (lambda: check_expectations({"val_loss": 1.0}, "ci"), ValueError, "result lacks 'steps'"),
    (lambda: check_expectations({"val_loss": 2.0, "steps": 1}, "Huge"), ValueError,
     r"size must be one of \['ci', 'cpu', 'gpu'\] \(any case\), got 'Huge'"),
    (lambda: check_expectations({"val_loss": 2.0, "steps": 1}, ["ci"]), TypeError,
     r"size must be a str, one of \['ci', 'cpu', 'gpu'\], got list"),  # was 'unhashable type'
    (lambda: check_expectations(None, "ci"), TypeError,  # what finished_run returns for an unfinished run
     r"result must be the dict that course_utils.train.train returns, got NoneType: None means the run has not fin"),
    (lambda: check_expectations('{"val_loss": 2.2, "steps": 1}', "ci"), TypeError,
     r"result must be the dict .* returns, got str$"),
    (lambda: check_expectations({"val_loss": "2.2", "steps": 1}, "ci"), TypeError,
     r"result\['val_loss'\] must be a number, got '2.2' \(str\)"),  # was '<=' not supported
    (lambda: check_expectations({"val_loss": None, "steps": 1}, "ci"), TypeError,
     r"result\['val_loss'\] must be a number, got None \(NoneType\)"),
    (lambda: check_expectations({"val_loss": torch.ones(2), "steps": 1}, "ci"), TypeError,
     r"result\['val_loss'\] must be a number, got tensor\(\[1., 1.\]\) \(Tensor\)"),
    (lambda: choose_size("cpu", {"COURSE_GPT_SIZE": "Huge"}), ValueError,
     r"COURSE_GPT_SIZE='Huge' is not a run size; choose one of \['ci', 'cpu', 'gpu'\]"),
    (lambda: run_folder("big", {}), ValueError, r"size must be one of \['ci', 'cpu', 'gpu'\], got 'big'"),
]  # fmt: skip
test_each_bad_input_gets_its_message = refusals_test(REFUSALS, regex=True)


LOW, HIGH = RUN_SIZES["ci"].expected_val_loss
WITHIN_OR_NOT = [  # (val_loss, within, what the message says)
    ((LOW + HIGH) / 2, True, "✓ val_loss"),
    (HIGH + 0.5, False, f"! outside the range: val_loss {HIGH + 0.5:.2f} after 100 steps"),
    (LOW - 0.5, False, f"! outside the range: val_loss {LOW - 0.5:.2f} after 100 steps"),
    # judged as printed, to 2 decimals: the verdict never contradicts the number shown
    (LOW - 0.0001, True, f"✓ val_loss {LOW:.2f} after"),
    (HIGH + 0.004, True, f"✓ val_loss {HIGH:.2f} after"),
    (LOW - 0.006, False, f"! outside the range: val_loss {LOW - 0.01:.2f} after"),
    (HIGH + 0.006, False, f"! outside the range: val_loss {HIGH + 0.01:.2f} after"),
    (torch.tensor(2.2), True, "✓ val_loss 2.20 after"),  # a 0-d tensor: within is still a bool
] + [
    (bad, False, f"! outside the range: val_loss {bad} after 100 steps (the run diverged: lower the learning rate)")
    for bad in (float("nan"), float("inf"), float("-inf"))
]


@pytest.mark.parametrize("val_loss, within, words", WITHIN_OR_NOT)
@pytest.mark.parametrize("size", ["ci", "CI", " Ci "])  # any case, as choose_size takes COURSE_GPT_SIZE
def test_check_expectations_within_and_outside(val_loss, within, words, size):
    ok, msg = check_expectations({"val_loss": val_loss, "steps": 100}, size)
    assert ok is within and words in msg, msg
    assert msg.startswith("Size 'ci': ")
    assert f"expected val_loss {LOW:.2f} to {HIGH:.2f} ({RUN_SIZES['ci'].source})" in msg


def test_every_size_says_what_loss_it_should_reach_and_where_the_figure_comes_from():
    for size in RUN_SIZES.values():
        assert size.source.startswith(("measured", "estimate")), size.source
        assert 0 < size.expected_val_loss[0] < size.expected_val_loss[1]
    gpu = RUN_SIZES["gpu"].source
    assert "nanoGPT's figure" in gpu and "not yet measured on this corpus" in gpu


def test_run_folder_follows_the_environment_and_each_test_process_trains_notebook_10_into_a_fresh_folder(tmp_path):
    """Under pytest (and each xdist worker) notebook 10's runs go to a temporary folder of this process,
    so no earlier or concurrent run in runs/ is resumed in its place."""
    assert run_folder("ci", {"COURSE_RUNS_DIR": str(tmp_path)}).parent == tmp_path
    runs = run_folder("ci", {}).parent
    assert runs.name == "runs" and (runs.parent / "course_utils").is_dir()
    assert os.environ.get("COURSE_RUNS_DIR_OWNER") == str(os.getpid())
    assert str(run_folder("ci")).startswith(tempfile.gettempdir())


def test_run_dir_is_named_after_notebook_10_and_leaves_other_folders_alone(tmp_path):
    env = {"COURSE_RUNS_DIR": str(tmp_path)}
    (tmp_path / "09_cpu").mkdir()  # a folder of an older version of the course is not moved or read
    assert run_folder("cpu", env) == tmp_path / "10_cpu" and not (tmp_path / "10_cpu").exists()
    assert (tmp_path / "09_cpu").is_dir()
