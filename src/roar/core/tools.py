"""The environment of the child processes that run roar's tools: ``dvc``, and the ``roar`` commands of its stages.

``.venv/bin/roar pipeline`` runs without the virtualenv on ``PATH``; DVC and the stage commands it runs
through a shell (``roar chain ...``), and Slurm jobs that inherit the environment, must still find the
virtualenv's ``dvc`` and ``roar``. :func:`tool_env` puts the running interpreter's scripts folder first on
``PATH`` and refuses in one line when ``dvc`` is nowhere.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from roar.core.errors import RoarError


def scripts_folder() -> Path:
    """Where the running interpreter's environment keeps its console scripts (``.venv/bin``)."""
    return Path(sysconfig.get_path("scripts"))


def tool_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this process's environment) plus ``extra``, with the interpreter's scripts folder
    first on ``PATH``; :class:`RoarError` when no ``dvc`` is found on that ``PATH``."""
    env = {**(os.environ if base is None else base), **extra}
    folders = [str(scripts_folder()), str(Path(sys.executable).parent)]
    path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p not in folders]
    env["PATH"] = os.pathsep.join([*dict.fromkeys(folders), *path])
    if shutil.which("dvc", path=env["PATH"]) is None:
        raise RoarError(f"dvc not found beside {sys.executable} nor on PATH; run `make setup` (installs it into "
                        ".venv) or activate the virtualenv (`source .venv/bin/activate`)")
    return env
