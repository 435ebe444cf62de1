"""Notifications for the trap receiver's tests (agent/devices/traps.py): Net-SNMP's own
``snmptrap`` and ``snmpinform`` sent to a port, and SNMP messages pysnmp encodes (to send
one datagram exactly, twice, or in a burst).

The tools run with ``-m ''`` (no MIB: IF-MIB is not installed, every OID is numeric) and
their own ``SNMP_PERSISTENT_DIR`` and ``SNMPCONFPATH`` (the sender's engine ID is kept there,
and nothing of /etc/snmp or /var/lib/snmp is read or written).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.snmpd import User, find

LINK_DOWN, LINK_UP, COLD_START = ("1.3.6.1.6.3.1.1.5.3", "1.3.6.1.6.3.1.1.5.4",
                                  "1.3.6.1.6.3.1.1.5.1")
IF_INDEX, IF_ADMIN, IF_OPER = "1.3.6.1.2.1.2.2.1.1", "1.3.6.1.2.1.2.2.1.7", "1.3.6.1.2.1.2.2.1.8"


def link_varbinds(if_index: int, admin: int, oper: int) -> list[str]:
    """A linkDown's or linkUp's varbinds as the tools take them (RFC 2863: ifIndex,
    ifAdminStatus, ifOperStatus), by number."""
    return [f"{IF_INDEX}.{if_index}", "i", str(if_index), f"{IF_ADMIN}.{if_index}", "i",
            str(admin), f"{IF_OPER}.{if_index}", "i", str(oper)]


class Sender:
    """Net-SNMP's ``snmptrap``/``snmpinform`` to ``host`` (IPv4 or IPv6) ``port``, its state
    in ``root``."""

    def __init__(self, root: Path, port: int, host: str = "127.0.0.1"):
        if find("snmptrap") is None:
            pytest.skip("Net-SNMP's tools not installed (apt-get install snmp, or make "
                        "install)")
        self.root = Path(root)
        self.target = f"udp6:[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "SNMP_PERSISTENT_DIR": str(self.root),
                    "SNMPCONFPATH": str(self.root)}

    def send(self, oid: str = LINK_DOWN, varbinds=(), *, inform: bool = False,
             community: str | None = None, user: User | None = None, engine_id: str = "",
             source: str = "", timeout: float = 2.0, retries: int = 0,
             ) -> subprocess.CompletedProcess:
        """Send notification ``oid`` with ``varbinds`` (the tools' ``OID TYPE VALUE``
        words) as v2c (``community``) or v3 ``authPriv`` (``user``; ``engine_id``: the
        sender's, 0x..., else the tool's own); ``source``: the address to send from. An
        inform waits ``timeout`` seconds for its answer, ``retries`` times more."""
        if user is None:
            auth = ["-v2c", "-c", community or ""]
        else:
            auth = ["-v3", "-l", "authPriv", "-u", user.name, "-a", user.auth, "-A",
                    user.auth_key, "-x", user.priv, "-X", user.priv_key]
            auth += ["-e", engine_id] if engine_id else []
        return self._run("snmpinform" if inform else "snmptrap", *auth, *(
            [f"--clientaddr={source}"] if source else []), self.target, "", oid, *varbinds,
            timeout=timeout, retries=retries)

    def send_v1(self, enterprise: str, agent_address: str, generic: int, specific: int,
                varbinds=(), *, community: str) -> subprocess.CompletedProcess:
        """An SNMPv1 trap (its PDU names an ``agent_address``: a claim, not an identity)."""
        return self._run("snmptrap", "-v1", "-c", community, self.target, enterprise,
                         agent_address, str(generic), str(specific), "", *varbinds)

    def _run(self, tool: str, *args: str, timeout: float = 2.0, retries: int = 0
             ) -> subprocess.CompletedProcess:
        argv = [find(tool), "-m", "", "-t", f"{timeout:g}", "-r", str(retries), *args]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env,
                              timeout=10 + timeout * (retries + 1))


def encoded(oid: str | None = COLD_START, *, community: str, pdu_type: str = "trap",
            request_id: int = 1, varbinds=()) -> bytes:
    """A v2c message as pysnmp encodes it, for a test that sends one datagram exactly,
    again, or many at once: a notification ``oid`` (``pdu_type`` "trap" or "inform"; "get"
    makes a GetRequest) with sysUpTime.0 and snmpTrapOID.0 first (None: without them), then
    ``varbinds`` ((OID, pysnmp value) pairs)."""
    from pyasn1.codec.ber import encoder
    from pysnmp.proto import api
    v2c = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    pdu = {"trap": v2c.SNMPv2TrapPDU, "inform": v2c.InformRequestPDU,
           "get": v2c.GetRequestPDU}[pdu_type]()
    v2c.apiPDU.set_defaults(pdu)
    v2c.apiPDU.set_request_id(pdu, request_id)
    head = [] if oid is None else [("1.3.6.1.2.1.1.3.0", v2c.TimeTicks(12345)),
                                   ("1.3.6.1.6.3.1.1.4.1.0", v2c.ObjectIdentifier(oid))]
    v2c.apiPDU.set_varbinds(pdu, [*head, *varbinds])
    message = v2c.Message()
    v2c.apiMessage.set_defaults(message)
    v2c.apiMessage.set_community(message, community)
    v2c.apiMessage.set_pdu(message, pdu)
    return encoder.encode(message)
