"""Run commands between processes as letters (`pheby.run_owners`), without sockets: two processes' inboxes on
one in-process bell. What the owner raised comes back as the same error; an owner that does not answer, or
too many commands at once, is an error that says to try again, never a hang or an unbounded queue."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from pheby import run_owners
from pheby.errors import ApprovalNotFound, PhebyError, RateLimited, Unavailable
from pheby.events import Letter, LocalBell
from pheby.run_owners import UNANSWERED, BellRunOwners
from pheby.runs.forwarding import AnswerApproval, CancelRun, RunCommand

pytestmark = pytest.mark.anyio

CANCEL = CancelRun(account_id="acc", conversation_id="conv", run_id="run")


class Processes:
    def __init__(self, carry_out: Callable[[RunCommand], Awaitable[None]]) -> None:
        self.bell = LocalBell()
        self.asking = BellRunOwners(self.bell, "asking", self._nothing_here, answer_seconds=0.5)
        self.owning = BellRunOwners(self.bell, "owning", carry_out, answer_seconds=0.5)
        self.letters: list[Letter] = []

    @staticmethod
    async def _nothing_here(command: RunCommand) -> None:
        raise AssertionError("the asking process owns nothing")

    async def deliver(self) -> None:
        """The feed's part: each letter to the inbox it names."""
        while True:
            letter = await self.bell.receive()
            assert isinstance(letter, Letter)
            self.letters.append(letter)
            {"asking": self.asking, "owning": self.owning}[letter.address].on_letter(letter)


@pytest.fixture
async def make() -> AsyncIterator[Callable[[Callable[[RunCommand], Awaitable[None]]], Awaitable[Processes]]]:
    delivering: list[asyncio.Task[None]] = []
    made: list[Processes] = []

    async def start(carry_out: Callable[[RunCommand], Awaitable[None]]) -> Processes:
        processes = Processes(carry_out)
        for owners in (processes.asking, processes.owning):
            await owners.start()
        delivering.append(asyncio.create_task(processes.deliver()))
        made.append(processes)
        return processes

    yield start
    for task in delivering:
        task.cancel()
    for processes in made:
        await processes.owning.aclose()


async def test_a_command_is_carried_out_by_its_owner_and_its_error_comes_back_as_raised(
    make: Callable[[Callable[[RunCommand], Awaitable[None]]], Awaitable[Processes]],
) -> None:
    done: list[RunCommand] = []

    async def carry_out(command: RunCommand) -> None:
        done.append(command)
        if isinstance(command, AnswerApproval):
            raise ApprovalNotFound()
        if command.run_id == "crash":  # type: ignore[union-attr]
            raise KeyError("an unexpected failure")

    processes = await make(carry_out)
    await processes.asking.forward("owning", CANCEL)
    assert done == [CANCEL]

    answer = AnswerApproval(account_id="acc", approval_id="a1", choice="once", request_id="r7")
    with pytest.raises(ApprovalNotFound) as refused:
        await processes.asking.forward("owning", answer)
    assert refused.value.message == ApprovalNotFound.default_message
    assert done[-1] == answer  # the request id went along: the owner's broadcast carries it

    with pytest.raises(PhebyError) as crashed:
        await processes.asking.forward("owning", CancelRun(account_id="acc", conversation_id="c", run_id="crash"))
    assert (crashed.value.code, crashed.value.message) == ("internal_error", "Internal error")  # nothing of it


async def test_an_owner_that_does_not_answer_is_unavailable_within_the_wait(
    make: Callable[[Callable[[RunCommand], Awaitable[None]]], Awaitable[Processes]],
) -> None:
    async def stalled(command: RunCommand) -> None:
        await asyncio.sleep(60)

    processes = await make(stalled)
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(Unavailable, match="try again"):
        await processes.asking.forward("owning", CANCEL)
    assert 0.4 < loop.time() - began < 2
    with pytest.raises(Unavailable) as nobody:
        await processes.asking.forward("nobody-listens", CANCEL)
    assert nobody.value.message == UNANSWERED


async def test_commands_waiting_and_being_carried_out_are_bounded(
    make: Callable[[Callable[[RunCommand], Awaitable[None]]], Awaitable[Processes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_owners, "CARRYING_MAX", 2)
    release = asyncio.Event()

    async def slow(command: RunCommand) -> None:
        await release.wait()

    processes = await make(slow)
    waiting = [asyncio.create_task(processes.asking.forward("owning", CANCEL)) for _ in range(2)]
    await asyncio.sleep(0.05)
    with pytest.raises(RateLimited):  # the owner carries two out at once: a third is "busy" at once, not queued
        await processes.asking.forward("owning", CANCEL)

    monkeypatch.setattr(run_owners, "PENDING_MAX", 2)
    with pytest.raises(Unavailable):  # two wait for their answers here: a third is refused before it is sent
        await processes.asking.forward("owning", CANCEL)
    release.set()
    assert await asyncio.gather(*waiting) == [None, None]
