"""Build configuration beyond pyproject.toml: the optional compiled record walk.

storage/_recwalk.c is a plain CPython extension (storage/validator.py's fast check).
`optional=True`: when it cannot be compiled (no compiler, no Python headers) the
install still succeeds and storage/validator.py uses its pure-Python walk. An editable
install (`pip install -e .`, what scripts/dev.sh does) builds it in place, next to
storage/validator.py, so that a checkout run from its root imports it too.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._recwalk", ["storage/_recwalk.c"], optional=True)])
