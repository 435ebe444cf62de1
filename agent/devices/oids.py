"""The OIDs a poller reads and a trap receiver names, numeric and named here: the MIB files
are not installed (IF-MIB and SNMPv2-SMI are absent from Debian main: snmp-mibs-downloader
is in non-free), and a poller needs no MIB compiler to read a dozen columns.

- SNMPv2-MIB (RFC 3418): the system group's scalars, and what a notification carries
  (sysUpTime.0, snmpTrapOID.0) with the generic traps' OIDs;
- IF-MIB (RFC 2863): ifTable's and ifXTable's columns, the row index is ifIndex;
- HOST-RESOURCES-MIB (RFC 2790): hrProcessorLoad (indexed by hrDeviceIndex) and
  hrStorageTable's columns (by hrStorageIndex), with the storage types;
- NET-SNMP-EXTEND-MIB: the ``extend`` output columns (an index is the entry's name).

:data:`NAMES` maps each OID to its MIB name; :func:`name_of` names any OID under one of them
(``1.3.6.1.2.1.2.2.1.8.4`` -> ``ifOperStatus.4``), the numeric OID itself otherwise. Plain
data, no pysnmp.
"""

from __future__ import annotations

# ------------------------------------------------------------------ SNMPv2-MIB system group
SYSTEM = "1.3.6.1.2.1.1"
SYS_DESCR = SYSTEM + ".1.0"
SYS_OBJECT_ID = SYSTEM + ".2.0"
SYS_UPTIME = SYSTEM + ".3.0"
SYS_CONTACT = SYSTEM + ".4.0"
SYS_NAME = SYSTEM + ".5.0"
SYS_LOCATION = SYSTEM + ".6.0"
#: the system group as a poll reads it: :class:`agent.devices.snmp.System`'s field -> OID
SYSTEM_FIELDS = {"descr": SYS_DESCR, "object_id": SYS_OBJECT_ID, "uptime": SYS_UPTIME,
                 "contact": SYS_CONTACT, "name": SYS_NAME, "location": SYS_LOCATION}

# ------------------------------------------------------------------ IF-MIB ifTable
IF_TABLE = "1.3.6.1.2.1.2.2.1"
IF_INDEX = IF_TABLE + ".1"
IF_DESCR = IF_TABLE + ".2"
IF_TYPE = IF_TABLE + ".3"
IF_SPEED = IF_TABLE + ".5"               # bits/s, Gauge32: 4294967295 when faster
IF_ADMIN_STATUS = IF_TABLE + ".7"
IF_OPER_STATUS = IF_TABLE + ".8"
IF_IN_OCTETS = IF_TABLE + ".10"          # Counter32
IF_IN_DISCARDS = IF_TABLE + ".13"
IF_IN_ERRORS = IF_TABLE + ".14"
IF_OUT_OCTETS = IF_TABLE + ".16"         # Counter32
IF_OUT_DISCARDS = IF_TABLE + ".19"
IF_OUT_ERRORS = IF_TABLE + ".20"

# ------------------------------------------------------------------ IF-MIB ifXTable
IF_X_TABLE = "1.3.6.1.2.1.31.1.1.1"
IF_NAME = IF_X_TABLE + ".1"
IF_HC_IN_OCTETS = IF_X_TABLE + ".6"      # Counter64
IF_HC_OUT_OCTETS = IF_X_TABLE + ".10"    # Counter64
IF_HIGH_SPEED = IF_X_TABLE + ".15"       # Mbit/s
IF_ALIAS = IF_X_TABLE + ".18"
#: sysUpTime when the interface's counters last had a discontinuity (TimeTicks)
IF_COUNTER_DISCONTINUITY_TIME = IF_X_TABLE + ".19"

#: ifAdminStatus and ifOperStatus values
IF_STATUS = {1: "up", 2: "down", 3: "testing", 4: "unknown", 5: "dormant", 6: "notPresent",
             7: "lowerLayerDown"}
UP, DOWN = 1, 2

# ------------------------------------------------------------------ HOST-RESOURCES-MIB
HR_PROCESSOR_LOAD = "1.3.6.1.2.1.25.3.3.1.2"      # percent, the last minute's average
HR_STORAGE_TABLE = "1.3.6.1.2.1.25.2.3.1"
HR_STORAGE_TYPE = HR_STORAGE_TABLE + ".2"
HR_STORAGE_DESCR = HR_STORAGE_TABLE + ".3"
HR_STORAGE_ALLOCATION_UNITS = HR_STORAGE_TABLE + ".4"    # bytes
HR_STORAGE_SIZE = HR_STORAGE_TABLE + ".5"                # allocation units
HR_STORAGE_USED = HR_STORAGE_TABLE + ".6"                # allocation units
#: hrStorageType values (hrStorageTypes.N)
HR_STORAGE_TYPES = "1.3.6.1.2.1.25.2.1"
STORAGE_TYPES = {f"{HR_STORAGE_TYPES}.{n}": name for n, name in enumerate(
    ("other", "ram", "virtualMemory", "fixedDisk", "removableDisk", "floppyDisk",
     "compactDisc", "ramDisk", "flashMemory", "networkDisk"), start=1)}

# ------------------------------------------------------------------ notifications
#: a notification's first two varbinds (RFC 3416 4.2.6)
SNMP_TRAP_OID = "1.3.6.1.6.3.1.1.4.1.0"
SNMP_TRAPS = "1.3.6.1.6.3.1.1.5"
COLD_START = SNMP_TRAPS + ".1"
WARM_START = SNMP_TRAPS + ".2"
LINK_DOWN = SNMP_TRAPS + ".3"
LINK_UP = SNMP_TRAPS + ".4"
AUTHENTICATION_FAILURE = SNMP_TRAPS + ".5"

# ------------------------------------------------------------------ NET-SNMP-EXTEND-MIB
NS_EXTEND_OUTPUT_1_LINE = "1.3.6.1.4.1.8072.1.3.2.3.1.1"
NS_EXTEND_OUTPUT_FULL = "1.3.6.1.4.1.8072.1.3.2.3.1.2"
NS_EXTEND_RESULT = "1.3.6.1.4.1.8072.1.3.2.3.1.4"

#: OID -> its MIB name (scalars without their ``.0``: sysUpTime.0 is ``sysUpTime`` + ``.0``)
NAMES = {
    SYSTEM: "system",
    SYS_DESCR[:-2]: "sysDescr", SYS_OBJECT_ID[:-2]: "sysObjectID",
    SYS_UPTIME[:-2]: "sysUpTime", SYS_CONTACT[:-2]: "sysContact", SYS_NAME[:-2]: "sysName",
    SYS_LOCATION[:-2]: "sysLocation",
    IF_INDEX: "ifIndex", IF_DESCR: "ifDescr", IF_TYPE: "ifType", IF_SPEED: "ifSpeed",
    IF_ADMIN_STATUS: "ifAdminStatus", IF_OPER_STATUS: "ifOperStatus",
    IF_IN_OCTETS: "ifInOctets", IF_IN_DISCARDS: "ifInDiscards", IF_IN_ERRORS: "ifInErrors",
    IF_OUT_OCTETS: "ifOutOctets", IF_OUT_DISCARDS: "ifOutDiscards",
    IF_OUT_ERRORS: "ifOutErrors",
    IF_NAME: "ifName", IF_HC_IN_OCTETS: "ifHCInOctets", IF_HC_OUT_OCTETS: "ifHCOutOctets",
    IF_HIGH_SPEED: "ifHighSpeed", IF_ALIAS: "ifAlias",
    IF_COUNTER_DISCONTINUITY_TIME: "ifCounterDiscontinuityTime",
    HR_PROCESSOR_LOAD: "hrProcessorLoad",
    HR_STORAGE_TYPE: "hrStorageType", HR_STORAGE_DESCR: "hrStorageDescr",
    HR_STORAGE_ALLOCATION_UNITS: "hrStorageAllocationUnits",
    HR_STORAGE_SIZE: "hrStorageSize", HR_STORAGE_USED: "hrStorageUsed",
    SNMP_TRAP_OID[:-2]: "snmpTrapOID",
    COLD_START: "coldStart", WARM_START: "warmStart", LINK_DOWN: "linkDown",
    LINK_UP: "linkUp", AUTHENTICATION_FAILURE: "authenticationFailure",
    NS_EXTEND_OUTPUT_1_LINE: "nsExtendOutput1Line", NS_EXTEND_OUTPUT_FULL: "nsExtendOutputFull",
    NS_EXTEND_RESULT: "nsExtendResult",
}


def name_of(oid: str) -> str:
    """``oid`` (numeric, dotted, no leading dot) named after the longest OID of
    :data:`NAMES` it starts with, the rest kept as its index (``ifOperStatus.4``,
    ``sysUpTime.0``, ``linkDown``); ``oid`` itself when none names it."""
    parts = oid.split(".")
    for end in range(len(parts), 0, -1):
        name = NAMES.get(".".join(parts[:end]))
        if name is not None:
            return ".".join([name, *parts[end:]])
    return oid
