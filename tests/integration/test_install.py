"""``make install`` in a copy of the Makefile, with stand-ins for Python, pip and apt-get: the
interpreter is checked before anything is built, a .venv of another Python is rebuilt, and
a JRE is installed when no java is found (nothing is downloaded: the stand-ins record what
they were asked)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from support.sandbox import path_without

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]

#: a stand-in for pythonX.Y: tells its version, and `-m venv DIR` makes a venv of stand-ins
#: (bin/python: itself; bin/pip: records its arguments in ../calls)
FAKE_PYTHON = """#!/bin/sh
case "$1" in
  -c) echo {version} ;;
  -m) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" &&
      printf '#!/bin/sh\\necho pip "$*" >> {calls}\\n' > "$3/bin/pip" && chmod +x "$3/bin/pip" ;;
  *) exit 2 ;;
esac
"""
RECORDER = "#!/bin/sh\necho {name} \"$*\" >> {calls}\n"


@pytest.fixture
def tree(tmp_path):
    """A copy of what the install target reads (the console's asset sources too), and a
    bin/ of stand-ins."""
    (tmp_path / "web" / "assets").mkdir(parents=True)
    for name in ("Makefile", "setup.cfg", "pyproject.toml", "web/assets.py",
                 *(f"web/assets/{n}" for n in ("package.json", "package-lock.json",
                                               "fleetwatch.css", "console.js", "favicon.svg"))):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "fakes").mkdir()
    return tmp_path


def fake(tree: Path, name: str, text: str) -> str:
    path = tree / "fakes" / name
    path.write_text(text.format(calls=tree / "calls", name=name))
    path.chmod(0o755)
    return str(path)


def fake_python(tree: Path, version: str) -> str:
    return fake(tree, f"python{version}", FAKE_PYTHON.replace("{version}", version))


def make_install(tree: Path, python: str, java: bool = True) -> subprocess.CompletedProcess:
    """`make install PYTHON=python` with the packages already there (coreutils: dpkg -s says
    so), apt-get a recorder, and java on the PATH or not."""
    fake(tree, "apt-get", RECORDER)
    if java:
        fake(tree, "java", RECORDER)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "MAKEFLAGS",
                                                              "MAKELEVEL")}
    # no npm: the console's assets are not built (nothing is downloaded), and install goes on
    env["PATH"] = path_without(tree / "usrbin", "java", "apt-get", "npm", first=tree / "fakes")
    # should a real pip ever run (a Makefile that let a real python3.12 through), it finds
    # no index and stops at once
    env.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    proc = subprocess.Popen(["make", "install", f"PYTHON={python}",
                             "SYSTEM_PACKAGES=coreutils"], cwd=tree, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def calls(tree: Path) -> list[str]:
    path = tree / "calls"
    return path.read_text().splitlines() if path.exists() else []


def real_pythons() -> list[str]:
    """Other Pythons on this machine (pyenv's), to try the check with a real one too."""
    return sorted(glob.glob("/root/.pyenv/versions/3.1[23]*/bin/python3.1[23]"))[:1]


@pytest.mark.parametrize("python", ["3.12", *real_pythons(), "no-such-python"])
def test_an_unsupported_python_is_refused_in_one_line_before_anything_is_built(tree, python):
    if python == "3.12":
        python = fake_python(tree, python)
    res = make_install(tree, python)
    assert res.returncode != 0
    assert res.stdout == ""
    ours, *rest = res.stderr.splitlines()
    found = "not found" if python == "no-such-python" else python[-4:]
    assert ours == (f"make install: fleetwatch needs Python 3.11 ({python} is {found}): "
                    f"make install PYTHON=python3.11")
    assert [line for line in rest if not line.startswith("make: *** ")] == []
    assert not (tree / ".venv").exists() and calls(tree) == []


def test_a_venv_of_another_python_is_rebuilt(tree):
    subprocess.run([fake_python(tree, "3.12"), "-m", "venv", str(tree / ".venv")], check=True)
    (tree / ".venv" / "left-by-3.12").touch()
    res = make_install(tree, fake_python(tree, "3.11"))
    assert res.returncode == 0, res.stderr
    assert "make install: .venv was made by Python 3.12: rebuilding it with" in res.stdout
    assert not (tree / ".venv" / "left-by-3.12").exists()
    version = subprocess.run([tree / ".venv" / "bin" / "python", "-c", "v"],
                             capture_output=True, text=True).stdout.strip()
    assert version == "3.11" and (tree / ".venv" / ".installed").exists()
    # packages and java there: apt-get is not asked for anything
    assert calls(tree) == ["pip install --quiet --disable-pip-version-check -e .[all,test]"]
    again = make_install(tree, fake_python(tree, "3.11"))
    assert again.returncode == 0 and "rebuilding" not in again.stdout
    assert calls(tree) == ["pip install --quiet --disable-pip-version-check -e .[all,test]"]


def test_a_jre_is_installed_when_no_java_is_found(tree):
    res = make_install(tree, fake_python(tree, "3.11"), java=False)
    assert res.returncode == 0, res.stderr
    # without npm the console's assets are not built, and install says so and goes on
    assert "make assets: npm not found" in res.stderr
    assert "the console's CSS and JavaScript are not built" in res.stderr
    apt, pip = calls(tree)
    assert apt == "apt-get install -y -q --no-install-recommends openjdk-17-jre-headless"
    assert pip.startswith("pip install")
