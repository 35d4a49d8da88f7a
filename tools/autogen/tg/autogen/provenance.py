"""Where a generated module came from: each source header with its Debian package, version and sha256.

The record is written at the top of every generated file and read back by `regen --check`, which can then tell
"the generator changed its output" (a failure) from "this machine has other headers" (a named skip).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Shim headers live in the checkout; they are recorded as {shims}/... so generated files name no checkout path.
SHIMS = Path(__file__).parent / "shims"
SHIMS_MARK = "{shims}"

SOURCE_LINE = re.compile(r"^#   (?P<path>\S+)  (?P<package>\S+) (?P<version>\S+)  sha256:(?P<sha256>[0-9a-f]{64})$")


@dataclass(frozen=True)
class Source:
    path: str
    package: str
    version: str
    sha256: str

    def comment(self) -> str:
        return f"  {self.path}  {self.package} {self.version}  sha256:{self.sha256}"


def sha256_of(path: str) -> str:
    return hashlib.sha256(Path(real_path(path)).read_bytes()).hexdigest()


def sysroot() -> Path | None:
    """An unpacked Debian package (`dpkg-deb -R PKG.deb DIR`) whose headers stand in for installed ones, set by
    `regen --sysroot` through TG_AUTOGEN_SYSROOT: bindings can be regenerated without installing the package."""
    folder = os.environ.get("TG_AUTOGEN_SYSROOT")
    return Path(folder).resolve() if folder else None


def recorded_path(path: str) -> str:
    """PATH as written in a generated file: shim headers relative to the shims folder, sysroot files as installed."""
    prefix = str(SHIMS) + "/"
    if path.startswith(prefix):
        return SHIMS_MARK + "/" + path[len(prefix) :]
    root = sysroot()
    if root is not None and path.startswith(f"{root}/"):
        return path[len(str(root)) :]
    return path


def real_path(path: str) -> str:
    """The file a recorded path stands for on this machine (in the sysroot, when one is set and has it)."""
    if path.startswith(SHIMS_MARK + "/"):
        return str(SHIMS) + path[len(SHIMS_MARK) :]
    root = sysroot()
    if root is not None and (root / path.lstrip("/")).is_file():
        return str(root / path.lstrip("/"))
    return path


def sysroot_include_dirs() -> tuple[str, ...]:
    """The sysroot's include folders (multiarch first), searched before the system's: a header of the package that
    includes a sibling with angle brackets (`#include <fake/types.h>`) must get the package's sibling, not an
    installed (older) one or none. Quoted includes find siblings next to the including file by themselves."""
    root = sysroot()
    if root is None:
        return ()
    folders = (root / "usr" / "include" / f"{os.uname().machine}-linux-gnu", root / "usr" / "include")
    return tuple(str(folder) for folder in folders if folder.is_dir())


def _sysroot_package() -> tuple[str, str]:
    root = sysroot()
    control = (root / "DEBIAN" / "control") if root else None
    if control is None or not control.is_file():
        return "unpackaged", "-"
    fields = dict(line.split(": ", 1) for line in control.read_text().splitlines() if ": " in line)
    return fields.get("Package", "unpackaged"), fields.get("Version", "-")


def _owning_packages(paths: Sequence[str]) -> dict[str, str]:
    """Map each path to the Debian package that installed it (paths dpkg does not know are left out)."""
    if not shutil.which("dpkg") or not paths:
        return {}
    out = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True, check=False)
    owners: dict[str, str] = {}
    for line in out.stdout.splitlines():
        package, _, path = line.partition(": ")
        owners[path.strip()] = package.split(":")[0].split(",")[0].strip()
    return owners


def _versions(packages: set[str]) -> dict[str, str]:
    if not packages:
        return {}
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version}\n", *sorted(packages)],
        capture_output=True,
        text=True,
        check=False,
    )
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def describe_sources(paths: Sequence[str]) -> list[Source]:
    """Package, version and hash of each header in PATHS (package "unpackaged" when dpkg does not own it)."""
    owners = _owning_packages([p for p in paths if not p.startswith(SHIMS_MARK)])
    versions = _versions(set(owners.values()))
    sources = []
    for path in paths:
        if path.startswith(SHIMS_MARK):
            package, package_version = "tg-autogen", "shim"
        elif real_path(path) != path:
            package, package_version = _sysroot_package()
        else:
            package = owners.get(path, "unpackaged")
            package_version = versions.get(package, "-")
        sources.append(Source(path, package, package_version, sha256_of(path)))
    return sources


def read_sources(module_text: str) -> list[Source]:
    """The sources recorded at the top of a generated module."""
    sources = []
    for line in module_text.splitlines():
        if not line.startswith("#"):
            break
        match = SOURCE_LINE.match(line)
        if match:
            sources.append(Source(**match.groupdict()))
    return sources
