"""tools/check_share.py: the share of the lines a call runs that check its arguments, the validator's included."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "check_share.py"
_spec = importlib.util.spec_from_file_location("check_share", SCRIPT)
check_share = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_share)  # defines functions; measures nothing

SNIPPET = textwrap.dedent(
    '''
    def idea(x, n):
        """A docstring."""
        check_int("n", n)  # 4: a check call as a statement
        if n > 3:  # 5, 6: an if whose body only raises
            raise ValueError(f"n must be at most 3, got {n}")
        out = x * n  # 7: the idea
        try:  # 8-11: a try that only provokes an error, turned into the caller's
            broadcast_shapes(x, x)
        except RuntimeError:
            raise ValueError("x does not broadcast") from None
        if out:  # 12: an if that does more than check is the idea; its raise (14) is a check
            out += 1
            raise ValueError("no")
        return out  # 15


    def check_pair(a, b):  # 18-20: a check_* function counts whole
        total = a + b
        return total
    '''
)


def test_check_lines_are_read_from_the_syntax_tree(tmp_path):
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    assert sorted(check_share.check_lines(str(path))) == [4, 5, 6, 8, 9, 10, 11, 14, 18, 19, 20]
    validator = tmp_path / "_validate.py"
    validator.write_text("def anything(x):\n    y = x + 1\n    return y\n")
    assert sorted(check_share.check_lines(str(validator))) == [1, 2, 3]  # every line of the validator


def test_the_validators_lines_count_where_they_run():
    """A call into _validate is measured line by line, not as one line at the call site: moving a check into
    another file cannot lower the share."""
    from course_utils import attention

    module, seen = check_share.lines_run(attention.softmax, (torch.randn(2, 3),), {})
    assert module == "attention"
    validator = {line for path, line in seen if path.endswith("_validate.py")}
    assert len(validator) >= 4  # check_float_tensor and check_dim ran there
    assert validator <= check_share.check_lines(str(ROOT / "course_utils" / "_validate.py"))
    own = {line for path, line in seen if path.endswith("attention.py")}
    assert own - check_share.check_lines(str(ROOT / "course_utils" / "attention.py"))  # the idea ran too


def test_the_script_prints_a_share_for_each_learner_module():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(check_share.LEARNER_MODULES) | {"all"} == set(rows)
    for module in check_share.LEARNER_MODULES:
        calls, run, checks, share = rows[module][1:]
        assert int(calls) >= 1 and 0 < int(checks) < int(run) and share.endswith("%")
