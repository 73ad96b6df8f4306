"""Runs the atheris fuzz target (fuzz_frames_atheris.py) for a bounded number of inputs, when atheris is here.

atheris is not a dependency (it needs a libFuzzer-capable build); where it is missing this test says so as a
skip. The hypothesis tests in test_self_fuzz.py always run.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = Path(__file__).with_name("fuzz_frames_atheris.py")


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (pip install atheris)")
def test_atheris_finds_no_crash_in_20000_inputs():
    proc = subprocess.run([sys.executable, str(TARGET), "-runs=20000", "-seed=1"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done 20000 runs" in proc.stderr
