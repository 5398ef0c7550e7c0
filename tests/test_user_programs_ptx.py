"""The gradients of the user programs lowered for target="cuda": their PTX (written in a child
process, as NVPTX can abort on a bad lowering) assembles with ptxas for sm_80 and sm_90. Their
numbers are checked by the CUDA emulation in each program's own test."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptx_child import assemble_in_child  # noqa: E402

_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import symgrad as sg
import test_user_programs_rnn as rnn
import test_user_programs_science as sci
programs = [
    (rnn.elman_loss, rnn.elman_args(), (0, 1, 2)),
    (rnn.hand_objective, rnn.hand_args(), 0),
    (sci.gp_nll_cholesky, [np.log(np.array([0.8, 1.2, 0.1])), np.linspace(0, 3, 7), np.sin(np.arange(7.0))], 0),
    (sci.contact_energy, [np.array([0.0, 1.0, -1.0, 0.5, 0.25]), 50.0, 0.0], (0, 1)),
    (sci.final_state_loss, [np.array([1.1, 0.4, 0.1, 0.4]), np.array([2.0, 1.0])], (0, 1)),
]
for path, (fn, args, wrt) in zip(sys.argv[1:], programs):
    open(path, "w").write(sg.grad(fn, wrt=wrt, target="python").ptx(*args, arch="ARCH"))
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_user_program_gradients_assemble_with_ptxas(tmp_path, arch):
    files = [tmp_path / f"program{i}.ptx" for i in range(5)]
    assemble_in_child(_SCRIPT.replace("ARCH", arch), files, arch=arch)
