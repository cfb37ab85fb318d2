"""Files the tool ships to a host as one archive, named by the hash of its content.

The host keeps the hash it last unpacked next to the files (``.manifest``); a deploy compares it with
the local one in the same round trip as its other facts, and uploads and unpacks only when they differ,
instead of one checksum round trip per file.
"""

from __future__ import annotations

import hashlib
import io
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .hostside.contract.paths import UPLOAD_DIR


@dataclass(frozen=True)
class Shipment:
    """An archive to unpack under `root` on the host; `manifest` is where its hash is kept there."""

    name: str
    root: str
    manifest: str
    data: bytes
    digest: str

    @property
    def upload_path(self) -> str:
        return f"{UPLOAD_DIR}/.upload-{self.name}.tar"


def build(name: str, root: str, manifest: str, members: list[tuple[str, bytes, int]]) -> Shipment:
    """members: (path relative to root, content, mode). Deterministic: sorted, no times, root owner."""
    data = archive(members)
    return Shipment(name, root, manifest, data, hashlib.sha256(data).hexdigest())


def archive(members: list[tuple[str, bytes, int]]) -> bytes:
    """A tar of members (path, content, mode): sorted, no times, root owner, so the same members give the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content, mode in sorted(members):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime, info.uid, info.gid = len(content), mode, 0, 0, 0
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def tree(source: Path, prefix: str, mode: int = 0o644) -> list[tuple[str, bytes, int]]:
    """Every file under `source` (no bytecode), as members under `prefix`."""
    return [(f"{prefix}/{path.relative_to(source)}", path.read_bytes(), mode)
            for path in sorted(source.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"]


def unpack_command(shipment: Shipment) -> str:
    """Unpack into the root, record the hash, drop the archive (one shell command)."""
    root, manifest, archive = (shlex.quote(p) for p in (shipment.root, shipment.manifest, shipment.upload_path))
    return (f"mkdir -p {root} && tar -C {root} --no-same-owner -xf {archive} && "
            f"echo {shipment.digest} > {manifest} && rm -f {archive}")
