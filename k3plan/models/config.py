"""Typed, named access to a HF config.json: every missing or bad field is a K3PlanError naming it."""

from __future__ import annotations

from typing import Any

from k3plan.errors import K3PlanError

_MISSING = object()


class ConfigReader:
    def __init__(self, data: dict, *, source: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            raise K3PlanError(f"{source}: '{prefix.rstrip('.') or 'config'}' must be a JSON object")
        self.data, self.source, self.prefix = data, source, prefix

    def _where(self, key: str) -> str:
        return f"{self.source}: field '{self.prefix}{key}'"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = _MISSING) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise K3PlanError(f"{self._where(key)} is missing")
            return default
        return value

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        value = self.get(key, default)
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise K3PlanError(f"{self._where(key)} is {value!r}; expected an integer")
        if value < minimum:
            raise K3PlanError(f"{self._where(key)} is {value}; expected an integer >= {minimum}")
        return value

    def opt_int(self, key: str, *, minimum: int = 1):
        return self.int(key, None, minimum=minimum) if self.has(key) else None

    def bool(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise K3PlanError(f"{self._where(key)} is {value!r}; expected true or false")
        return value

    def int_list(self, key: str, default: Any = _MISSING) -> list[int]:
        value = self.get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise K3PlanError(f"{self._where(key)} is {value!r}; expected a list of integers")
        return value

    def sub(self, key: str, *, required: bool = True) -> "ConfigReader":
        if not required and not self.has(key):
            return ConfigReader({}, source=self.source, prefix=f"{self.prefix}{key}.")
        return ConfigReader(self.get(key), source=self.source, prefix=f"{self.prefix}{key}.")
