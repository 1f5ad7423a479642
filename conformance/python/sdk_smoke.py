"""The official Python SDK (apache-iggy, pinned in .ci/run) against a running server.

apache-iggy 0.9.0 embeds the Rust SDK at protocol 0.11.0, which the server does not admit
(it admits 0.11.1 and 0.12.0), so over the binary transports the SDK must be told its version
is refused (eviction 14: "Incompatible binary protocol version", not "Invalid format"). Its HTTP
client carries no protocol version, and runs the whole user flow: login, streams, topics,
sends (balanced, by partition, by key, with headers), polls (offset, first, next with
auto-commit), consumer groups, users and permissions, updates of streams, topics and users
(0.11's bodies: typed topic settings beside the options, options nested in updates), error
paths.

Environment: IGGY_PY_HTTP (http://host:port, required), IGGY_PY_TCP and IGGY_PY_WS (host:port,
optional). Credentials iggy/iggy. Prints each check; exits 1 on any mismatch.
"""

import asyncio
import os
import sys
import uuid

from apache_iggy import (
    Consumer,
    GlobalPermissions,
    HttpConfig,
    IggyClient,
    Partitioning,
    Permissions,
    PollingStrategy,
    SendMessage,
    TcpConfig,
    WebSocketConfig,
)

FAILURES = []
TIMEOUT = 15


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        FAILURES.append(name)


async def call(coro):
    return await asyncio.wait_for(coro, TIMEOUT)


async def refused(name, coro):
    """The call fails; returns the error text (or None when it succeeded)."""
    try:
        await call(coro)
    except Exception as e:  # noqa: BLE001 - the SDK raises RuntimeError with the server's reason
        return f"{type(e).__name__}: {e}"
    check(name, False, "succeeded, expected a refusal")
    return None


async def binary_transport(name, config):
    client = IggyClient(config)
    await call(client.connect())
    error = await refused(f"{name}: login refused", client.login_user("iggy", "iggy"))
    if error is not None:
        check(
            f"{name}: login refused as an incompatible protocol version",
            "Incompatible binary protocol version" in error and "0.11.0" in error,
            error,
        )


async def http_flow(url):
    c = IggyClient(HttpConfig(api_url=url))
    await call(c.connect())
    error = await refused("http: wrong password refused", c.login_user("iggy", "wrong-password"))
    # 400 with the code, as upstream answers it (401 is only "no valid token").
    check("http: wrong password is invalid_credentials", error is not None and "invalid_credentials" in error, str(error))
    await call(c.login_user("iggy", "iggy"))
    await call(c.ping())
    stats = await call(c.get_stats())
    check("http: stats", stats.iggy_server_version != "" and stats.clients_count >= 1, repr(stats))

    stream = "py-" + uuid.uuid4().hex[:8]
    await call(c.create_stream(stream))
    details = await call(c.get_stream(stream))
    check("http: get_stream", details is not None and details.name == stream and details.topics_count == 0)
    check("http: get_stream of a missing stream is None", await call(c.get_stream(stream + "-missing")) is None)
    names = [s.name for s in await call(c.get_streams())]
    check("http: get_streams lists it", stream in names, str(names))

    await call(c.create_topic(stream, "t", partitions_count=3))
    topic = await call(c.get_topic(stream, "t"))
    check(
        "http: get_topic",
        topic is not None and topic.name == "t" and topic.partitions_count == 3 and len(topic.partitions) == 3
        and topic.compression_algorithm == "none",
    )
    topics = await call(c.get_topics(stream))
    check("http: get_topics", [t.name for t in topics] == ["t"])

    sent = await call(c.send_messages(stream, "t", Partitioning.partition_id(1),
                                      [SendMessage(f"m{i}", user_headers={"k": "v", "n": i}) for i in range(5)]))
    check("http: send by partition", [(x.partition_id, x.base_offset) for x in sent.confirmations] == [(1, 0)],
          str([(x.partition_id, x.base_offset) for x in sent.confirmations]))
    polled = await call(c.poll_messages(stream, "t", consumer=Consumer.Single(1),
                                        polling_strategy=PollingStrategy.Offset(0), count=10,
                                        auto_commit=False, partition_id=1))
    check("http: poll offset 0", [m.payload() for m in polled] == [f"m{i}".encode() for i in range(5)],
          str([m.payload() for m in polled]))
    check("http: offsets 0..4", [m.offset() for m in polled] == list(range(5)))
    headers = polled[0].user_headers() if polled else None
    check("http: user headers round-trip", headers is not None and headers.to_scalar_dict() == {"k": "v", "n": 0},
          repr(headers))

    first = await call(c.poll_messages(stream, "t", consumer=Consumer.Single("c1"),
                                       polling_strategy=PollingStrategy.First(), count=2,
                                       auto_commit=True, partition_id=1))
    check("http: poll first, auto-commit", [m.offset() for m in first] == [0, 1])
    following = await call(c.poll_messages(stream, "t", consumer=Consumer.Single("c1"),
                                           polling_strategy=PollingStrategy.Next(), count=10,
                                           auto_commit=True, partition_id=1))
    check("http: poll next continues after the committed offset", [m.offset() for m in following] == [2, 3, 4],
          str([m.offset() for m in following]))
    again = await call(c.poll_messages(stream, "t", consumer=Consumer.Single("c1"),
                                       polling_strategy=PollingStrategy.Next(), count=10,
                                       auto_commit=True, partition_id=1))
    check("http: poll next at the end is empty", again == [])

    balanced = set()
    for i in range(3):
        r = await call(c.send_messages(stream, "t", Partitioning.balanced(), [SendMessage(f"b{i}")]))
        balanced.update(x.partition_id for x in r.confirmations)
    check("http: balanced sends go round the partitions", balanced == {0, 1, 2}, str(balanced))
    keyed = set()
    for _ in range(2):
        r = await call(c.send_messages(stream, "t", Partitioning.messages_key("key-1"), [SendMessage("k")]))
        keyed.update(x.partition_id for x in r.confirmations)
    check("http: one key, one partition", len(keyed) == 1, str(keyed))
    await call(c.send_messages(stream, "t", 2, [SendMessage(b"\x00\x01raw")]))
    total = 0
    for p in range(3):
        total += len(await call(c.poll_messages(stream, "t", consumer=Consumer.Single(2),
                                                polling_strategy=PollingStrategy.First(), count=100,
                                                auto_commit=False, partition_id=p)))
    check("http: every message stored", total == 11, str(total))
    topic = await call(c.get_topic(stream, "t"))
    check("http: topic counts the messages", topic.messages_count == 11, str(topic.messages_count))

    error = await refused("http: poll of a missing stream refused",
                          c.poll_messages(stream + "-missing", "t", consumer=Consumer.Single(1),
                                          polling_strategy=PollingStrategy.First(), count=1,
                                          auto_commit=False, partition_id=0))
    check("http: missing stream named", error is not None and "not found" in error, str(error))

    await call(c.create_consumer_group(stream, "t", "g1"))
    group = await call(c.get_consumer_group(stream, "t", "g1"))
    check("http: get_consumer_group", group is not None and group.name == "g1" and group.partitions_count == 3)
    check("http: get_consumer_groups", [g.name for g in await call(c.get_consumer_groups(stream, "t"))] == ["g1"])
    await call(c.delete_consumer_group(stream, "t", "g1"))

    user = "py-" + uuid.uuid4().hex[:8]
    created = await call(c.create_user(user, "secret-pw-1"))
    check("http: create_user", created.username == user)
    got = await call(c.get_user(user))
    check("http: get_user", got is not None and got.username == user)
    check("http: get_users", user in [u.username for u in await call(c.get_users())])
    other = IggyClient(HttpConfig(api_url=url))
    await call(other.connect())
    await call(other.login_user(user, "secret-pw-1"))
    error = await refused("http: a user without grants is refused", other.create_stream(stream + "-x"))
    check("http: refusal is Unauthorized", error is not None and "Unauthorized" in error, str(error))

    # 0.11's typed topic settings travel beside the options, and its updates nest the options.
    await call(c.create_topic(stream, "z", partitions_count=1, compression_algorithm="gzip"))
    zipped = await call(c.get_topic(stream, "z"))
    check("http: create_topic keeps its compression", zipped is not None and zipped.compression_algorithm == "gzip",
          zipped and zipped.compression_algorithm)
    await call(c.update_topic(stream, "z", "z2"))
    check("http: update_topic renames", await call(c.get_topic(stream, "z2")) is not None)
    renamed = stream + "-r"
    await call(c.update_stream(stream, renamed))
    check("http: update_stream renames", (await call(c.get_stream(renamed))) is not None)
    stream = renamed

    await call(c.update_permissions(user, Permissions(global_permissions=GlobalPermissions(manage_streams=True))))
    await call(other.create_stream(stream + "-x"))
    check("http: update_permissions grants", await call(c.get_stream(stream + "-x")) is not None)
    await call(c.delete_stream(stream + "-x"))
    await call(c.change_password(user, "secret-pw-1", "secret-pw-2"))
    await call(c.update_user(user, username=user + "-r"))
    check("http: update_user renames", (await call(c.get_user(user + "-r"))) is not None)
    third = IggyClient(HttpConfig(api_url=url))
    await call(third.connect())
    await call(third.login_user(user + "-r", "secret-pw-2"))
    await call(c.delete_user(user + "-r"))

    await call(c.delete_topic(stream, "t"))
    await call(c.delete_stream(stream))
    check("http: stream deleted", await call(c.get_stream(stream)) is None)
    await call(c.logout_user())


async def main():
    http = os.environ.get("IGGY_PY_HTTP")
    if not http:
        print("IGGY_PY_HTTP (http://host:port) is required", file=sys.stderr)
        return 2
    try:
        if os.environ.get("IGGY_PY_TCP"):
            await binary_transport("tcp", TcpConfig(server_address=os.environ["IGGY_PY_TCP"]))
        if os.environ.get("IGGY_PY_WS"):
            await binary_transport("ws", WebSocketConfig(server_address=os.environ["IGGY_PY_WS"]))
        await http_flow(http)
    except Exception as e:  # noqa: BLE001
        check("no unexpected error", False, f"{type(e).__name__}: {e}")
    print(f"{len(FAILURES)} failed" + (f": {FAILURES}" if FAILURES else ""), flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    code = asyncio.run(main())
    sys.stdout.flush()
    # The SDK's runtime can abort the interpreter at exit (apache-iggy 0.9.0); the verdict is ours.
    os._exit(code)
