"""Every client message type and its handler: add a type with one module and one line here.

Inbound frames decode through one msgspec tagged union on "type" built from these entries, so
decoding and validation happen in one step.
"""

from collections.abc import Awaitable, Callable
from typing import Any, Union

import msgspec

from handlers.ws import (
    approval_respond,
    chat_send,
    clarify_respond,
    conversation_create,
    conversation_delete,
    conversation_list,
    conversation_open,
    conversation_rename,
    conversation_search,
    hello,
    model_set,
    models_current,
    models_list,
    ping,
    presence_set,
    push_subscribe,
    push_unsubscribe,
    reasoning_current,
    reasoning_set,
    run_cancel,
    run_steer,
    yolo_current,
    yolo_set,
)
from handlers.ws.support.context import WsContext
from handlers.ws.support.messages import ClientMessage

Handler = Callable[[WsContext, Any], Awaitable[None]]

HANDLERS: dict[type[ClientMessage], Handler] = {
    hello.Hello: hello.handle,
    ping.Ping: ping.handle,
    conversation_list.ConversationList: conversation_list.handle,
    conversation_create.ConversationCreate: conversation_create.handle,
    conversation_open.ConversationOpen: conversation_open.handle,
    conversation_rename.ConversationRename: conversation_rename.handle,
    conversation_delete.ConversationDelete: conversation_delete.handle,
    conversation_search.ConversationSearch: conversation_search.handle,
    chat_send.ChatSend: chat_send.handle,
    run_cancel.RunCancel: run_cancel.handle,
    run_steer.RunSteer: run_steer.handle,
    approval_respond.ApprovalRespond: approval_respond.handle,
    clarify_respond.ClarifyRespond: clarify_respond.handle,
    yolo_current.YoloCurrent: yolo_current.handle,
    yolo_set.YoloSet: yolo_set.handle,
    models_list.ModelsList: models_list.handle,
    models_current.ModelsCurrent: models_current.handle,
    model_set.ModelSet: model_set.handle,
    reasoning_current.ReasoningCurrent: reasoning_current.handle,
    reasoning_set.ReasoningSet: reasoning_set.handle,
    presence_set.PresenceSet: presence_set.handle,
    push_subscribe.PushSubscribe: push_subscribe.handle,
    push_unsubscribe.PushUnsubscribe: push_unsubscribe.handle,
}

DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(Union[tuple(HANDLERS)])  # noqa: UP007
KNOWN_TYPES = frozenset(cls.__struct_config__.tag for cls in HANDLERS)


async def dispatch(ctx: WsContext, message: ClientMessage) -> None:
    await HANDLERS[type(message)](ctx, message)
