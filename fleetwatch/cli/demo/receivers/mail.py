"""The SMTP receiver (aiosmtpd), for the ``email`` channel."""

from __future__ import annotations

import importlib.util
from pathlib import Path


class Mail:
    """The SMTP receiver: each message a file of ``DIR/mail/``."""

    name = "smtp"
    about = "an SMTP server"

    def __init__(self, directory: Path, port: int):
        from aiosmtpd.controller import Controller
        self.directory = directory / "mail"
        self.directory.mkdir(exist_ok=True)
        self.count = len(list(self.directory.glob("*.eml")))
        receiver = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                return receiver.keep(envelope.content)

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=port)

    def keep(self, content: bytes) -> str:
        self.count += 1
        queued = f"{self.count:06d}"
        (self.directory / f"{queued}.eml").write_bytes(content)
        return f"250 2.0.0 Ok: queued as {queued}"

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("aiosmtpd") is not None

    @classmethod
    def for_demo(cls, directory: Path, port: int) -> "Mail":
        return cls(directory, port)

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> None:
        return None
