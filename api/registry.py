"""Which module answers which page: every module of ``api.answers`` declares its page's ``PATH`` (from
``data.views.paths``), its ``NAME`` in the API's URL (``/api/v1/<NAME>``) and ``answer(query)``; found by
listing the package, so that adding a page's answer is adding its module."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import cache
from types import ModuleType

from api import answers
from api.answer import Answer
from data.store.layout import STORE_FORMAT


class UnknownView(LookupError):
    """No page answers this path or name (the API answers 404, the command line exits 2)."""


@cache
def modules() -> dict[str, ModuleType]:
    """Each answering module by its ``NAME``."""
    found = {}
    for info in pkgutil.iter_modules(answers.__path__):
        mod = importlib.import_module(f"{answers.__name__}.{info.name}")
        if hasattr(mod, "answer") and hasattr(mod, "NAME"):
            found[mod.NAME] = mod
    return dict(sorted(found.items()))


def names() -> list[str]:
    return list(modules())


def by_name(name: str) -> Callable[[dict[str, list[str]]], Answer]:
    mod = modules().get(name)
    if mod is None:
        raise UnknownView(f"No view named {name!r}: one of {', '.join(names())}.")
    return mod.answer


def by_path(path: str) -> tuple[str, Callable[[dict[str, list[str]]], Answer]]:
    """``(name, answer)`` for a page's path (``/reward``; ``/`` is the runs page)."""
    path = "/" + path.strip("/")
    for name, mod in modules().items():
        if mod.PATH == path:
            return name, mod.answer
    raise UnknownView(f"No page at {path!r}: one of {', '.join(m.PATH for m in modules().values())}.")


def store_info(store) -> dict:
    """What an answer says of the store it read: its format and committed version (None: none yet)."""
    return {"format": STORE_FORMAT, "version": None if store is None else store.version}
