"""The build that `pip install .` installed from this checkout, for the tests that look at
what pip ships (the wheel's files and metadata) or install it into other environments
(tests/integration/test_jax_window.py, tests/tools/test_docs.py): found, checked to be
this checkout's and current, and repacked as a wheel from the installed files."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import re
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

REPO = Path(__file__).resolve().parents[2]  # tests/helpers/ -> the checkout


def distribution() -> importlib.metadata.Distribution:
    """The installed jax-unpool; the test fails (asking for `pip install .`) unless it was
    installed from this checkout, not editable, and its Python files are the checkout's."""
    try:
        dist = importlib.metadata.distribution("jax-unpool")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    origin = json.loads((dist and dist.read_text("direct_url.json")) or "{}")
    source = Path(unquote(urlparse(origin.get("url", "")).path or "/nowhere")).resolve()
    if source != REPO or origin.get("dir_info", {}).get("editable"):
        pytest.fail(f"this test reads the build of this checkout that pip installed: run "
                    f"`pip install .` in {REPO} first (installed: {origin or 'none'})")
    installed = {f.as_posix(): f for f in _files(dist)
                 if f.parts[0] == "jax_unpool" and f.suffix == ".py"}
    ours = {p.relative_to(REPO).as_posix() for p in (REPO / "jax_unpool").rglob("*.py")}
    stale = sorted((installed.keys() ^ ours) | {name for name in installed.keys() & ours
                                                if (REPO / name).read_bytes()
                                                != installed[name].read_binary()})
    if stale:
        pytest.fail(f"the installed jax-unpool is an older build of this checkout ({stale}): "
                    f"run `pip install .` in {REPO} again")
    return dist


def _files(dist: importlib.metadata.Distribution) -> list:
    return [f for f in dist.files if f.parts[0] != ".." and "__pycache__" not in f.parts]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def installed() -> dict:
    """This checkout's installed build: its files (name -> contents, without pip's own
    records), dist-info folder, version and wheel tag."""
    dist = distribution()
    info = f"jax_unpool-{dist.version}.dist-info"
    skipped = {f"{info}/{name}" for name in ("RECORD", "INSTALLER", "REQUESTED",
                                             "direct_url.json")}
    tag = re.search(r"^Tag: (\S+)$", dist.read_text("WHEEL"), re.MULTILINE).group(1)
    return {"files": {f.as_posix(): f.read_binary() for f in _files(dist)
                      if f.as_posix() not in skipped},
            "info": info, "version": dist.version, "tag": tag}


def pack(out: Path, files: dict[str, bytes], info: str) -> Path:
    """Writes a wheel of `files` (name -> contents) and its RECORD to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in files.items()]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in files.items():
            whl.writestr(name, data)
        whl.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return out


def repack(directory: Path) -> Path:
    """This checkout's installed build as a wheel in `directory` (the same files)."""
    build = installed()
    return pack(directory / f"jax_unpool-{build['version']}-{build['tag']}.whl",
                build["files"], build["info"])
