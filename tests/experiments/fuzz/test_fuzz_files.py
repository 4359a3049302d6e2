"""A short seeded sample of ``experiments.fuzz.files``: saved schedules and problem files
mutated at random either load and give correct results or are refused with a one-line
StaxError; never another exception, a hang or the hostile name's marker file."""
from __future__ import annotations

from experiments.fuzz.files import HOSTILE, MARKER, fuzz


def test_mutated_files_load_correctly_or_are_refused_in_one_line():
    failures: list[str] = []
    counts = fuzz(240, seed=51, echo=failures.append)
    assert failures == [] and counts["failure"] == 0
    assert counts["loaded"] > 0 and counts["refused"] > 0, counts  # both outcomes were exercised
    assert not MARKER.exists()


def test_the_hostile_value_would_leave_the_marker():
    assert str(MARKER) in HOSTILE and "system(" in HOSTILE
