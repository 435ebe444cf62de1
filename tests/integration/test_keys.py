"""``fleetwatch keys``: certificates made, listed and refused, as an operator runs it."""

from __future__ import annotations

import json
import os
import stat

import pytest
import zmq.auth

from fleetwatch.cli.keys import scan
from fleetwatch.security import check_own
from fleetwatch.security import ClientKeys, ClientSecurity, SecurityError, read_certificate

pytestmark = pytest.mark.timeout(60)

UUID = "0b6d5c8e-2f1a-4c3b-9d7e-1a2b3c4d5e6f"


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_new_agent_key_is_bound_to_its_uuid(fleet):
    d = fleet.root / "agents"
    res = fleet.cli("keys", "new", "agent", "--uuid", UUID, str(d))
    public, secret = d / f"{UUID}.key", d / f"{UUID}.key_secret"
    assert mode(public) == 0o644 and mode(secret) == 0o600
    cert = read_certificate(str(secret), need_secret=True)
    assert cert.metadata == {"role": "agent", "uuid": UUID, "name": UUID}
    assert read_certificate(str(public)).public == cert.public
    assert read_certificate(str(public)).secret is None
    # What the command printed: both paths and the public key.
    out = res.stdout
    assert str(public) in out and str(secret) in out and cert.public.decode() in out
    assert cert.secret.decode() not in out + res.stderr
    # zmq.auth reads the same files (the format is zmq.auth's).
    pub, sec = zmq.auth.load_certificate(str(secret))
    assert (pub, sec) == (cert.public, cert.secret)


@pytest.mark.parametrize("role", ["router", "backend"])
def test_new_router_and_backend_keys(fleet, role):
    d = fleet.root / role
    fleet.cli("keys", "new", role, "fleet-1", str(d), "--config", "/nonexistent/ignored.yaml")
    cert = read_certificate(str(d / "fleet-1.key_secret"), need_secret=True)
    assert cert.role == role and cert.name == "fleet-1" and cert.uuid == ""
    assert mode(d / "fleet-1.key_secret") == 0o600


def test_an_existing_key_is_never_overwritten(fleet):
    d = fleet.root / "k"
    fleet.cli("keys", "new", "backend", "op", str(d))
    before = (d / "op.key_secret").read_bytes()
    res = fleet.cli("keys", "new", "backend", "op", str(d), check=False)
    assert res.returncode == 78
    assert "exists already" in one_line(res)
    assert (d / "op.key_secret").read_bytes() == before
    # Half a pair left behind is not silently completed either.
    (d / "op.key").unlink()
    res = fleet.cli("keys", "new", "backend", "op", str(d), check=False)
    assert res.returncode == 78 and "op.key_secret exists already" in one_line(res)


def test_new_backend_with_several_name_dir_pairs_as_its_usage_says(fleet):
    """``keys new backend A DIR B DIR`` is what ``--help`` shows; it makes
    both keys, and ``--help`` shows exactly the forms the parser takes."""
    a, b = fleet.root / "a", fleet.root / "b"
    res = fleet.cli("keys", "new", "backend", "A", str(a), "B", str(b))
    for name, d in (("A", a), ("B", b)):
        cert = read_certificate(str(d / f"{name}.key_secret"), need_secret=True)
        assert cert.role == "backend" and cert.name == name
        assert mode(d / f"{name}.key_secret") == 0o600 and str(d / f"{name}.key") in res.stdout
    usage = fleet.cli("keys", "new", "--help").stdout
    assert "fleetwatch keys new agent --uuid UUID DIR" in usage
    assert "fleetwatch keys new {router,backend,site} NAME DIR [NAME DIR ...]" in usage
    fleet.cli("keys", "new", "site", "site-paris", str(a))      # a site router's (4.10)
    cert = read_certificate(str(a / "site-paris.key_secret"), need_secret=True)
    assert (cert.role, cert.name) == ("site", "site-paris")
    # An odd count, or a key that exists already, writes none of them.
    c = fleet.root / "c"
    res = fleet.cli("keys", "new", "backend", "C", str(c), "D", check=False)
    assert res.returncode == 2 and "NAME DIR pairs" in one_line(res) and not c.exists()
    res = fleet.cli("keys", "new", "backend", "C", str(c), "A", str(a), check=False)
    assert res.returncode == 78 and "A.key exists already" in one_line(res)
    assert not (c / "C.key").exists()


@pytest.mark.parametrize("argv, text", [
    (["new", "agent", "--uuid", "a/b", "DIR"], "uuid 'a/b': expected 1 to 64"),
    (["new", "agent", "--uuid", "-x", "DIR"], None),   # argparse: -x is an option
    (["new", "agent", "--uuid", "x" * 65, "DIR"], "expected 1 to 64"),
    (["new", "agent", "DIR"], "--uuid UUID is required"),
    (["new", "agent", "--uuid", UUID, "NAME", "DIR"], "give the directory only"),
    (["new", "router", "DIR"], "expected NAME DIR pairs"),
    (["new", "backend", "op", "DIR", "op", "DIR"], "op twice"),
    (["new", "router", ".hidden", "DIR"], "NAME '.hidden'"),
    (["new", "backend", "op", "DIR", "--uuid", UUID], "--uuid is for agent keys only"),
    (["new", "sink", "op", "DIR"], None),
    (["remove", "DIR"], None),
    ([], None),
])
def test_usage_errors_exit_2(fleet, argv, text):
    argv = [str(fleet.root / "out") if a == "DIR" else a for a in argv]
    res = fleet.cli("keys", *argv, check=False)
    assert res.returncode == 2, res
    if text is not None:
        assert text in one_line(res)
    assert not (fleet.root / "out").exists()


def test_list_shows_every_key_recursively(fleet):
    d = fleet.root / "keys"
    fleet.cli("keys", "new", "router", "fleet", str(d / "routers"))
    fleet.cli("keys", "new", "agent", "--uuid", UUID, str(d / "agents"))
    fleet.cli("keys", "new", "backend", "operator", str(d / "backends" / "ops"))
    os.unlink(d / "routers" / "fleet.key_secret")      # a router host keeps only its public
    os.chmod(d / "agents" / f"{UUID}.key_secret", 0o644)
    (d / "backends" / "broken.key").write_text("not a certificate\n")
    res = fleet.cli("keys", "list", str(d), "--json")
    keys = {k["name"]: k for k in json.loads(res.stdout)["keys"]}
    assert set(keys) == {"fleet", UUID, "operator", "broken"}
    assert keys["fleet"]["role"] == "router" and keys["fleet"]["secret"] is False
    assert keys["fleet"]["warnings"] == []
    agent = keys[UUID]
    assert agent["role"] == "agent" and agent["uuid"] == UUID and agent["secret"] is True
    assert agent["public_key"] == read_certificate(str(d / "agents" / f"{UUID}.key")) \
        .public.decode()
    assert agent["path"] == str(d / "agents" / f"{UUID}.key")
    assert any("mode 0644, expected 0600" in w for w in agent["warnings"])
    assert keys["operator"]["role"] == "backend" and keys["operator"]["warnings"] == []
    assert keys["broken"]["public_key"] is None
    assert any("not a CURVE certificate" in w for w in keys["broken"]["warnings"])

    text = fleet.cli("keys", "list", str(d))
    header = text.stdout.splitlines()[0].split()
    assert header == ["NAME", "ROLE", "UUID", "PUBLIC_KEY", "SECRET", "PATH"]
    assert UUID in text.stdout and "operator" in text.stdout
    assert "mode 0644, expected 0600" in text.stderr


def test_list_of_a_missing_directory_exits_78(fleet):
    res = fleet.cli("keys", "list", str(fleet.root / "nowhere"), check=False)
    assert res.returncode == 78 and "no such directory" in one_line(res)


def test_scan_flags_a_secret_in_the_public_file_and_a_mismatched_pair(tmp_path):
    from fleetwatch.security import write_certificates
    pub, sec = write_certificates(str(tmp_path), "a", {"role": "backend", "name": "a"})
    _, other = write_certificates(str(tmp_path / "o"), "a", {"role": "backend", "name": "a"})
    os.replace(other, sec)
    os.chmod(sec, 0o600)
    (tmp_path / "leak.key").write_text(open(sec).read())
    entries = {e["name"] + e["path"][-8:]: e for e in scan(str(tmp_path))}
    warnings = [w for e in entries.values() for w in e["warnings"]]
    assert any("does not match" in w for w in warnings)
    assert any("public file holds a secret key" in w for w in warnings)


# ---------------------------------------------------------------- client checks

def client_keys(tmp_path, own_meta: dict, router_meta: dict | None = None) -> ClientKeys:
    from fleetwatch.security import write_certificates
    _, secret = write_certificates(str(tmp_path / "own"), "own", own_meta)
    router, _ = write_certificates(str(tmp_path / "r"), "fleet",
                                   router_meta or {"role": "router", "name": "fleet"})
    return ClientKeys(ClientSecurity(curve=True, key=secret, router_key=router))


def test_check_own_refuses_a_wrong_role_or_uuid(tmp_path):
    keys = client_keys(tmp_path, {"role": "agent", "uuid": "u-1", "name": "u-1"})
    check_own(keys, "agent", "u-1")
    with pytest.raises(SecurityError, match="bound to uuid u-1, but this agent is u-2"):
        check_own(keys, "agent", "u-2")
    with pytest.raises(SecurityError, match="a agent key, but this process needs a backend"):
        check_own(keys, "backend")


def test_check_own_refuses_a_router_key_of_another_role(tmp_path):
    keys = client_keys(tmp_path, {"role": "backend", "name": "b"},
                       {"role": "backend", "name": "x"})
    with pytest.raises(SecurityError, match="router_key is a backend key"):
        check_own(keys, "backend")


def test_check_own_takes_keys_without_metadata_and_curve_off(tmp_path):
    check_own(client_keys(tmp_path, {}), "agent", "u-1")
    check_own(ClientKeys(ClientSecurity()), "agent", "u-1")
