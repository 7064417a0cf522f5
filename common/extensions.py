"""Loading an optional compiled accelerator, or saying why the pure-Python reference runs.

The store (``broker/store/_speedups.c``), the client codec (``client/_codec.c``)
and the Spark Arrow codec (``spark/_arrowcodec.c``) are each optional: without
a C compiler the package installs and runs its references. Each source states
the ``VERSION`` its Python side was written for; an editable install can keep an
older build, which is then ignored with a warning rather than trusted.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Final

__all__ = ["DISABLE_ENV", "load_extension"]

log = logging.getLogger(__name__)

#: Set to anything but "" or "0" to run the pure-Python references everywhere.
DISABLE_ENV: Final = "POCKETMQ_NO_SPEEDUPS"


def load_extension(name: str, expected_version: int) -> tuple[ModuleType | None, str]:
    """(the compiled module, or None; why): None when disabled, not built or stale."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None, f"{DISABLE_ENV} is set"
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        return None, f"the extension is not built ({exc})"
    version = getattr(module, "VERSION", None)
    if version != expected_version:
        log.warning(
            "ignoring %s: it is version %s, this source needs %s; rebuild it with pip install -e .",
            module.__file__,
            version,
            expected_version,
        )
        return None, f"the built extension is stale (version {version})"
    return module, f"compiled, {module.__file__}"
