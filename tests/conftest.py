"""Every test session starts with an empty machine-code cache of its own (unless
SYMGRAD_CACHE_DIR is set), so the suite sees what a fresh machine sees: a test that passed only
because an earlier run had left machine code under ~/.cache/symgrad (reuse across sizes did)
fails here too. Subprocesses started by the tests inherit the directory."""
import os
import shutil
import tempfile

if not os.environ.get("SYMGRAD_CACHE_DIR"):
    _CACHE = tempfile.mkdtemp(prefix="symgrad-test-cache-")
    os.environ["SYMGRAD_CACHE_DIR"] = _CACHE

    def pytest_unconfigure(config):
        shutil.rmtree(_CACHE, ignore_errors=True)
