"""How a worker starts its executors: the `Launch` every executor of this worker shares.

The app is named by `module:attribute` (`yoke worker --app` gives it; otherwise it is found by
looking for the object among the loaded modules' globals, which works for any app defined at
module level). The executor gets the worker's import path (so it imports the same code),
a working directory per tenant below `YOKE_EXECUTOR_DIR`, and an environment of `PATH`, the
locale, `TZ` and the variables named in `YOKE_EXECUTOR_ENV`: never the database URL, a token,
or anything else of the worker's. This module must never start a process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from yoke.actors.executor import sandbox
from yoke.actors.executor.boot import Launch
from yoke.actors.executor.settings import ExecutorSettings
from yoke.errors import BadValue

log = logging.getLogger("yoke.executor")

BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
# Names an executor never sees, even when YOKE_EXECUTOR_ENV names them.
SECRET_PREFIXES = ("YOKE_DATABASE_URL", "YOKE_TOKEN", "YOKE_TOKENS_FILE", "PG", "DATABASE_URL")


def spec_of(candidates: Iterable[object]) -> str:
    """`module:attribute` of the first candidate found at module level in a loaded module."""
    wanted = [c for c in candidates if c is not None]
    for name, module in list(sys.modules.items()):
        if module is None or name == "__main__" or name.startswith(("yoke.", "_")):
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            if any(value is c for c in wanted):
                return f"{name}:{attr}"
    main = sys.modules.get("__main__")
    main_spec = getattr(main, "__spec__", None)
    if main is not None and main_spec is not None:
        for attr, value in vars(main).items():
            if any(value is c for c in wanted):
                return f"{main_spec.name}:{attr}"
    raise BadValue(
        "executors='process' needs the app importable as module:attribute; define it at "
        "module level, or pass app_spec= (yoke worker --app gives it)"
    )


def make_launch(settings: ExecutorSettings, *, app: str, worker_id: str) -> Launch:
    """How this worker starts its executors; `sandbox.WeakIsolation` if, as root, tenant code
    would run as root and that was not accepted (a WARNING is logged when it was, or when a
    worker that is not root has no namespaces)."""
    python = settings.python or sys.executable
    path = tuple(_import_path())
    directory = _directory(settings.directory, worker_id)
    isolation = isolation_of(settings, app=app, path=path, directory=directory)
    return Launch(
        python=python,
        app=app,
        preload=preload_of(app),
        path=path,
        env=tuple(_env(settings.passed_env)),
        directory=directory,
        isolation=isolation,
        max_frame=settings.max_frame_bytes,
        boot_timeout=settings.boot_timeout,
        dispatch_timeout=settings.dispatch_timeout,
    )


def isolation_of(
    settings: ExecutorSettings, *, app: str, path: tuple[str, ...], directory: Path
) -> sandbox.Isolation:
    """The tiers this worker can give its executors (detected, the namespace tier probed),
    checked: `sandbox.WeakIsolation` when they fail closed, a WARNING when weak but allowed."""
    isolation = sandbox.detect(
        memory_mb=settings.memory_mb,
        python=settings.python or sys.executable,
        needed=_roots(app),
        uids=bool(settings.uids),
        uid_base=settings.uid_base,
        uid_span=settings.uid_count,
        cgroup=settings.cgroup,
        namespaces=settings.namespaces,
        workdir=prepared_base(directory),
        reads=path,
    )
    warning = sandbox.check(isolation, allow_weak=bool(settings.allow_weak_isolation))
    if warning is not None:
        log.warning("%s", warning)
    return isolation


def prepared_base(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def preload_of(app: str) -> tuple[str, ...]:
    """yoke's own modules that the app's module uses (the app object's, and those of the names
    it imports), as loaded in this worker. A warm spare imports them before it is bound: they
    are yoke's code, the same for every tenant, with no effect at import; the app's own module
    is imported only once bound, in the tenant's directory and under its uid, because its
    top-level code is the app's and may look at either."""
    module_name, _, attr = app.partition(":")
    module = sys.modules.get(module_name)
    main = sys.modules.get("__main__")
    if module is None and getattr(getattr(main, "__spec__", None), "name", None) == module_name:
        module = main  # the app's module is the worker's `python -m` module
    if module is None:
        return ()
    values = list(vars(module).values())
    target = getattr(module, attr, None)
    if target is not None:
        values.append(type(target))
    found: set[str] = set()
    for value in values:
        name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", "")
        if isinstance(name, str) and name.startswith("yoke.") and name in sys.modules:
            found.add(name)
    return tuple(sorted(found))


def _roots(app: str) -> list[str]:
    """Where yoke and the app's module are imported from (what an executor must read)."""
    module = app.partition(":")[0]
    out = [str(Path(__file__).resolve().parents[3])]  # .../yoke/actors/executor/launch.py
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.origin:
        origin = Path(found.origin).resolve()
        out.append(str(origin.parents[module.count(".")]))
    return out


def _import_path() -> list[str]:
    out: list[str] = []
    for entry in sys.path:
        full = os.path.abspath(entry or os.getcwd())
        if full not in out and os.path.isdir(full):
            out.append(full)
    return out


def _env(extra: list[str]) -> list[tuple[str, str]]:
    names = [*BASE_ENV, *(n for n in extra if not n.upper().startswith(SECRET_PREFIXES))]
    return [(n, os.environ[n]) for n in dict.fromkeys(names) if n in os.environ]


def _directory(configured: str, worker_id: str) -> Path:
    if configured:
        return Path(configured).resolve()
    digest = hashlib.blake2b(worker_id.encode(), digest_size=6).hexdigest()
    return Path(tempfile.gettempdir()) / f"yoke-executors-{os.getuid()}" / digest
