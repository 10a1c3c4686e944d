"""The GPU recipe's code paths, run on the CPU: torch.compile (inductor), bfloat16 autocast, fused AdamW, and the
``gpu`` preset for two steps with all three on, each compared with the plain path (eager, float32, for-each
AdamW) to a stated tolerance. Two processes under torchrun are tested in test_train.py
(``test_two_processes_train_like_one``).

No GPU has been available to this project's machines, so this is where those lines of ``course_utils.train``
run at all. The two tests that compile (about 20-40 s together on 2 cores with a cold inductor cache) carry the
``compile`` marker: ``-m "not compile"`` leaves them out; ``python3 course.py test`` runs them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from strategies import one_cpu_thread, practice_text

from course_utils.train import TrainConfig, gpu_switches, train
from course_utils.train_cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

# float32 agrees with itself up to rounding: the fused AdamW kernel and inductor's fused kernels add and multiply
# in another order than the eager for-each path, so each result differs by a few units in the last place (about
# 1e-7 relative), and four Adam steps amplify that. We measured at most 4.8e-7 on losses near 3.4; 1e-5 leaves
# 20 times that, and each test also shows that a real change (a learning rate 10% off) moves the loss further.
FLOAT32_ATOL = 1e-5
# bfloat16 keeps 8 significant bits: a single rounding of a number near the loss is already up to 2**-8 of it
# (0.4%), and under autocast the logits themselves are bfloat16. No comparison with float32 can promise more than
# that one rounding step; we measured 6.5e-5 relative for the gpu preset (two steps) and 3.4e-6 for the tiny one.
BF16_RTOL = 2.0**-8
# The tiny preset, with a learning rate high enough that four steps change the weights visibly.
QUICK = dict(
    max_steps=4,
    batch_size=8,
    warmup_steps=2,
    learning_rate=1e-2,
    min_lr=1e-3,
    log_interval=1,
    eval_interval=4,
    eval_batches=1,
    checkpoint_interval=4,
)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    """About 20k characters of simple text: enough for the gpu preset's context of 256 in both splits."""
    path = tmp_path_factory.mktemp("data") / "text.txt"
    path.write_text(practice_text(600))
    return path


def run(text_file, out, preset="tiny", **settings):
    return train(preset, text_file, out, TrainConfig.preset(preset, **settings), progress=False)


def max_abs_diff(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def max_rel_diff(a, b) -> float:
    return max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def plain(text_file, tmp_path_factory):
    """The plain path (eager, float32, for-each AdamW) on QUICK: what each switch is compared with."""
    with one_cpu_thread():
        return run(text_file, tmp_path_factory.mktemp("plain"), **QUICK)


@pytest.fixture
def same_dropout_when_compiled():
    """Inductor draws its own random numbers for dropout (the gpu preset has 0.2); with ``fallback_random`` it
    draws PyTorch's, so compiled and eager runs drop the same units and the comparison measures the compiler."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fallback_random=True):
        yield


# ----------------------------------------------------------------------------------------------
# Which switches a session uses
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("triton", [None, object()], ids=["without Triton", "with Triton"])
def test_cuda_defaults_keep_the_recipe_and_compile_only_with_triton(monkeypatch, triton):
    """On CUDA, by default: bf16 autocast and fused AdamW; torch.compile only if Triton is importable (Windows has
    none on PyPI). Decided without touching a GPU; a switch asked for is used as asked."""
    cuda, real_find_spec = torch.device("cuda"), importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: triton if name == "triton" else real_find_spec(name, *a)
    )
    switches = gpu_switches(TrainConfig.preset("gpu"), cuda)
    assert switches == {"compile": triton is not None, "autocast": "bf16", "fused_adamw": True}
    asked = TrainConfig.preset("gpu", compile=True, autocast="off", fused_adamw=False)
    assert gpu_switches(asked, cuda) == {"compile": True, "autocast": "off", "fused_adamw": False}


def no_compiler(graph, example_inputs):
    """A torch.compile backend that fails as inductor does without a C++ compiler (dynamo wraps what it raises)."""
    raise RuntimeError("No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, '')")


def adamw_without_fused(params, **kwargs):  # as torch.optim.AdamW(fused=True) on a device with no fused step
    if kwargs.get("fused"):
        raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
    return REAL_ADAMW(params, **kwargs)


REAL_ADAMW, REAL_COMPILE = torch.optim.AdamW, torch.compile
SWITCH_REFUSALS = [  # (the switch asked for, what breaks it, what the one line says)
    ("--compile", (torch, "compile", lambda model: REAL_COMPILE(model, backend=no_compiler)),
     "error: torch.compile failed in the first step (No working C++ compiler found in torch._inductor.config.cpp.cxx: "
     "(None, '')): train without it: --no-compile (compile=False)"),
    ("--fused-adamw", (torch.optim, "AdamW", adamw_without_fused),
     f"error: fused AdamW is not available for cpu in torch {torch.__version__} (`fused=True` requires all the params "
     "to be floating point Tensors of supported devices): leave out --fused-adamw"),
]  # fmt: skip


@pytest.mark.parametrize("switch, breaks, line", SWITCH_REFUSALS)
def test_a_switch_that_cannot_work_here_is_one_line_with_its_fix(text_file, tmp_path, monkeypatch, capsys, switch,
                                                                  breaks, line):  # fmt: skip
    """Found where torch raises it (AdamW's constructor, compiling the first step), not probed for in advance."""
    monkeypatch.setattr(*breaks)
    argv = ["--data", str(text_file), "--out", str(tmp_path), "--max-steps", "2", "--batch-size", "4", switch]
    try:
        assert main(argv) == 2
    finally:
        torch._dynamo.reset()  # forget the failed compilation
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert not (tmp_path / "checkpoint.pt").exists()


def test_a_resumed_run_takes_the_switches_of_this_session(text_file, tmp_path):
    """A run started on a GPU (bf16) and continued on a laptop: the checkpoint's run, this machine's switches."""
    run(text_file, tmp_path, **{**QUICK, "max_steps": 2}, autocast="bf16", fused_adamw=True)
    again = TrainConfig.preset("tiny", **{**QUICK, "max_steps": 2})  # as the first run, switches left to default
    result = train("tiny", text_file, tmp_path, again, resume=True, max_steps=4, progress=False)
    assert result["steps"] == 4 and result["autocast"] == "off" and result["fused_adamw"] is False
    assert result["notices"] == [], "the switches are not settings of the run: no notice"


def test_the_command_line_switches(text_file, tmp_path, capsys):
    flags = "--max-steps 2 --eval-interval 2 --batch-size 4 --no-compile --autocast bf16 --fused-adamw"
    assert main(["--data", str(text_file), "--out", str(tmp_path), *flags.split()]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["compiled"], result["autocast"], result["fused_adamw"]) == (False, "bf16", True)


# ----------------------------------------------------------------------------------------------
# Each switch on the CPU, against the plain path
# ----------------------------------------------------------------------------------------------


def test_the_cpu_default_is_the_plain_path(plain):
    assert (plain["compiled"], plain["autocast"], plain["fused_adamw"]) == (False, "off", False)
    assert plain["notices"] == []


def test_fused_adamw_on_the_cpu_matches_the_for_each_step(text_file, tmp_path, monkeypatch, plain):
    made = []

    def spy(params, **kw):
        made.append(kw.get("fused"))
        return REAL_ADAMW(params, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    fused = run(text_file, tmp_path / "fused", **QUICK, fused_adamw=True)
    assert made == [True], "the run really used the fused step"
    assert fused["fused_adamw"] is True
    assert max_abs_diff(fused["history"], plain["history"]) <= FLOAT32_ATOL
    other = run(text_file, tmp_path / "other", **{**QUICK, "learning_rate": 1.1e-2})
    assert max_abs_diff(other["history"], plain["history"]) > 10 * FLOAT32_ATOL, "the tolerance tells steps apart"


def test_bf16_autocast_on_the_cpu_agrees_with_float32_to_one_bf16_rounding(text_file, tmp_path, plain):
    bf16 = run(text_file, tmp_path / "bf16", **QUICK, autocast="bf16")
    assert bf16["autocast"] == "bf16"
    assert bf16["history"] != plain["history"], "autocast really ran in bfloat16 (float32 would be identical)"
    assert max_rel_diff(plain["history"], bf16["history"]) <= BF16_RTOL
    assert bf16["val_loss"] == pytest.approx(plain["val_loss"], rel=BF16_RTOL)


@pytest.mark.compile
def test_compile_on_the_cpu_matches_eager(text_file, tmp_path, same_dropout_when_compiled, plain):
    """Inductor on the CPU (C++ kernels) for the tiny preset."""
    compiled = run(text_file, tmp_path / "compiled", **QUICK, compile=True)
    assert compiled["compiled"] is True and compiled["notices"] == []
    assert max_abs_diff(compiled["history"], plain["history"]) <= FLOAT32_ATOL
    assert compiled["val_loss"] == pytest.approx(plain["val_loss"], abs=FLOAT32_ATOL)  # eval runs the eager model


@pytest.mark.compile
def test_the_gpu_preset_with_every_switch_on_matches_the_plain_path(text_file, tmp_path, same_dropout_when_compiled):
    """nanoGPT's baby Shakespeare model (6 layers, 384 wide, context 256, dropout 0.2), compiled, in bf16, with
    fused AdamW, for two steps. Shrunk only in steps and batch (64 -> 2: every code path is the same at any batch
    size, and a CPU does such a step in about a second) and in eval_batches (20 -> 1: evaluation uses none of the
    switches but autocast, and the whole validation split is evaluated at the end anyway)."""
    small = dict(max_steps=2, batch_size=2, eval_batches=1)
    plain = run(text_file, tmp_path / "plain", "gpu", **small, compile=False, autocast="off", fused_adamw=False)
    every = run(text_file, tmp_path / "every", "gpu", **small, compile=True, autocast="bf16", fused_adamw=True)
    assert (every["compiled"], every["autocast"], every["fused_adamw"]) == (True, "bf16", True)
    assert every["model_config"] == plain["model_config"] and every["model_config"]["num_layers"] == 6
    assert max_rel_diff(plain["history"], every["history"]) <= BF16_RTOL
    assert every["val_loss"] == pytest.approx(plain["val_loss"], rel=BF16_RTOL)
