"""The bundled checks in plugins/bin, each run as a real subprocess.

Exit codes at OK/WARNING/CRITICAL come from thresholds placed around the value the check
really measures; perfdata is checked against the guidelines' format (and parsed by
plugins.output); bad arguments give exit 3 and one line. Where Debian's monitoring-plugins
measure the same thing, their figures are compared with ours.
"""

import glob
import http.server
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import plugins
from plugins import output

BIN = Path(plugins.bundled_dir())
DEBIAN = Path("/usr/lib/nagios/plugins")
SERVICES = {
    "check_fw_load": "LOAD", "check_fw_disk": "DISK", "check_fw_memory": "MEMORY",
    "check_fw_swap": "SWAP", "check_fw_procs": "PROCS", "check_fw_tcp": "TCP",
    "check_fw_http": "HTTP", "check_fw_file_age": "FILE_AGE",
}
STATUS = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}

# The guidelines' perfdata, strictly: no exponents, no trailing empty fields.
_NUM = r"-?\d+(?:\.\d+)?"
_RANGE = rf"@?(?:(?:~|{_NUM})?:)?(?:{_NUM})?"
_TOKEN = (rf"(?:'(?:[^']|'')+'|[^\s'=]+)=(?:U|{_NUM}[^\d\s;.\-]*)"
          rf"(?:;{_RANGE}(?:;{_RANGE}(?:;(?:{_NUM})?(?:;(?:{_NUM})?)?)?)?)?")
PERFDATA = re.compile(rf"{_TOKEN}(?: {_TOKEN})*")


class Result:
    def __init__(self, name, proc):
        self.name, self.code = name, proc.returncode
        self.out, self.err = proc.stdout.decode(), proc.stderr.decode()
        self.lines = self.out.splitlines()
        self.parsed = output.parse(proc.stdout)
        self.perf = {p["label"]: p for p in self.parsed.perfdata}

    def __repr__(self):
        return f"<{self.name} exit {self.code}: {self.out!r} {self.err!r}>"

    def valid(self):
        """Assert the output follows the guidelines and matches the exit code; self."""
        assert self.err == "", self
        first = self.lines[0]
        m = re.match(rf"{SERVICES[self.name]} (OK|WARNING|CRITICAL|UNKNOWN) - \S", first)
        assert m and STATUS[m.group(1)] == self.code, self
        _, bar, perf = first.partition(" | ")
        if bar:
            assert PERFDATA.fullmatch(perf), f"bad perfdata {perf!r}"
        assert self.parsed.bad_perfdata == 0, self
        return self


def run(name, *args, via="python", env=None):
    """Run a bundled check: through its shebang, or with this interpreter without site
    packages (-S: the checks must need nothing but the standard library)."""
    path = str(BIN / name)
    argv = {"shebang": [path], "python": [sys.executable, "-S", path]}.get(via, [via, path])
    proc = subprocess.run(argv + [str(a) for a in args], capture_output=True, timeout=20,
                          env=env)
    return Result(name, proc)


def debian(name, *args):
    plugin = DEBIAN / name
    if not os.access(plugin, os.X_OK):
        pytest.skip(f"{plugin} not installed")
    proc = subprocess.run([str(plugin)] + [str(a) for a in args], capture_output=True,
                          timeout=20)
    return proc.returncode, output.parse(proc.stdout)


def debian_perf(parsed, label):
    return next(p for p in parsed.perfdata if p["label"] == label)["value"]


def around(value, margin):
    """A range that holds ``value`` with ``margin`` either side: alerts with '@'."""
    return f"{value - margin:.6f}:{value + margin:.6f}"


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


class Handler(http.server.BaseHTTPRequestHandler):
    release = threading.Event()

    def do_GET(self):
        if self.path == "/slow":
            self.release.wait(10)
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        code = {"/": 200, "/slow": 200, "/error": 500}.get(self.path, 404)
        body = b"hello from fleetwatch\n" if code == 200 else b"no\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def web():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    Handler.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def aged_file(tmp_path):
    path = tmp_path / "backup.dump"
    path.write_bytes(b"x" * 50)
    old = time.time() - 100
    os.utime(path, (old, old))
    return path


@pytest.fixture(scope="module")
def sleepers(tmp_path_factory):
    """Three processes with a command name of their own (a copy of sleep), killed after."""
    name = "fwp" + uuid.uuid4().hex[:8]
    exe = tmp_path_factory.mktemp("procs") / name
    shutil.copy(shutil.which("sleep"), exe)
    procs = [subprocess.Popen([str(exe), "60"]) for _ in range(3)]
    yield name
    for p in procs:
        p.kill()
        p.wait(5)


# Arguments for a plain OK run of each check.
BASIC = {
    "check_fw_load": lambda f: ["-w", "1000", "-c", "2000"],
    "check_fw_disk": lambda f: ["-p", "/", "-w", "100", "-c", "100"],
    "check_fw_memory": lambda f: ["-w", "100", "-c", "100"],
    "check_fw_swap": lambda f: ["-w", "100", "-c", "100"],
    "check_fw_procs": lambda f: ["-w", "1:", "-c", "1:"],
    "check_fw_tcp": lambda f: ["-H", "127.0.0.1", "-p", f["listener"], "-w", "5", "-c", "10"],
    "check_fw_http": lambda f: ["-u", f["web"] + "/", "-e", "200", "-s", "hello"],
    "check_fw_file_age": lambda f: ["-f", f["aged_file"], "-w", "3600", "-c", "7200"],
}


@pytest.fixture
def basic_args(listener, web, aged_file):
    fixtures = {"listener": listener, "web": web, "aged_file": aged_file}
    return lambda name: BASIC[name](fixtures)


# ---------------------------------------------------------------------------- every check


def test_layout():
    assert os.path.isabs(plugins.bundled_dir()) and BIN == Path(plugins.__file__).parent / "bin"
    assert {p.name for p in BIN.glob("check_*")} == set(SERVICES)
    for name in SERVICES:
        path = BIN / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o755, name
        assert path.read_text().splitlines()[0] == "#!/usr/bin/env python3", name


@pytest.mark.parametrize("via", ["shebang", "python"])
@pytest.mark.parametrize("name", sorted(SERVICES))
def test_runs_ok(name, via, basic_args):
    res = run(name, *basic_args(name), via=via).valid()
    assert res.code == 0, res


def _old_python():
    candidates = [shutil.which("python3.9")] + sorted(
        glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3")))
    for exe in filter(None, candidates):
        try:
            ok = subprocess.run([exe, "-c", "import sys; assert sys.version_info[:2] == (3, 9)"],
                                capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok:
            return exe
    return None


def test_runs_on_python_3_9(basic_args):
    exe = _old_python()
    if exe is None:
        pytest.skip("no Python 3.9 interpreter here")
    for name in sorted(SERVICES):
        res = run(name, *basic_args(name), via=exe).valid()
        assert res.code == 0, res


def test_runs_through_a_symlink(tmp_path, basic_args):
    link = tmp_path / "check_fw_load"
    link.symlink_to(BIN / "check_fw_load")
    proc = subprocess.run([str(link), *basic_args("check_fw_load")], capture_output=True,
                          timeout=20)
    assert proc.returncode == 0 and proc.stdout.startswith(b"LOAD OK - "), proc


BAD_ARGS = [(name, ["-w", "ten"]) for name in sorted(SERVICES)] + [
    ("check_fw_load", ["-w", "1,2"]),
    ("check_fw_load", ["--no-such-option"]),
    ("check_fw_disk", ["--units", "furlongs"]),
    ("check_fw_swap", ["--no-swap", "maybe"]),
    ("check_fw_procs", ["-u", "no-such-user-" + uuid.uuid4().hex[:6]]),
    ("check_fw_tcp", ["-H", "127.0.0.1"]),
    ("check_fw_tcp", ["-H", "127.0.0.1", "-p", "70000"]),
    ("check_fw_http", ["-u", "ftp://example.org/"]),
    ("check_fw_http", ["-u", "http://x/", "-e", "2y0"]),
    ("check_fw_http", ["-u", "http://x/", "--header", "no colon"]),
    ("check_fw_file_age", []),
    ("check_fw_file_age", ["-f", "/x", "-W", "1:0"]),
]


@pytest.mark.parametrize("name, args", BAD_ARGS)
def test_bad_arguments_are_unknown_in_one_line(name, args):
    res = run(name, *args)
    assert res.code == 3, res
    assert res.err == "" and len(res.lines) == 1, res
    assert res.lines[0].startswith(f"{SERVICES[name]} UNKNOWN - bad arguments: "), res
    assert "Traceback" not in res.out


def test_help_and_version_exit_unknown():
    res = run("check_fw_disk", "--help")
    assert res.code == 3 and res.lines[0].startswith("usage: check_fw_disk"), res
    res = run("check_fw_http", "-V", via="shebang")
    assert res.code == 3 and res.lines == [f"check_fw_http (fleetwatch {_version()})"], res


def _version():
    from fleetwatch import __version__
    return __version__


# ---------------------------------------------------------------------------- load


def _loads(res, prefix=""):
    return [res.perf[prefix + label]["value"] for label in ("load1", "load5", "load15")]


def test_load_statuses_around_the_current_value():
    loads = _loads(run("check_fw_load").valid())
    m = 5  # the load does not move by 5 within a second
    ok = ",".join(f"{v + m:.2f}" for v in loads)
    inside = ",".join("@" + around(v, m) for v in loads)
    assert run("check_fw_load", "-w", ok, "-c", ok).valid().code == 0
    res = run("check_fw_load", "-w", inside, "-c", ok).valid()
    assert res.code == 1 and res.perf["load1"]["warn"].startswith("@"), res
    assert run("check_fw_load", "-w", ok, "-c", inside).valid().code == 2
    assert run("check_fw_load", "-w", f"{loads[0] + m:.2f},@~:,{ok.split(',')[2]}").code == 1


def test_load_matches_debian_check_load():
    code, theirs = debian("check_load", "-w", "1000", "-c", "2000")
    ours = run("check_fw_load", "-w", "1000", "-c", "2000").valid()
    assert code == ours.code == 0
    for label, mine in zip(("load1", "load5", "load15"), _loads(ours)):
        assert mine == pytest.approx(debian_perf(theirs, label), abs=0.3), label


def test_load_per_cpu_matches_debian_check_load_r():
    _, theirs = debian("check_load", "-r", "-w", "1000", "-c", "2000")
    ours = run("check_fw_load", "-r", "-w", "1000", "-c", "2000").valid()
    cpus = os.sysconf("SC_NPROCESSORS_ONLN")
    assert ours.lines[0].startswith(f"LOAD OK - load average per CPU ({cpus} CPUs): ")
    for label, mine in zip(("load1", "load5", "load15"), _loads(ours, "scaled_")):
        assert mine == pytest.approx(debian_perf(theirs, "scaled_" + label), abs=0.2), label
    assert ours.perf["scaled_load1"]["warn"] == "1000"
    assert ours.perf["load1"]["warn"] is None


# ---------------------------------------------------------------------------- disk


def _root_usage():
    st = os.statvfs("/")
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize
    return used * 100 / usable, st.f_bavail * st.f_frsize / 2 ** 20, usable


def test_disk_statuses_around_the_used_percentage():
    pct, free_mb, usable = _root_usage()
    res = run("check_fw_disk", "-p", "/", "-w", f"{pct + 5:.1f}", "-c", f"{pct + 6:.1f}")
    assert res.valid().code == (0 if pct < 94 else 1 if pct < 95 else 2), res
    inside = "@" + around(pct, 3)
    assert run("check_fw_disk", "-p", "/", "-w", inside).valid().code == 1
    res = run("check_fw_disk", "-p", "/", "-w", "50", "-c", inside).valid()
    assert res.code == 2
    item = res.perf["/"]
    assert item["uom"] == "B" and item["min"] == 0
    assert item["max"] == os.statvfs("/").f_blocks * os.statvfs("/").f_frsize
    assert float(item["warn"]) == pytest.approx(usable / 2, rel=0.01)


def test_disk_thresholds_on_free_megabytes():
    _, free_mb, _ = _root_usage()
    low, high = f"{free_mb / 2:.0f}:", f"{free_mb * 2:.0f}:"
    assert run("check_fw_disk", "-p", "/", "-u", "MB", "-w", low, "-c", "1:").valid().code == 0
    res = run("check_fw_disk", "-p", "/", "-u", "MB", "-w", high, "-c", "1:").valid()
    assert res.code == 1
    assert res.perf["/"]["warn"].startswith("~:")  # free below X is used above total - X
    assert run("check_fw_disk", "-p", "/", "-u", "GB", "-c", f"{free_mb:.0f}:").code == 2


def test_disk_all_mounts_and_a_missing_path():
    res = run("check_fw_disk").valid()
    assert res.code == 0 and "/" in res.perf, res
    assert not any(label.startswith(("/proc", "/sys")) for label in res.perf)
    res = run("check_fw_disk", "-p", "/", "-p", "/no/such/mount").valid()
    assert res.code == 2 and "/no/such/mount: No such file or directory" in res.lines[0]


def test_disk_matches_debian_check_disk():
    code, theirs = debian("check_disk", "-w", "1%", "-c", "1%", "-p", "/")
    ours = run("check_fw_disk", "-p", "/").valid()
    total = ours.perf["/"]["max"]
    assert ours.perf["/"]["value"] == pytest.approx(debian_perf(theirs, "/"), abs=total / 100)
    assert next(p for p in theirs.perfdata if p["label"] == "/")["max"] == \
        pytest.approx(total, rel=0.001)


# ---------------------------------------------------------------------------- memory, swap


def test_memory_statuses_around_the_used_percentage():
    res = run("check_fw_memory").valid()
    pct = res.perf["used_pct"]["value"]
    assert 0 <= pct <= 100 and res.perf["used_pct"]["max"] == 100
    assert res.perf["used"]["value"] + res.perf["available"]["value"] == res.perf["used"]["max"]
    assert run("check_fw_memory", "-w", f"{pct + 5:.1f}:", "-c", "0:").valid().code == 1
    assert run("check_fw_memory", "-w", "@" + around(pct, 5)).valid().code == 1
    assert run("check_fw_memory", "-c", "@" + around(pct, 5)).valid().code == 2
    assert run("check_fw_memory", "-w", f"{pct + 5:.1f}", "-c", f"{pct + 9:.1f}").code == 0


def test_memory_without_memavailable(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 50 kB\n")
    res = run("check_fw_memory", "--meminfo", path, "-w", "70", "-c", "90").valid()
    assert res.code == 1 and res.perf["used_pct"]["value"] == 80, res
    path.write_text("nothing useful\n")
    res = run("check_fw_memory", "--meminfo", path).valid()
    assert res.code == 3 and len(res.lines) == 1


def _meminfo(tmp_path, total_kb, free_kb):
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal: 1000 kB\nSwapTotal: {total_kb} kB\nSwapFree: {free_kb} kB\n")
    return path


@pytest.mark.parametrize("warn, crit, code", [("60", "70", 0), ("40", "60", 1),
                                              ("30", "45", 2), ("@0:50", "~:", 1)])
def test_swap_statuses(tmp_path, warn, crit, code):
    res = run("check_fw_swap", "--meminfo", _meminfo(tmp_path, 1024, 512), "-w", warn, "-c", crit)
    assert res.valid().code == code
    assert res.lines[0].split(" | ")[1] == \
        f"used_pct=50%;{warn};{crit};0;100 used=524288B;;;0;1048576"


def test_swap_absent_is_ok_with_a_note(tmp_path):
    res = run("check_fw_swap", "--meminfo", _meminfo(tmp_path, 0, 0), "-w", "1", "-c", "2")
    assert res.valid().code == 0
    assert res.lines == ["SWAP OK - no swap configured | used=0B;;;0;0"]
    res = run("check_fw_swap", "--meminfo", _meminfo(tmp_path, 0, 0), "--no-swap", "critical")
    assert res.valid().code == 2


def test_swap_on_this_host_agrees_with_debian_check_swap():
    code, theirs = debian("check_swap", "-n", "ok", "-w", "20%", "-c", "10%")
    ours = run("check_fw_swap").valid()
    with open("/proc/meminfo") as f:
        has_swap = not re.search(r"^SwapTotal:\s+0 kB", f.read(), re.M)
    if has_swap:
        assert ours.perf["used"]["max"] > 0
    else:
        assert ours.code == code == 0 and "no swap configured" in ours.lines[0]


# ---------------------------------------------------------------------------- processes


def test_procs_counts_by_command_name(sleepers):
    res = run("check_fw_procs", "-C", sleepers).valid()
    assert res.code == 0 and res.perf["procs"]["value"] == 3, res
    assert res.lines[0].startswith(f"PROCS OK - 3 processes with command name '{sleepers}'")
    assert run("check_fw_procs", "-C", sleepers, "-w", "2").valid().code == 1
    assert run("check_fw_procs", "-C", sleepers, "-w", "2", "-c", "1:2").valid().code == 2
    assert run("check_fw_procs", "-C", sleepers, "-w", "3", "-c", "1:3").valid().code == 0
    assert run("check_fw_procs", "-C", "no" + sleepers, "-c", "1:").valid().code == 2


def test_procs_filters(sleepers):
    def count(*args):
        return run("check_fw_procs", *args).valid().perf["procs"]["value"]

    assert count("-a", sleepers + " 60") == 3
    assert count("-C", sleepers, "-s", "SD") == 3
    assert count("-C", sleepers, "-s", "Z") == 0
    assert count("-C", sleepers, "-u", str(os.getuid())) == 3
    assert count("-C", sleepers, "-u", str(os.getuid() + 1)) == 0
    assert count() >= 4


def test_procs_matches_debian_check_procs(sleepers):
    code, theirs = debian("check_procs", "-C", sleepers, "-w", "2")
    ours = run("check_fw_procs", "-C", sleepers, "-w", "2").valid()
    assert code == ours.code == 1
    assert debian_perf(theirs, "procs") == ours.perf["procs"]["value"] == 3


# ---------------------------------------------------------------------------- tcp


def test_tcp_open_port(listener):
    res = run("check_fw_tcp", "-H", "127.0.0.1", "-p", listener, "-w", "1", "-c", "2").valid()
    assert res.code == 0 and f"127.0.0.1 port {listener}" in res.lines[0]
    item = res.perf["time"]
    assert item["uom"] == "s" and 0 < item["value"] < 1 and item["max"] == 10
    inside = "@0:" + "5"
    assert run("check_fw_tcp", "-H", "127.0.0.1", "-p", listener, "-w", inside).valid().code == 1
    assert run("check_fw_tcp", "-H", "localhost", "-p", listener, "-c", inside).valid().code == 2


def test_tcp_closed_port_is_critical_like_debian(listener, closed_port):
    res = run("check_fw_tcp", "-H", "127.0.0.1", "-p", closed_port).valid()
    assert res.code == 2 and "Connection refused" in res.lines[0], res
    assert debian("check_tcp", "-H", "127.0.0.1", "-p", closed_port)[0] == 2
    assert debian("check_tcp", "-H", "127.0.0.1", "-p", listener)[0] == 0


def test_tcp_timeout_is_critical():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fill = []  # a full accept queue: further SYNs go unanswered
    try:
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fill.append(c)
        started = time.monotonic()
        res = run("check_fw_tcp", "-H", "127.0.0.1", "-p", port, "-t", "0.5").valid()
        assert time.monotonic() - started < 5
        assert res.code == 2 and "within 0.5 s" in res.lines[0], res
    finally:
        for c in fill:
            c.close()
        server.close()


# ---------------------------------------------------------------------------- http


HTTP_CASES = [
    (["/"], 0, "200 OK"),
    (["/", "-s", "hello from"], 0, "200 OK"),
    (["/", "-s", "goodbye"], 2, "string 'goodbye' not found"),
    (["/", "-e", "200,3xx"], 0, "200 OK"),
    (["/missing"], 1, "404 Not Found"),
    (["/missing", "-e", "200"], 2, "404 Not Found (expected 200)"),
    (["/missing", "-e", "4xx"], 0, "404 Not Found"),
    (["/error"], 2, "500 Internal Server Error"),
    (["/redirect"], 0, "302 Found"),
    (["/redirect", "-e", "200"], 2, "302 Found (expected 200)"),
    (["/redirect", "-f", "-e", "200", "-s", "hello"], 0, "200 OK"),
    (["/", "-w", "@0:30"], 1, "bytes in"),
    (["/", "-w", "30", "-c", "@0:30"], 2, "bytes in"),
]


@pytest.mark.parametrize("args, code, text", HTTP_CASES)
def test_http(web, args, code, text):
    path, *rest = args
    res = run("check_fw_http", "-u", web + path, *rest).valid()
    assert res.code == code and text in res.lines[0], res
    assert res.perf["time"]["uom"] == "s" and res.perf["size"]["uom"] == "B"


@pytest.mark.parametrize("path", ["/", "/missing", "/error"])
def test_http_status_like_debian_check_http(web, path):
    port = web.rsplit(":", 1)[1]
    code, _ = debian("check_http", "-I", "127.0.0.1", "-p", port, "-u", path)
    assert run("check_fw_http", "-u", web + path).valid().code == code


def test_http_ignores_proxy_variables(web):
    env = dict(os.environ, http_proxy="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
               no_proxy="", NO_PROXY="")
    assert run("check_fw_http", "-u", web + "/", env=env).valid().code == 0


def test_http_unreachable_and_timeout(web, closed_port):
    res = run("check_fw_http", "-u", f"http://127.0.0.1:{closed_port}/").valid()
    assert res.code == 2 and "Connection refused" in res.lines[0], res
    started = time.monotonic()
    res = run("check_fw_http", "-u", web + "/slow", "-t", "0.5").valid()
    assert time.monotonic() - started < 5
    assert res.code == 2 and "no response" in res.lines[0], res


# ---------------------------------------------------------------------------- file age


@pytest.mark.parametrize("args, code", [
    (["-w", "200", "-c", "300"], 0),
    (["-w", "50", "-c", "200"], 1),
    (["-w", "10", "-c", "50"], 2),
    (["-w", "@90:110"], 1),
    (["-W", "100:"], 1),
    (["-W", "1:", "-C", "100:"], 2),
    (["-w", "200", "-C", "@40:60"], 2),
])
def test_file_age(aged_file, args, code):
    res = run("check_fw_file_age", "-f", aged_file, *args).valid()
    assert res.code == code, res
    assert res.perf["age"]["value"] == pytest.approx(100, abs=5)
    assert res.perf["size"]["value"] == 50 and res.perf["size"]["uom"] == "B"


def test_file_age_missing(tmp_path):
    res = run("check_fw_file_age", "-f", tmp_path / "nope").valid()
    assert res.code == 2 and "does not exist" in res.lines[0], res
    assert run("check_fw_file_age", "-f", tmp_path / "nope", "--ok-missing").valid().code == 0


@pytest.mark.parametrize("warn, crit", [("200", "300"), ("50", "200"), ("10", "50")])
def test_file_age_like_debian_check_file_age(aged_file, warn, crit):
    code, theirs = debian("check_file_age", "-f", aged_file, "-w", warn, "-c", crit)
    ours = run("check_fw_file_age", "-f", aged_file, "-w", warn, "-c", crit).valid()
    assert ours.code == code
    assert ours.perf["age"]["value"] == pytest.approx(debian_perf(theirs, "age"), abs=2)
    assert ours.perf["size"]["value"] == debian_perf(theirs, "size")
