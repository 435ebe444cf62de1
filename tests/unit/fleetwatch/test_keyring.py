"""The allowlists' :class:`fleetwatch.security.Keyring`: what its periodic refresh sees (a key
file added or removed) and what only a forced re-read (SIGHUP) sees (another key under the
same name, size and modification time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetwatch.security import Keyring, read_certificate, write_certificates


@pytest.fixture
def dirs(tmp_path):
    agents, backends = tmp_path / "agents", tmp_path / "backends"
    agents.mkdir()
    backends.mkdir()
    return agents, backends


def agent_key(directory: Path, name: str, uuid: str) -> Path:
    return Path(write_certificates(str(directory), name, {"role": "agent", "uuid": uuid,
                                                         "name": name})[0])


def test_an_added_or_removed_key_is_seen_by_the_periodic_refresh(dirs):
    agents, backends = dirs
    keyring = Keyring(str(agents), str(backends))
    assert keyring.refresh(force=True) is False and keyring.keys == {}
    public = agent_key(agents, "late", "agent-late")
    assert keyring.refresh() is True
    assert [a.uuid for a in keyring.keys.values()] == ["agent-late"]
    assert keyring.refresh() is False                           # nothing changed since
    public.unlink()
    assert keyring.refresh() is True and keyring.keys == {}


def test_the_same_name_size_and_time_with_another_key_is_seen_only_when_forced(dirs, tmp_path):
    agents, backends = dirs
    first = agent_key(agents, "hup-1", "agent-hup")
    second = agent_key(tmp_path, "hup-2", "agent-hup")
    keyring = Keyring(str(agents), str(backends))
    keyring.refresh(force=True)
    st = first.stat()
    text = second.read_text().replace("hup-2", "hup-1")
    assert len(text) == st.st_size
    first.write_text(text)
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert keyring.refresh() is False                           # the periodic check: no change
    assert read_certificate(str(second)).public not in keyring.keys
    assert keyring.refresh(force=True) is True                  # SIGHUP
    assert list(keyring.keys) == [read_certificate(str(second)).public]
