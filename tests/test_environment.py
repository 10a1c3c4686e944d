"""Tests for course_utils.environment: the notebook setup line and the environment report."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import random
import re
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

from course_utils import environment
from course_utils.environment import (
    Requirement,
    best_device,
    environment_report,
    print_report,
    setup_notebook,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def restore_global_settings():
    """setup_notebook changes process-wide settings; put them back so later tests are unaffected."""
    threads = torch.get_num_threads()
    with matplotlib.rc_context():
        yield
    torch.set_num_threads(threads)
    torch.set_printoptions(profile="default")


def test_setup_notebook_returns_a_device_and_seeds_everything(restore_global_settings):
    device = setup_notebook(seed=3)
    assert device in ("cpu", "cuda", "mps") and device == best_device()
    torch.device(device)  # a valid device string
    a, r1, n1 = torch.randn(5), random.random(), np.random.rand(3)
    setup_notebook(seed=3)
    b, r2, n2 = torch.randn(5), random.random(), np.random.rand(3)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert r1 == r2 and (n1 == n2).all()
    setup_notebook(seed=4)
    assert not torch.equal(torch.randn(5), a)


def test_setup_notebook_threads_print_and_plot_settings(restore_global_settings):
    setup_notebook(seed=0)
    assert torch.get_num_threads() == 1
    assert matplotlib.rcParams["figure.dpi"] == 72
    assert str(torch.tensor([1 / 3])) == "tensor([0.3333])"  # precision 4, no scientific notation
    torch.set_num_threads(2)
    setup_notebook(seed=0, threads=None)  # None keeps the thread count
    assert torch.get_num_threads() == 2


def test_environment_report_structure():
    reqs = environment_report()
    assert reqs and all(isinstance(r, Requirement) for r in reqs)
    by_name = {r.name: r for r in reqs}
    for name in ("Python >= 3.10", "torch", "device", "matplotlib", "tqdm", "course_utils"):
        assert name in by_name, name
    assert by_name["torch"].ok and by_name["torch"].detail == torch.__version__
    assert by_name["Python >= 3.10"].ok
    assert by_name["matplotlib"].ok and by_name["matplotlib"].detail == md.version("matplotlib")
    for r in reqs:
        assert isinstance(r.ok, bool) and r.detail
        if not r.ok:
            assert r.fix, f"{r.name} failed without a fix"


def test_environment_report_broken_torch_has_a_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    by_name = {r.name: r for r in environment_report()}
    assert not by_name["torch"].ok and by_name["torch"].detail.startswith("cannot import")
    assert by_name["torch"].fix
    assert "device" not in by_name


def test_environment_report_old_python_has_a_fix():
    VersionInfo = namedtuple("VersionInfo", "major minor micro releaselevel serial")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "version_info", VersionInfo(3, 9, 7, "final", 0))
        python = environment_report()[0]
    assert python.name == "Python >= 3.10" and not python.ok
    assert python.detail == "3.9.7" and "3.10" in python.fix


def test_environment_report_course_utils_import(monkeypatch):
    real_import = importlib.import_module

    def fake_import(name, *args):
        if name == "course_utils.exercises":
            return type("Fake", (), {"all_exercises": staticmethod(lambda: {})})
        return real_import(name, *args)

    monkeypatch.setattr(environment.importlib, "import_module", fake_import)
    assert {r.name: r for r in environment_report()}["course_utils"].ok

    def broken_import(name, *args):
        if name == "course_utils.exercises":
            raise ImportError("no module named course_utils.exercises.masking")
        return real_import(name, *args)

    monkeypatch.setattr(environment.importlib, "import_module", broken_import)
    cu = {r.name: r for r in environment_report()}["course_utils"]
    assert not cu.ok and "no module named" in cu.detail and cu.fix


def test_print_report(capsys):
    reqs = [
        Requirement("alpha", True, "1.0"),
        Requirement("beta", False, "not installed", "pip install beta"),
        Requirement("gamma", False, "not fetched yet", "fetch it", later=True),
    ]
    assert print_report(reqs) is False  # a failure beside a LATER still fails
    out = capsys.readouterr().out
    assert "OK    alpha  1.0" in out and "FAIL  beta" in out and "fix: pip install beta" in out
    assert "LATER gamma" in out and "fix: fetch it" not in out and "Something is missing" in out
    assert print_report(reqs[:1]) is True
    assert "All set." in capsys.readouterr().out
    assert print_report(reqs[2:]) is True and "Something is missing" not in capsys.readouterr().out


def test_print_report_wraps_long_lines_at_word_boundaries(capsys):
    """JupyterLab breaks a long output line anywhere, mid-word included (notebook 00's LATER line did)."""
    detail = "not fetched yet: only notebooks 10 and 11 read it, and notebook 10 fetches it when it first runs " * 2
    fix = "or fetch it now from the course folder with: python3 course.py corpus"
    print_report([Requirement("corpus", False, detail.strip(), fix, later=True)])
    lines = capsys.readouterr().out.splitlines()[:-1]
    assert len(lines) > 2 and all(len(line) <= environment.REPORT_WIDTH for line in lines)
    assert all(line.startswith(" " * 14) for line in lines[1:])  # continuations sit under the detail column
    words = " ".join(lines).split()
    assert words[2:] == [*detail.split(), *fix.split()]  # no word was cut in two


def _corpus_row(reqs):
    return next(r for r in reqs if r.name.startswith("corpus"))


@pytest.fixture
def datasets(monkeypatch, tmp_path):
    """An empty datasets folder: no corpus fetched yet."""
    from course_utils import data

    monkeypatch.setattr(data, "DATASETS_DIR", tmp_path)
    return tmp_path


def test_a_corpus_not_fetched_yet_is_later_not_a_failure(monkeypatch, datasets, capsys):
    """Before, a fresh machine's `course.py lab` printed FAIL for it and "Something is missing", then started
    JupyterLab: a newcomer read that setup had broken. Only the GPT notebooks read the corpus."""
    monkeypatch.setattr(environment, "hosted_service", lambda: False)
    reqs = environment_report()
    row = _corpus_row(reqs)
    assert row.name == "corpus (notebooks 10 and 11)" and not row.ok and row.later and row.status == "LATER"
    assert row.detail.startswith("not fetched yet: only notebooks 10 and 11 read it, and notebook 10 fetches it")
    assert row.fix.endswith(f": {environment.CORPUS_FETCH}") and environment.CORPUS_FETCH == "python3 course.py corpus"
    others = [r for r in reqs if r is not row]
    assert print_report([*others, row]) is all(r.ok for r in others)
    out = capsys.readouterr().out
    assert "LATER corpus (notebooks 10 and 11)" in out and row.fix in " ".join(out.split())
    if all(r.ok for r in others):  # this machine has the rest: the corpus alone is no FAIL
        assert "FAIL" not in out and "Something is missing" not in out
        assert out.splitlines()[-1] == "All set for now: what says LATER is needed only later, and is not an error."


def test_on_a_hosted_service_the_corpus_waits_for_notebook_10(monkeypatch, datasets):
    monkeypatch.setattr(environment, "hosted_service", lambda: True)
    row = _corpus_row(environment_report())
    assert row.later and "notebook 10 fetches it when it first runs" in row.detail
    assert "course.py" not in row.fix  # no course folder to run it in there


def test_a_damaged_corpus_is_a_failure_with_the_command_that_fetches_it_again(datasets):
    (datasets / "shakespeare.txt").write_text("not the corpus\n", encoding="utf-8")
    row = _corpus_row(environment_report())
    assert row.status == "FAIL" and row.fix.endswith(f"{environment.CORPUS_FETCH} --force")


def test_the_corpus_notebooks_are_those_that_load_it():
    """CORPUS_NOTEBOOKS names notebooks of the course, and every notebook source that loads the corpus is one."""
    sources = sorted((ROOT / "course_source").glob("[0-9][0-9]_*.py"))
    numbers = {p.name[:2] for p in sources}
    assert set(environment.CORPUS_NOTEBOOKS) <= numbers, (environment.CORPUS_NOTEBOOKS, sorted(numbers))
    loading = {p.name[:2] for p in sources if "load_corpus(" in p.read_text(encoding="utf-8")}
    assert loading and loading <= set(environment.CORPUS_NOTEBOOKS), sorted(loading)


# pick_device: the one place that turns a device name into a device, or says in one line why it cannot


def test_pick_device_auto_cpu_and_a_gpu_that_is_there(monkeypatch):
    assert environment.pick_device("cpu") == torch.device("cpu")
    assert environment.pick_device(None) == environment.pick_device("auto") == torch.device(best_device())
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert environment.pick_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.parametrize(
    "name, cuda_build, gpus, match",
    [
        ("cuda", None, 0, r"this PyTorch \(.*\) was built without CUDA; use --device cpu or auto"),
        ("cuda", "12.8", 0, r"PyTorch has CUDA but sees no GPU .*; use --device cpu or auto"),
        ("cuda:3", "12.8", 1, r"'cuda:3': this machine has 1 CUDA device\(s\), cuda:0 to cuda:0"),
        ("gpu", None, 0, r"device 'gpu' is not a device name: use cpu, cuda, cuda:N, mps or auto"),
        ("meta", None, 0, r"device 'meta': the course trains on cpu, cuda or mps; use --device cpu or auto"),
        (0, None, 0, r"device must be a str such as 'cpu' or 'cuda', or a torch.device; got int"),
    ],
)
def test_pick_device_refuses_what_this_machine_lacks(monkeypatch, name, cuda_build, gpus, match):
    """Before: torch.device("cuda") was accepted, and training died at the first .to(device) with a traceback."""
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(TypeError if name == 0 else ValueError, match=match):
        environment.pick_device(name)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has Apple's GPU")
def test_pick_device_mps_off_a_mac_says_so():
    why = "it needs macOS on Apple silicon" if sys.platform != "darwin" else "no Metal support"
    with pytest.raises(
        ValueError, match=rf"device 'mps' \(Apple's GPU\) is not available here: .*{why}.*; use --device"
    ):
        environment.pick_device("mps")


def _first_figure(env_small: bool, monkeypatch):
    """Run a notebook that plots after setup_notebook; return (PIL image, display metadata) of its figure."""
    import base64
    import io

    import nbformat
    from nbclient import NotebookClient
    from PIL import Image

    from course_utils.environment import SMALL_FIGURES_ENV

    if env_small:
        monkeypatch.setenv(SMALL_FIGURES_ENV, "1")
    else:
        monkeypatch.delenv(SMALL_FIGURES_ENV, raising=False)
    src = (
        "import matplotlib.pyplot as plt\nfrom course_utils.environment import setup_notebook\n"
        "setup_notebook()\nplt.rcParams['figure.facecolor'] = 'none'  # a style asking for see-through figures\n"
        "fig, ax = plt.subplots()\n"
        "ax.plot([0, 1], [0, 1])\nplt.show()"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src)])
    NotebookClient(nb, kernel_name="python3", timeout=60).execute()
    out = next(o for o in nb.cells[0].outputs if o.output_type == "display_data")
    return Image.open(io.BytesIO(base64.b64decode(out.data["image/png"]))).convert("RGBA"), out.get("metadata", {})


def test_a_running_notebook_gets_sharp_opaque_figures_and_the_build_small_ones(monkeypatch):
    live, live_meta = _first_figure(False, monkeypatch)
    small, small_meta = _first_figure(True, monkeypatch)
    # retina: twice the pixels, shown at the size of the 1x image
    assert live.size[0] >= 2 * small.size[0] - 2 and live_meta["image/png"]["width"] in range(
        small.size[0] - 1, small.size[0] + 2
    )
    assert "image/png" not in small_meta  # the committed notebooks' plain 1x PNG
    for im in (live, small):  # opaque white, though the style asked for transparent: legible on a dark theme
        assert im.getpixel((1, 1)) == (255, 255, 255, 255)
        assert im.getchannel("A").getextrema() == (255, 255)


def test_figures_for_screens_does_nothing_outside_ipython():
    from course_utils.environment import figures_for_screens

    assert figures_for_screens() is None


def test_a_missing_package_has_a_fix_and_a_hosted_service_brings_its_own_front_end(monkeypatch):
    real_version = md.version

    def version(dist):
        if dist.startswith("jupyterlab") or dist == "tqdm":
            raise md.PackageNotFoundError(dist)
        return real_version(dist)

    monkeypatch.setattr(md, "version", version)
    monkeypatch.setattr(environment, "hosted_service", lambda: False)
    rows = {r.name: r for r in environment_report()}
    for name in ("JupyterLab", "tqdm"):
        assert not rows[name].ok and rows[name].detail == "not installed" and "course.py lab" in rows[name].fix
    monkeypatch.setattr(environment, "hosted_service", lambda: True)
    rows = {r.name: r for r in environment_report()}
    assert rows["JupyterLab"].ok and "hosted" in rows["JupyterLab"].detail
    assert rows["nbclient (course.py check)"].ok and not rows["tqdm"].ok


@pytest.mark.parametrize("variables, ok, detail", [
    ({}, True, "defaults (no COURSE_* variable set)"),
    ({"COURSE_GPT_SIZE": "ci", "COURSE_CHECK_SEED": "12"}, True, "COURSE_CHECK_SEED=12, COURSE_GPT_SIZE=ci"),
    ({"COURSE_GPT_SIZE": "huge"}, False,
     "COURSE_GPT_SIZE='huge' is not a run size; choose one of ['ci', 'cpu', 'gpu']"),
    ({"COURSE_CHECK_SEED": "abc"}, False, "COURSE_CHECK_SEED must be an integer seed, got 'abc'"),
])  # fmt: skip
def test_the_report_checks_the_course_settings_that_are_set(monkeypatch, variables, ok, detail):
    """Before, `course.py env` said all OK with COURSE_GPT_SIZE=huge; notebook 10 failed only when it got there."""
    import os

    for name in [n for n in os.environ if n.startswith("COURSE_")]:
        monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    row = {r.name: r for r in environment_report()}["course settings"]
    assert row.ok is ok and row.detail.startswith(detail)
    assert ok or row.fix == "change the value, or unset the variable to get the default"


def test_colab_with_ipywidgets_8_gets_its_widget_manager_and_nothing_elsewhere(monkeypatch):
    import types

    import course_utils.environment as env

    calls = []
    colab = types.ModuleType("google.colab")
    colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append("on"))
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    versions = {"ipywidgets": "8.1.5"}
    monkeypatch.setattr(env, "_version", lambda dist: versions.get(dist))
    monkeypatch.setattr(env, "hosted_service", lambda: False)
    assert env.hosted_widgets() is None and calls == []
    monkeypatch.setattr(env, "hosted_service", lambda: True)
    assert env.hosted_widgets() == "Colab: widget manager switched on for ipywidgets 8.1.5" and calls == ["on"]
    versions["ipywidgets"] = "7.7.1"  # Colab's own version: its front end renders it as it is
    assert env.hosted_widgets() is None and calls == ["on"]


def test_the_setup_check_reports_a_machine_without_torch_instead_of_crashing():
    """The report exists for the machine that lacks something: without torch it must still print its table
    (the corpus and settings rows read modules that need torch; before, they ended it with a traceback)."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # import torch now raises ImportError\n"
        "from course_utils.environment import print_report\n"
        "print_report()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert "FAIL  torch" in done.stdout, done.stdout
    assert re.search(r"FAIL  course settings +not checked", done.stdout), done.stdout
    assert "corpus --force" not in done.stdout  # a missing torch is not a damaged corpus
    assert "Something is missing" in done.stdout
