"""``python -m symgrad.readme_numpy [README.md]``: rewrite the README's generated list of the
supported NumPy surface from the tables (tests/test_numpy_surface.py keeps the two equal)."""
import os
import sys

from .numpy_api import rewrite_readme

if __name__ == "__main__":
    rewrite_readme(sys.argv[1] if len(sys.argv) > 1 else
                   os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md"))
