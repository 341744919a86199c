# tests/ (the support package), hack/ (the local control plane manager, stdlib only) and bench/ (its
# scripts) are on sys.path through pyproject.toml's pytest pythonpath.
#
# Fixtures shared by the unit tests live here: a second conftest.py under tests/unit would replace
# tests/e2e/conftest.py as the module `conftest` that e2e tests import OperatorProcess from.
import logging
import sys
import threading

import pytest


@pytest.fixture
def restore_logging():
    """`run` sets up logging for the process (handlers, levels, hooks, warnings): undo it."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("kopf").level, sys.excepthook, threading.excepthook)
    yield
    root.handlers[:], lvl, kopf_level, sys.excepthook, threading.excepthook = saved
    root.setLevel(lvl)
    logging.getLogger("kopf").setLevel(kopf_level)
    logging.captureWarnings(False)
