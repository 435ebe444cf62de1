"""``make dist``: fleetwatch's release files in dist/, from this tree, offline but for the
agent's wheelhouse (docs/operating/packages.md).

    python packaging/dist.py [--out dist] [--deb-version V] [--wheelhouse DIR]
                             [--extras snmp,otlp] [--no-deb]
    python packaging/dist.py venv DEST FINAL      (run by packaging/deb/rules)

- the sdist and the wheel, reproducible: built by setuptools' own PEP 517 backend from the
  interpreter running this (no build isolation, so no download) in a copy of the tree's
  files (git's tracked and untracked-not-ignored ones, and the console's built assets),
  every date ``SOURCE_DATE_EPOCH`` (the last commit's), modes 0644/0755, entries sorted;
  the sdist re-packed so (setuptools' tar keeps the build's times and owner);
- ``fleetwatch-agent_VERSION_ARCH.deb``: plain debhelper (packaging/deb/) around a virtual
  environment of Debian's python3.11 holding that wheel and the agent's closure, installed
  from a wheelhouse without an index (``--wheelhouse``; else one is downloaded first, by
  pip, of the versions this interpreter has: PyPI is then the one input from outside).

Run as a script, never imported as ``packaging`` (PyPI's ``packaging`` is that name).
"""

from __future__ import annotations

import argparse
import base64
import csv
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).resolve().parent / "deb"
#: the interpreter of the package's venv: the one Debian 12 ships (Depends: python3.11)
TARGET_PYTHON = "/usr/bin/python3.11"
FINAL = "/opt/fleetwatch-agent"
#: the agent's optional features the package carries: devices (SNMP) and the OTLP intake
EXTRAS = "snmp,otlp"
MAINTAINER = "fleetwatch maintainers <fleetwatch@example.org>"


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` if set, else the last commit's time."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    res = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"],
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0 or not res.stdout.strip():
        sys.exit("make dist: no git history to date the files: set SOURCE_DATE_EPOCH")
    return int(res.stdout)


def version() -> str:
    text = (REPO / "fleetwatch/__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


def deb_version(pep440: str) -> str:
    """1.1.0rc1 -> 1.1.0~rc1: a pre-release sorts before its release, as in PEP 440."""
    return re.sub(r"\.?(a|b|rc|dev)(\d+)", r"~\1\2", pep440)


# ---------------------------------------------------------------- sdist and wheel

def tree_files() -> list[str]:
    res = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, timeout=60, check=True)
    names = {n for n in res.stdout.decode().split("\0") if n}
    static = REPO / "web/static"            # built by make assets, ignored by git
    if static.is_dir():
        names |= {str(p.relative_to(REPO)) for p in static.rglob("*") if p.is_file()}
    return sorted(n for n in names if (REPO / n).is_file() and "__pycache__" not in n)


def copy_tree(dst: Path, epoch: int) -> None:
    for name in tree_files():
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, target)
        os.chmod(target, 0o755 if os.access(REPO / name, os.X_OK) else 0o644)
        os.utime(target, (epoch, epoch))


def normalize_sdist(path: Path, epoch: int) -> None:
    """Re-pack: members sorted, dated ``epoch``, owned by root, gzip without a date."""
    with tarfile.open(path) as src:
        members = sorted(src.getmembers(), key=lambda m: m.name)
        data = {m.name: src.extractfile(m).read() for m in members if m.isfile()}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in members:
            m.mtime, m.uid, m.gid, m.uname, m.gname = epoch, 0, 0, "root", "root"
            m.mode = 0o755 if m.isdir() or m.mode & 0o100 else 0o644
            m.pax_headers = {}
            dst.addfile(m, io.BytesIO(data[m.name]) if m.isfile() else None)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                filename="") as gz:
        gz.write(out.getvalue())


def python_dists(out: Path, epoch: int) -> tuple[Path, Path]:
    """The sdist and the wheel of this tree, into ``out``."""
    with tempfile.TemporaryDirectory(prefix="fleetwatch-dist-") as tmp:
        src = Path(tmp) / f"fleetwatch-{version()}"
        copy_tree(src, epoch)
        built = Path(tmp) / "built"
        # the backend prints its progress on stdout and rewrites sys.argv: the names go to
        # a file named before it runs
        code = ("import sys; from setuptools import build_meta as b; out, to = sys.argv[1:]; "
                "names = [b.build_sdist(out), b.build_wheel(out)]; "
                "open(to, 'w').write('\\n'.join(names))")
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PYTHONHASHSEED": "0"}
        names = Path(tmp) / "names"
        res = subprocess.run([sys.executable, "-c", code, str(built), str(names)], cwd=src,
                             env=env, capture_output=True, text=True, timeout=600)
        if res.returncode != 0 or not names.exists():
            sys.exit(f"make dist: building the sdist and wheel failed:\n{res.stdout[-2000:]}"
                     f"\n{res.stderr[-3000:]}")
        sdist, wheel = (built / n for n in names.read_text().split("\n"))
        normalize_sdist(sdist, epoch)
        out.mkdir(parents=True, exist_ok=True)
        return (Path(shutil.copy2(sdist, out / sdist.name)),
                Path(shutil.copy2(wheel, out / wheel.name)))


# ---------------------------------------------------------------- the agent's package

def pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def download_wheelhouse(wheel: Path, extras: str, dest: Path) -> Path:
    """The agent's closure as wheels, of the versions this interpreter has installed (the
    ones the suite ran), from the configured index or pip's cache."""
    frozen = subprocess.run(pip("freeze", "--exclude-editable"), capture_output=True,
                            text=True, timeout=120, check=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    constraints = dest / "constraints.txt"
    constraints.write_text("".join(line + "\n" for line in frozen.splitlines()
                                   if "==" in line and not line.startswith("fleetwatch")))
    res = subprocess.run(pip("download", "--quiet", "--only-binary", ":all:", "--dest",
                             str(dest), "--constraint", str(constraints),
                             f"{wheel}[{extras}]" if extras else str(wheel)),
                         capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        sys.exit(f"make dist: the agent's wheelhouse could not be downloaded (give one: "
                 f"make dist WHEELHOUSE=DIR):\n{res.stderr[-3000:]}")
    return dest


def agent_deb(wheel: Path, wheelhouse: Path, out: Path, debver: str, extras: str,
              epoch: int, work: Path) -> Path:
    """Assemble the debhelper tree from packaging/deb/ and build the package."""
    sys.path.insert(0, str(REPO))
    from fleetwatch.cli.units import Service, default_config, render
    tree = work / f"fleetwatch-agent-{debver}"
    shutil.rmtree(tree, ignore_errors=True)
    debian = tree / "debian"
    shutil.copytree(TEMPLATE, debian)
    control = debian / "control"
    control.write_text(control.read_text().replace("@MAINTAINER@", MAINTAINER))
    service = Service("agent")
    (debian / "fleetwatch-agent.service").write_text(
        render(service, f"{FINAL}/bin/fleetwatch"))
    (tree / "agent.yaml").write_text(
        default_config(service).replace("written by `fleetwatch service install`",
                                        "installed by the fleetwatch-agent package"))
    date = subprocess.run(["date", "-u", "-R", "-d", f"@{epoch}"], capture_output=True,
                          text=True, check=True, timeout=10).stdout.strip()
    (debian / "changelog").write_text(
        f"fleetwatch-agent ({debver}) bookworm; urgency=medium\n\n"
        f"  * fleetwatch {version()}: CHANGELOG.md of the source has what changed.\n\n"
        f" -- {MAINTAINER}  {date}\n")
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8",
           "FW_DIST": f"{sys.executable} {Path(__file__).resolve()}",
           "FW_WHEEL": str(wheel.resolve()), "FW_WHEELHOUSE": str(wheelhouse.resolve()),
           "FW_EXTRAS": extras}
    res = subprocess.run(["dpkg-buildpackage", "-b", "-us", "-uc"], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        sys.exit(f"make dist: dpkg-buildpackage failed:\n{res.stdout[-4000:]}\n"
                 f"{res.stderr[-3000:]}")
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True, timeout=10).stdout.strip()
    name = f"fleetwatch-agent_{debver}_{arch}.deb"
    out.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(work / name, out / name))


def venv(dest: Path, final: str) -> None:
    """The package's virtual environment made at ``dest`` (the package's tree) and
    relocated to ``final``: the paths it records (scripts' ``#!``, activate, pyvenv.cfg)
    name ``final``; no bytecode (postinst compiles it), no pip, nothing naming the build's
    directories (the same package from any of them)."""
    wheel, wheelhouse = os.environ["FW_WHEEL"], os.environ["FW_WHEELHOUSE"]
    extras = os.environ.get("FW_EXTRAS", "")
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run([TARGET_PYTHON, "-m", "venv", "--without-pip", str(dest)], check=True,
                   timeout=120)
    subprocess.run(pip("--python", str(dest / "bin/python"), "install", "--quiet",
                       "--no-index", "--find-links", wheelhouse, "--no-compile",
                       "--no-cache-dir", f"{wheel}[{extras}]" if extras else wheel),
                   check=True, timeout=600)
    # the wheel's path on the build machine (PEP 610): fleetwatch is then as if from an index
    for direct in dest.glob("lib/python3*/site-packages/*.dist-info/direct_url.json"):
        direct.unlink()
    old = str(dest).encode()
    site = dest / "lib"
    changed = set()
    for path in sorted(dest.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        if path.name == ".DS_Store":            # macOS litter some wheels carry (pysnmp)
            path.unlink()
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data:
            data = plain_shebang(data.replace(old, final.encode()))
            path.write_bytes(data)
            changed.add(os.path.normpath(path))
        if path.is_relative_to(site):
            # executable only if a script (the bundled plugins): some wheels (protobuf)
            # mark every file executable; shared objects need no x bit either
            path.chmod(0o755 if data.startswith(b"#!") else 0o644)
    for cache in dest.rglob("__pycache__"):
        shutil.rmtree(cache)
    for record in sorted(site.glob("python3*/site-packages/*.dist-info/RECORD")):
        fix_record(record, changed)


#: pip's shebang for an interpreter path too long for ``#!`` (a deep build directory): a
#: /bin/sh script that execs the interpreter, which lintian reads as a broken shell script
_LONG_SHEBANG = re.compile(rb"""\A#!/bin/sh\n'''exec' "?([^"\n]+?)"? "\$0" "\$@"\n' '''\n""")


def plain_shebang(data: bytes) -> bytes:
    """A script made with pip's long-path shebang (:data:`_LONG_SHEBANG`), relocated to a
    short path, with a plain ``#!`` line instead."""
    found = _LONG_SHEBANG.match(data)
    return b"#!" + found.group(1) + b"\n" + data[found.end():] if found else data


def fix_record(record: Path, changed: set[str]) -> None:
    """A RECORD (PEP 376) true again: the files relocated hashed anew, the removed ones
    left out."""
    base = record.parent.parent
    text = record.read_bytes().decode()
    rows = []
    for row in csv.reader(io.StringIO(text)):
        path = os.path.normpath(base / row[0])
        if row[1] and not os.path.exists(path):
            continue
        if path in changed:
            data = Path(path).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            row = [row[0], f"sha256={digest.decode()}", str(len(data))]
        rows.append(row)
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n" if "\r\n" in text else "\n").writerows(rows)
    record.write_bytes(out.getvalue().encode())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["venv"]:
        venv(Path(argv[1]), argv[2])
        return
    parser = argparse.ArgumentParser(prog="packaging/dist.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    parser.add_argument("--work", type=Path, default=REPO / "build/dist",
                        help="where the package is assembled (default build/dist)")
    parser.add_argument("--deb-version", default="",
                        help="the package's version (default fleetwatch's, in Debian's form)")
    parser.add_argument("--wheelhouse", type=Path, default=None,
                        help="the agent's dependencies as wheels (default: downloaded)")
    parser.add_argument("--extras", default=EXTRAS,
                        help=f"the extras the package carries (default {EXTRAS})")
    parser.add_argument("--no-deb", action="store_true", help="the sdist and wheel only")
    args = parser.parse_args(argv)
    epoch = source_date_epoch()
    sdist, wheel = python_dists(args.out, epoch)
    print(sdist)
    print(wheel)
    if args.no_deb:
        return
    if shutil.which("dpkg-buildpackage") is None or shutil.which("dh") is None:
        sys.exit("make dist: dpkg-buildpackage and debhelper are needed for the agent's "
                 "package (make system-packages installs them)")
    wheelhouse = args.wheelhouse or download_wheelhouse(wheel, args.extras,
                                                        args.work / "wheelhouse")
    print(agent_deb(wheel, wheelhouse, args.out, args.deb_version or deb_version(version()),
                    args.extras, epoch, args.work))


if __name__ == "__main__":
    main()
