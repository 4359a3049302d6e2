"""The measured peak of one call (experiments.models.peak_memory): the resident set's growth while it runs,
in a fresh process as the real zoo measures it (in a long-lived one, memory freed earlier and still
resident can serve the call without the resident set growing)."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
MIB = 1 << 20
CHILD = """
import numpy as np
from experiments.models.peak_memory import call_peak

def touch_and_free():
    buffer = np.ones(64 << 20, np.uint8)
    return int(buffer[::4096].sum())
print(call_peak(touch_and_free), call_peak(lambda: None))
"""


def test_a_buffer_the_call_touches_and_frees_is_counted():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=120)
    touched, idle = map(int, done.stdout.split())
    assert touched >= 60 * MIB  # less what the process released meanwhile
    assert idle < 16 * MIB
