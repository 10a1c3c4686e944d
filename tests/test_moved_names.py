"""Names that moved or were renamed in #20: code written before (a learner's notebook, an instructor's script) is
told the new name in one line, in the form it used (``from X import name`` or ``obj.name``)."""

from __future__ import annotations

import importlib

import pytest

from course_utils.runs import RUN_SIZES

MOVED = [  # (module, old name, new dotted home)
    ("course_utils.train", "load_model", "course_utils.checkpoints.load_model"),
    ("course_utils.train", "load_checkpoint", "course_utils.checkpoints.load_checkpoint"),
    ("course_utils.train", "export_model", "course_utils.checkpoints.export_model"),
    ("course_utils.train", "CheckpointError", "course_utils.checkpoints.CheckpointError"),
    ("course_utils.train", "pick_device", "course_utils.devices.pick_device"),
    ("course_utils.train", "compile_available", "course_utils.train_setup.compile_available"),
    ("course_utils.train", "fused_adamw_available", "course_utils.train_setup.fused_adamw_available"),
    ("course_utils.train", "main", "course_utils.train_cli.main"),
    ("course_utils.environment", "parse_device", "course_utils.devices.parse_device"),
    ("course_utils.length_generalisation", "SCHEMES", "course_utils.length_generalisation.POSITIONS"),
    ("course_utils.data", "fetch", "course_tools.corpus.fetch"),
]


@pytest.mark.parametrize("module, old, new", MOVED, ids=[f"{m}.{o}" for m, o, _ in MOVED])
def test_importing_a_moved_name_says_its_new_home_in_one_line(module, old, new):
    with pytest.raises(ImportError) as caught:
        exec(f"from {module} import {old}", {})
    assert str(caught.value) == f"{module}.{old} is now {new}"
    with pytest.raises(ImportError):  # attribute lookups too: feature detection is told, not misled
        hasattr(importlib.import_module(module), old)
    home, _, name = new.rpartition(".")
    assert hasattr(importlib.import_module(home), name), f"{new} does not exist"  # the message is true


def test_other_missing_names_are_the_usual_attribute_error():
    train = importlib.import_module("course_utils.train")
    assert not hasattr(train, "no_such_name")
    with pytest.raises(ImportError, match="cannot import name 'no_such_name'"):
        exec("from course_utils.train import no_such_name", {})


@pytest.mark.parametrize("old, new", [("model", "model_config"), ("training", "train_config")])
def test_run_size_names_its_renamed_fields(old, new):
    size = RUN_SIZES["cpu"]
    with pytest.raises(AttributeError, match=rf"^{old} was renamed {new} \(course_utils\.runs\.RunSize\)$"):
        getattr(size, old)
    assert getattr(size, new) is not None
    with pytest.raises(AttributeError, match="'RunSize' object has no attribute 'colour'"):
        size.colour  # noqa: B018
