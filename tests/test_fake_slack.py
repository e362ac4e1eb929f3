"""The fake Slack must behave like Slack for the real slack_sdk/slack_bolt clients, or e2e tests prove nothing."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from fakes.slack_api import (
    MAX_EVENT_RETRIES,
    MAX_SOCKET_CONNECTIONS,
    FakeSlack,
    event_callback_body,
    signed_event_request,
    signed_interactive_request,
)
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    """The unmodified slack_sdk client (not the daemon's `SlackClient`): the fake answers as Slack does."""
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


async def connect(handler: AsyncSocketModeHandler) -> None:
    """Open the Socket Mode session (bolt's method is untyped)."""
    await handler.connect_async()  # type: ignore[no-untyped-call]


async def noop_listener() -> None:
    """A bolt listener that does nothing (so the event is acked)."""


@pytest.fixture
async def socket_app(slack: FakeSlack) -> AsyncIterator[tuple[AsyncApp, AsyncSocketModeHandler]]:
    """A real bolt app connected over Socket Mode; closed before the fake stops so nothing reconnects."""
    app = AsyncApp(client=AsyncWebClient(token="xoxb-test", base_url=slack.api_url))
    handler = AsyncSocketModeHandler(app, app_token="xapp-test")
    try:
        yield app, handler
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]


async def test_api_url_and_auth_test(slack: FakeSlack, client: AsyncWebClient) -> None:
    assert slack.api_url.startswith("http://127.0.0.1:") and slack.api_url.endswith("/api/")
    auth = await client.auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"], auth["user"]) == ("UBOT", "BBOT", "T1", "threadbot")
    [call] = slack.calls_to("auth.test")
    assert call.token == "xoxb-test" and call.ok


async def test_post_update_delete_and_thread_history(slack: FakeSlack, client: AsyncWebClient) -> None:
    root = slack.user_message("C1", "please summarise", user="U7")
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*working*"}}]
    posted = await client.chat_postMessage(channel="C1", thread_ts=root["ts"], text="working", blocks=blocks)
    ts = posted["ts"]
    assert float(ts) > float(root["ts"]) and posted["message"]["user"] == "UBOT"

    await client.chat_update(channel="C1", ts=ts, text="done")
    await client.chat_update(channel="C1", ts=ts, text="done!", blocks=[])
    [reply] = slack.posts_in_thread("C1", root["ts"])
    assert (reply.text, reply.blocks) == ("done!", [])
    assert [r.text for r in reply.history] == ["working", "done", "done!"] and len(reply.edits) == 2
    assert reply.history[0].blocks == blocks

    replies = await client.conversations_replies(channel="C1", ts=root["ts"])
    assert [(m["user"], m["text"]) for m in replies["messages"]] == [("U7", "please summarise"), ("UBOT", "done!")]
    assert replies["messages"][0]["reply_count"] == 1

    with pytest.raises(SlackApiError) as err:
        await client.chat_update(channel="C1", ts="1.000001", text="x")
    assert err.value.response["error"] == "message_not_found"
    with pytest.raises(SlackApiError) as err:
        await client.chat_update(channel="C1", ts=root["ts"], text="x")
    assert err.value.response["error"] == "cant_update_message"

    await client.chat_delete(channel="C1", ts=ts)
    assert slack.posts_in_thread("C1", root["ts"]) == [] and slack.message("C1", ts).deleted


async def test_ts_values_are_unique_and_increasing(slack: FakeSlack, client: AsyncWebClient) -> None:
    results = await asyncio.gather(*(client.chat_postMessage(channel="C1", text=str(i)) for i in range(5)))
    stamps = [r["ts"] for r in results]
    assert len(set(stamps)) == 5 and all(len(s.split(".")[1]) == 6 for s in stamps)
    assert stamps[0].startswith("1700000000.")
    later = slack.user_message("C1", "hi")
    assert float(later["ts"]) > max(float(s) for s in stamps)


async def test_form_encoded_blocks_are_decoded(slack: FakeSlack, client: AsyncWebClient) -> None:
    blocks = [{"type": "divider"}]
    await client.api_call("chat.postMessage", data={"channel": "C2", "text": "t", "blocks": json.dumps(blocks)})
    [message] = slack.messages("C2")
    assert message.blocks == blocks
    assert slack.calls_to("chat.postMessage")[0].params["blocks"] == blocks


@pytest.mark.parametrize(
    "blocks",
    [
        [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}] * 51,
        [{"type": "no_such_block"}],
        [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}],
    ],
)
async def test_blocks_slack_would_refuse_are_invalid_blocks(
    slack: FakeSlack, client: AsyncWebClient, blocks: list[dict[str, object]]
) -> None:
    with pytest.raises(SlackApiError) as refused:
        await client.chat_postMessage(channel="C1", text="t", blocks=blocks)
    assert refused.value.response["error"] == "invalid_blocks"
    posted = await client.chat_postMessage(channel="C1", text="t")
    with pytest.raises(SlackApiError) as refused:
        await client.chat_update(channel="C1", ts=posted["ts"], text="t", blocks=blocks)
    assert refused.value.response["error"] == "invalid_blocks"


async def test_reactions_mirror_real_errors(slack: FakeSlack, client: AsyncWebClient) -> None:
    event = slack.user_message("C1", "hello")
    await client.reactions_add(channel="C1", timestamp=event["ts"], name="eyes")
    with pytest.raises(SlackApiError) as err:
        await client.reactions_add(channel="C1", timestamp=event["ts"], name="eyes")
    assert err.value.response["error"] == "already_reacted"
    assert slack.reactions_on("C1", event["ts"]) == {"eyes": ["UBOT"]}

    await client.reactions_remove(channel="C1", timestamp=event["ts"], name="eyes")
    with pytest.raises(SlackApiError) as err:
        await client.reactions_remove(channel="C1", timestamp=event["ts"], name="eyes")
    assert err.value.response["error"] == "no_reaction"
    assert slack.reactions_on("C1", event["ts"]) == {}

    reaction = slack.reaction_added("U2", "x", "C1", event["ts"])
    assert reaction["item"] == {"type": "message", "channel": "C1", "ts": event["ts"]} and reaction["item_user"] == "U1"
    assert slack.reactions_on("C1", event["ts"]) == {"x": ["U2"]}


async def test_users_info_conversations_info_and_misc(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.users["U9"] = {"tz": "Europe/Paris", "real_name": "Zoé"}
    paris = (await client.users_info(user="U9"))["user"]
    assert paris["tz"] == "Europe/Paris" and paris["real_name"] == "Zoé" and paris["tz_offset"] in (3600, 7200)
    assert (await client.users_info(user="U1"))["user"]["tz"] == "UTC"

    assert (await client.conversations_info(channel="D1"))["channel"]["is_im"] is True
    slack.channels["C5"] = {"name": "general"}
    assert (await client.conversations_info(channel="C5"))["channel"]["name"] == "general"

    await client.assistant_threads_setStatus(channel_id="D1", thread_ts="1.000001", status="is thinking…")
    assert slack.assistant_status("D1", "1.000001") == "is thinking…"

    await client.chat_postEphemeral(channel="C1", user="U1", text="only you")
    assert [(e.user, e.text) for e in slack.ephemerals] == [("U1", "only you")]

    with pytest.raises(SlackApiError) as err:
        await client.api_call("no.such.method")
    assert err.value.response["error"] == "unknown_method"


async def test_token_checks(slack: FakeSlack) -> None:
    anonymous = AsyncWebClient(base_url=slack.api_url)
    with pytest.raises(SlackApiError) as err:
        await anonymous.chat_postMessage(channel="C1", text="x")
    assert err.value.response["error"] == "not_authed"
    bot = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
    with pytest.raises(SlackApiError) as err:
        await bot.apps_connections_open(app_token="xoxb-test")
    assert err.value.response["error"] == "not_allowed_token_type"
    opened = await bot.apps_connections_open(app_token="xapp-test")
    assert opened["url"].startswith(f"ws://127.0.0.1:{slack.base_url.rsplit(':', 1)[1]}/link?ticket=")


async def test_injected_429_is_retried_by_slack_sdk(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.fail("chat.postMessage", status=429, retry_after=1, times=1)
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))
    started = time.perf_counter()
    await client.chat_postMessage(channel="C1", text="eventually")
    assert time.perf_counter() - started >= 1.0
    first, second = slack.calls_to("chat.postMessage")
    assert (first.status, first.response["error"], second.status) == (429, "ratelimited", 200)
    assert slack.rate_limited["chat.postMessage"] == 1
    assert [m.text for m in slack.messages("C1")] == ["eventually"]


async def test_injected_errors_without_retry(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.fail("chat.update", status=200, error="ratelimited", times=1)
    slack.fail("chat.postMessage", status=500, times=1)
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(channel="C1", text="x")
    assert err.value.response.status_code == 500
    assert slack.messages("C1") == []  # failed calls have no side effects
    await client.chat_postMessage(channel="C1", text="x")
    assert len(slack.messages("C1")) == 1


async def test_random_failures_are_seeded_and_have_no_side_effects(slack: FakeSlack, client: AsyncWebClient) -> None:
    async def outcomes(seed: int) -> list[int]:
        slack.fail_randomly("chat.", rate=0.5, seed=seed)
        statuses = []
        for i in range(40):
            try:
                await client.chat_postMessage(channel=f"S{seed}", text=str(i))
                statuses.append(200)
            except SlackApiError as err:
                statuses.append(err.response.status_code)
                if err.response.status_code == 429:
                    assert (err.response["error"], err.response.headers["Retry-After"]) == ("ratelimited", "1")
                else:
                    assert err.response["error"] == "fatal_error"
        return statuses

    first, again, other = await outcomes(7), await outcomes(7), await outcomes(8)
    assert first == again != other
    assert {500, 429, 200} <= set(first)
    assert len(slack.messages("S7")) == 2 * first.count(200)  # the failed calls stored nothing
    failed = [s for s in first + again + other if s != 200]
    assert slack.random_failures == {500: failed.count(500), 429: failed.count(429)}
    await client.reactions_add(channel="S7", timestamp=slack.messages("S7")[0].ts, name="ok")  # not chat.*
    slack.fail_randomly(rate=0)
    for _ in range(10):
        await client.chat_postMessage(channel="S9", text="calm")


async def test_token_bucket_rate_limit(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.rate_limit("chat.postMessage", per_minute=60, burst=2)
    await client.chat_postMessage(channel="C1", text="1")
    await client.chat_postMessage(channel="C1", text="2")
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(channel="C1", text="3")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "1"
    assert slack.rate_limited["chat.postMessage"] == 1

    slack.rate_limit("chat.postMessage", per_minute=60, burst=1, time_scale=60_000)  # new bucket, a token per ms
    for text in "xyz":
        await client.chat_postMessage(channel="C9", text=text)
    slack.rate_limit("reactions.add", per_minute=1, burst=1, per_channel=True)
    a, b = slack.user_message("CA", "a"), slack.user_message("CB", "b")
    await client.reactions_add(channel="CA", timestamp=a["ts"], name="one")
    await client.reactions_add(channel="CB", timestamp=b["ts"], name="one")  # separate bucket
    with pytest.raises(SlackApiError):
        await client.reactions_add(channel="CA", timestamp=a["ts"], name="two")


async def test_wait_for_wakes_on_calls_and_times_out_descriptively(slack: FakeSlack, client: AsyncWebClient) -> None:
    async def post_later() -> None:
        await asyncio.sleep(0.01)
        await client.chat_postMessage(channel="C1", text="hi")

    task = asyncio.create_task(post_later())
    message = await slack.wait_for(lambda: slack.messages("C1"), timeout=5)
    assert message[0].text == "hi"
    await task
    with pytest.raises(TimeoutError, match=r"never.*chat\.postMessage\(200\)"):
        await slack.wait_for(lambda: False, timeout=0.05, description="never")


async def test_hold_and_latency(slack: FakeSlack, client: AsyncWebClient) -> None:
    gate = slack.hold("chat.update")
    ts = (await client.chat_postMessage(channel="C1", text="a"))["ts"]
    update = asyncio.create_task(client.chat_update(channel="C1", ts=ts, text="b"))
    held = await slack.wait_for(lambda: slack.pending, timeout=5)
    assert held[0].method == "chat.update" and held[0].params["text"] == "b"
    assert slack.message("C1", ts).text == "a" and not update.done()
    gate.set()
    await update
    assert slack.message("C1", ts).text == "b"
    slack.set_latency("auth.test", 0.1)
    started = time.perf_counter()
    await client.auth_test()
    assert time.perf_counter() - started >= 0.1


async def test_bolt_socket_mode_receives_mention_and_acks(
    slack: FakeSlack, socket_app: tuple[AsyncApp, AsyncSocketModeHandler]
) -> None:
    app, handler = socket_app
    seen: list[dict[str, object]] = []
    got = asyncio.Event()

    @app.event("app_mention")
    async def on_mention(event: dict[str, object]) -> None:
        seen.append(event)
        got.set()

    await connect(handler)
    conn = await slack.wait_connected(timeout=10)
    assert conn.open and slack.calls_to("apps.connections.open")[0].token == "xapp-test"

    event = slack.mention("C1", "summarise this", user="U3")
    envelope_id = await slack.send_event(event)
    latency = await slack.wait_ack(envelope_id, timeout=5)
    assert 0 <= latency < 5
    await asyncio.wait_for(got.wait(), timeout=5)
    assert seen[0]["text"] == "<@UBOT> summarise this" and seen[0]["user"] == "U3"
    envelope = slack.envelopes[0].body
    assert envelope["type"] == "events_api" and envelope["payload"]["authorizations"][0]["user_id"] == "UBOT"
    assert envelope["payload"]["event"] == event and not slack.unacked()


async def test_bolt_interactive_respond_replaces_original(
    slack: FakeSlack, socket_app: tuple[AsyncApp, AsyncSocketModeHandler]
) -> None:
    app, handler = socket_app

    @app.action("cancel")
    async def on_cancel(ack: AsyncAck, respond: AsyncRespond, body: dict[str, object]) -> None:
        await ack()
        await respond(text="cancelled", replace_original=True)

    client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
    root = slack.user_message("C1", "go")
    ts = (await client.chat_postMessage(channel="C1", thread_ts=root["ts"], text="running"))["ts"]
    await connect(handler)
    payload = slack.block_action("C1", ts, "cancel", "stop", user="U4")
    assert payload["container"]["thread_ts"] == root["ts"]
    envelope_id = await slack.send_interactive(payload)
    await slack.wait_ack(envelope_id)
    await slack.wait_for(lambda: slack.message("C1", ts).text == "cancelled", timeout=5)
    assert slack.response_url_posts[0].body["replace_original"] is True


async def test_socket_mode_reconnects_after_drop_and_disconnect(
    slack: FakeSlack, socket_app: tuple[AsyncApp, AsyncSocketModeHandler]
) -> None:
    app, handler = socket_app
    events: list[str] = []

    @app.event("message")
    async def on_message(event: dict[str, str]) -> None:
        events.append(event["text"])

    await connect(handler)
    await slack.wait_connected()
    await slack.drop_connections()
    await slack.wait_connected(total=2)
    await slack.request_reconnect()
    await slack.wait_connected(total=3)
    await slack.wait_for(lambda: len(slack.open_connections) == 1, timeout=5)
    envelope_id = await slack.send_event(slack.user_message("C1", "after reconnects"))
    await slack.wait_ack(envelope_id)
    await slack.wait_for(lambda: events == ["after reconnects"], timeout=5)
    assert len(slack.calls_to("apps.connections.open")) == 3


async def test_redelivery_keeps_event_id(slack: FakeSlack, socket_app: tuple[AsyncApp, AsyncSocketModeHandler]) -> None:
    app, handler = socket_app
    app.event("message")(noop_listener)  # bolt does not ack events nobody listens to
    await connect(handler)
    first = await slack.send_event(slack.user_message("C1", "x"), event_id="Ev123")
    second = await slack.redeliver(first)
    await slack.wait_ack(second)
    a, b = slack.envelopes[0].body, slack.envelopes[1].body
    assert a["payload"]["event_id"] == b["payload"]["event_id"] == "Ev123"
    assert (a["retry_attempt"], b["retry_attempt"], b["retry_reason"]) == (0, 1, "timeout")


async def test_stop_closes_live_sessions(socket_app: tuple[AsyncApp, AsyncSocketModeHandler]) -> None:
    """Stopping the fake while a client is connected must not hang either side."""
    _, handler = socket_app
    async with FakeSlack() as other:
        handler.client.web_client.base_url = other.api_url
        await connect(handler)
        await other.wait_connected()
        handler.client.auto_reconnect_enabled = False
        handler.client.default_auto_reconnect_enabled = False
    assert not other.open_connections


def test_signed_event_request_verifies_with_slack_sdk() -> None:
    body = event_callback_body({"type": "app_mention", "text": "<@UBOT> hi"}, event_id="Ev1")
    raw, headers = signed_event_request(body, "s3cret", retry_num=1)
    verifier = SignatureVerifier("s3cret")
    assert verifier.is_valid_request(raw, headers)
    assert json.loads(raw)["event_id"] == "Ev1" and headers["X-Slack-Retry-Num"] == "1"
    assert not SignatureVerifier("other").is_valid_request(raw, headers)
    stale_raw, stale_headers = signed_event_request(body, "s3cret", timestamp=int(time.time()) - 3600)
    assert not verifier.is_valid_request(stale_raw, stale_headers)
    form_raw, form_headers = signed_interactive_request({"type": "block_actions"}, "s3cret")
    assert verifier.is_valid_request(form_raw, form_headers) and form_raw.startswith(b"payload=")


async def test_get_requests_and_raw_http(slack: FakeSlack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{slack.api_url}auth.test", headers={"Authorization": "Bearer xoxb-t"}) as resp:
            assert (await resp.json())["user_id"] == "UBOT"
        async with session.post(f"{slack.api_url}auth.test", data={"token": "xoxb-t"}) as resp:
            assert (await resp.json())["ok"] is True
    assert [c.http_method for c in slack.calls] == ["GET", "POST"] and slack.calls[1].token == "xoxb-t"


# --- several Socket Mode clients: what a cluster of replicas sees ------------------------------------------------


class Replica:
    """One replica's Socket Mode client (slack_sdk's own), recording what it receives; acks unless ``acking`` is
    off (a replica that dies before its commit)."""

    def __init__(self, slack: FakeSlack, *, acking: bool = True) -> None:
        web = AsyncWebClient(base_url=slack.api_url)
        self.client = SocketModeClient(app_token="xapp-test", web_client=web, ping_interval=1)
        self.client.socket_mode_request_listeners.append(self._on_request)
        self.acking = acking
        self.received: list[SocketModeRequest] = []

    async def _on_request(self, client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        self.received.append(request)
        if self.acking:
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    async def close(self) -> None:
        await self.client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
async def replicas(slack: FakeSlack) -> AsyncIterator[Callable[..., Awaitable[Replica]]]:
    """Connects replicas one after the other (session ids 1, 2, ...); all closed before the fake stops."""
    opened: list[Replica] = []

    async def connect_one(*, acking: bool = True) -> Replica:
        replica = Replica(slack, acking=acking)
        opened.append(replica)
        await replica.client.connect()  # type: ignore[no-untyped-call]
        await slack.wait_for(lambda: len(slack.open_connections) == len(opened), 10, f"{len(opened)} sessions")
        return replica

    try:
        yield connect_one
    finally:
        await asyncio.gather(*(r.close() for r in opened))


async def send_events(slack: FakeSlack, count: int) -> list[str]:
    """``count`` messages, one after the other; returns their event_ids."""
    envelopes = [await slack.send_event(slack.user_message("C1", f"m{i}")) for i in range(count)]
    return [str(next(e.event_id for e in slack.envelopes if e.envelope_id == env)) for env in envelopes]


async def test_each_envelope_goes_to_one_random_open_connection(
    slack: FakeSlack, replicas: Callable[..., Awaitable[Replica]]
) -> None:
    slack.routing, slack.rng, slack.redeliver_after_s = "random", random.Random(7), None
    three = [await replicas() for _ in range(3)]
    await send_events(slack, 30)
    await slack.wait_for(lambda: len(slack.acks) == 30, 10, "30 acks")

    expected = random.Random(7)
    assert [e.connection_id for e in slack.envelopes] == [expected.choice([1, 2, 3]) for _ in range(30)]
    per_connection = slack.deliveries_per_connection()
    assert sorted(per_connection) == [1, 2, 3] and sum(per_connection.values()) == 30
    assert [len(r.received) for r in three] == [per_connection[i] for i in (1, 2, 3)]  # each envelope once
    assert {r.envelope_id for replica in three for r in replica.received} == {e.envelope_id for e in slack.envelopes}
    assert all(slack.acked_by(e.envelope_id) == e.connection_id for e in slack.envelopes)
    assert slack.redeliveries == [] and slack.abandoned == []


async def test_unacked_events_are_retried_three_times_then_given_up(
    slack: FakeSlack, replicas: Callable[..., Awaitable[Replica]]
) -> None:
    slack.routing, slack.redeliver_after_s = "random", 0.2
    deaf = [await replicas(acking=False) for _ in range(2)]
    [event_id] = await send_events(slack, 1)
    clicked = await slack.send_interactive(slack.block_action("C1", slack.messages("C1")[0].ts, "cancel"))
    await slack.wait_for(lambda: slack.abandoned, 10, "Slack giving up")

    chain = slack.envelopes_of(event_id)
    assert [e.retry_attempt for e in chain] == list(range(MAX_EVENT_RETRIES + 1))
    assert [e.body["retry_reason"] for e in chain] == ["", "timeout", "timeout", "timeout"]
    assert len({e.envelope_id for e in chain}) == 4 and slack.abandoned == [event_id]
    assert [(r.event_id, r.attempt, r.cause) for r in slack.redeliveries] == [
        (event_id, n, "timeout") for n in (1, 2, 3)
    ]
    seen = sorted(
        (r.retry_attempt, r.retry_reason) for replica in deaf for r in replica.received if r.type == "events_api"
    )
    assert seen == [(0, ""), (1, "timeout"), (2, "timeout"), (3, "timeout")]  # as slack_sdk parses them
    # The click came before the event and was never acked either, yet it was sent once: Slack never retries those.
    assert [e.envelope_id for e in slack.envelopes if e.type == "interactive"] == [clicked]


async def test_what_a_dying_replica_never_acked_is_redelivered_to_another(
    slack: FakeSlack, replicas: Callable[..., Awaitable[Replica]]
) -> None:
    slack.routing, slack.rng, slack.redeliver_after_s = "random", random.Random(5), 0.3
    dying, alive = await replicas(acking=False), await replicas()
    event_ids = await send_events(slack, 10)
    await dying.close()  # died before acking what it got
    await slack.wait_for(lambda: all(slack.event_acked(e) for e in event_ids), 10, "every event acked")

    lost = {e.event_id for e in slack.envelopes if e.connection_id == 1}  # read or not, none of them was acked
    assert lost and {r.payload["event_id"] for r in alive.received} == set(event_ids) and slack.abandoned == []
    for event_id in event_ids:
        chain = slack.envelopes_of(event_id)
        assert [e.retry_attempt for e in chain] == list(range(len(chain)))
        assert [slack.acked_by(e.envelope_id) for e in chain] == [None] * (len(chain) - 1) + [2]
        assert (len(chain) > 1) == (event_id in lost)
    assert len(slack.redeliveries) == sum(len(slack.envelopes_of(e)) - 1 for e in event_ids)


async def test_a_late_ack_gets_a_retry_that_bolt_sees_as_retry_num(
    slack: FakeSlack, socket_app: tuple[AsyncApp, AsyncSocketModeHandler]
) -> None:
    """A replica slow to ack (its commit took too long): Slack sends the event again, which bolt hands on with
    the ``x-slack-retry-num``/``x-slack-retry-reason`` headers; once either envelope is acked, retries stop."""
    app, handler = socket_app
    slack.redeliver_after_s = 0.2
    retried = asyncio.Event()
    seen: list[tuple[str | None, str | None]] = []

    @app.middleware
    async def slow_first_ack(
        req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        headers = {k: v[0] for k, v in req.headers.items()}
        seen.append((headers.get("x-slack-retry-num"), headers.get("x-slack-retry-reason")))
        if headers.get("x-slack-retry-num") == "0":
            await retried.wait()  # held until Slack has sent the retry
        else:
            retried.set()
        return await next()

    app.event("message")(noop_listener)
    await connect(handler)
    [event_id] = await send_events(slack, 1)
    await slack.wait_for(lambda: len(slack.acks) == 2, 10, "both envelopes acked")
    assert seen == [("0", ""), ("1", "timeout")]
    assert [e.retry_attempt for e in slack.envelopes_of(event_id)] == [0, 1]
    assert [r.cause for r in slack.redeliveries] == ["timeout"] and slack.abandoned == []


async def test_redeliver_fraction_sends_acked_events_twice(
    slack: FakeSlack, replicas: Callable[..., Awaitable[Replica]]
) -> None:
    slack.routing, slack.rng, slack.redeliver_after_s, slack.redeliver_fraction = "random", random.Random(3), None, 0.2
    three = [await replicas() for _ in range(3)]
    event_ids = await send_events(slack, 100)
    await slack.wait_for(lambda: not slack.unacked(), 10, "every envelope acked")

    draws = random.Random(3)  # the fake's draws, replayed: no scheduling can change which events are sent twice

    def drawn_twice() -> bool:
        draws.choice([1, 2, 3])  # the first delivery's session
        if draws.random() >= 0.2:
            return False
        draws.choice([1, 2, 3])  # the duplicate's session
        return True

    expected = [drawn_twice() for _ in range(100)]
    twice = {r.event_id for r in slack.redeliveries}
    assert [event_id in twice for event_id in event_ids] == expected and 10 <= len(twice) <= 30
    for event_id in event_ids:
        assert [e.retry_attempt for e in slack.envelopes_of(event_id)] == ([0, 1] if event_id in twice else [0])
    assert {r.cause for r in slack.redeliveries} == {"duplicate"} and len(slack.redeliveries) == len(twice)
    received = [r.payload["event_id"] for replica in three for r in replica.received]
    assert len(received) == len(slack.acks) == 100 + len(twice) and set(received) == set(event_ids)


async def test_the_eleventh_connection_is_refused_with_too_many_websockets(
    slack: FakeSlack, replicas: Callable[..., Awaitable[Replica]]
) -> None:
    slack.routing = "random"
    ten = [await replicas() for _ in range(MAX_SOCKET_CONNECTIONS)]
    eleventh = Replica(slack)
    knocking = asyncio.create_task(eleventh.client.connect())  # type: ignore[no-untyped-call]
    try:
        await slack.wait_for(lambda: len(slack.refused_connections) >= 2, 10, "the 11th refused, and retrying")
        assert {r.reason for r in slack.refused_connections} == {"too_many_websockets"}
        assert len(slack.open_connections) == MAX_SOCKET_CONNECTIONS and len(slack.connections) == 10
        await send_events(slack, 20)
        await slack.wait_for(lambda: len(slack.acks) == 20, 10, "20 acks")
        assert eleventh.received == [] and sum(len(r.received) for r in ten) == 20

        await ten[0].close()  # a replica leaves: slack_sdk's reconnect loop gets the 11th in
        await slack.wait_for(lambda: len(slack.connections) == 11 and slack.connections[-1].open, 10, "the 11th in")
        assert len(slack.open_connections) == MAX_SOCKET_CONNECTIONS
    finally:
        await eleventh.close()
        await knocking
