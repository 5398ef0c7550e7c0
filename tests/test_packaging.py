"""pyproject.toml uses the SPDX license string (a TOML table makes every pip install warn that
it is deprecated); setuptools reads that form from version 77 on, so the build requires it."""
import pathlib
import re

import pytest

tomllib = pytest.importorskip("tomllib")   # Python 3.11+ (3.10 has no TOML reader built in)

PYPROJECT = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_license_is_an_spdx_string():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["license"] == "MIT"


def test_build_requires_a_setuptools_that_reads_spdx_licenses():
    requires = tomllib.loads(PYPROJECT.read_text())["build-system"]["requires"]
    (setuptools,) = [r for r in requires if r.startswith("setuptools")]
    minimum = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert minimum is not None and int(minimum.group(1)) >= 77, setuptools
