"""Settings for every test run from this folder (tests/, and nbval over notebooks/ and solutions/).

Notebook 10 trains a model; under test it runs its smallest size unless told otherwise, so that the
whole suite stays within minutes on a 2-core CPU (set COURSE_GPT_SIZE=cpu or gpu to test a bigger run).
It trains into a fresh folder for each test process (COURSE_RUNS_DIR, removed at exit): a run left in
`runs/` by an earlier test run, or by another pass running at the same time (the learner copy and the
solution on two pytest-xdist workers, the passes under other CPU kernels), is never resumed instead of
trained. A COURSE_RUNS_DIR set before pytest starts is used as it is.
The kernels nbval and the browser tests start inherit this environment.
Backups are never collected: `course.py reset` keeps a learner's previous notebook beside it as
`backup-NAME-DATE.ipynb` (with its wrong answers), and `pytest --nbval-lax notebooks/` (the README's and the
classroom workflow's command, and `course.py test`) would run it and fail on it.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("COURSE_GPT_SIZE", "ci")

_OWNER = "COURSE_RUNS_DIR_OWNER"  # the pid of the test process that made COURSE_RUNS_DIR
if "COURSE_RUNS_DIR" not in os.environ or os.environ.get(_OWNER, str(os.getpid())) != str(os.getpid()):
    # not set by the user, or inherited from the pytest process that started this xdist worker
    _runs = tempfile.mkdtemp(prefix="course-runs-")
    os.environ["COURSE_RUNS_DIR"] = _runs
    os.environ[_OWNER] = str(os.getpid())
    atexit.register(shutil.rmtree, _runs, ignore_errors=True)

# pytest reads this from the conftest.py at the course's root for every path it is given (see the docstring)
collect_ignore_glob = ["notebooks/backup-*", "solutions/backup-*"]
