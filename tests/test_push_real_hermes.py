"""Web Push against a real hermes-agent 0.19.0: the fake LLM's dangerous command asks for approval, the
background account is pushed, the answer from the notification lets the command really run, and the
run's end is pushed (the threshold set to 0 s)."""

from collections.abc import Callable

import pytest

from pheby.settings import Settings
from tests.live_server import LiveServer, free_port
from tests.push_service import PushService
from tests.real_hermes import RealHermes
from tests.test_hermes_contract_real import restore_danger_dir
from tests.test_push_e2e import PUSH_HOST, action_token, new_chat, pushing_on

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]


async def test_an_approval_is_pushed_and_answered_from_the_notification(
    start_live_server: Callable[[Settings], LiveServer],
    make_settings: Callable[..., Settings],
    real_hermes: RealHermes,
    push_service: PushService,
) -> None:
    server = start_live_server(
        make_settings(
            port=free_port(),
            hermes_url=real_hermes.base_url,
            hermes_api_key=real_hermes.api_key,
            push_allow_hosts=(PUSH_HOST,),
            push_run_seconds=0.0,  # every run is long enough: its end is pushed too
        )
    )
    async with pushing_on(server, push_service) as pushing:
        subscription = await pushing.subscribe()
        phone, laptop = await pushing.client(), await pushing.client()
        restore_danger_dir(real_hermes)
        _, run_id = await new_chat(phone, "Please run DANGER now")
        request = await phone.expect("approval.request", run_id=run_id, timeout=60)
        (push,) = await subscription.wait_for(1, timeout=5)
        assert push.payload["type"] == "approval"
        assert push.payload["approval_id"] == request["approval_id"]
        assert "rm -rf" in push.payload["body"]

        assert (await pushing.answer(action_token(push, "once"), "once")).status_code == 200
        for client in (phone, laptop):
            resolved = await client.expect("approval.resolved", approval_id=request["approval_id"])
            assert (resolved["choice"], resolved["accepted"]) == ("once", True)
        finished = await phone.expect("run.finished", run_id=run_id, timeout=60)
        assert finished["status"] == "completed"
        assert not real_hermes.danger_dir.exists()  # approved from the notification: the command really ran
        restore_danger_dir(real_hermes)  # as the gateway's other tests expect to find it
        assert (await pushing.answer(action_token(push, "once"), "once")).status_code == 404
        _, dismiss, finished_push = await subscription.wait_for(3, timeout=5)
        assert (dismiss.payload["type"], dismiss.payload["tag"]) == ("dismiss", push.payload["tag"])
        assert (finished_push.payload["type"], finished_push.payload["title"]) == (
            "run_finished",
            "Your agent has finished",
        )
        await phone.close()
        await laptop.close()
