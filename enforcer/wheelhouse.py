"""
The wheelhouse schedule.py ships to a node that converges itself: the wheel of the installed
partition-enforcer and the wheels of everything it needs, so that the node installs it into a
virtualenv with `pip install --no-index` (no index, no internet on the node).

Built on the control node with `pip wheel` (its own pip configuration: index, find-links), once
per version, Python and platform, into a cache directory; checked there before any node sees it
(the project's wheel at the running version, and an offline `pip install --dry-run` from the
directory alone resolves). A directory with a MANIFEST is complete: it is written last.

Its identity is its MANIFEST (the wheels' file names: every distribution and version), not its
bytes: a rebuild of the same versions is the same wheelhouse, and a node that has it is left
alone. A change of this project ships with a new version (or an emptied cache).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

DIST = "partition-enforcer"
DEPLOYS = "enforcer/deploys.py"  # what the node's unit runs: a wheel without it is no product
MANIFEST = "MANIFEST"
# Standard input carries the archive base64, in lines this long (`base64 -d` ignores newlines):
# few writes to the SSH channel, none of them huge.
LINE = 1 << 20


class WheelhouseError(RuntimeError):
    """The wheelhouse could not be built or does not hold what a node needs; says what to do."""


@dataclass(frozen=True)
class Wheelhouse:
    directory: Path
    version: str  # of partition-enforcer
    python: str  # sys.implementation.cache_tag of the Python it was built for: cpython-311
    platform: str  # sysconfig.get_platform(): linux-x86_64
    wheels: tuple[str, ...]  # file names, sorted

    @property
    def manifest(self) -> str:
        return "".join(f"{name}\n" for name in self.wheels)

    @property
    def digest(self) -> str:
        """What is installed: a short digest of the manifest (the venv's directory is named so)."""
        return hashlib.sha256(self.manifest.encode()).hexdigest()[:16]

    @property
    def pure(self) -> bool:
        """Only pure-Python wheels: any Python the project supports installs them."""
        return all(name.endswith("-none-any.whl") for name in self.wheels)

    def fits(self, python: str, platform: str) -> bool:
        return self.pure or (python, platform) == (self.python, self.platform)

    def archive(self) -> bytes:
        """The wheels as an uncompressed tar (wheels are zips already), the same bytes for the
        same files: sorted, owned by 0, dated 0."""
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in self.wheels:
                data = (self.directory / name).read_bytes()
                info = tarfile.TarInfo(f"wheels/{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
        return out.getvalue()


def stdin_lines(archive: bytes) -> list[str]:
    """The archive as base64 lines for pyinfra's `_stdin` (each line is sent with a newline)."""
    text = base64.b64encode(archive).decode()
    return [text[i : i + LINE] for i in range(0, len(text), LINE)] or [""]


def requirement() -> str:
    """The running partition-enforcer, as pip names it: what a node installs."""
    return f"{DIST}=={metadata.version(DIST)}"


def here() -> tuple[str, str]:
    """This Python's tag and platform, as the node's Python prints them (InstalledVenv)."""
    return sys.implementation.cache_tag, sysconfig.get_platform()


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "partition-enforcer" / "wheelhouse"


# pyinfra runs hosts side by side (gevent: its CLI patches threading, so this lock is theirs);
# two builds of one checkout at once would share its build/ folder and ship an empty wheel.
BUILDING = threading.Lock()


@cache
def _wheelhouse(cache_dir: str) -> Wheelhouse:
    version = metadata.version(DIST)
    python, platform = here()
    target = Path(cache_dir) / f"{version}-{python}-{platform}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:  # another run on this control node
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / MANIFEST).is_file():
            _build(target, version)
    return _load(target, version, python, platform)


def wheelhouse(cache_dir: str) -> Wheelhouse:
    """The wheelhouse of the running partition-enforcer under `cache_dir`, built if missing.
    Once per process: every host of a run gets the same one."""
    with BUILDING:
        return _wheelhouse(cache_dir)


def _load(target: Path, version: str, python: str, platform: str) -> Wheelhouse:
    wheels = tuple(sorted((target / MANIFEST).read_text().split()))
    missing = [name for name in wheels if not (target / name).is_file()]
    if missing:
        raise WheelhouseError(
            f"the wheelhouse {target} lacks {', '.join(missing[:3])}: remove the directory, "
            "and the next run builds it again"
        )
    return Wheelhouse(target, version, python, platform, wheels)


def _build(target: Path, version: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        pip = [sys.executable, "-m", "pip"]
        # The versions this control node runs (and was tested with), not the index's newest.
        pins = work / "constraints.txt"
        pins.write_text(_installed_pins())
        wheel = [*pip, "wheel", "--quiet", "--wheel-dir", str(work), "--constraint", str(pins)]
        _pip([*wheel, source()], "build")
        pins.unlink()
        wheels = sorted(p.name for p in work.glob("*.whl"))
        ours = [n for n in wheels if n.startswith(f"{DIST.replace('-', '_')}-{version}-")]
        if len(ours) != 1:
            raise WheelhouseError(
                f"pip wheel built no {DIST} {version} wheel (it built {', '.join(wheels)}): is "
                f"the {DIST} it found the one running here?"
            )
        if DEPLOYS not in zipfile.ZipFile(work / ours[0]).namelist():
            raise WheelhouseError(f"the wheel pip built, {ours[0]}, lacks {DEPLOYS}")
        # Offline, as the node installs it: from this directory alone, no configuration.
        check = [*pip, "install", "--dry-run", "--quiet", "--ignore-installed", "--no-index"]
        check += ["--find-links", str(work), f"{DIST}=={version}"]
        _pip(check, "check", env={"PIP_CONFIG_FILE": os.devnull})
        (work / MANIFEST).write_text("".join(f"{name}\n" for name in wheels))
        work.rename(target)  # complete, or not there
    finally:
        shutil.rmtree(work, ignore_errors=True)


def source() -> str:
    """What `pip wheel` builds partition-enforcer from: the directory or the wheel file it was
    installed from (pip's direct_url.json), else the version from the index."""
    dist = metadata.distribution(DIST)
    recorded = dist.read_text("direct_url.json")
    if recorded:
        url = json.loads(recorded)
        path = Path(unquote(urlparse(url["url"]).path))
        if url["url"].startswith("file://") and path.exists():
            return str(path)
    return f"{DIST}=={dist.version}"


def _installed_pins() -> str:
    pins = {
        d.metadata["Name"].lower(): d.version
        for d in metadata.distributions()
        if d.metadata["Name"] and d.metadata["Name"].lower() != DIST
    }
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def _pip(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        raise WheelhouseError(
            f"the wheelhouse {what} failed ({' '.join(argv)}, exit {done.returncode}): {tail}\n"
            "The control node's pip needs its index (or find-links) for the wheels of "
            f"{DIST}'s dependencies; or set enforcer_schedule_install: index, so that each "
            "node installs from its own index"
        )
