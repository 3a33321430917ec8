"""The package list of pfc, found rather than listed (pyproject.toml has the rest).

The import package ``pfc`` is assembled from four folders (``[tool.setuptools.package-dir]``
in pyproject.toml): compiler/ is ``pfc``, backends/ is ``pfc.backends``, grammar/ and
templates/ are the resource packages ``pfc.grammar`` and ``pfc.templates``. Every folder
under them is a package of the wheel, with or without an ``__init__.py``, so a new
subpackage cannot be left out (tests/tools/test_install.py imports every module from an
installed wheel).
"""

import setuptools
from setuptools import find_namespace_packages, setup

ROOTS = {"pfc": "compiler", "pfc.backends": "backends", "pfc.grammar": "grammar",
         "pfc.templates": "templates"}


def packages() -> list[str]:
    found = []
    for name, folder in ROOTS.items():
        subs = find_namespace_packages(folder, exclude=["__pycache__", "*.__pycache__"])
        found += [name] + [f"{name}.{sub}" for sub in subs]
    return sorted(found)


def license_metadata() -> dict[str, str]:
    """MIT, as a PEP 639 expression where setuptools has them (77 and later: pip's
    builds), as the old free-text field for older ones (Debian 12's 66: the .deb)."""
    major = int(setuptools.__version__.split(".")[0])
    return {"license_expression": "MIT"} if major >= 77 else {"license": "MIT"}


setup(packages=packages(), **license_metadata())
