"""Check a learner's exercises: run their notebooks under nbval and print one row per exercise.

``python3 course.py check [NOTEBOOK ...]`` (default: every notebook in ``notebooks/``) prints a table
of notebook, exercise and verdict (passed / failed with the named mistake / not attempted / not run),
a total, and writes the same as JSON (``--json``, default ``reports/exercises.json``) for an
instructor to collect. The exit status is 1 when an attempted exercise failed or a cell errored.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from course_utils.checking import FAILED, NOT_ATTEMPTED, PASSED, REPORT_ENV
from course_utils.exercises import all_exercises

ROOT = Path(__file__).resolve().parent.parent
NOT_RUN = "not run"


def _run_nbval(notebooks: list[Path], report: Path, junit: Path) -> None:
    env = dict(os.environ, **{REPORT_ENV: str(report)})
    env.setdefault("COURSE_08_SIZE", "ci")  # checking exercises needs no full training run of notebook 08
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider",
           "-q", f"--junitxml={junit}", *map(str, notebooks)]
    print(f"running your notebooks under nbval: {' '.join(p.name for p in notebooks)} ...", flush=True)
    subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _cell_errors(junit: Path) -> dict[str, list[str]]:
    """Cells that failed for a reason other than an exercise check: {notebook file name: [messages]}."""
    errors: dict[str, list[str]] = {}
    if not junit.exists():
        return errors
    for case in ET.parse(junit).getroot().iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            text = (bad.get("message") or "") + (bad.text or "")
            if "ExerciseFailed" in text:
                continue
            name = Path(case.get("file") or case.get("classname", "").replace(".", "/")).name
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            errors.setdefault(name, []).append(f"{case.get('name')}: {lines[-1] if lines else 'failed'}")
    return errors


def grade(notebooks: list[Path]) -> list[dict]:
    """Run the notebooks and return one row per exercise they contain."""
    exercises = all_exercises()
    with tempfile.TemporaryDirectory() as tmp:
        report, junit = Path(tmp) / "report.jsonl", Path(tmp) / "junit.xml"
        report.touch()
        _run_nbval(notebooks, report, junit)
        records = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines() if line.strip()]
        errors = _cell_errors(junit)
    latest = {r["key"]: r for r in records}
    rows = []
    for nb in notebooks:
        number = nb.name[:2]
        for key, ex in exercises.items():
            if key.split(".")[0] != number:
                continue
            r = latest.get(key)
            if r is None:
                why = "; ".join(errors.get(nb.name, [])) or "its check cell did not run"
                rows.append({"notebook": nb.name, "key": key, "title": ex.title, "status": NOT_RUN,
                             "mistake": None, "message": f"an earlier cell failed: {why}"})
            else:
                rows.append({"notebook": nb.name, **r})
    return rows


def print_table(rows: list[dict]) -> None:
    if not rows:
        print("no exercises found in these notebooks")
        return
    wn = max(len(r["notebook"]) for r in rows)
    wt = max(len(f"{r['key']} {r['title']}") for r in rows)
    print(f"\n{'notebook':<{wn}}  {'exercise':<{wt}}  verdict")
    print(f"{'-' * wn}  {'-' * wt}  {'-' * 40}")
    for r in rows:
        verdict = r["status"]
        if r["status"] == FAILED:
            verdict += f" ({r['mistake']})" if r.get("mistake") else f": {r['message']}"
        elif r["status"] == NOT_RUN:
            verdict += f": {r['message']}"
        print(f"{r['notebook']:<{wn}}  {r['key'] + ' ' + r['title']:<{wt}}  {verdict}")
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASSED, FAILED, NOT_ATTEMPTED, NOT_RUN)}
    print(f"\ntotal: {len(rows)} exercises, " + ", ".join(f"{n} {s}" for s, n in counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check your exercises and print a table of verdicts.")
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to check (default: notebooks/*.ipynb)")
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "exercises.json",
                        help="where to write the table as JSON (default: reports/exercises.json)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in notebooks if not p.exists()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    rows = grade([p.resolve() for p in notebooks])
    print_table(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(f"written: {args.json}")
    return 1 if any(r["status"] in (FAILED, NOT_RUN) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
