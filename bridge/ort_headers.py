"""onnxruntime's C/C++ headers for building the custom-op library.

The onnxruntime wheel ships none; Debian trixie's `libonnxruntime-dev` has them.
They are fetched once into the build cache with apt-get, without touching the
system's apt configuration: a private sources list naming the machine's own
Debian mirror (read from its apt configuration, so no registry host is written
here), private state and cache folders, `apt-get download`, `dpkg -x`; only the
headers are kept, in a folder named by their ORT_API_VERSION.

`ORT_INCLUDE_DIR` names a folder with `onnxruntime_c_api.h` and skips the fetch.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

PACKAGE = "libonnxruntime-dev"
SUITE = "trixie"
MAIN_HEADER = "onnxruntime_c_api.h"


class HeaderError(RuntimeError):
    pass


def api_version(include_dir: Path) -> int:
    text = (Path(include_dir) / MAIN_HEADER).read_text(errors="replace")
    m = re.search(r"#define\s+ORT_API_VERSION\s+(\d+)", text)
    if not m:
        raise HeaderError(f"{include_dir / MAIN_HEADER} defines no ORT_API_VERSION")
    return int(m.group(1))


def debian_mirror() -> str:
    """The first Debian archive URI in this machine's apt configuration."""
    candidates = []
    for f in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in f.read_text(errors="replace").splitlines():
            if line.strip().lower().startswith("uris:"):
                candidates += line.split(":", 1)[1].split()
    for f in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        if f.exists():
            for line in f.read_text(errors="replace").splitlines():
                parts = line.split("#", 1)[0].split()
                if parts and parts[0] == "deb":
                    candidates += [p for p in parts[1:] if "://" in p][:1]
    for uri in candidates:
        if "security" not in uri and "debian" in uri:
            return uri
    if candidates:
        return candidates[0]
    raise HeaderError("no Debian mirror found in /etc/apt/sources.list(.d)")


def _run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-8:])
        raise HeaderError(f"`{' '.join(cmd[:1] + cmd[-2:])}` failed (exit {p.returncode}):\n{tail}")
    return p.stdout


def find(cache: Path) -> Optional[Path]:
    """The include folder if `ORT_INCLUDE_DIR` names one or the cache has one, else None."""
    env = os.environ.get("ORT_INCLUDE_DIR")
    if env:
        return Path(env) if (Path(env) / MAIN_HEADER).exists() else None
    found = sorted(Path(cache).glob("ort-headers-api*/" + MAIN_HEADER))
    return found[-1].parent if found else None


def fetch(cache: Path) -> Path:
    """The include folder (with onnxruntime_c_api.h), fetching it into `cache`
    the first time. Raises HeaderError naming the cause and the fix."""
    env = os.environ.get("ORT_INCLUDE_DIR")
    if env:
        if not (Path(env) / MAIN_HEADER).exists():
            raise HeaderError(f"ORT_INCLUDE_DIR={env} has no {MAIN_HEADER}. Fix: point it at the folder "
                              f"holding onnxruntime's C/C++ headers")
        return Path(env)
    cache = Path(cache)
    found = sorted(cache.glob("ort-headers-api*/" + MAIN_HEADER))
    if found:
        return found[-1].parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "ort-headers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(cache.glob("ort-headers-api*/" + MAIN_HEADER))
        if found:
            return found[-1].parent
        try:
            return _fetch(cache)
        except (HeaderError, OSError, subprocess.SubprocessError) as e:
            raise HeaderError(
                f"could not fetch onnxruntime's headers ({PACKAGE} from Debian {SUITE}): {e}\n"
                f"Fix: check that apt-get can reach the Debian mirror, or install onnxruntime's headers "
                f"(e.g. from an onnxruntime release archive) and set ORT_INCLUDE_DIR to their folder") from e


def _fetch(cache: Path) -> Path:
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        raise HeaderError("apt-get and dpkg are needed (not a Debian-like system)")
    work = Path(tempfile.mkdtemp(prefix=".ort-headers.", dir=cache))
    try:
        apt = work / "apt"
        for d in ("lists/partial", "cache/archives/partial"):
            (apt / d).mkdir(parents=True)
        keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
        signed = f" [signed-by={keyring}]" if Path(keyring).exists() else ""
        sources = apt / "sources.list"
        sources.write_text(f"deb{signed} {debian_mirror()} {SUITE} main\n")
        opts = ["-o", f"Dir::Etc::sourcelist={sources}", "-o", "Dir::Etc::sourceparts=-",
                "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
                "-o", "Debug::NoLocking=1", "-o", "APT::Get::List-Cleanup=0", "-q"]
        _run(["apt-get", *opts, "update"])
        dl = work / "download"
        dl.mkdir()
        _run(["apt-get", *opts, "download", PACKAGE], cwd=dl)
        debs = sorted(dl.glob("*.deb"))
        if not debs:
            raise HeaderError(f"apt-get download {PACKAGE} produced no .deb")
        tree = work / "tree"
        _run(["dpkg", "-x", str(debs[0]), str(tree)])
        header = next(iter(sorted(tree.rglob(MAIN_HEADER))), None)
        if header is None:
            raise HeaderError(f"{debs[0].name} has no {MAIN_HEADER}")
        version = api_version(header.parent)
        final = cache / f"ort-headers-api{version}"
        staged = work / "headers"
        shutil.copytree(header.parent, staged)
        (staged / "SOURCE").write_text(f"{debs[0].name}\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(staged, final)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)
