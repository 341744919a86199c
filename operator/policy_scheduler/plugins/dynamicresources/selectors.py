"""Device selectors as the allocator and DeviceFragmentation evaluate them: a CEL selector's
result on a device (compiled by cel.py), remembered on the device, and whether a DeviceClass
accepts a device."""

from __future__ import annotations

from .cel import CELError, compile_selector
from .objects import Device, DeviceClass

MAX_REMEMBERED = 64  # selector results kept per device


def selector_result(dev: Device, text: str) -> bool | CELError:
    """Selector ``text`` on ``dev``: True, False or the CELError, remembered on the device (at
    most MAX_REMEMBERED results: claims with ever new selectors cannot grow it)."""
    hit = dev.matches.get(text)
    if hit is None:
        try:
            hit = compile_selector(text).evaluate(dev.cel_device())
        except CELError as e:
            hit = e
        if len(dev.matches) >= MAX_REMEMBERED:
            dev.matches.clear()
        dev.matches[text] = hit
    return hit


def class_matches(cls: DeviceClass, dev: Device) -> bool:
    """Whether every selector of ``cls`` accepts ``dev`` (a CEL error counts as no)."""
    return all(selector_result(dev, text) is True for text in cls.selectors)
