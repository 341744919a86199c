import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# hack/ holds the local control plane manager (stdlib only); tests and benchmarks import it.
sys.path.insert(0, str(ROOT / "hack"))


# Fixtures shared by the unit tests live here: a second conftest.py under tests/unit would replace
# tests/e2e/conftest.py as the module `conftest` that e2e tests import OperatorProcess from.
import logging  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402


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
