"""Run commands between the processes of a deployment, as letters on the bell (`pheby.events.bell.Letter`).

A client's command for a run another process owns (`pheby.runs.forwarding`) goes to the owner's inbox (its
address is its run leases' holder, the `owner` of the run's journal row) with this process's address to
answer to; the owner carries it out as if asked there and answers with nothing or with the error it raised.
Letters are as unreliable as the bell: a command not answered within `ANSWER_SECONDS` (the owner stalled or
gone, Redis down) is `unavailable` to its client, who may try again; by then a stalled owner's runs are being
taken over. Nothing here is acknowledged to a client before its owner has done it.
"""

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec

from pheby.errors import PhebyError, RateLimited, Unavailable, error_of
from pheby.events import Bell, BellUnavailable, Letter
from pheby.runs.forwarding import RemoteSnapshot, RunCommand, RunOwners

log = logging.getLogger("pheby.runs")

ANSWER_SECONDS: Final = 10.0  # a forwarded cancel waits up to 5 s for its run's end over there
PENDING_MAX: Final = 1024  # commands of this process's clients waiting for their owners' answers
CARRYING_MAX: Final = 256  # other processes' commands being carried out here at once
UNANSWERED = "The server that runs this run did not answer in time; try again"


class Request(msgspec.Struct, frozen=True, kw_only=True, tag="request"):
    id: str
    reply_to: str
    command: RunCommand


class Reply(msgspec.Struct, frozen=True, kw_only=True, tag="reply"):
    id: str
    code: str | None = None  # the error's, None when it was done
    message: str = ""
    snapshot: RemoteSnapshot | None = None  # a snapshot's answer


_decode = msgspec.json.Decoder(Request | Reply).decode
_encode = msgspec.json.Encoder().encode


class BellRunOwners(RunOwners):
    """This process's inbox for run commands (open it with `start`; letters arrive through `on_letter`)."""

    def __init__(
        self,
        bell: Bell,
        address: str,
        carry_out: Callable[[RunCommand], Awaitable[RemoteSnapshot | None]],
        *,
        answer_seconds: float = ANSWER_SECONDS,
    ) -> None:
        self._bell = bell
        self.address = address
        self._carry_out = carry_out
        self._answer_seconds = answer_seconds
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._carrying: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self._bell.open_inbox(self.address)

    async def aclose(self) -> None:
        for task in self._carrying:
            task.cancel()
        await asyncio.gather(*self._carrying, return_exceptions=True)

    async def forward(self, owner: str, command: RunCommand) -> RemoteSnapshot | None:
        if len(self._pending) >= PENDING_MAX:
            raise Unavailable(UNANSWERED)
        request = Request(id=secrets.token_hex(8), reply_to=self.address, command=command)
        answered: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[request.id] = answered
        try:
            await self._bell.publish_many([Letter(owner, _encode(request))])
            async with asyncio.timeout(self._answer_seconds):
                reply = await answered
        except (BellUnavailable, TimeoutError):
            raise Unavailable(UNANSWERED) from None
        finally:
            self._pending.pop(request.id, None)
        if reply.code is not None:
            raise error_of(reply.code, reply.message)
        return reply.snapshot

    def on_letter(self, letter: Letter) -> None:
        try:
            message = _decode(letter.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("a run command letter that can't be read was dropped")
            return
        if isinstance(message, Reply):
            answered = self._pending.get(message.id)
            if answered is not None and not answered.done():
                answered.set_result(message)
            return
        if len(self._carrying) >= CARRYING_MAX:
            busy = RateLimited("This server is busy with other commands; try again in a moment")
            self._answer(message, Reply(id=message.id, code=busy.code, message=busy.message))
            return
        task = asyncio.create_task(self._carry(message), name=f"run-command-{message.id}")
        self._carrying.add(task)
        task.add_done_callback(self._carrying.discard)

    async def _carry(self, request: Request) -> None:
        try:
            reply = Reply(id=request.id, snapshot=await self._carry_out(request.command))
        except PhebyError as exc:
            reply = Reply(id=request.id, code=exc.code, message=exc.message)
        except Exception:
            log.exception("carrying out a forwarded run command failed")
            reply = Reply(id=request.id, code=PhebyError.code, message=PhebyError.default_message)
        self._answer(request, reply)

    def _answer(self, request: Request, reply: Reply) -> None:
        task = asyncio.create_task(self._send(request.reply_to, reply), name=f"run-command-reply-{request.id}")
        self._carrying.add(task)
        task.add_done_callback(self._carrying.discard)

    async def _send(self, address: str, reply: Reply) -> None:
        try:
            await self._bell.publish_many([Letter(address, _encode(reply))])
        except BellUnavailable:
            log.warning("a run command's answer could not be sent (the bell is down); its sender gives up")
