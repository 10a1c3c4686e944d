"""The training loop: it learns, resumes exactly, survives a kill, refuses damaged checkpoints, stops on NaN,
and trains the same under torchrun with two processes."""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import json
import math
import os
import re
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from strategies import practice_text

from course_utils import train as train_module
from course_utils import train_cli
from course_utils._start import pasteable
from course_utils.data import (
    CORPUS_SHA256,
    corpus_path,
    iter_eval_batches,
    min_characters,
    sha256_file,
    split_data,
)
from course_utils.gpt import GPT, GPTConfig
from course_utils.train import (
    CheckpointError,
    NonFiniteLossError,
    RunInterrupted,
    RunSetupError,
    TrainConfig,
    check_out_dir,
    evaluate,
    export_model,
    finished_run,
    learning_rate,
    load_checkpoint,
    load_model,
    loss_by_position,
    save_checkpoint,
    train,
)
from course_utils.train_cli import main

ROOT = Path(__file__).resolve().parent.parent
FAST = dict(
    batch_size=8,
    max_steps=20,
    warmup_steps=4,
    learning_rate=1e-2,
    min_lr=1e-3,
    log_interval=1,
    eval_interval=10,
    eval_batches=2,
    checkpoint_interval=5,
)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny models, one CPU thread


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    """About 12k characters of simple, learnable text (no network, nothing from outside the repository)."""
    path = tmp_path_factory.mktemp("data") / "text.txt"
    path.write_text(practice_text(400))
    return path


def run(text_file, out, **overrides):
    kwargs = {k: overrides.pop(k) for k in ("resume", "callback", "max_steps") if k in overrides}
    return train("tiny", text_file, out, TrainConfig.preset("tiny", **{**FAST, **overrides}), progress=False, **kwargs)


def cli_argv(text_file, out, *flags) -> list[str]:
    """The command line's arguments for a 3-step run of the tiny preset on ``text_file`` into ``out``."""
    steps = ["--max-steps", "3", "--eval-interval", "3", "--batch-size", "4"]
    return ["--data", str(text_file), "--out", str(out), *steps, *map(str, flags)]


# ----------------------------------------------------------------------------------------------
# Settings and schedule
# ----------------------------------------------------------------------------------------------


def test_train_config_presets_and_an_infinite_grad_clip():
    assert TrainConfig.preset("tiny", grad_clip=math.inf).grad_clip == math.inf  # clipping off
    assert TrainConfig.preset("gpu").batch_size == 64


def test_learning_rate_warms_up_then_follows_a_cosine():
    train_config = TrainConfig(max_steps=100, warmup_steps=10, learning_rate=1.0, min_lr=0.1)
    lrs = [learning_rate(s, train_config) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert learning_rate(55, train_config) == pytest.approx(0.55)  # half way down the cosine: the mean of max and min
    assert learning_rate(100, train_config) == pytest.approx(0.1) == learning_rate(500, train_config)


# ----------------------------------------------------------------------------------------------
# Training, evaluation, the command line
# ----------------------------------------------------------------------------------------------


def test_training_learns_and_reports(text_file, tmp_path):
    events = []
    result = run(text_file, tmp_path, max_steps=30, callback=events.append)
    history = result["history"]
    assert len(history) == 30 and result["steps"] == 30
    assert sum(history[-5:]) / 5 < sum(history[:5]) / 5 - 0.5, "the loss should fall well within 30 steps"
    assert {"val_loss", "train_loss", "steps", "tokens_per_s", "wall_s", "params", "device"} <= set(result)
    assert result["device"] == "cpu" and result["params"] == GPT(GPTConfig(**result["model_config"])).num_parameters()
    assert [e["step"] for e in events if e["kind"] == "eval"] == [10, 20, 30]
    assert [e["step"] for e in events if e["kind"] == "train"] == list(range(1, 31))
    assert json.loads((tmp_path / "summary.json").read_text())["val_loss"] == result["val_loss"]
    assert not list(tmp_path.glob("*.tmp")), "no temporary file left behind"


def test_val_loss_is_the_mean_over_the_whole_validation_split_and_the_checkpoint_holds_plain_data(text_file, tmp_path):
    result = run(text_file, tmp_path, max_steps=5)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["step"] == 5
    assert isinstance(state["model_config"], dict) and isinstance(state["train_config"], dict)
    assert set(state["rng"]) >= {"torch", "batch", "cuda"}
    assert "".join(state["tokenizer"]) == "".join(sorted(set(text_file.read_text())))
    assert "state" in state["optimizer"] and "tok_emb.weight" in state["model"]
    model, tokenizer, _ = load_model(tmp_path / "checkpoint.pt")
    _, val = split_data(tokenizer.encode(text_file.read_text()))
    total = 0.0
    with torch.no_grad():  # every target once, window by window, the slow way
        for x, y in iter_eval_batches(val, 1, model.config.context_length, drop_last=False):
            logits, _ = model(x)
            total += torch.nn.functional.cross_entropy(logits[0], y[0], reduction="sum").item()
    assert result["val_loss"] == pytest.approx(total / (len(val) - 1), rel=1e-5)
    by_evaluate = evaluate(model, val, model.config.context_length, batch_size=7)
    assert by_evaluate == pytest.approx(result["val_loss"], rel=1e-5)


# ----------------------------------------------------------------------------------------------
# Checkpoints and resuming
# ----------------------------------------------------------------------------------------------


class Killed(Exception):
    pass


def kill_at(step, error=Killed):
    """A callback that raises ``error`` at the train event of ``step`` (a kill, or Ctrl+C)."""

    def callback(event):
        if event["kind"] == "train" and event["step"] == step:
            raise error

    return callback


def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_checkpoint_gives_a_clear_error(text_file, tmp_path, damage, capsys):
    run(text_file, tmp_path, max_steps=5)
    path = tmp_path / "checkpoint.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a checkpoint" * 10)
    said = "truncated or corrupt" if damage == "truncate" else "not a file that torch.save writes (a text file, say)"
    with pytest.raises(CheckpointError, match=re.escape(said)):
        run(text_file, tmp_path, resume=True)
    code = main(["--preset", "tiny", "--data", str(text_file), "--out", str(tmp_path), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "poison, first, log_interval",
    [(float("nan"), 8, 1), (float("inf"), 7, 4)],  # log_interval 4: step 7's loss is seen when the window 5..8 closes
)
def test_a_non_finite_loss_stops_the_run_names_its_step_and_keeps_the_last_good_checkpoint(
    text_file, tmp_path, monkeypatch, poison, first, log_interval
):
    forward, calls = GPT.forward, {"train": 0}

    def poisoned(self, idx, targets=None, cache=None):
        logits, loss = forward(self, idx, targets, cache)
        if self.training:
            calls["train"] += 1
            if calls["train"] >= first:  # from step `first` on
                loss = loss * poison
        return logits, loss

    monkeypatch.setattr(GPT, "forward", poisoned)
    with pytest.raises(NonFiniteLossError) as stopped:
        run(text_file, tmp_path, log_interval=log_interval)
    lower = "a lower learning rate (--learning-rate N; learning_rate and min_lr in a TrainConfig)"
    assert str(stopped.value) == (  # before: "then --resume", which kept the rate the run diverged with
        f"the training loss became {poison} at step {first}; stopped: {tmp_path / 'checkpoint.pt'} holds step 5: "
        f"resume it with {lower}"
    )
    with pytest.raises(NonFiniteLossError, match=f"stopped: nothing is saved: train again with {re.escape(lower)}"):
        run(text_file, tmp_path / "fresh", log_interval=1, checkpoint_interval=100)
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    assert state["step"] == 5 and len(state["history"]) == 5  # nothing saved after the last good one
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert not (tmp_path / "summary.json").exists()
    monkeypatch.undo()  # the advice followed: resume from step 5 with a lower learning rate (before: a dead end,
    result = run(text_file, tmp_path, resume=True, learning_rate=1e-4, min_lr=1e-5)  # --resume kept the old rate)
    assert (result["steps_this_run"], result["train_config"]["learning_rate"]) == (FAST["max_steps"] - 5, 1e-4)


def test_a_nan_after_a_checkpoint_that_had_already_diverged_says_start_again(text_file, tmp_path, monkeypatch):
    """Before: "resume with a lower rate", from a checkpoint whose loss had already climbed a thousandfold."""
    forward, calls = GPT.forward, []

    def climbing(self, idx, targets=None, cache=None):  # finite and rising from step 2, NaN from step 8
        logits, loss = forward(self, idx, targets, cache)
        calls.extend([1] if self.training else [])
        factor = math.nan if len(calls) >= 8 else 10.0 ** min(len(calls) - 1, 3)
        return logits, loss * factor if self.training else loss

    monkeypatch.setattr(GPT, "forward", climbing)
    with pytest.raises(NonFiniteLossError, match=r"loss had risen to .*: start again with .* in another --out"):
        run(text_file, tmp_path)


# ----------------------------------------------------------------------------------------------
# Several processes (DistributedDataParallel, gloo on the CPU)
# ----------------------------------------------------------------------------------------------


def test_two_processes_train_like_one(text_file, tmp_path):
    """torchrun with 2 processes x 4 rows == 1 process x 8 rows: each process trains on its half of the same batch.

    The gradients are the same up to rounding (the mean of two half-batch means is the full-batch mean, but
    summed in another order), so the losses agree to about 1e-6; 1e-4 leaves room for Adam to amplify that
    over 12 steps on another machine.
    """
    same = dict(max_steps=12, batch_size=8, log_interval=1, eval_interval=12, checkpoint_interval=6)
    one = train("tiny", text_file, tmp_path / "one", TrainConfig.preset("tiny", **same), progress=False)
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in same.items()]
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node=2"]
    command = [*torchrun, "-m", "course_utils.train", "--data", str(text_file), "--out", str(tmp_path / "two"), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, "only process 0 prints"
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert two["world_size"] == 2
    assert two["history"][-1] < two["history"][0] - 0.5, "it learns"
    torch.testing.assert_close(torch.tensor(two["history"]), torch.tensor(one["history"]), atol=1e-4, rtol=0)
    assert two["val_loss"] == pytest.approx(one["val_loss"], abs=1e-4)


# ----------------------------------------------------------------------------------------------
# The GPU benchmark refuses to run without a GPU
# ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_gpu_benchmark_exits_with_a_clear_message_without_cuda(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_gpu.py"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "benchmarks" / "train_gpu.py"), run_name="__main__")
    assert exit_info.value.code == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# A trained model for learners: --export and load_model
# ----------------------------------------------------------------------------------------------


def test_export_writes_a_small_model_with_its_provenance(text_file, tmp_path, capsys):
    dest = tmp_path / "model.pt"
    assert main(cli_argv(text_file, tmp_path / "run", "--max-steps", 4, "--eval-interval", 4, "--export", dest)) == 0
    result = json.loads(capsys.readouterr().out.strip())
    assert result["export"] == str(dest)
    assert dest.stat().st_size < 0.5 * (tmp_path / "run" / "checkpoint.pt").stat().st_size, "no optimizer state"
    model, tokenizer, info = load_model(dest)
    prov = info["provenance"]
    assert prov["command"].startswith(f"python -m course_utils.train --data {text_file} --out")
    assert prov["device"] == "cpu" and prov["steps"] == 4 and prov["val_loss"] == result["val_loss"]
    assert prov["data"] == {"file": text_file.name, "sha256": sha256_file(text_file)}
    assert not model.training and tokenizer.decode(tokenizer.encode("to be")) == "to be"
    full, _, _ = load_model(tmp_path / "run" / "checkpoint.pt")  # a full checkpoint loads the same way
    x = tokenizer.encode("to be or not")[None]  # (1, T)
    torch.testing.assert_close(model(x)[0], full(x)[0])


def test_the_shipped_model_loads_with_its_provenance():
    """checkpoints/shakespeare_cpu.pt: made by the training command, and usable without the corpus."""
    model, tokenizer, info = load_model(ROOT / "checkpoints" / "shakespeare_cpu.pt")
    prov = info["provenance"]
    assert prov["command"].startswith("python -m course_utils.train --preset cpu --data datasets/shakespeare.txt")
    assert {"device", "date", "torch", "val_loss", "steps", "train_s", "data"} <= set(prov)
    assert prov["data"]["sha256"] == "255d8a99ce7f50bdc9a20f78118289c942dbf7c3702cb9d5cbdbb085b60dea9d"
    assert model.config == GPTConfig.preset("cpu", vocab_size=tokenizer.vocab_size)
    assert prov["params"] == model.num_parameters() and prov["val_loss"] < 1.85
    assert len(info["history"]) == prov["steps"] == 1000
    maps = model.attention_maps(tokenizer.encode("ROMEO:\nBut soft")[None])
    assert len(maps) == 3 and maps[0].shape == (1, 4, 15, 15)


def test_two_writers_of_one_checkpoint_do_not_collide(tmp_path):
    """Two runs saving into one folder at the same moment: each rename moves its own whole file, never the other's."""
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "checkpoint.pt"
    states = [{"format": "x", "writer": torch.full((50_000,), float(i))} for i in range(2)]

    def write(i):
        for _ in range(20):
            save_checkpoint(path, states[i])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, range(2)))  # before the fix: FileNotFoundError on a shared "checkpoint.pt.tmp"
    final = torch.load(path, weights_only=True)["writer"]
    assert final.unique().numel() == 1 and float(final[0]) in (0.0, 1.0), "one writer's whole state, not a mix"
    assert not list(tmp_path.glob("*.tmp"))


# ----------------------------------------------------------------------------------------------
# Everything is checked before the first step: one line with the fix, exit code 2, no traceback
# ----------------------------------------------------------------------------------------------


def cli(capsys, text_file, out, *flags):
    """Run the command line; return (exit code, stderr lines, the JSON result or None)."""
    code = main(cli_argv(text_file, out, *flags))
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    return code, captured.err.strip().splitlines(), json.loads(lines[-1]) if lines else None


def refused(capsys, text_file, out, *flags) -> str:
    """The one line the command printed when it refused to start (and checks that it trained nothing)."""
    code, err, result = cli(capsys, text_file, out, *flags)
    assert code == 2 and result is None, (code, err)
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


BIG = 10**23
CLI_REFUSALS = [  # (--out under tmp, more flags, what the one line says; {tmp}: tmp_path, which holds notes.txt,
    # held/checkpoint.pt/, a folder, and locked/, a folder this process may not write to)
    # Before: 3 steps trained, then FileExistsError from mkdir (a traceback), and the run was lost.
    ("notes.txt", [], "--out {tmp}/notes.txt is a file, expected a folder for checkpoint.pt and summary.json: choose "
     "another --out"),
    ("notes.txt/run", [], "cannot be created: {tmp}/notes.txt is a file, not a folder; choose another --out"),
    ("locked/run", [], "--out {tmp}/locked/run cannot be written here ({tmp}/locked is not writable): choose a folder "
     "you can write to, such as runs/NAME in the course folder"),
    ("run", ["--export", "{tmp}/notes.txt/model.pt"], "--export {tmp}/notes.txt/model.pt cannot be created: {tmp}/"
     "notes.txt is a file, not a folder; choose another --export"),
    ("run", ["--export", "{tmp}"], "--export {tmp} is a folder, expected a file name such as model.pt"),
    # Before: --export new/ wrote a file named new.
    ("run", ["--export", "{tmp}/new/"], "--export {tmp}/new/ is a folder, expected a file name such as model.pt"),
    # Before: --export equal to --out trained fully, then IsADirectoryError.
    ("run", ["--export", "{tmp}/run"], "--export {tmp}/run is inside --out {tmp}/run (the run's own folder"),
    ("run", ["--export", "{tmp}/run/m.pt"], "--export {tmp}/run/m.pt is inside --out {tmp}/run (the run's own folder"),
    # Before: trained, then "dest ... is a folder" (training had made the export's path a folder).
    ("run/x", ["--export", "{tmp}/run"], "--out {tmp}/run/x is inside --export {tmp}/run: --export names a file"),
    # Before: "give --export a file outside it, such as checkpoints/model.pt", the path just refused.
    ("", ["--export", "{tmp}/checkpoints/model.pt"], "(the run's own folder, for checkpoint.pt and summary.json): "
     "give --export a file outside it"),
    # Before: --seed 10**23 'Overflow when unpacking long long'; --max-steps 10**23 was accepted.
    ("run", ["--seed", BIG], f"--seed must be a whole number from 0 to 2**63 - 1 ({2**63 - 1}), got {BIG}"),
    ("run", ["--seed", -1], "--seed must be a whole number from 0 to 2**63 - 1"),
    ("run", ["--max-steps", BIG], f"--max-steps must be a whole number from 1 to 1,000,000,000 (a billion), got {BIG}"),
    ("run", ["--max-steps", 0], "--max-steps must be a whole number from 1 to 1,000,000,000 (a billion), got 0"),
    # Before: "eval_interval must be ...", the Python name of the flag the learner typed.
    ("run", ["--eval-interval", 0], "error: --eval-interval must be at least 1, got 0"),
    ("run", ["--batch-size", -2], "error: --batch-size must be at least 1, got -2"),
] + [  # Before: -1 was a RuntimeError traceback from torch.set_num_threads; 0 was silently ignored; 100000 crashed
    # PyTorch (exit 139, a segmentation fault).
    ("run", ["--threads", threads], f"--threads must be a number of CPU threads from 1 to {4 * (os.cpu_count() or 1)}"
     f" (4 per CPU here), got {threads}; leave")
    for threads in (-1, 0, 100000)
] + [  # Found before the first step: exit code 2 (1 is for a run that failed while training)
    ("run", ["--data", "{tmp}/nope.txt"], "no text file at {tmp}/nope.txt"),
] + [  # Before: --data '' was "error: . is a folder, expected a UTF-8 text file"; --export '' was ignored.
    ("run", ["--data", ""], "--data is empty (''), expected a UTF-8 text file such as datasets/shakespeare.txt (an "
     "unset shell variable?)"),
    ("run", ["--data", " "], "--data is empty (' '), expected a UTF-8 text file"),
    ("run", ["--export", ""], "--export is empty (''), expected a file name such as model.pt (an unset shell "
     "variable?)"),
] + [  # Before: torch's AssertionError "Torch not compiled with CUDA enabled" as a traceback. One line for any
    # device pick_device refuses (its messages, cuda and mps included: tests/test_environment.py)
    ("run", ["--device", "gpu"], "device 'gpu' is not a device name: use cpu, cuda, cuda:N, mps or auto"),
] + [  # Before: 'no checkpoint at .../checkpoint.pt: train a model first', though one was there, as a folder.
    ("held", ["--resume"], "{tmp}/held/checkpoint.pt is a folder, not a checkpoint: move it away, or name the file "
     "inside it"),
]  # fmt: skip


@pytest.mark.parametrize("out, flags, line", CLI_REFUSALS)
def test_the_command_line_refuses_before_training_in_one_line(text_file, tmp_path, capsys, monkeypatch, out, flags,
                                                              line):  # fmt: skip
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "held" / "checkpoint.pt").mkdir(parents=True)
    (tmp_path / "locked").mkdir()  # tests run as root, who may write anywhere: os.access says no for this one
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != tmp_path / "locked" and real_access(p, mode))
    flags = [str(flag).format(tmp=tmp_path) for flag in flags]
    assert line.format(tmp=tmp_path) in refused(capsys, text_file, tmp_path / out, *flags)
    assert (tmp_path / "notes.txt").read_text() == "mine" and not (tmp_path / "run").exists()


def test_a_save_that_fails_is_one_line_and_keeps_the_file_before(tmp_path, monkeypatch):
    """Before: a full disk gave torch's two-part traceback ending 'unexpected pos 22976 vs 22864'."""
    (tmp_path / "c.pt").write_bytes(b"the earlier one")

    def full_disk(state, f):
        open(f, "wb").write(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 22976 vs 22864")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=r"could not write .*c\.pt \(\[enforce fail .*\): is its disk full\?"):
        save_checkpoint(tmp_path / "c.pt", {})
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"] and (tmp_path / "c.pt").read_bytes() == b"the earlier one"


def test_a_finished_run_is_exported_only_for_its_own_preset_and_text(text_file, tmp_path, capsys):
    """--resume --export of a finished run exports without training (a stop during --export); before, it skipped
    --resume's checks and recorded the other --data in the provenance."""
    assert cli(capsys, text_file, tmp_path / "run")[0] == 0
    other = tmp_path / "other.txt"
    other.write_text(text_file.read_text()[::-1])
    for flags, words in ((["--data", str(other)], "was trained on a text with sha256"),
                         (["--preset", "cpu"], "is a run of another model")):  # fmt: skip
        line = refused(capsys, text_file, tmp_path / "run", "--resume", "--export", tmp_path / "m.pt", *flags)
        assert words in line and not (tmp_path / "m.pt").exists(), line
    code, err, result = cli(capsys, text_file, tmp_path / "run", "--resume", "--export", tmp_path / "m.pt")
    assert code == 0 and result["steps_this_run"] == 3 and load_model(tmp_path / "m.pt")[2]["provenance"]


def test_a_text_too_small_for_the_split_and_the_context_says_how_small(tmp_path, capsys):
    """Before: a ValueError from get_batch about tokens, or a split error, depending on the size."""
    small = tmp_path / "small.txt"
    small.write_text("hello world\n" * 10)
    line = refused(capsys, small, tmp_path / "run")
    needed = min_characters(GPTConfig.preset("tiny").context_length)
    assert f"{small} has 120 characters; training with context_length 32 needs at least {needed:,}" in line
    assert "use a longer text or a model with a shorter context" in line
    small.write_text("x" * needed)  # exactly enough: it trains
    assert cli(capsys, small, tmp_path / "run", "--batch-size", "2")[0] == 0


def test_resume_applies_the_flags_given_from_the_saved_step(text_file, tmp_path, capsys):
    """Before: the flags given with --resume were ignored with a notice, so a run that diverged could not go on
    with a lower learning rate; and before that, silently dropped."""
    assert cli(capsys, text_file, tmp_path)[0] == 0
    flags = "--resume --max-steps 5 --batch-size 8 --learning-rate 1e-4".split()
    code, err, result = cli(capsys, text_file, tmp_path, *flags)
    assert code == 0 and err == [] and result["steps"] == 5 and result["steps_this_run"] == 2
    assert (result["train_config"]["batch_size"], result["train_config"]["learning_rate"]) == (8, 1e-4)
    # min_lr follows --learning-rate (a tenth): before, a rate below the preset's min_lr (3e-4) was refused over it
    assert result["train_config"]["min_lr"] == pytest.approx(1e-5)
    assert main(["--data", str(text_file), "--out", str(tmp_path), "--resume", "--max-steps", "6"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["train_config"]["batch_size"] == 8, "no setting flag: the checkpoint's settings go on"


def _save_killed_midway(folder: Path) -> int:
    """A process that dies (os._exit, as a kill would) while writing a checkpoint; returns its process id."""
    code = (
        "import os, sys, torch; from course_utils.train import save_checkpoint\n"
        "torch.save = lambda state, f: (open(f, 'wb').write(b'half a checkpoint'), os._exit(9))\n"
        f"save_checkpoint({str(folder / 'checkpoint.pt')!r}, {{}})\n"
    )
    with subprocess.Popen([sys.executable, "-c", code], cwd=ROOT) as proc:
        assert proc.wait(timeout=120) == 9
    return proc.pid  # waited for: no process has this id now (until the system reuses it, which takes a while)


def test_a_killed_save_leaves_a_temporary_file_that_the_next_run_removes(text_file, tmp_path, capsys):
    """Before: every killed save left its checkpoint.pt.*.tmp (130 MB for the gpu size) for ever."""
    out = tmp_path / "run"
    out.mkdir()
    dead = _save_killed_midway(out)
    stale = list(out.glob(f".checkpoint.pt.{dead}-*.tmp"))
    assert len(stale) == 1 and stale[0].read_bytes() == b"half a checkpoint"
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            writing = out / f".checkpoint.pt.{live.pid}-abc123.tmp"  # another run saving into this folder right now
            writing.write_bytes(b"being written")
            code, err, _ = cli(capsys, text_file, out, "--resume")
            assert code == 0, err
            assert not stale[0].exists(), "the dead writer's file is removed"
            assert writing.read_bytes() == b"being written", "a live writer's file is kept"
        finally:
            live.kill()
    assert sorted(p.name for p in out.iterdir()) == sorted([".lock", "checkpoint.pt", "summary.json", writing.name])


def test_the_course_corpus_is_verified_whichever_path_reads_it(text_file, tmp_path, capsys):
    """A modified copy of the corpus given with --data is refused; before, it trained on it without a word."""
    real = corpus_path()
    base = real.read_bytes() if real.exists() else text_file.read_bytes() * 300  # the corpus, or a stand-in
    copy = tmp_path / "shakespeare.txt"
    copy.write_bytes(base.replace(b"ROMEO", b"ROMEA", 1) if real.exists() else base)
    line = refused(capsys, copy, tmp_path / "run")
    digest = sha256_file(copy)
    assert (
        f"{copy} is named like the course corpus but its sha256 is {digest[:16]}..., expected {CORPUS_SHA256[:16]}..."
    ) in line
    assert "Run `python -m course_tools.corpus fetch --force` to fetch it again" in line
    assert not (tmp_path / "run").exists()


def test_resume_from_python_starts_afresh_extends_a_finished_run_and_names_the_settings_it_keeps(text_file, tmp_path):
    result = run(text_file, tmp_path, max_steps=3, resume=True)  # no checkpoint: from step 0, said (a mistyped --out)
    assert result["notices"] == [f"--resume: no checkpoint in {tmp_path}, so a new run starts there"]
    assert result["steps_this_run"] == 3
    result = run(text_file, tmp_path, max_steps=4, resume=True, log_interval=2)  # another TrainConfig: it applies
    assert result["steps"] == 4 and result["steps_this_run"] == 1 and len(result["history"]) == 4
    assert result["train_config"]["log_interval"] == 2 and result["notices"] == []
    six = TrainConfig.preset("tiny", **{**FAST, "max_steps": 6})
    result = train("tiny", text_file, tmp_path, six, resume=True, progress=False)  # its max_steps too
    assert (result["steps"], result["steps_this_run"]) == (6, 2)
    with pytest.raises(RunSetupError, match=r"is at step 6 and max_steps is 6, so resuming would train nothing"):
        train("tiny", text_file, tmp_path, six, resume=True, progress=False)  # before: a no-op rewriting the summary
    (tmp_path / "summary.json").unlink()  # as if stopped during the final evaluation: the resume only writes it
    result = train("tiny", text_file, tmp_path, resume=True, progress=False)  # no TrainConfig: the checkpoint's
    assert (result["steps"], result["steps_this_run"]) == (6, 0)


def test_finished_run_loads_only_a_run_that_resume_would_refuse(text_file, tmp_path):
    assert finished_run(tmp_path / "none") is None  # no folder
    with pytest.raises(ZeroDivisionError):
        run(text_file, tmp_path / "cut", max_steps=3, checkpoint_interval=1,
            callback=lambda e: e["kind"] == "train" and e["step"] == 2 and 1 / 0)  # fmt: skip
    assert finished_run(tmp_path / "cut") is None  # stopped before its last step: a resume trains it
    done = run(text_file, tmp_path / "done", max_steps=3)
    loaded = finished_run(tmp_path / "done")
    assert loaded == json.loads(json.dumps(done))  # the result train returned, as summary.json holds it
    (tmp_path / "done" / "summary.json").unlink()  # as if stopped during the final evaluation
    assert finished_run(tmp_path / "done") is None


def test_notebook_10s_training_cell_run_again_loads_the_finished_run(text_file, tmp_path):
    """A learner who runs notebook 10 again from the top (or nbval running the learner copy and the solution in
    one process, one COURSE_RUNS_DIR) reaches the training cell with the run already finished: it must load."""
    from course_tools.build import parse_source

    cells = parse_source((ROOT / "course_source" / "10_tiny_gpt.py").read_text(encoding="utf-8"))
    (cell,) = [c["source"] for c in cells if c["cell_type"] == "code" and "result = " in c["source"]
               and "train(config" in c["source"]]  # fmt: skip
    cfg = TrainConfig.preset("tiny", **{**FAST, "max_steps": 3})
    names = dict(
        SIZE="ci", cfg=cfg, config="tiny", device="cpu", baseline=3.0, uniform=4.0, train=train,
        finished_run=finished_run, corpus_path=lambda: text_file, run_folder=lambda size: tmp_path / f"10_{size}",
        LiveLossPlot=lambda *args, **kwargs: None,
    )  # fmt: skip
    first, again = dict(names), dict(names)
    exec(cell, first)
    exec(cell, again)  # before: RunSetupError, "finished at step 3 (its summary.json is written)"
    assert first["result"]["steps_this_run"] == 3 and again["result"]["val_loss"] == first["result"]["val_loss"]


def test_a_post_norm_run_trains_resumes_and_refuses_a_pre_norm_resume(text_file, tmp_path):
    """norm_position travels in the checkpoint: a resume continues the post-norm model, exactly, and a
    pre-norm config is refused with a message that tells the two apart."""
    post = GPTConfig.preset("tiny", norm_position="post")
    settings = TrainConfig.preset("tiny", **{**FAST, "max_steps": 6})
    whole = train(post, text_file, tmp_path / "whole", settings, progress=False)
    train(post, text_file, tmp_path / "split", settings, progress=False, max_steps=5)
    resumed = train(post, text_file, tmp_path / "split", settings, progress=False, max_steps=6, resume=True)
    assert resumed["history"] == whole["history"] and resumed["model_config"]["norm_position"] == "post"
    assert whole["history"][-1] < whole["history"][0]
    model, _, _ = load_model(tmp_path / "whole" / "checkpoint.pt")
    assert model.config.norm_position == "post" and isinstance(model.ln_f, torch.nn.Identity)
    with pytest.raises(
        RunSetupError,
        match=r"is a run of another model \(norm_position 'post' there, 'pre' asked\): leave out --preset",
    ):
        train("tiny", text_file, tmp_path / "whole", settings, progress=False, resume=True)
    # before: a message about presets that never named attention ('the tiny preset ..., not a model of ...')
    with pytest.raises(RunSetupError, match=r"another model \(attention 'torch' there, 'course' asked\): leave out"):
        train(replace(post, attention="course"), text_file, tmp_path / "whole", settings, progress=False, resume=True)
    assert load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["step"] == 6


DEEP = functools.reduce(lambda inner, _: {"x": inner}, range(3000), {})  # deeper than json goes


def a_checkpoint(tmp: Path) -> Path:
    """What load_checkpoint accepts, enough for export_model's refusals."""
    return saved(tmp / "c.pt", {"format": "course_utils.train/1"})


def saved(path: Path, state: object) -> Path:
    """``path``, holding ``state`` (bytes as they are, anything else with torch.save)."""
    if isinstance(state, bytes):
        path.write_bytes(state)
    else:
        torch.save(state, path)
    return path


def tiny(**overrides) -> TrainConfig:
    return TrainConfig.preset("tiny", **overrides)


API_REFUSALS = [  # (the call, given tmp_path; the exception; what its message must say, {tmp} for tmp_path)
    (lambda tmp: tiny(batch_size=0), ValueError, "batch_size must be at least 1, got 0"),
    (lambda tmp: tiny(max_steps=2.5), TypeError, "max_steps must be an int, got float"),
    (lambda tmp: tiny(eval_interval=True), TypeError, "eval_interval must be an int, got bool"),
    (lambda tmp: tiny(warmup_steps=-1), ValueError, "warmup_steps must be at least 0, got -1"),
    (lambda tmp: tiny(learning_rate=0.0), ValueError, "learning_rate must be a positive finite number, got 0.0"),
    (lambda tmp: tiny(learning_rate="3e-3"), TypeError, r"learning_rate must be a positive number, got '3e-3' \(str\)"),
    (lambda tmp: tiny(min_lr=1.0), ValueError, r"min_lr must be in \[0, learning_rate = 0.003\]"),
    (lambda tmp: tiny(min_lr=None), TypeError, r"min_lr must be a number in \[0, learning_rate = 0.003\], got None"),
    (lambda tmp: tiny(beta2=1.0), ValueError, r"beta2 must be in \[0, 1\)"),
    (lambda tmp: tiny(weight_decay=-0.1), ValueError, "weight_decay must be a finite number >= 0, got -0.1"),
    (lambda tmp: tiny(grad_clip=0.0), ValueError, "grad_clip must be positive"),
    (lambda tmp: tiny(grad_clip="1"), TypeError, r"grad_clip must be a positive number, got '1' \(str\)"),
    (lambda tmp: tiny(seed="x"), TypeError, "seed must be an int, got str"),
    (lambda tmp: tiny(compile="yes"), TypeError,
     r"compile must be True, False or None \(on for CUDA only\), got 'yes' \(str\)"),
    (lambda tmp: tiny(fused_adamw=1), TypeError,
     r"fused_adamw must be True, False or None \(on for CUDA only\), got 1 \(int\)"),
    (lambda tmp: tiny(autocast="fp16"), ValueError,
     r"autocast must be one of \(None, 'bf16', 'off'\) \(bf16 on CUDA only\), got 'fp16'"),
    (lambda tmp: tiny(lr=1.0), ValueError, r"unknown TrainConfig field\(s\) \['lr'\]"),
    (lambda tmp: TrainConfig.preset("big"), ValueError, "unknown preset 'big'"),
    (lambda tmp: learning_rate(-1, tiny()), ValueError, "step must be at least 0, got -1"),
    (lambda tmp: learning_rate("5", tiny()), TypeError, "step must be an int, got str"),
    (lambda tmp: learning_rate(5, None), TypeError, "train_config must be a TrainConfig .* got NoneType"),
    (lambda tmp: train("tiny", tmp / "t.txt", tmp / "run", progress="no"), TypeError,
     r"progress must be True, False or None \(a bar when stderr is a terminal\), got 'no'"),
    (lambda tmp: finished_run(None), TypeError, "out_dir must be a str or os.PathLike, got NoneType"),
    (lambda tmp: export_model(a_checkpoint(tmp), tmp / "m.pt", {"seen": {1, 2}}), TypeError,
     "provenance must hold plain data .*, got Object of type set is not JSON serializable"),
    (lambda tmp: export_model(a_checkpoint(tmp), tmp / "m.pt", "me"), TypeError, "provenance must be a dict"),
    (lambda tmp: export_model(a_checkpoint(tmp), None, {}), TypeError, "dest must be a str or os.PathLike, got None"),
    # Before: "e.pt is not a checkpoint written by course_utils.train", though that module wrote it.
    (lambda tmp: load_checkpoint(saved(tmp / "e.pt", {"format": "course_utils.model/1"})), CheckpointError,
     r"e\.pt holds a GPT exported by python -m course_utils\.train --export, not a checkpoint written by"),
    # Before: " " wrote a file named ' '; "" said "dest  is a folder"; a deep provenance raised RecursionError.
    (lambda tmp: export_model(a_checkpoint(tmp), " ", {}), RunSetupError, r"dest is empty \(' '\), expected a file"),
    (lambda tmp: export_model(a_checkpoint(tmp), "", {}), RunSetupError, r"dest is empty \(''\), expected a file"),
    (lambda tmp: export_model(a_checkpoint(tmp), tmp / "m.pt", DEEP), TypeError, "provenance must hold plain data"),
    (lambda tmp: export_model(a_checkpoint(tmp), saved(tmp / "t.txt", b"x") / "m.pt", {}), RunSetupError,
     "dest .*t.txt/m.pt cannot be created: .*t.txt is a file, not a folder"),
    # Before: train() with a dict of settings raised dataclasses' TypeError from inside
    (lambda tmp: train("tiny", tmp / "t.txt", tmp / "run", {"batch_size": 8}), TypeError,
     r"train_config must be a TrainConfig \(TrainConfig.preset\('tiny', batch_size=8\), say\) or None, got dict"),
    (lambda tmp: evaluate(None, torch.zeros(20, dtype=torch.long), 8), TypeError,
     "model must be a torch.nn.Module .* got NoneType"),
    (lambda tmp: loss_by_position("model", torch.arange(10), 4), TypeError, "model must be a torch.nn.Module"),
    (lambda tmp: loss_by_position(torch.nn.Linear(2, 2), torch.arange(10), 0), ValueError, "context_length"),
    (lambda tmp: loss_by_position(GPT(GPTConfig.preset("tiny", vocab_size=7, context_length=8)),
                                  torch.randint(0, 7, (100,)), 16),
     ValueError, r"context_length 16 is longer than the model's context \(8\)"),  # was the GPT's: crop the input
    (lambda tmp: load_checkpoint(tmp / "none.pt"), FileNotFoundError, "no checkpoint at {tmp}/none.pt: train"),
    (lambda tmp: export_model(tmp / "none.pt", tmp / "m.pt", {}), FileNotFoundError, "no checkpoint at .*none.pt"),
    (lambda tmp: load_model(tmp / "none.pt"), FileNotFoundError, "no model file at .*none.pt: export one"),
    (lambda tmp: load_model(None), TypeError, "path must be a str or os.PathLike, got NoneType"),
    (lambda tmp: load_model(ROOT / "checkpoints" / "shakespeare_cpu.pt", device="gpu"), ValueError,
     "device 'gpu' is not a device name: use cpu, cuda"),
    (lambda tmp: load_model(saved(tmp / "bad.pt", b"\x00" * 100)), CheckpointError, "bad.pt: it is not a file that"),
    (lambda tmp: load_model(saved(tmp / "other.pt", {"format": "something else"})), CheckpointError,
     "other.pt is not a model written by course_utils.train"),
    (lambda tmp: load_checkpoint(saved(tmp / "c.pt", {"weights": torch.zeros(2)})), CheckpointError,
     "c.pt is not a checkpoint written by course_utils.train"),
    (lambda tmp: check_out_dir(None), TypeError, "out_dir must be a str or os.PathLike, got NoneType"),
    # `--out "$RUN"` with RUN unset trained and wrote into the current folder
    (lambda tmp: check_out_dir(""), ValueError, r"--out is empty \(''\), expected a folder for checkpoint.pt .+, or "
     r"\. for this one \(an unset shell variable\?\)"),
    (lambda tmp: check_out_dir("  "), ValueError, r"--out is empty \('  '\), expected a folder for checkpoint.pt"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, match", API_REFUSALS)
def test_python_api_checks_its_arguments_at_the_call(tmp_path, call, error, match):
    with pytest.raises(error, match=match.format(tmp=re.escape(str(tmp_path)))):
        call(tmp_path)


def test_a_callback_that_is_no_function_is_refused_before_any_work(tmp_path, text_file):
    with pytest.raises(TypeError, match="callback must be a function taking one event dict, or None, got int"):
        run(text_file, tmp_path / "run", callback=5)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(os.name == "nt", reason="the lock is POSIX's flock")
def test_a_second_run_into_an_out_in_use_is_refused_before_its_first_step(tmp_path, text_file):
    """Before, two runs into one --out both trained and the last to save kept only its own checkpoint."""
    import fcntl

    (tmp_path / "run").mkdir()
    with open(tmp_path / "run" / ".lock", "a") as other:  # what a run training there holds
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RunSetupError, match=r"--out .*run is in use by another run \(a command or a notebook"):
            run(text_file, tmp_path / "run")
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".lock"]  # nothing trained or saved
    run(text_file, tmp_path / "run")  # once it has ended; and the lock is let go at the end, a second run resumes
    assert run(text_file, tmp_path / "run", resume=True, max_steps=FAST["max_steps"] + 1)["steps"]


# ----------------------------------------------------------------------------------------------
# The loop's windows: log lines, the finite-loss guard, the time limit, the summary (issue #11)
# ----------------------------------------------------------------------------------------------


def train_windows(events: list[dict], result: dict) -> list[int]:
    """The steps of the train events, each checked to be the mean loss of its window, at its last step's rate."""
    train_events, begin = [e for e in events if e["kind"] == "train"], 0
    for event in train_events:
        window = result["history"][begin : event["step"]]
        assert event["loss"] == pytest.approx(sum(window) / len(window), rel=1e-12)
        assert event["lr"] == learning_rate(event["step"] - 1, TrainConfig(**result["train_config"]))
        assert event["tokens_per_s"] > 0
        begin = event["step"]
    return [e["step"] for e in train_events]


def test_each_log_event_is_the_mean_of_its_window_of_steps(text_file, tmp_path):
    """log_interval 3 and checkpoint_interval 5: a window closes at every multiple of either, and at the end."""
    events = []
    result = run(text_file, tmp_path, max_steps=11, log_interval=3, checkpoint_interval=5, callback=events.append)
    assert train_windows(events, result) == [3, 5, 6, 9, 10, 11] and len(result["history"]) == 11


INTERVALS = dict(max_steps=12, eval_interval=3, log_interval=2, checkpoint_interval=4)  # none a multiple of another


def test_every_multiple_of_eval_interval_is_evaluated_whatever_the_other_intervals(text_file, tmp_path, capsys):
    """Issue #17: eval 3, log 2, checkpoint 4 evaluated only at 6 and 12, the eval steps that were also log or
    checkpoint steps. Now 3, 6, 9 and 12: in the printed lines, the summary and the checkpoint."""
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in INTERVALS.items()]
    argv = ["--preset", "tiny", "--data", str(text_file), "--out", str(tmp_path), "--batch-size=8", "--progress"]
    assert main([*argv, *flags]) == 0
    err = capsys.readouterr().err  # the bar's redraws, and a line per evaluation written through it
    assert re.findall(r"\rstep (\d+): train \d+\.\d{4}, val \d+\.\d{4}\n", err) == ["3", "6", "9", "12"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [e[0] for e in summary["evals"]] == [3, 6, 9, 12]
    assert all(math.isfinite(loss) for e in summary["evals"] for loss in e[1:])
    assert [e[0] for e in load_checkpoint(tmp_path / "checkpoint.pt")["evals"]] == [3, 6, 9, 12]


def test_evaluations_off_the_log_steps_close_a_window_and_resume_exactly(text_file, tmp_path):
    """Through train(): an eval event at every multiple of 3; a train event (the mean of its window) at every
    multiple of 2, 3 or 4; killed at step 6 (last checkpoint: 4) and resumed, the same losses and evaluations."""
    events = []
    whole = run(text_file, tmp_path / "whole", callback=events.append, **INTERVALS)
    assert [e["step"] for e in events if e["kind"] == "eval"] == [3, 6, 9, 12]
    assert whole["evals"] == [[e["step"], e["train_loss"], e["val_loss"]] for e in events if e["kind"] == "eval"]
    assert train_windows(events, whole) == [2, 3, 4, 6, 8, 9, 10, 12]
    with pytest.raises(Killed):
        run(text_file, tmp_path / "split", callback=kill_at(6), **INTERVALS)
    state = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert state["step"] == 4 and [e[0] for e in state["evals"]] == [3]
    resumed = run(text_file, tmp_path / "split", resume=True, **INTERVALS)
    assert resumed["steps_this_run"] == 8
    assert resumed["history"] == whole["history"]
    assert resumed["evals"] == whole["evals"]
    assert resumed["val_loss"] == whole["val_loss"]


SUMMARY_KEYS = (
    "val_loss train_loss steps steps_this_run tokens_per_s train_s wall_s "
    "params flops_per_token device world_size compiled autocast fused_adamw notices "
    "checkpoint model_config train_config history evals"
).split()


def test_the_summary_has_every_key_in_its_order_and_its_figures_add_up(text_file, tmp_path):
    result = run(text_file, tmp_path, max_steps=6)
    assert list(result) == SUMMARY_KEYS
    assert json.loads((tmp_path / "summary.json").read_text()) == result
    tokens_per_step = FAST["batch_size"] * result["model_config"]["context_length"]
    assert result["world_size"] == 1
    assert result["tokens_per_s"] == pytest.approx(6 * tokens_per_step / result["train_s"], rel=1e-12)
    assert 0 < result["train_s"] <= result["wall_s"]
    assert result["checkpoint"] == str(tmp_path / "checkpoint.pt")


def test_the_loop_reads_top_to_bottom_in_three_labelled_phases():
    """House style (issue #11): one flat loop of about 40 lines, its phases labelled, set-up and summary beside it."""

    source = inspect.getsource(train_module._loop)  # train() holds the run, _loop its steps
    loop = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.For))  # inside Ctrl+C's try
    lines = source.splitlines()[loop.lineno - 1 : loop.end_lineno]
    comments = [line.strip() for line in lines if line.strip().startswith("# ")]
    phases = ["# forward, backward, update", "# time and log", "# evaluate and save"]
    first = [min(i for i, c in enumerate(comments) if c.startswith(p)) for p in phases]  # each phase is labelled ...
    assert first == sorted(first)  # ... in this order
    assert len(lines) <= 45

    def depth(node: ast.AST) -> int:
        blocks = (ast.If, ast.For, ast.While, ast.With, ast.Try)
        return max((depth(c) + isinstance(c, blocks) for c in ast.iter_child_nodes(node)), default=0)

    assert depth(loop) <= 2, "no block nested deeper than two levels inside the loop"


# ----------------------------------------------------------------------------------------------
# Commands that never hide a mistake or lose a file (issue #29: Ctrl+C, another model's file, silent no-ops)
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(text_file, tmp_path_factory) -> Path:
    """A finished run of 3 steps (its summary written), which each refusal below leaves as it is."""
    out = tmp_path_factory.mktemp("finished")
    assert main(cli_argv(text_file, out)) == 0
    return out


NOTHING = (
    "error: --resume: {out}/checkpoint.pt is at step 3 and max_steps is {steps}, so resuming would train nothing: "
    "give a max_steps above 3 (--max-steps on the command line, max_steps=N in train() from Python)"
)
RESUME_REFUSALS = [  # (flags, the one line; {out}: the finished run, {other}: another text, {sha}: the sha256 of each)
    ([], "error: --out {out} already holds a run (checkpoint.pt): add --resume to continue it, or choose another --out "
     "for a new run (delete the folder to start it over)"),
    (["--resume", "--preset", "cpu"], "error: --resume: {out}/checkpoint.pt is a run of another model (context_length "
     "32 there, 64 asked; embed_dim 32 there, 96 asked; num_layers 2 there, 3 asked; positions 'learned' there, "
     "'rope' asked): leave out --preset to continue that run, or choose another --out for a new one"),
    (["--resume", "--data", "{other}"], "error: --resume: {out}/checkpoint.pt was trained on a text with sha256 "
     "{sha}..., but --data has {other_sha}...: pass the same file to continue that run, or choose another --out for a "
     "new one"),
    # before: `--resume --max-steps N` at or below the saved step exited 0 having trained nothing
    (["--resume", "--max-steps", "3"], NOTHING.replace("{steps}", "3")),
    (["--resume", "--max-steps", "2"], NOTHING.replace("{steps}", "2")),
    # Before: applied, so only the evaluation batches changed and the curve jumped at the resume
    (["--resume", "--max-steps", "9", "--seed", "7"], "error: --resume: the run's seed is 1337, and it goes on from "
     "the random state its checkpoint holds: leave out --seed (the seed of the TrainConfig, from Python), or choose "
     "another --out for a new run"),
]  # fmt: skip


@pytest.mark.parametrize("flags, line", RESUME_REFUSALS)
def test_a_finished_run_is_refused_without_resume_with_another_model_or_text_or_a_step_already_done(
    text_file, finished, tmp_path, capsys, flags, line
):
    other = tmp_path / "other.txt"
    other.write_text(text_file.read_text() + "more words\n")
    before = (finished / "checkpoint.pt").read_bytes()
    flags = [flag.format(other=other) for flag in flags]
    shas = {"sha": sha256_file(text_file)[:16], "other_sha": sha256_file(other)[:16]}
    assert refused(capsys, text_file, finished, *flags) == line.format(out=finished, **shas)
    assert (finished / "checkpoint.pt").read_bytes() == before


def test_resuming_a_finished_run_from_python_is_refused(text_file, finished):
    with pytest.raises(RunSetupError, match=re.escape(NOTHING.format(out=finished, steps=3).removeprefix("error: "))):
        train("tiny", text_file, finished, resume=True, progress=False)  # before: a flag a caller cannot pass


OUT_OF_MEMORY = [  # what PyTorch raises when a batch does not fit: the CPU's allocator, CUDA's
    RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 102400000000 bytes. Error code 12 "
                 "(Cannot allocate memory)"),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 95.37 GiB. GPU 0 has a total capacity of 139 GiB"),
]  # fmt: skip


@pytest.mark.parametrize("error", OUT_OF_MEMORY, ids=["cpu", "cuda"])
def test_a_first_step_out_of_memory_is_one_line_naming_the_flags_to_lower(text_file, tmp_path, capsys, monkeypatch,
                                                                          error):  # fmt: skip
    """Before: `--batch-size 100000000` ended in a traceback (exit 1) from the first batch."""

    def too_big(self):
        raise error

    monkeypatch.setattr(train_module._Run, "batch", too_big)
    line = refused(capsys, text_file, tmp_path, "--batch-size", "100000000")
    assert line == (
        f"error: out of memory in the first step with batch_size 100000000 and context_length 32 ({error}): lower "
        "batch_size (--batch-size on the command line), or the context_length (a --preset with a shorter context)"
    )
    assert not (tmp_path / "checkpoint.pt").exists()


def test_out_of_memory_after_the_first_step_or_another_error_is_not_called_a_setup_problem(text_file, tmp_path,
                                                                                           monkeypatch):  # fmt: skip
    real, calls = train_module._Run.batch, []

    def fails(error, after):
        def batch(self):
            calls.append(1)
            if len(calls) > after:
                raise error
            return real(self)

        return batch

    for error, after in ((OUT_OF_MEMORY[0], 1), (RuntimeError("shape mismatch"), 0)):
        calls.clear()
        monkeypatch.setattr(train_module._Run, "batch", fails(error, after))
        with pytest.raises(RuntimeError) as raised:
            run(text_file, tmp_path / str(after))
        assert raised.value is error


def test_export_from_the_command_or_python_refuses_another_kind_of_model_and_replaces_an_export(
    text_file, tmp_path, capsys
):
    """Before: --export replaced whatever the file held (an induction model included) without a word."""
    from course_utils.induction import InductionConfig, save_induction_model, train_induction

    induction = tmp_path / "induction.pt"
    save_induction_model(induction, train_induction(InductionConfig(), max_steps=1)[0], [], {})
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert cli(capsys, text_file, tmp_path / "run")[0] == 0
    for there, what in (
        (induction, "an induction model (python -m course_utils.induction)"),
        (notes, "a file that is not a model of this course"),
        (tmp_path / "run" / "checkpoint.pt", "a training checkpoint (python -m course_utils.train --out)"),
    ):
        before = there.read_bytes()
        line = refused(capsys, text_file, tmp_path / "new", "--export", there)
        fix = "choose another --export, or move that file away first"
        assert line == f"error: --export {there} already holds {what}: {fix}"
        assert there.read_bytes() == before and not (tmp_path / "new").exists()
    shipped = tmp_path / "shakespeare_cpu.pt"
    shipped.write_bytes((ROOT / "checkpoints" / "shakespeare_cpu.pt").read_bytes())  # an export: replaced
    code, err, result = cli(capsys, text_file, tmp_path / "first", "--export", shipped)
    assert code == 0 and result["export"] == str(shipped) and load_model(shipped)[0].config.num_layers == 2
    said = [line for line in err if line.startswith(f"--export {shipped} holds a model of 1000 steps (python -m ")]
    assert len(said) == 1 and said[0].endswith("): this run will replace it"), err  # before training, not silently
    # from Python: before, export_model(checkpoint, checkpoint, ...) replaced the run's own checkpoint (its resume was
    # lost), and a folder gave an IsADirectoryError naming a temporary file
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    before = checkpoint.read_bytes()
    with pytest.raises(RunSetupError, match=r"dest .* already holds a training checkpoint .*: choose another dest"):
        export_model(checkpoint, checkpoint, {})
    with pytest.raises(RunSetupError, match=r"dest .* is a folder, expected a file name such as model\.pt"):
        export_model(checkpoint, tmp_path, {})
    assert checkpoint.read_bytes() == before
    export_model(checkpoint, tmp_path / "model.pt", {})
    export_model(checkpoint, tmp_path / "model.pt", {"again": True})  # an export is replaced
    assert load_model(tmp_path / "model.pt")[2]["provenance"] == {"again": True}
    (tmp_path / "model.pt").chmod(0o444)  # its owner protected it: not replaced, from Python as from the command
    with pytest.raises(RunSetupError, match=r"dest .*model\.pt' is read-only: it is not replaced"):
        export_model(checkpoint, tmp_path / "model.pt", {"third": True})


def test_ctrl_c_in_python_is_a_keyboard_interrupt_naming_the_step_and_what_the_checkpoint_holds(text_file, tmp_path):
    with pytest.raises(RunInterrupted) as stopped:  # a KeyboardInterrupt: a notebook's cell stops as it always did
        run(text_file, tmp_path, callback=kill_at(2, KeyboardInterrupt))
    assert isinstance(stopped.value, KeyboardInterrupt)
    assert (stopped.value.step, stopped.value.saved_step) == (2, None)  # checkpoint_interval 5: nothing saved yet
    with pytest.raises(RunInterrupted) as stopped:
        run(text_file, tmp_path, resume=True, callback=kill_at(7, KeyboardInterrupt))
    assert (stopped.value.step, stopped.value.saved_step) == (7, 5)
    assert str(stopped.value) == f"stopped at step 7; {tmp_path / 'checkpoint.pt'} holds step 5: resume=True goes on"
    assert stopped.value.checkpoint == tmp_path / "checkpoint.pt"
    ended = run(text_file, tmp_path, resume=True, max_steps=5)  # the run ends at its checkpoint, not an eval step
    assert ended["steps_this_run"] == 0 and [e[0] for e in ended["evals"]] == [5], "evaluated at step 5 to end it"


@pytest.mark.parametrize(
    "raised, line",
    [
        # before: "resume: ... --resume", with nothing to resume
        ("RunInterrupted", "stopped at step 2; nothing is saved yet; start again: {command}"),
        ("KeyboardInterrupt", "stopped before the first step or after the last; nothing is saved yet; start again: "
         "{command}"),
    ],
)  # fmt: skip
def test_ctrl_c_outside_a_checkpoint_says_what_is_kept(text_file, tmp_path, capsys, monkeypatch, raised, line):
    def interrupted(*args, **kwargs):
        raise RunInterrupted(2, tmp_path / "checkpoint.pt") if raised == "RunInterrupted" else KeyboardInterrupt

    monkeypatch.setattr(train_cli, "train", interrupted)
    code, err, result = cli(capsys, text_file, tmp_path)
    assert (code, result) == (130, None)
    assert err == [line.format(command=pasteable("course_utils.train", cli_argv(text_file, tmp_path)))]


@pytest.mark.skipif(not corpus_path().exists(), reason="needs the course corpus (python -m course_tools.corpus fetch)")
def test_the_documented_export_command_may_replace_the_shipped_model(tmp_path):
    """checkpoints/README.md's command, re-run, may replace checkpoints/shakespeare_cpu.pt (an export)."""
    from course_utils.train_cli import _check_export

    text = (ROOT / "checkpoints" / "README.md").read_text()
    found = re.search(r"python -m course_utils\.train (.+?--no-progress)", text, re.S)
    argv = shlex.split(found[1].replace("\\\n", " "))
    assert argv[argv.index("--export") + 1] == "checkpoints/shakespeare_cpu.pt", argv
    shipped = tmp_path / "shakespeare_cpu.pt"
    shutil.copy(ROOT / "checkpoints" / "shakespeare_cpu.pt", shipped)
    _check_export(str(shipped), argv[argv.index("--out") + 1])  # no error


def _train_command(text_file, out, *flags) -> list[str]:
    return [sys.executable, "-m", "course_utils.train", "--preset", "tiny", "--data", str(text_file), "--out",
            str(out), "--batch-size", "4", *flags]  # fmt: skip


def test_ctrl_c_or_sigterm_prints_one_line_naming_the_checkpoint_and_the_command_that_resumes(
    text_file, tmp_path, capsys
):
    """Before: a KeyboardInterrupt traceback of 20-60 lines; SIGTERM printed nothing (killed, -15). Now one line
    with the step and the command that resumes, exit code 130 or 143, and that command resumes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for signals, code, how in (((signal.SIGINT,), 130, ""), ((signal.SIGTERM,), 143, " by SIGTERM")):
        out = tmp_path / f"run{code}"
        command = _train_command(text_file, out, "--max-steps", "100000", "--checkpoint-interval", "5")
        with subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as p:
            deadline = time.monotonic() + 240
            while not (out / "checkpoint.pt").exists() and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert p.poll() is None, "finished before it could be interrupted"
            for signum in signals:
                p.send_signal(signum)
                time.sleep(0.02)
            stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == code and stdout == "" and len(stderr.splitlines()) == 1, (p.returncode, stderr)
        found = re.fullmatch(
            rf"stopped{how} at step (\d+); the checkpoint at (.+) holds step (\d+); resume: (.+)\n", stderr
        )
        assert found and found[2] == str(out / "checkpoint.pt"), stderr
        step, saved, again = int(found[1]), int(found[3]), found[4]
        assert saved % 5 == 0 and 5 <= saved <= step and load_checkpoint(found[2])["step"] == saved
        with contextlib.chdir(ROOT):  # where the command ran: its interpreter as the user can paste it there
            assert again == pasteable("course_utils.train", [*command[3:], "--resume"])
    # the printed command, pasted where it ran (before: `python -m ...`, which may lack torch), run shorter
    pasted = subprocess.run([*shlex.split(again), "--max-steps", str(saved + 2)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=240)  # fmt: skip
    assert pasted.returncode == 0, pasted.stderr
    result = json.loads(pasted.stdout.strip().splitlines()[-1])
    assert (result["steps"], result["steps_this_run"]) == (saved + 2, 2)


@pytest.mark.parametrize("module", ["course_utils.train", "course_utils.induction"])
def test_ctrl_c_during_start_up_prints_one_line(tmp_path, module, text_file):
    """Before: a KeyboardInterrupt traceback from inside `import torch` (the first seconds)."""
    argv = [str(tmp_path / "m.pt")] if module.endswith("induction") else _train_command(text_file, tmp_path / "r")[3:]
    with subprocess.Popen([sys.executable, "-m", module, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as p:  # fmt: skip
        time.sleep(0.4)  # the package is imported (a few ms), torch is still loading (seconds)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
    assert (p.returncode, stdout, stderr) == (130, "", "stopped during start-up; nothing was written\n")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_in_the_final_evaluation_says_the_run_finished_and_resume_writes_only_the_summary(
    text_file, tmp_path, capsys, monkeypatch
):
    """Before: 'run it again with <the same command>', which was refused. Now the line's command writes the summary
    (training nothing); a --resume of a finished run with its summary is refused instead of exiting 0 with
    tokens_per_s 0.0 written over it."""

    monkeypatch.setattr(train_module, "evaluate", ctrl_c)  # the final full-validation pass
    code, err, _ = cli(capsys, text_file, tmp_path)
    monkeypatch.undo()
    assert code == 130 and len(err) == 1, err
    found = re.fullmatch(
        rf"stopped before the first step or after the last; the checkpoint at "
        rf"{re.escape(str(tmp_path / 'checkpoint.pt'))} holds step 3; resume: "
        rf"({re.escape(pasteable('course_utils.train', []))} .+ --resume)",
        err[0],
    )
    assert found and not (tmp_path / "summary.json").exists(), err
    assert main(shlex.split(found[1])[3:]) == 0  # the line's command (.venv/bin/python -m course_utils.train ...)
    summary = (tmp_path / "summary.json").read_bytes()
    assert json.loads(summary)["steps"] == 3 and json.loads(capsys.readouterr().out)["steps_this_run"] == 0
    assert main(["--data", str(text_file), "--out", str(tmp_path), "--resume"]) == 2  # nothing left to do
    err = capsys.readouterr().err
    assert "is at step 3 and max_steps is 3, so resuming would train nothing" in err and len(err.splitlines()) == 1
    assert (tmp_path / "summary.json").read_bytes() == summary


def test_a_flag_is_spelt_out(text_file, tmp_path, capsys):
    """Before: --res was taken for --resume (argparse's abbreviations)."""
    with pytest.raises(SystemExit) as exit_info:
        main(cli_argv(text_file, tmp_path / "run", "--res"))
    assert exit_info.value.code == 2 and "unrecognized arguments: --res" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_ctrl_c_while_exporting_then_the_lines_command_writes_only_the_export(text_file, tmp_path, capsys, monkeypatch):
    """Before: 'run it again with <the same command>', refused since the folder held a run. Now the printed
    --resume exports the finished run without training (again each time it is run)."""

    out, model = tmp_path / "run", tmp_path / "model.pt"
    monkeypatch.setattr(train_cli, "export_model", ctrl_c)
    code, err, _ = cli(capsys, text_file, out, "--export", model)
    monkeypatch.undo()
    assert code == 130 and len(err) == 1 and not model.exists(), err
    assert err[0].startswith(f"stopped before the first step or after the last; the checkpoint at {out}")
    again = shlex.split(err[0].split("; resume: ")[1])
    summary = (out / "summary.json").read_bytes()
    assert main(again[3:]) == 0 and load_model(model)[2]["step"] == 3
    assert (out / "summary.json").read_bytes() == summary  # the summary is not rewritten with zeros
    model.unlink()
    assert main(again[3:]) == 0 and load_model(model)[2]["step"] == 3
    assert (out / "summary.json").read_bytes() == summary


def test_loss_by_position_is_the_per_position_mean_whose_mean_is_evaluates_loss():
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=7, context_length=8))
    data = torch.randint(0, 7, (8 * 20 + 1,))  # 20 full windows, nothing left over
    by_position = loss_by_position(model, data, 8, batch_size=6)
    assert by_position.shape == (8,) and by_position.dtype == torch.float64
    torch.testing.assert_close(by_position.mean().item(), evaluate(model, data, 8), rtol=1e-6, atol=1e-6)
    x, y = data[:-1].view(20, 8), data[1:].view(20, 8)  # the windows by hand
    with torch.no_grad():
        logits = model(x)[0]  # (20, 8, 7)
    by_hand = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(dim=0)  # (8,)
    torch.testing.assert_close(by_position.float(), by_hand, rtol=1e-5, atol=1e-5)
