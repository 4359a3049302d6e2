"""The measured peak of one call (experiments.peak_memory): the resident set's growth while it runs."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from experiments.peak_memory import call_peak

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
MIB = 1 << 20


def test_a_buffer_the_call_touches_is_counted_and_one_it_frees_still_counts():
    def touch_and_free():
        buffer = np.ones(64 * MIB, np.uint8)
        return int(buffer[::4096].sum())
    assert call_peak(touch_and_free) >= 60 * MIB  # less what the process released meanwhile
    assert call_peak(lambda: None) < 16 * MIB
