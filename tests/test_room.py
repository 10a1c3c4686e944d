"""Instructor tools: the guide's exercise table, the learner and instructor zips, a room without internet."""

import json
import re
import subprocess
import sys
import venv
import zipfile
from datetime import datetime
from pathlib import Path

import pytest
from course_command import ROOT, fake_venv_course, installed_env, run_command

from course_tools import room


@pytest.fixture(scope="module")
def learner_zip(tmp_path_factory):
    out = tmp_path_factory.mktemp("zip") / "course-learner.zip"
    room.package(out, learner=True)
    return out


@pytest.fixture(scope="module")
def learner_copy(learner_zip, tmp_path_factory):
    """The learner zip unzipped, as a learner's course folder (the tests that read it change nothing in it)."""
    where = tmp_path_factory.mktemp("unzipped")
    with zipfile.ZipFile(learner_zip) as z:
        z.extractall(where)
    return where / "attention-course"


@pytest.fixture(scope="module")
def graded_zip(tmp_path_factory):
    """`course.py package --learner ../graded.zip --no-solutions`, run as an instructor types it from a folder of
    their own: (what it printed, the zip)."""
    here = tmp_path_factory.mktemp("graded") / "course"
    here.mkdir()
    proc = run_command(
        [sys.executable, str(ROOT / "course.py"), "package", "--learner", "../graded.zip", "--no-solutions"],
        cwd=here,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, here.parent / "graded.zip"


def test_instructor_guide_exercise_table_is_current():
    text = room.GUIDE.read_text(encoding="utf-8")
    assert room.guide_with_table(text) == text, (
        "docs/INSTRUCTOR_GUIDE.md's exercise table is stale: run `python -m course_tools.room guide`"
    )
    from course_utils.exercises import all_exercises

    for key, ex in all_exercises().items():
        assert f"| {key} " in text
        for m in ex.mistakes:
            assert m.name.replace("|", "\\|") in text


def test_learner_zip_has_solutions_and_no_sources(learner_zip):
    """The learner zip used to leave solutions/ out although its README and notebook 00 sent a stuck learner
    there (#29): it holds them now, and never course_source/ or a `### BEGIN SOLUTION` line. (The instructor zip:
    the test of --force below.)"""
    with zipfile.ZipFile(learner_zip) as z:
        names = z.namelist()
        for name in names:
            assert "course_source" not in name.split("/"), name
            assert "### BEGIN SOLUTION" not in z.read(name).decode("utf-8", errors="replace"), name
        for folder in ("notebooks", "solutions"):
            shipped = {n.split("/")[-1] for n in names if n.startswith(f"attention-course/{folder}/")}
            assert shipped >= {p.name for p in (ROOT / folder).glob("[0-9][0-9]_*.ipynb")}, folder
        for name in room.SAYS_WHERE_SOLUTIONS_ARE:  # the sentence is the course's own, unchanged
            text = z.read(f"attention-course/{name}").decode("utf-8")
            assert text.count(room.SOLUTIONS_SENTENCE) == 1 and room.GRADED_SENTENCE not in text, name
        assert (
            z.read("attention-course/notebooks/00_setup_check.ipynb")
            == (ROOT / "notebooks" / "00_setup_check.ipynb").read_bytes()
        )  # (the README gains a note on what the zip leaves out: tested below)
        assert {
            f"attention-course/{f}"
            for f in (
                "course.py",
                "requirements.txt",
                "README.md",
                "lock/learner.txt",
                "course_utils/exercises/_engine/__init__.py",
                "course_utils/exercises/_engine/mistakes.py",
                "course_utils/exercises/_engine/sandbox.py",
                "course_tools/reset.py",
                "course_tools/grade.py",
                "course_tools/corpus.py",
            )
        } <= set(names)
        assert not {"attention-course/course_tools/build.py", "attention-course/course_tools/room.py"} & set(names)
        assert any(n.startswith("attention-course/.course/clean/03_") for n in names)  # for `course.py reset`
    assert room.learner_leaks(learner_zip, solutions_allowed=True) == []
    assert room.learner_leaks(learner_zip)  # the check sees solutions/ where they are not allowed


def test_the_readme_and_notebook_00_say_where_the_solutions_are_in_one_sentence():
    """What a graded zip replaces must be there, word for word, once: otherwise its promise would stay."""
    import nbformat

    for name in room.SAYS_WHERE_SOLUTIONS_ARE:
        assert (ROOT / name).read_text(encoding="utf-8").count(room.SOLUTIONS_SENTENCE) == 1, name
    source = "\n".join(c.source for c in nbformat.read(ROOT / "notebooks" / "00_setup_check.ipynb", as_version=4).cells)
    assert room.SOLUTIONS_SENTENCE in source  # a sentence of a cell, not split over two JSON strings


def test_a_zip_for_a_graded_session_has_no_solutions_and_says_so_run_literally(graded_zip, tmp_path):
    """`course.py package --learner OUT.zip --no-solutions`, run as an instructor types it: no solutions/, and the
    README, notebook 00 and the clean copy `reset` puts back say there are none instead of pointing there. The
    path it prints is resolved (`package --learner ../x.zip` printed `wrote /x/course/../x.zip`)."""
    said, out = graded_zip
    assert said.splitlines()[-1].startswith(f"wrote {out.resolve()}: "), said
    assert said.splitlines()[-1].endswith("without solutions/ (for a graded session)"), said
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        assert not [n for n in names if "solutions" in n.split("/")[:-1]]
        for name in (*room.SAYS_WHERE_SOLUTIONS_ARE, ".course/clean/00_setup_check.ipynb"):
            text = z.read(f"attention-course/{name}").decode("utf-8")
            assert room.SOLUTIONS_SENTENCE not in text and text.count(room.GRADED_SENTENCE) == 1, name
        # the instructor guide warns that the checks' references are still there, as code
        assert "def _weights_solution" in z.read("attention-course/course_utils/exercises/masking.py").decode()
    assert room.learner_leaks(out) == []


def tiny_package(tmp_path: Path, name: str, version: str, requires: list[str], index: Path) -> None:
    src = tmp_path / "src" / f"{name}-{version}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text(f"VALUE = {version!r}\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\n'
        'build-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
        f"dependencies = {json.dumps(requires)}\n"
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(index),
            str(src),
        ],
        check=True,
        capture_output=True,
    )


def test_room_folder_holds_what_the_lock_pins_for_each_target_and_installs_with_no_index(tmp_path):
    """A tiny room, all offline: wheels of three small packages stand in for PyPI. `prepare` downloads what
    installing the roots needs, at the lock's versions, with the lock's markers evaluated for the target
    machine (pip itself would evaluate them for this one), and a fresh venv installs from the room with
    --no-index."""
    from packaging.requirements import Requirement

    index = tmp_path / "index"
    tiny_package(tmp_path, "roomcheck", "0.1", ["roomcore", "roomwin; sys_platform == 'win32'"], index)
    tiny_package(tmp_path, "roomcore", "1.0", [], index)
    tiny_package(tmp_path, "roomcore", "2.0", [], index)  # newer than the pin: must not be taken
    tiny_package(tmp_path, "roomwin", "0.2", [], index)
    lock = tmp_path / "learner.txt"
    lock.write_text(
        "# a lock\nroomcheck==0.1  # via course-utils (pyproject.toml)\nroomcore==1.0  # via roomcheck\n"
        "roomwin==0.2 ; sys_platform == 'win32'  # via roomcheck\nunused==9.9  # pinned, never needed\n"
    )
    source = ["--no-index", f"--find-links={index}"]
    out = tmp_path / "room"
    notes = room.prepare(
        out, lock, pip_args=source, data=False, course=False, build_backend=False, roots=[Requirement("roomcheck")]
    )
    assert sorted(p.name for p in (out / "wheels").iterdir()) == [
        "roomcheck-0.1-py3-none-any.whl",
        "roomcore-1.0-py3-none-any.whl",
    ], notes  # no roomwin off Windows
    assert "--no-index" in (out / "README.txt").read_text() and "(learner set)" in (out / "README.txt").read_text()
    room.prepare(
        out,
        lock,
        platforms=["win_amd64"],
        python_versions=["3.12"],
        pip_args=source,
        data=False,
        course=False,
        build_backend=False,
        roots=[Requirement("roomcheck")],
    )
    assert "roomwin-0.2-py3-none-any.whl" in {p.name for p in (out / "wheels").iterdir()}  # Windows needs it
    assert "win_amd64 / Python 3.12 (learner set)" in (out / "README.txt").read_text()
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    py = env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", "--find-links", out / "wheels", "-c", lock, "roomcheck"],
        check=True,
        capture_output=True,
    )
    got = subprocess.run(
        [py, "-c", "import roomcheck, roomcore; print(roomcore.VALUE)"], capture_output=True, text=True
    )
    assert got.stdout.strip() == "1.0", got.stderr
    lock.write_text("roomcheck==0.1\n")  # a lock that lacks what roomcheck needs
    with pytest.raises(ValueError, match=r"pins no version of roomcore for this platform.*needed by roomcheck"):
        room.prepare(
            out, lock, pip_args=source, data=False, course=False, build_backend=False, roots=[Requirement("roomcheck")]
        )


def test_marker_environments_describe_the_target_not_this_machine():
    envs = room.marker_environments("win_amd64", "3.10")
    assert [e["python_full_version"] for e in envs] == ["3.10.0", "3.10.99"]
    assert {(e["sys_platform"], e["platform_machine"], e["os_name"]) for e in envs} == {("win32", "AMD64", "nt")}
    assert room.marker_environments("macosx_14_0_arm64", None)[0]["platform_system"] == "Darwin"
    assert room.marker_environments("manylinux_2_28_aarch64", "3.13")[0]["platform_machine"] == "aarch64"


def test_lab_offline_installs_from_the_room_folder_only(tmp_path, monkeypatch):
    course, calls = fake_venv_course(tmp_path / "venv", monkeypatch)
    (tmp_path / "room" / "wheels").mkdir(parents=True)
    where, rest = course.take_offline(["--offline", str(tmp_path / "room"), "--port=9999"])
    assert rest == ["--port=9999"]
    course.ensure_installed(where)
    pip = calls[0]
    assert pip[pip.index("--find-links") + 1] == str(tmp_path / "room" / "wheels")
    assert "--no-index" in pip and pip[-4:] == ["-c", "lock/learner.txt", "-e", ".[lab]"]
    assert course.take_offline(["--offline=http://10.0.0.2:8000/wheels/"])[0] == "http://10.0.0.2:8000/wheels/"
    assert course.offline_source("http://10.0.0.2:8000/wheels/") == "http://10.0.0.2:8000/wheels/"
    # pip ignored the room machine's plain-http host ("not a trusted or secure host"), so `lab --offline
    # http://HOST:8000/wheels/`, as the room's README.txt prints it, found no package on any laptop
    calls.clear()
    monkeypatch.setattr(course, "STAMP", tmp_path / "venv" / ".none")
    course.ensure_installed("http://10.0.0.2:8000/wheels/")
    pip = calls[0]
    assert pip[pip.index("--find-links") + 1] == "http://10.0.0.2:8000/wheels/"
    assert pip[pip.index("--trusted-host") + 1] == "10.0.0.2"
    assert "--trusted-host" not in course.offline_pip_args(str(tmp_path / "room"))
    assert "--trusted-host" not in course.offline_pip_args("https://room.example/wheels/")


# ------------------------------------------------------------------------ nothing a learner made is ever lost

DEAD_PID = 2**22 + 12345  # above any pid_max default: the temporary of a run that was killed


def test_package_onto_an_existing_zip_needs_force_and_keeps_a_backup(tmp_path):
    """The instructor zip, packed over one made yesterday: it holds everything, solutions and sources."""
    out = tmp_path / "course.zip"
    out.write_bytes(b"a zip an instructor made yesterday")
    with pytest.raises(
        ValueError,
        match=r"course.zip already exists \(a file\); it is never replaced silently: "
        r".* or add --force to replace it",
    ):
        room.package(out, learner=False)
    assert out.read_bytes() == b"a zip an instructor made yesterday"
    stale = tmp_path / f".course.zip.{DEAD_PID}-abc.tmp"
    stale.write_bytes(b"half a zip from a killed run")
    done = room.package(out, learner=False, force=True, now=datetime(2026, 1, 2, 3, 4, 5))
    assert done.backup == tmp_path / "backup-course-20260102-030405.zip"
    assert done.backup.read_bytes() == b"a zip an instructor made yesterday"
    assert not stale.exists()  # cleaned by the next run
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
    assert "attention-course/course.py" in names
    assert any(n.startswith("attention-course/solutions/") for n in names)
    assert any(n.startswith("attention-course/course_source/") for n in names)
    assert room.learner_leaks(out, solutions_allowed=True)  # the leak check does see the sources
    assert not [n for n in names if n.endswith((".zip", ".tmp")) or "/backup-" in n]  # never itself, never others
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup-course-20260102-030405.zip", "course.zip"]


def fake_download(out, *args, **kwargs):
    (out / "wheels").mkdir(parents=True, exist_ok=True)
    (out / "wheels" / "fake-0.1-py3-none-any.whl").write_bytes(b"wheel")
    return []


def test_a_room_stopped_by_a_failed_download_can_be_run_again(tmp_path, monkeypatch):
    """`room OUT --python-version 3.99` (a version pip has no wheels for) or a dropped network failed the download
    and left OUT/wheels/ without the room's mark, so the corrected command was refused as 'already exists'."""

    def failing_download(out, *args, **kwargs):
        (out / "wheels").mkdir(parents=True, exist_ok=True)
        raise RuntimeError("pip download failed")

    monkeypatch.setattr(room, "download_wheels", failing_download)
    out = tmp_path / "room"
    with pytest.raises(RuntimeError, match="pip download failed"):
        room.prepare(out, data=False, course=False)
    monkeypatch.setattr(room, "download_wheels", fake_download)
    room.prepare(out, data=False, course=False)  # no --force needed: the folder is the room's own
    assert sorted(p.name for p in out.iterdir()) == [".course-room.json", "README.txt", "wheels"]
    assert not list(tmp_path.glob("backup-*"))


def test_room_onto_an_existing_folder_needs_force_and_moves_it_aside_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(room, "download_wheels", fake_download)
    out = tmp_path / "room"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "plan.md").write_text("my workshop plan")
    with pytest.raises(ValueError, match=r"room already exists \(a folder\); .* add --force"):
        room.prepare(out, data=False, course=False)
    assert sorted(p.name for p in out.iterdir()) == ["notes"]  # nothing written, nothing downloaded
    notes = room.prepare(out, data=False, course=False, force=True, now=datetime(2026, 1, 2, 3, 4, 5))
    kept = tmp_path / "backup-room-20260102-030405"
    assert (kept / "notes" / "plan.md").read_text() == "my workshop plan"
    assert any(str(kept) in n for n in notes)
    assert sorted(p.name for p in out.iterdir()) == [".course-room.json", "README.txt", "wheels"]
    empty = tmp_path / "empty"
    empty.mkdir()
    room.prepare(empty, data=False, course=False)  # an empty folder has nothing to lose: no --force needed
    assert (empty / "README.txt").exists()


def test_a_second_room_run_adds_to_its_folder_and_keeps_a_changed_file(tmp_path, monkeypatch):
    """As for a mixed room: a second run into a folder room made adds to it (no --force); a file edited since
    room wrote it is moved aside, one left as room wrote it is simply replaced."""
    monkeypatch.setattr(room, "download_wheels", fake_download)
    out = tmp_path / "room"
    room.prepare(out, data=False, course=False, platforms=["win_amd64"])
    assert "win_amd64" in (out / "README.txt").read_text()
    room.prepare(out, data=False, course=False, platforms=["macosx_11_0_arm64"], now=datetime(2026, 1, 2, 3, 4, 5))
    readme = (out / "README.txt").read_text()
    assert "win_amd64" in readme and "macosx_11_0_arm64" in readme  # both sets of laptops
    assert not list(out.glob("backup-*"))  # README.txt was as room left it: nothing to keep
    (out / "README.txt").write_text("my notes for the room")
    notes = room.prepare(out, data=False, course=False, now=datetime(2026, 1, 2, 3, 4, 5))
    kept = out / "backup-README-20260102-030405.txt"
    assert kept.read_text() == "my notes for the room" and any(kept.name in n for n in notes)
    assert "--no-index" in (out / "README.txt").read_text()


def test_the_room_folder_carries_the_static_site(tmp_path, monkeypatch):
    """prepare writes the solved notebooks as a static site into DIR/site (course_tools.site) and README.txt
    says to open site/index.html; a second run rebuilds it in place. (One small notebook, to stay fast.)"""
    import shutil

    from course_tools import site

    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copy(ROOT / "solutions" / "00_setup_check.ipynb", solutions)
    monkeypatch.setattr(site, "SOLUTIONS", solutions)
    monkeypatch.setattr(room, "download_wheels", fake_download)
    monkeypatch.setattr(room, "package", lambda out, **kw: out.write_bytes(b"a zip"))
    out = tmp_path / "room"
    notes = room.prepare(out, data=False)
    assert (out / "site" / "index.html").is_file() and (out / "site" / "00_setup_check.html").is_file()
    assert any(n.startswith("site: 1 notebooks, open ") for n in notes)
    assert "site/index.html" in (out / "README.txt").read_text()
    (out / "site" / "00_setup_check.html").write_text("my notes")
    notes = room.prepare(out, data=False, now=datetime(2026, 1, 2, 3, 4, 5))
    assert (out / "site" / "backup-00_setup_check-20260102-030405.html").read_text() == "my notes"
    assert "course-site-toc" in (out / "site" / "00_setup_check.html").read_text()
    room.prepare(tmp_path / "no-course", data=False, course=False)
    assert not (tmp_path / "no-course" / "site").exists()
    monkeypatch.setattr(site, "SOLUTIONS", tmp_path / "missing")  # a learner's copy has no solutions/
    assert any(n.startswith("skipped site/: no folder") for n in room.prepare(tmp_path / "r3", data=False))


def test_room_no_solutions_packs_the_learner_zip_without_them_and_its_readme_says_so(tmp_path, monkeypatch, capsys):
    """`room DIR --no-solutions` for a graded session: the zip it packs has no solutions/, and DIR has no site/ (it
    used to build one from every solved notebook, while README.txt said to copy the whole folder to each laptop);
    README.txt says both. Packing says what it does before it starts."""
    monkeypatch.setattr(room, "download_wheels", fake_download)
    out = tmp_path / "room"
    assert room.main(["prepare", str(out), "--no-data", "--no-solutions"]) == 0
    said = capsys.readouterr().out
    assert said.index("packing ") < said.index("room folder ready") and "building the static site" not in said
    assert "skipped site/ (--no-solutions: its pages show every solution)" in said
    assert not (out / "site").exists()
    leaks = [p for p in out.rglob("*") if p.is_file() and b"### BEGIN SOLUTION" in p.read_bytes()]
    assert leaks == []
    with zipfile.ZipFile(out / "course-learner.zip") as z:
        assert not [n for n in z.namelist() if n.startswith("attention-course/solutions/")]
        assert room.GRADED_SENTENCE in z.read("attention-course/README.md").decode("utf-8")
    readme = (out / "README.txt").read_text()
    assert "course-learner.zip   the course without solutions/ (for a graded session)" in readme
    assert "site/index.html" not in readme and "the static site, whose pages show\n" in readme
    assert room.ROOM_SITE.splitlines()[0] not in readme


def test_a_graded_room_refuses_a_folder_that_holds_a_site_from_before(tmp_path, monkeypatch):
    monkeypatch.setattr(room, "download_wheels", fake_download)
    monkeypatch.setattr(room, "build_room_site", lambda out, now=None: (out / "site").mkdir() or "site: made")
    out = tmp_path / "room"
    room.prepare(out, data=False, course=True)
    assert (out / "site").is_dir()
    with pytest.raises(ValueError, match="holds site/ from an earlier run"):
        room.prepare(out, data=False, solutions=False)


def test_the_pip_commands_room_prints_paste_back_whole(tmp_path, monkeypatch, capsys):
    """The `$ pip download ...` line and the `failed: ...` line quote a room folder with spaces in its path."""
    import shlex

    def refuse(cmd, **kw):
        raise subprocess.CalledProcessError(1, cmd)

    monkeypatch.setattr(room.subprocess, "run", refuse)
    out = tmp_path / "room 12" / "sité ü"
    assert room.main(["prepare", str(out), "--no-data", "--no-course"]) == 1
    said = capsys.readouterr()
    shown = next(ln for ln in said.out.splitlines() if ln.startswith("  $ "))
    failed = said.err.strip().removeprefix("failed: ")
    assert shlex.split(failed) == shlex.split(shown.removeprefix("  $ "))
    where = shlex.split(failed)[shlex.split(failed).index("-d") + 1]
    assert Path(where).parent == out, where  # one argument, in the room folder


def test_a_link_to_a_room_folder_is_refused_as_a_link(tmp_path, monkeypatch):
    """DIR a symbolic link (to a room folder, or to a site): refused before anything is written, saying it is a
    link (it said "a folder"); --force moves the link aside and leaves what it points to as it is."""
    monkeypatch.setattr(room, "download_wheels", fake_download)
    made = tmp_path / "room"
    room.prepare(made, data=False, course=False)
    before = {p: p.read_bytes() for p in made.rglob("*") if p.is_file()}
    link = tmp_path / "link"
    link.symlink_to(made)
    shown = re.escape(str(made))
    with pytest.raises(
        ValueError,
        match=rf"link is a symbolic link \(to {shown}\); the room folder is never "
        r"written through a link.* or add --force to move the link aside",
    ):
        room.prepare(link, data=False, course=False)
    room.prepare(link, data=False, course=False, force=True, now=datetime(2026, 1, 2, 3, 4, 5))
    assert (tmp_path / "backup-link-20260102-030405").is_symlink() and not link.is_symlink()
    assert {p: p.read_bytes() for p in made.rglob("*") if p.is_file()} == before


def test_every_tool_in_the_learner_zip_imports_only_what_the_zip_holds_and_the_rest_is_refused(learner_copy, tmp_path):
    """The #11 review: the learner zip shipped course_tools/site.py without the build.py and room.py it imports,
    and course.py offered site, room, package and build there, which ended in ModuleNotFoundError."""
    import ast

    course = learner_copy
    tools = {p.stem for p in (course / "course_tools").glob("*.py")}
    assert {"grade", "reset", "corpus"} <= tools and not {"build", "room", "site", "vendor_js"} & tools
    for module in (course / "course_tools").glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in tree.body:  # what loading the module imports (reset reaches for build only beside course_source/)
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            for name in names:
                if name.startswith("course_tools."):
                    part = name.split(".")[1]
                    assert part in tools or part in {"__init__"}, f"{module.name} imports {name}, not in the zip"
    for command in ("site", "room", "package", "build"):
        done = run_command([sys.executable, str(course / "course.py"), command, str(tmp_path / "out")], cwd=tmp_path)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f"`{command}` is an author's or instructor's command: this is the learner copy" in done.stderr


def laptop_lines(where: str) -> list[str]:
    """The lines for each laptop that README.txt (in the room folder) or docs/INSTRUCTOR_GUIDE.md gives."""
    if where == "README.txt":
        text = room.ROOM_README.format(
            targets="this platform", solutions=room.with_solutions(True), site=room.ROOM_SITE
        )
        block = text.split("On each laptop, with this folder copied to it", 1)[1].split("\n\n")[1]
        return [line.strip() for line in block.splitlines()]
    text = room.GUIDE.read_text(encoding="utf-8")
    blocks = [
        b for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) if "course-learner.zip" in b and "unzip" in b
    ]
    assert len(blocks) == 1, blocks
    return blocks[0].strip().splitlines()


@pytest.mark.parametrize("where", ["README.txt", "guide"])
def test_the_instructions_for_each_laptop_run_as_printed(where, tmp_path, learner_zip):
    """README.txt said `unzip ... -d ~/attention-course && cd ~/attention-course`, but the zip holds its own
    attention-course/ folder: the next line found no course.py. README.txt's lines run from anywhere, the guide's
    from the folder that holds room/; as one bash script with ``lab`` asked for its help (nothing installed),
    then a check that the folder --offline names is the room folder."""
    home = tmp_path / "home"
    (home / "room" / "wheels").mkdir(parents=True)
    (home / "room" / "course-learner.zip").write_bytes(learner_zip.read_bytes())
    (tmp_path / "elsewhere").mkdir()
    lines = laptop_lines(where)
    assert re.match(r"unzip (~/)?room/course-learner\.zip", lines[0]) and lines[-1].startswith("python3 course.py lab")
    offline = re.search(r"--offline (\S+)", lines[-1]).group(1)
    script = [line.replace("course.py lab ", "course.py lab --help ") for line in lines]
    script += [f'test -d {offline}/wheels || {{ echo "--offline {offline} is no room folder here"; exit 3; }}']
    proc = run_command(
        ["bash", "-e", "-c", "\n".join(script)],
        cwd=tmp_path / "elsewhere" if where == "README.txt" else home,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "COURSE_VENV": str(tmp_path / "venv")},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--offline DIR" in proc.stdout  # lab's own help, from the unzipped course.py
    assert (home / "attention-course" / "course.py").is_file() and not (tmp_path / "venv").exists()


# What `course.py room` and `course.py package` refuse before anything is written or downloaded: one line saying
# why, exit code 2. {root} is the course, {tmp} a new folder, {file} a file in it. Each row was once a traceback,
# a folder left behind (the corrected command then refused as "already exists"), a flag taken by its prefix
# (--no-solution for --no-solutions) or a message naming room.py instead of the command typed.
REFUSED = [
    ("package --learner {root}/notebooks/03_masking.ipynb", r"^course package: .*--force does not change this"),
    ("package --learner {root}/notebooks/03_masking.ipynb --force", r"--force does not change this"),
    ("package --instructor {root}/notebooks/new.zip --force", r"--force does not change this"),
    ("package --learner {root}/course-learner-test.zip", r"is inside the course folder {root}.*add --force to write"),
    ("package --instructor {tmp}/i.zip --no-solutions", r"^course package: --no-solutions is for the learner zip"),
    (
        "package --learner {file}/x.zip",
        r"^course package: cannot write the zip to {file}/x\.zip: {file} is a file, not a folder",
    ),
    (
        "package --learner /sys/x.zip",
        r"^course package: cannot write the zip to /sys/x\.zip: the system .* in /sys \(.*\); give the zip a path",
    ),
    ("package --learner x.zip --no-solution", r"^usage: python3 course.py package.*unrecognized arguments"),
    ("room {root}/room-test-folder", r"^course room: .*is inside the course folder .* or add --force"),
    ("room {root}/notebooks/room --force", r"is inside notebooks/, a folder of the course .* \(--force does not"),
    ("room {root_parent} --force", r"holds the course folder .* itself"),
    (
        "room {file}/room",
        r"^course room: cannot write the room folder to {file}/room: {file} is a file, not a folder; give the room "
        r"folder a path in a folder you can write to, e\.g\. {home}/room\n$",
    ),
    *(
        (
            f"room {system}/room",
            rf"^course room: cannot write the room folder to {system}/room: the system .* in {system} \(.*\); give "
            r"the room folder a path in a folder you can",
        )
        for system in ("/sys", "/proc")
    ),
    ("room {tmp}/room --platform bogus_tag", r"unknown platform tag 'bogus_tag': expected one such as"),
    ("room {tmp}/empty --platform win_amd64 --platform bogus_tag", r"unknown platform tag 'bogus_tag'"),
    ("room {tmp}/room --python-version 3", r"--python-version wants X\.Y such as 3\.12, got '3'"),
    ("room {tmp}/empty --platform win_amd64 --python-version 3", r"--python-version wants X\.Y"),
    ("room {tmp}/room --python-version 2.7", r"--python-version 2\.7: the course's lock covers Python 3\.10 to 3\.13"),
    ("room {tmp}/room --python-version 3.99", r"--python-version 3\.99: the course's lock covers Python 3\.10 to"),
]


@pytest.mark.parametrize(("args", "said"), REFUSED)
def test_room_and_package_refuse_in_one_line_before_anything_is_made(args, said, tmp_path, monkeypatch, capsys):
    system = next((d for d in ("/sys", "/proc") if f" {d}/" in args), None)
    if system and not (sys.platform.startswith("linux") and Path(system).is_dir()):
        pytest.skip(f"no {system} here")
    monkeypatch.setattr(room, "download_wheels", lambda *a, **k: pytest.fail("downloaded"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("an instructor's notes")
    where = {"root": ROOT, "root_parent": ROOT.parent, "tmp": tmp_path, "file": tmp_path / "notes.txt"}
    where["home"] = Path.home()
    before = {p: sorted(p.iterdir()) for p in (ROOT, ROOT / "notebooks", tmp_path, tmp_path / "empty")}
    words = args.format(**where).split()
    command = {"room": "prepare", "package": "package"}[words[0]]
    try:
        assert room.main([command, *words[1:]]) == 2
    except SystemExit as stopped:  # argparse's refusal
        assert stopped.code == 2
    said = said.format(**{k: re.escape(str(v)) for k, v in where.items()})
    assert re.search(said, capsys.readouterr().err, re.DOTALL), said
    assert {p: sorted(p.iterdir()) for p in before} == before
    assert (tmp_path / "notes.txt").read_text() == "an instructor's notes"
    assert room.lock_pythons() == ("3.10", "3.13")  # the range said is the lock's own header's


def test_the_learner_zip_holds_every_folder_a_notebook_reads(learner_zip):
    """Notebooks 08 and 11 read benchmarks/results/ and 08 runs benchmarks/attention_cost.py: a learner copy
    without benchmarks/ failed there with FileNotFoundError."""
    read = set()
    for source in sorted((room.ROOT / "course_source").glob("[0-9][0-9]_*.py")):
        read |= set(re.findall(r'ROOT / "([^"/]+)"', source.read_text(encoding="utf-8")))
    assert read, "no notebook reads a folder of the course: the pattern is stale"
    with zipfile.ZipFile(learner_zip) as z:  # what is shipped: each entry is TOP/path
        learner = {name.split("/")[1] for name in z.namelist() if name.count("/") >= 2}
    assert read <= learner, f"the learner zip lacks {sorted(read - learner)}, which notebooks read"


def test_reset_of_an_untouched_notebook_in_the_learner_zip_writes_nothing_run_literally(learner_copy):
    """`reset notebooks/01_dot_product_toy.ipynb` on the notebook as the zip ships it (executed, with outputs) used
    to keep a backup and wipe the outputs, though the README promises nothing is written when it already is the
    clean copy. The zip records each notebook's sha256 as packed (.course/shipped.json); run in the unzipped copy."""
    course = learner_copy
    notebook = course / "notebooks" / "01_dot_product_toy.ipynb"
    before = notebook.read_bytes()
    proc = run_command(
        [sys.executable, "course.py", "reset", "notebooks/01_dot_product_toy.ipynb"], cwd=course, env=installed_env()
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "already is the clean learner copy: nothing written, no backup made." in proc.stdout, proc.stdout
    assert notebook.read_bytes() == before and not list(notebook.parent.glob("backup-*"))


def readme_links_missing(course: Path) -> list[str]:
    """The README's relative links (``[text](path)``) whose file or folder the copy at ``course`` lacks."""
    text = (course / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)]
    return [t for t in targets if t and "://" not in t and not (course / t).exists()]


def test_the_learner_zips_readme_links_only_what_it_holds_and_names_what_it_leaves_out(learner_copy):
    """The learner zip's README linked docs/INSTRUCTOR_GUIDE.md and CONTRIBUTING.md, which it lacks: links to what
    the zip leaves out become plain text marked "(in the full course)", and a note names what is left out."""
    full = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/INSTRUCTOR_GUIDE.md)" in full and "](CONTRIBUTING.md)" in full  # what the zip lacks is linked
    course = learner_copy
    assert readme_links_missing(course) == []
    text = (course / "README.md").read_text(encoding="utf-8")
    assert "docs/INSTRUCTOR_GUIDE.md (in the full course)" in text and "CONTRIBUTING.md (in the full course)" in text
    note = next(line for line in text.splitlines() if line.startswith("> **This is the learner copy"))
    for absent in ("`CONTRIBUTING.md`", "`course_source/`", "`docs/`", "`tests/`", "`tools/`"):
        assert absent in note and not (course / absent.strip("`")).exists(), absent
    assert "`solutions/`" not in note and (course / "solutions").is_dir()  # this zip has them


def test_every_sentence_of_a_graded_zip_about_solutions_is_true_run_literally(graded_zip, tmp_path):
    """`package --learner X.zip --no-solutions` still told the learner, in its README and in `course.py --help` and
    `lab --help`, that JupyterLab shows notebooks/ and solutions/ side by side and that solutions/ holds every
    exercise solved. Packed and run literally: no such sentence is left, and each says this copy has none."""
    with zipfile.ZipFile(graded_zip[1]) as z:
        z.extractall(tmp_path)
    course = tmp_path / "attention-course"
    assert not (course / "solutions").exists() and readme_links_missing(course) == []
    text = (course / "README.md").read_text(encoding="utf-8")
    for full, instead in room.GRADED_README:
        assert full in (ROOT / "README.md").read_text(encoding="utf-8")  # what is replaced is in the course's README
        assert full not in text and text.count(instead) == 1
    assert "(complete notebooks) side by side" not in text and "every exercise solved" not in text
    assert "own solution" not in text  # hint=3 has none to show here
    note = next(line for line in text.splitlines() if line.startswith("> **This is the learner copy"))
    assert "`solutions/`" in note
    for args in (["--help"], ["lab", "--help"]):
        shown = run_command([sys.executable, "course.py", *args], cwd=course, timeout=60).stdout
        shown = " ".join(shown.split())  # help is wrapped to the terminal
        assert "notebooks/ and solutions/ both open" not in shown and "has no solutions/" in shown, args
        assert shown.count("(not in this learner copy of the course") == (4 if args == ["--help"] else 0)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ("room DIR --no-solution", "python3 course.py room: error: unrecognized arguments: --no-solution"),
        ("reset notebooks/03_masking.ipynb --exer 03.1", "python3 course.py reset: error: unrecognized arguments"),
    ],
)
def test_a_command_refuses_an_abbreviated_flag_naming_itself_run_literally(tmp_path, args, said):
    """argparse took `--no-solution` for --no-solutions and its errors said `usage: room.py` (REFUSED has the
    other flags, in this process). Run literally from a new folder: exit 2, the command named as typed, nothing made."""
    proc = run_command([sys.executable, str(ROOT / "course.py"), *args.split()], cwd=tmp_path, env=installed_env())
    assert proc.returncode == 2 and said in proc.stderr, proc.stdout + proc.stderr
    assert "room.py" not in proc.stderr and "reset.py" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
