"""plugins/output.py: table-driven tests over real plugin output and awkward fixtures.

The ``REAL`` table holds stdout captured from Debian's monitoring-plugins-basic
(/usr/lib/nagios/plugins, version 2.3.3) on a test machine;
tests/integration/test_debian_plugins.py runs some of them again, so a change in their
output shape shows up there.
"""

from __future__ import annotations

import json
import time

import pytest

from plugins.output import (MAX_LONG, MAX_PERFDATA, MAX_TEXT, PluginOutput, parse,
                            parse_perfdata)


def pd(label, value, uom="", warn=None, crit=None, min=None, max=None):
    return {"label": label, "value": value, "uom": uom, "warn": warn, "crit": crit,
            "min": min, "max": max}


# (name, captured stdout, text, long_output, perfdata, bad_perfdata)
REAL = [
    ("check_load",
     b"LOAD OK - total load average: 0.02, 0.21, 0.49|load1=0.020;5.000;10.000;0; "
     b"load5=0.210;4.000;8.000;0; load15=0.490;3.000;6.000;0; \n",
     "LOAD OK - total load average: 0.02, 0.21, 0.49", "",
     [pd("load1", 0.02, "", "5.000", "10.000", 0.0), pd("load5", 0.21, "", "4.000", "8.000", 0.0),
      pd("load15", 0.49, "", "3.000", "6.000", 0.0)], 0),
    ("check_load -r",
     b"LOAD OK - scaled load average: 0.01, 0.10, 0.25 - total load average: 0.03, 0.21, 0.50"
     b"|load1=0.030;;;0; scaled_load1=0.015;1.000;2.000;0; load5=0.210;;;0; "
     b"scaled_load5=0.105;1.000;2.000;0; load15=0.500;;;0; scaled_load15=0.250;1.000;2.000;0; \n",
     "LOAD OK - scaled load average: 0.01, 0.10, 0.25 - total load average: 0.03, 0.21, 0.50",
     "", [pd("load1", 0.03, min=0.0), pd("scaled_load1", 0.015, "", "1.000", "2.000", 0.0),
          pd("load5", 0.21, min=0.0), pd("scaled_load5", 0.105, "", "1.000", "2.000", 0.0),
          pd("load15", 0.5, min=0.0), pd("scaled_load15", 0.25, "", "1.000", "2.000", 0.0)], 0),
    ("check_load usage (exit 3)",
     b"check_load: Could not parse arguments\nUsage:\ncheck_load [-r] -w WLOAD1,WLOAD5,WLOAD15 "
     b"-c CLOAD1,CLOAD5,CLOAD15 [-n NUMBER_OF_PROCS]\n",
     "check_load: Could not parse arguments",
     "Usage:\ncheck_load [-r] -w WLOAD1,WLOAD5,WLOAD15 -c CLOAD1,CLOAD5,CLOAD15 "
     "[-n NUMBER_OF_PROCS]", [], 0),
    ("check_disk -p /",
     b"DISK OK - free space: / 81492MiB (78% inode=97%);| /=23493345280B;243497277849;"
     b"257024904396;0;270552530944\n",
     "DISK OK - free space: / 81492MiB (78% inode=97%);", "",
     [pd("/", 23493345280.0, "B", "243497277849", "257024904396", 0.0, 270552530944.0)], 0),
    ("check_disk, several mounts",
     b"DISK OK - free space: /dev 12042MiB (100% inode=99%); / 81492MiB (78% inode=97%);| "
     b"/dev=0B;11364256972;11995604582;0;12626952192 /=23493345280B;243497277849;257024904396;"
     b"0;270552530944 /mnt/sandboxing/model_tools_env/v1/python=0B;0;0;0;0\n",
     "DISK OK - free space: /dev 12042MiB (100% inode=99%); / 81492MiB (78% inode=97%);", "",
     [pd("/dev", 0.0, "B", "11364256972", "11995604582", 0.0, 12626952192.0),
      pd("/", 23493345280.0, "B", "243497277849", "257024904396", 0.0, 270552530944.0),
      pd("/mnt/sandboxing/model_tools_env/v1/python", 0.0, "B", "0", "0", 0.0, 0.0)], 0),
    ("check_disk, missing mount",
     b"DISK CRITICAL - /nonexistent-mount is not accessible: No such file or directory\n",
     "DISK CRITICAL - /nonexistent-mount is not accessible: No such file or directory", "",
     [], 0),
    ("check_procs",
     b"PROCS OK: 72 processes | procs=72;;;0;\n",
     "PROCS OK: 72 processes", "", [pd("procs", 72.0, min=0.0)], 0),
    ("check_procs -w -c -a",
     b"PROCS OK: 0 processes with args 'python' | procs=0;500;1000;0;\n",
     "PROCS OK: 0 processes with args 'python'", "", [pd("procs", 0.0, "", "500", "1000", 0.0)],
     0),
    ("check_users",
     b"USERS OK - 0 users currently logged in |users=0;5;10;0\n",
     "USERS OK - 0 users currently logged in", "", [pd("users", 0.0, "", "5", "10", 0.0)], 0),
    ("check_swap, no swap",
     b"SWAP CRITICAL - 0% free (0MB out of 0MB) - Swap is either disabled, not present, or of "
     b"zero size. |swap=0B;0;0;0;0\n",
     "SWAP CRITICAL - 0% free (0MB out of 0MB) - Swap is either disabled, not present, or of "
     "zero size.", "", [pd("swap", 0.0, "B", "0", "0", 0.0, 0.0)], 0),
    ("check_tcp",
     b"TCP OK - 0.000 second response time on 127.0.0.1 port 33331|time=0.000142s;;;0.000000;"
     b"10.000000\n",
     "TCP OK - 0.000 second response time on 127.0.0.1 port 33331", "",
     [pd("time", 0.000142, "s", None, None, 0.0, 10.0)], 0),
    ("check_tcp refused",
     b"connect to address 127.0.0.1 and port 1: Connection refused\n",
     "connect to address 127.0.0.1 and port 1: Connection refused", "", [], 0),
    ("check_dummy 0", b"OK: hello\n", "OK: hello", "", [], 0),
    ("check_dummy 2", b"CRITICAL\n", "CRITICAL", "", [], 0),
    # check_dummy echoes its text: a '|' in it starts perfdata that does not parse
    ("check_dummy 3 'x|y'", b"UNKNOWN: x|y\n", "UNKNOWN: x", "", [], 1),
    ("check_file_age",
     b"FILE_AGE CRITICAL: /etc/hostname is 8356 seconds old and 3 bytes | age=8356s;1;2 "
     b"size=3B;0;0;0\n",
     "FILE_AGE CRITICAL: /etc/hostname is 8356 seconds old and 3 bytes", "",
     [pd("age", 8356.0, "s", "1", "2"), pd("size", 3.0, "B", "0", "0", 0.0)], 0),
    ("check_file_age, missing",
     b"FILE_AGE CRITICAL: File not found - /nonexistent\n",
     "FILE_AGE CRITICAL: File not found - /nonexistent", "", [], 0),
]

# (name, stdout, text, long_output, perfdata, bad_perfdata)
AWKWARD = [
    ("empty", b"", "", "", [], 0),
    ("only a bar", b"|", "", "", [], 0),
    ("only a bar and newline", b"|\n", "", "", [], 0),
    ("no trailing newline", b"OK - fine|a=1", "OK - fine", "", [pd("a", 1.0)], 0),
    ("no perfdata", b"OK - all good\n", "OK - all good", "", [], 0),
    ("crlf", b"OK - dos\r\nline 2\r\n", "OK - dos", "line 2", [], 0),
    ("quoted label with spaces", b"OK | 'free space'=12MB;;;0;100\n", "OK", "",
     [pd("free space", 12.0, "MB", None, None, 0.0, 100.0)], 0),
    ("quoted label with escaped quote", b"OK | 'it''s here'=3 'a=b'=4\n", "OK", "",
     [pd("it's here", 3.0), pd("a=b", 4.0)], 0),
    ("U value", b"OK | rtt=U;1;2;; loss=U\n", "OK", "",
     [pd("rtt", None, "", "1", "2"), pd("loss", None)], 0),
    ("units", b"OK | a=1% b=2s c=3ms d=4us e=5B f=6KB g=7MB h=8TB i=9c j=-1.5e3 k=+.5\n", "OK",
     "", [pd("a", 1.0, "%"), pd("b", 2.0, "s"), pd("c", 3.0, "ms"), pd("d", 4.0, "us"),
          pd("e", 5.0, "B"), pd("f", 6.0, "KB"), pd("g", 7.0, "MB"), pd("h", 8.0, "TB"),
          pd("i", 9.0, "c"), pd("j", -1500.0), pd("k", 0.5)], 0),
    ("empty and trailing fields", b"OK | a=1;;;; b=2;;; c=3; d=4;~:10;@10:20\n", "OK", "",
     [pd("a", 1.0), pd("b", 2.0), pd("c", 3.0), pd("d", 4.0, "", "~:10", "@10:20")], 0),
    ("long output, no perfdata", b"WARNING - 2 of 5\nfirst\nsecond\n\n",
     "WARNING - 2 of 5", "first\nsecond", [], 0),
    ("perfdata continued in long output",
     b"DISK OK | /=10B\nline one\nline two | /var=20B;30;40\n/home=30B\n'/x y'=5%\n",
     "DISK OK", "line one\nline two",
     [pd("/", 10.0, "B"), pd("/var", 20.0, "B", "30", "40"), pd("/home", 30.0, "B"),
      pd("/x y", 5.0, "%")], 0),
    ("long output then perfdata with empty text", b"OK\nlong\n|a=1\n", "OK", "long",
     [pd("a", 1.0)], 0),
    ("garbage tokens are counted",
     b"OK | a=1 junk =5 b= c=abc d=1;2;3;4;5;6 e=1.2.3 'open=1 f=2 g=1;;;x h=1e999 i=2\n",
     "OK", "", [pd("a", 1.0), pd("f", 2.0), pd("i", 2.0)], 9),
    ("non-UTF-8 bytes", b"OK - caf\xe9 \xff\xfe | 'l\xe9'=1\nlong \x80\n",
     "OK - caf\ufffd \ufffd\ufffd", "long \ufffd", [pd("l\ufffd", 1.0)], 0),
    ("text is trimmed", b"   OK   |  a=1  \n", "OK", "", [pd("a", 1.0)], 0),
]


@pytest.mark.parametrize("name,data,text,long_output,perfdata,bad",
                         REAL + AWKWARD, ids=[r[0] for r in REAL + AWKWARD])
def test_parse_table(name, data, text, long_output, perfdata, bad):
    got = parse(data)
    assert got == PluginOutput(text, long_output, perfdata, bad)
    json.dumps(got.perfdata, allow_nan=False)      # always encodable in a RESULT


def test_ten_megabytes_is_fast_and_capped():
    line = b"x" * 1000 + b"\n"
    data = b"OK " + b"y" * (10 * 1024 * 1024) + b"\n" + line * 10_000
    start = time.perf_counter()
    got = parse(data)
    assert time.perf_counter() - start < 1.0
    assert len(got.text) <= MAX_TEXT and got.text.endswith("[truncated]")
    assert got.long_output == ""        # everything past the input cap is ignored

    data = b"OK\n" + line * 10_000
    got = parse(data)
    assert len(got.long_output) <= MAX_LONG and got.long_output.endswith("[truncated]")


def test_ten_megabytes_of_perfdata_is_fast_and_capped():
    data = b"OK | " + b"a=1;2;3;4;5 " * (10 * 1024 * 1024 // 12)
    start = time.perf_counter()
    got = parse(data)
    assert time.perf_counter() - start < 1.0
    assert len(got.perfdata) == MAX_PERFDATA
    assert got.bad_perfdata > 1000          # the rest of the first MiB, counted


@pytest.mark.parametrize("data", [b"'" * 100_000, b"'a " * 100_000, b"=" * 100_000,
                                  b"a=" + b";" * 100_000, b"''=" * 50_000])
def test_pathological_perfdata_is_fast(data):
    start = time.perf_counter()
    items, bad = parse_perfdata(data.decode())
    assert time.perf_counter() - start < 1.0
    assert items == [] and bad >= 1
