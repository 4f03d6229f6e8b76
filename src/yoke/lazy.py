"""A package's names loaded on first use (a module `__getattr__`, PEP 562).

`import yoke` (and `yoke.actors`, `yoke.executions`, `yoke.store`) must stay cheap: an executor
process imports the app's module, which imports yoke, on a cold tenant's wake path, and pays for
every module loaded there. So these packages name what they export in a table (name -> module)
and load a module only when one of its names is first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str,
    table: Mapping[str, str],
    namespace: dict[str, Any],
    *,
    aliases: Mapping[str, str] | None = None,
) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: `table` maps each name to the module that defines it;
    `aliases` maps another name to one in `table`. A name found is kept in `namespace` (the
    package's globals), so it is looked up once."""
    renamed = aliases or {}

    def __getattr__(name: str) -> Any:
        target = renamed.get(name, name)
        module = table.get(target)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), target)
        namespace[name] = value
        return value

    return __getattr__
