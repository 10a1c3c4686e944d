"""The learner's check command, end to end: nbval runs a notebook, the table names each verdict."""

import json
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def test_grade_reports_passed_failed_and_not_attempted(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell("from course_utils.exercises import NotAttempted, check, get_exercise"),
        nbformat.v4.new_code_cell('check("01.1", get_exercise("01.1").solution)'),
        nbformat.v4.new_code_cell('check("01.2", get_exercise("01.2").mistakes[0].fn)'),
        nbformat.v4.new_code_cell('def mine(*a):\n    raise NotAttempted("replace this line")\ncheck("01.3", mine)'),
    ]
    path = tmp_path / "01_my_work.ipynb"
    nbformat.write(nb, path)
    out_json = tmp_path / "verdicts.json"
    proc = subprocess.run([sys.executable, "-m", "course_utils.grade", str(path), "--json", str(out_json)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # an attempted exercise failed
    rows = {r["key"]: r for r in json.loads(out_json.read_text())}
    from course_utils.exercises import get_exercise

    assert rows["01.1"]["status"] == "passed"
    assert rows["01.2"]["status"] == "failed"
    assert rows["01.2"]["mistake"] == get_exercise("01.2").mistakes[0].name
    assert rows["01.3"]["status"] == "not attempted"
    assert "total:" in proc.stdout and "1 passed, 1 failed" in proc.stdout
