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


def shared_line(file: SharedFile, directory: Path) -> str:
    """Save the file and say where, or why it could not be saved: the line a terminal edge prints for it."""
    try:
        path = save_shared(file, directory)
    except OSError as exc:
        return f"📎 {file.name} could not be saved: {exc.strerror or exc}"
    return f"📎 {file.name} ({len(file.content)} bytes) saved to {path}"
