"""The registry of plugins by name."""

from __future__ import annotations

from .interface import Plugin


class RegistryError(ValueError):
    pass


class Registry:
    def __init__(self) -> None:
        self._plugins: dict[str, type[Plugin]] = {}

    def register(self, cls: type[Plugin]) -> type[Plugin]:
        name = cls.NAME
        if not name:
            raise RegistryError(f"plugin class {cls.__name__} has no NAME")
        if name in self._plugins:
            raise RegistryError(f"a plugin named {name!r} is already registered")
        self._plugins[name] = cls
        return cls

    def get(self, name: str) -> type[Plugin] | None:
        return self._plugins.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._plugins

    def names(self) -> list[str]:
        return sorted(self._plugins)
