"""The lock files agree with what pyproject.toml declares, and with each other and this environment.

lock/learner.txt and lock/author.txt are written by tools/lock.py (uv, universal) from pyproject.toml's
dependencies and its [lab] and [author] extras. These tests read the files only (no network, no resolver):

- every declared requirement is pinned, in the right lock, at a version that satisfies it, on every
  supported platform and Python (markers evaluated for each);
- every pin is wanted: uv names what each package is there for, and a package there for pyproject.toml
  alone must still be declared there (a requirement removed from pyproject fails until the lock is redone);
- the learner lock holds no author tool, and the author lock holds the learner lock line for line;
- closure here: every locked package installed in this environment has its own requirements (markers
  evaluated here, extras followed) pinned by the lock, at the installed versions.
"""

import importlib.metadata as md
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from course_command import load_course
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SETS = {"learner": ("lab",), "author": ("lab", "author")}
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
MARKERS = ("sys_platform", "platform_system", "platform_machine", "os_name")
PLATFORMS = {  # the supported platforms, as environment markers see them
    platform: dict(zip(MARKERS, values))
    for platform, values in {
        "Linux x86-64": ("linux", "Linux", "x86_64", "posix"),
        "Linux aarch64": ("linux", "Linux", "aarch64", "posix"),
        "macOS arm64": ("darwin", "Darwin", "arm64", "posix"),
        "Windows x86-64": ("win32", "Windows", "AMD64", "nt"),
    }.items()
}
FROM_PYPROJECT = "course-utils (pyproject.toml)"  # uv's name for a requirement that pyproject.toml declares


def targets():
    """(words, environment) for every supported platform and Python, at its first and a late patch release."""
    for platform, env in PLATFORMS.items():
        for python in PYTHONS:
            for patch in ("0", "99"):
                yield (
                    f"{platform}, Python {python}.{patch}",
                    {
                        **default_environment(),
                        **env,
                        "implementation_name": "cpython",
                        "platform_python_implementation": "CPython",
                        "python_version": python,
                        "python_full_version": f"{python}.{patch}",
                        "extra": "",
                    },
                )


def applies(marker, env: dict, extras=("",)) -> bool:
    return marker is None or any(marker.evaluate({**env, "extra": x}) for x in extras)


def lock_lines(name: str) -> list[tuple[Requirement, list[str]]]:
    """The pins of lock/NAME.txt with what uv says each is there for ("via ...")."""
    lines = []
    for line in (ROOT / "lock" / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        text, _, comment = line.partition("#")
        if not text.strip():
            continue
        req = Requirement(text.strip())
        assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", (
            f"lock/{name}.txt: {line!r} is not an exact pin"
        )
        via = comment.strip().removeprefix("via ").split(", ") if comment.strip().startswith("via ") else []
        lines.append((req, via))
    return lines


def declared(extras: tuple[str, ...]) -> list[Requirement]:
    texts = list(PYPROJECT["dependencies"])
    for extra in extras:
        texts += PYPROJECT["optional-dependencies"][extra]
    return [Requirement(t) for t in texts]


def pinned(name: str, env: dict) -> dict[str, list[str]]:
    """Name -> the versions lock/NAME.txt pins on the machine ``env`` describes."""
    out: dict[str, list[str]] = {}
    for req, _ in lock_lines(name):
        if applies(req.marker, env):
            out.setdefault(canonicalize_name(req.name), []).append(next(iter(req.specifier)).version)
    return out


@pytest.mark.parametrize("which", SETS)
def test_every_declared_requirement_is_pinned_at_a_version_that_satisfies_it(which):
    problems = []
    for where, env in targets():
        pins = pinned(which, env)
        for req in declared(SETS[which]):
            if not applies(req.marker, env):
                continue
            versions = pins.get(canonicalize_name(req.name), [])
            if len(versions) != 1:
                problems.append(f"{where}: {req} has {len(versions)} pins ({versions}), not one")
            elif not req.specifier.contains(versions[0], prereleases=True):
                problems.append(f"{where}: {req} is pinned at {versions[0]}, which does not satisfy it")
    assert not problems, f"lock/{which}.txt disagrees with pyproject.toml (run `python3 tools/lock.py`):\n" + "\n".join(
        problems[:20]
    )


@pytest.mark.parametrize("which", SETS)
def test_every_package_is_pinned_once_per_platform_and_python(which):
    for where, env in targets():
        forked = {n: v for n, v in pinned(which, env).items() if len(v) > 1}
        assert not forked, f"lock/{which}.txt pins two versions of a package for {where}: {forked}"


@pytest.mark.parametrize("which", SETS)
def test_every_pin_is_wanted_by_pyproject_or_by_another_pin(which):
    lines = lock_lines(which)
    names = {canonicalize_name(r.name) for r, _ in lines}
    declared_names = {canonicalize_name(r.name) for r in declared(SETS[which])}
    for req, via in lines:
        assert via, f"lock/{which}.txt: {req} does not say what it is there for (regenerate with tools/lock.py)"
        for v in via:
            if v == FROM_PYPROJECT:
                assert canonicalize_name(req.name) in declared_names, (
                    f"lock/{which}.txt pins {req.name} for pyproject.toml, which no longer declares it "
                    "(run `python3 tools/lock.py`)"
                )
            else:
                assert canonicalize_name(v) in names, f"lock/{which}.txt: {req} is there for {v}, which it does not pin"


def test_the_learner_lock_holds_no_author_tool():
    learner = {canonicalize_name(r.name): via for r, via in lock_lines("learner")}
    learner_names = {canonicalize_name(r.name) for r in declared(SETS["learner"])}
    for req in declared(("author",)):
        name = canonicalize_name(req.name)
        if name in learner_names:
            continue  # declared for learners too
        assert name not in learner or FROM_PYPROJECT not in learner[name], (
            f"lock/learner.txt pins {req.name} for pyproject.toml, but only [author] declares it"
        )
    for tool in ("pytest", "nbval", "hypothesis", "ruff", "playwright", "jupytext", "uv"):
        assert tool not in learner, f"lock/learner.txt pins {tool}, an author tool"


def test_the_author_lock_holds_the_learner_lock_line_for_line():
    author = {(canonicalize_name(r.name), str(r.specifier), str(r.marker)) for r, _ in lock_lines("author")}
    missing = [
        str(r)
        for r, _ in lock_lines("learner")
        if (canonicalize_name(r.name), str(r.specifier), str(r.marker)) not in author
    ]
    assert not missing, f"lock/author.txt lacks or pins otherwise these lines of lock/learner.txt: {missing}"


@pytest.mark.parametrize("which", SETS)
def test_torch_has_one_version_everywhere_and_the_header_says_it(which):
    versions = {next(iter(r.specifier)).version for r, _ in lock_lines(which) if r.name == "torch"}
    assert len(versions) == 1, versions
    header = (ROOT / "lock" / f"{which}.txt").read_text(encoding="utf-8").split("\n\n")[0]
    assert f"torch=={versions.pop()} is served as different files" in header
    assert "Python 3.10-3.13" in header and "Windows x86-64" in header and "macOS arm64" in header


def test_requirements_txt_course_py_and_the_lock_tool_name_the_same_sets():
    lines = [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines == ["-c lock/learner.txt", "-e .[lab]"]
    course = load_course()
    assert {k: (v[0], tuple(v[1].split(","))) for k, v in course.SETS.items()} == {
        k: (f"lock/{k}.txt", v) for k, v in SETS.items()
    }
    spec = importlib.util.spec_from_file_location("lock_tool", ROOT / "tools" / "lock.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert {k: v[0] for k, v in tool.SETS.items()} == SETS and tool.PYTHONS == PYTHONS
    from course_tools import room

    assert {k: (v[0], v[1]) for k, v in room.SETS.items()} == {k: (f"lock/{k}.txt", v) for k, v in SETS.items()}


def installed(name: str):
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        return None


def test_what_is_installed_here_is_what_the_lock_pins_and_its_requirements_are_locked():
    """Closure on this machine: walk from the declared requirements of the richest set installed here
    through each installed package's own requirements (markers evaluated here, extras followed); every
    package met must be pinned by that set's lock, at the version installed."""
    which = "author" if installed("pytest") and installed("jupytext") else "learner"
    here = {**default_environment(), "extra": ""}
    pins = pinned(which, here)
    problems, seen = [], {}
    queue = [(r, "pyproject.toml") for r in declared(SETS[which]) if applies(r.marker, here)]
    while queue:
        req, by = queue.pop()
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        dist = installed(name)
        if name not in pins:
            problems.append(f"{req.name} (required by {by}) is not pinned by lock/{which}.txt")
        elif dist is not None and not SpecifierSet(f"=={pins[name][0]}").contains(dist.version, prereleases=True):
            problems.append(f"{req.name} {dist.version} is installed, lock/{which}.txt pins {pins[name][0]}")
        if dist is None:
            problems.append(f"{req.name} (required by {by}) is not installed here")
            continue
        for sub in dist.requires or []:
            sub = Requirement(sub)
            if applies(sub.marker, here, ("", *seen[name])):
                queue.append((sub, req.name))
    assert not problems, (
        f"this environment or lock/{which}.txt is out of date (run `python3 course.py "
        f"{'test' if which == 'author' else 'lab'}`, or `python3 tools/lock.py`):\n" + "\n".join(sorted(set(problems)))
    )
    assert len(seen) > 50  # the walk went through the dependency tree, not just the top


def test_a_lock_that_disagrees_is_caught(tmp_path, monkeypatch):
    """The checks above fail on a lock that misses a declared package, pins one out of range, or keeps one
    pyproject.toml dropped: each is seeded into a copy and must be found."""
    lock = (ROOT / "lock" / "learner.txt").read_text(encoding="utf-8")
    (tmp_path / "lock").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    cases = {
        "missing": re.sub(r"(?m)^tqdm==.*\n", "", lock),
        "out of range": re.sub(r"(?m)^torch==\S+", "torch==2.4.1", lock),
        "dropped from pyproject": lock + "left-pad==1.0    # via course-utils (pyproject.toml)\n",
    }
    for what, text in cases.items():
        (tmp_path / "lock" / "learner.txt").write_text(text, encoding="utf-8")
        with pytest.raises(AssertionError):
            test_every_declared_requirement_is_pinned_at_a_version_that_satisfies_it("learner")
            test_every_pin_is_wanted_by_pyproject_or_by_another_pin("learner")
            pytest.fail(f"a lock with a {what} package passed")
