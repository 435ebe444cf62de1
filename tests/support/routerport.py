"""A recording :class:`router.port.DeskPort` and a settable clock, for unit tests of the
router's slow path (:class:`router.admission.Admission`, :class:`router.control.ControlDesk`)
without sockets."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch import protocol
from fleetwatch.protocol import Message, ProtocolError
from router.port import SENT
from router.replies import ReplyLimiter
from support.clock import Clock  # noqa: F401  (the settable clock of these tests)


@dataclass(frozen=True)
class Refusal:
    rid: bytes
    status: int
    reason: str
    ref: str | None
    answer: bool
    careful: bool


class RecordingPort:
    """Records every reply, refusal, relayed message and send to an agent. Errors may be
    answered at most once a second per peer, as through the relay (a real
    :class:`router.replies.ReplyLimiter` on ``monotonic``); ``to_agent`` says
    ``agent_outcome``."""

    def __init__(self, router_id: str = "router-1", monotonic: Clock | None = None):
        self.id = router_id
        self.limiter = ReplyLimiter(1.0, monotonic or Clock(1000.0))
        self.replies: list[tuple[bytes, Message]] = []
        self.refusals: list[Refusal] = []
        self.relayed: list[tuple[bytes, bytes, bytes]] = []
        self.sent: list[tuple[bytes, bytes, bytes]] = []
        self.agent_outcome = SENT
        #: routing ids whose connection is gone: a reply to them fails
        self.gone: set[bytes] = set()

    def reply(self, rid: bytes, msg: Message) -> bool:
        if rid in self.gone:
            return False
        # through the codec, as on the wire: what the peer would decode
        self.replies.append((rid, protocol.decode(protocol.encode(msg))))
        return True

    def may_answer(self, rid: bytes) -> bool:
        return self.limiter.allow(rid)

    def refuse(self, rid: bytes, err: ProtocolError, ref: str | None = None,
               answer: bool = True, careful: bool = True) -> None:
        self.refusals.append(Refusal(rid, err.status, err.reason, ref, answer, careful))

    def relay(self, envelope: bytes, type_frame: bytes, body: bytes) -> None:
        self.relayed.append((envelope, type_frame, body))

    def welcome(self) -> Message:
        return protocol.make("WELCOME", self.id, router=self.id,
                             routers=["tcp://router-1.example:5555"])

    def fleet(self) -> dict:
        return {"sinks": {"alerting": 1, "history": 0},
                "durable": {"NOTIFY": ["alerting", "history"], "REGISTER": ["registry"]}}

    def to_agent(self, rid: bytes, type_frame: bytes, body: bytes) -> str:
        if self.agent_outcome == SENT:
            self.sent.append((rid, type_frame, body))
        return self.agent_outcome

    # ---------------------------------------------------------------- for assertions
    def types_replied(self) -> list[str]:
        return [msg.type for _, msg in self.replies]

    def statuses(self) -> list[int]:
        return [r.status for r in self.refusals]

    def relayed_types(self) -> list[bytes]:
        return [type_frame for _, type_frame, _ in self.relayed]
