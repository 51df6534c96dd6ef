"""Reading a user's TOML file: one error shape for every kind of file."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from infra.errors import UsageError


def load_toml(path: Path, kind: str, error: type[UsageError] = UsageError) -> dict[str, Any]:
    """The file's table, or ``error`` naming the file (and, for bad TOML, line and column)."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{kind} file {path} does not exist")
    try:
        return tomllib.loads(path.read_text(errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's message ends with "(at line L, column C)".
        raise error(f"{path}: invalid TOML: {exc}") from None
