"""Every public entry of the reference modules, called with a battery of bad inputs (tests/bad_inputs.py):
each raises what tests/bad_inputs.json records, with the course's own message, never an error from inside torch."""

import json

import pytest
from bad_inputs import RECORD, run

RECORDED = json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def outcomes():
    return run()


def test_no_bad_input_ends_in_an_error_from_inside_torch(outcomes):
    leaks = {case: got for case, got in outcomes.items() if len(got) == 3 and got[2] != "course"}
    assert not leaks


def test_every_case_raises_what_was_recorded(outcomes):
    assert sorted(outcomes) == sorted(RECORDED)
    changed = {case: (RECORDED[case], got) for case, got in outcomes.items() if got != RECORDED[case]}
    assert not changed, "re-record with `python tests/bad_inputs.py --write` only after a change made on purpose"
