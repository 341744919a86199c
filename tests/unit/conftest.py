"""Fixtures shared by the unit tests."""

from __future__ import annotations

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
