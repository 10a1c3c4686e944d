"""Settings for every test run from this folder (tests/, and nbval over notebooks/ and solutions/).

Notebook 08 trains a model; under test it runs its smallest size unless told otherwise, so that the
whole suite stays within minutes on a 2-core CPU (set COURSE_08_SIZE=cpu or gpu to test a bigger run).
The kernels nbval and the browser tests start inherit this environment.
"""

import os

os.environ.setdefault("COURSE_08_SIZE", "ci")
