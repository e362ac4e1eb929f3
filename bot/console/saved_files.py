"""Files a tool shared, kept on disk for the terminal edges (console, oneshot), which have nowhere to upload them."""

from __future__ import annotations

from pathlib import Path

from tools.base import SharedFile


def save_shared(file: SharedFile, directory: Path) -> Path:
    """Write the file under `directory`, never over an earlier one (`report.md`, `report-2.md`, …)."""
    directory.mkdir(parents=True, exist_ok=True)
    name = Path(file.name).name or "file"
    stem, suffix = Path(name).stem, Path(name).suffix
    path, number = directory / name, 1
    while path.exists():
        number += 1
        path = directory / f"{stem}-{number}{suffix}"
    path.write_bytes(file.content)
    return path
