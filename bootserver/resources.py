"""Locate the data folders that ship with bootserver: ``templates/`` and ``ignition/``.

In a wheel they live inside the package as ``bootserver/_data/<name>`` (see ``pyproject.toml``,
``force-include``); in a source checkout or an editable install they are the top-level folders of the
repository, beside the package.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the folder holding bootserver's shipped data ``name`` (``"templates"`` or ``"ignition"``).

    Raises ``FileNotFoundError`` when neither the packaged nor the source-tree copy exists.
    """
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bootserver data folder {name!r} is missing from the installation")
