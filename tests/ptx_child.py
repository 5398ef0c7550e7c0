"""PTX written by a child process and assembled by ptxas: NVPTX can abort a process on a bad
lowering, so the tests that ask for PTX of large programs generate it in a child."""
import os
import shutil
import subprocess
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))


def assemble_in_child(script: str, files, arch: str = "sm_80"):
    """Run ``script`` (its ``{tests}`` is this folder; it writes the PTX files named by
    sys.argv[1:]) in a child, then assemble each file with ptxas; skips without ptxas."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not found")
    r = subprocess.run([sys.executable, "-c", script.format(tests=TESTS), *map(str, files)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for p in files:
        done = subprocess.run([ptxas, f"-arch={arch}", str(p), "-o", os.devnull],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
