"""``--bootstrap-server`` (KIP-590) and ``--admin`` on the admin tools, and the AdminClient's
address list: the flags exclude each other, the environment supplies a default (never both
variables), and a list is tried in turn while an address is unreachable or serves no
AdminService. In-process gRPC servers stand in for brokers and controllers; the brokers'
own AdminService is tested end to end in test_admin_multiprocess.py."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import grpc.aio
import pytest

from kraftlog import errors
from kraftlog.admin import admin_client as ac
from kraftlog.raft import transport
from kraftlog.tools import cli
from kraftlog.tools import topic_commands as tc
from kraftlog.v1 import admin_pb2, admin_pb2_grpc, controller_pb2_grpc

# Every command that reaches the AdminService, with its required arguments.
ADMIN_COMMANDS = [
    ("topics", "create", "--topic", "t"),
    ("topics", "list"),
    ("topics", "describe"),
    ("topics", "alter", "--topic", "t", "--partitions", "2"),
    ("topics", "delete", "--topic", "t"),
    ("cluster", "describe"),
    ("reassign", "generate", "--topics", "t", "--broker-list", "1"),
    ("reassign", "execute", "--reassignment-json-file", "f"),
    ("reassign", "verify", "--reassignment-json-file", "f"),
    ("reassign", "cancel", "--reassignment-json-file", "f"),
    ("reassign", "list"),
    ("leader-election", "--election-type", "preferred", "--all-topic-partitions"),
    ("delete-records", "--offset-json-file", "f"),
]


def closed_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(tc.ADMIN_ENV, raising=False)
    monkeypatch.delenv(tc.BOOTSTRAP_ENV, raising=False)
    return monkeypatch


def test_flags_then_one_variable_then_the_default(no_env: pytest.MonkeyPatch) -> None:
    assert tc.admin_targets(None, None) == [ac.DEFAULT_ADMIN]
    assert tc.admin_targets("a:1", None) == ["a:1"]
    assert tc.admin_targets(None, "b:1, c:2,b:1") == ["b:1", "c:2"]
    no_env.setenv(tc.BOOTSTRAP_ENV, "broker:9092,broker2:9092")
    assert tc.admin_targets(None, None) == ["broker:9092", "broker2:9092"]
    assert tc.admin_targets("a:1", None) == ["a:1"]          # a flag beats either variable
    no_env.setenv(tc.ADMIN_ENV, "admin:19090")
    # Both set (as 'kraftlog dev up' suggests): the admin service's own variable wins.
    assert tc.admin_targets(None, None) == ["admin:19090"]
    assert tc.admin_targets(None, "b:1") == ["b:1"]
    no_env.delenv(tc.BOOTSTRAP_ENV)
    assert tc.admin_targets(None, None) == ["admin:19090"]
    with pytest.raises(errors.ConfigError, match="mutually exclusive"):
        tc.admin_targets("a:1", "b:1")
    with pytest.raises(errors.ConfigError, match="--bootstrap-server 'nohost' is not HOST:PORT"):
        tc.admin_targets(None, "b:1,nohost")
    with pytest.raises(errors.ConfigError, match="--bootstrap-server ' , ' holds no HOST:PORT"):
        tc.admin_targets(None, " , ")
    no_env.setenv(tc.ADMIN_ENV, "x:99999")
    with pytest.raises(errors.ConfigError, match=r"\$KRAFTLOG_ADMIN 'x:99999' is not HOST:PORT"):
        tc.admin_targets(None, None)


@pytest.mark.parametrize("command", ADMIN_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_admin_command_takes_either_flag_but_not_both(
        command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser(list(command))
    args = parser.parse_args([*command, "--bootstrap-server", "b:1,b:2"])
    assert (args.bootstrap_server, args.admin) == ("b:1,b:2", None)
    assert parser.parse_args([*command, "--admin", "a:1"]).admin == "a:1"
    with pytest.raises(SystemExit) as usage:
        parser.parse_args([*command, "--admin", "a:1", "--bootstrap-server", "b:1"])
    assert usage.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


class FakeAdmin(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def ListTopics(self, request: admin_pb2.ListTopicsRequest,
                         context: Any) -> admin_pb2.ListTopicsResponse:
        self.calls += 1
        return admin_pb2.ListTopicsResponse(
            topics=[admin_pb2.ListTopicsResponse.TopicListing(name="orders")])


async def _server(*, admin: FakeAdmin | None) -> tuple[Any, str]:
    """A gRPC server with the AdminService, or (admin None) only a ControllerService, as a
    controller's port has."""
    server = grpc.aio.server(options=transport.server_options())
    if admin is not None:
        admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
    else:
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(
            controller_pb2_grpc.ControllerServiceServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_the_client_passes_a_call_along_the_list_and_stays_where_it_was_answered() -> None:
    async def scenario() -> None:
        fake = FakeAdmin()
        controller, controller_at = await _server(admin=None)
        broker, broker_at = await _server(admin=fake)
        closed = closed_address()
        try:
            async with ac.AdminClient(f"{closed},{controller_at},{broker_at}",
                                      timeout_ms=5000) as client:
                assert client.target == closed
                listed = await client.list_topics()
                assert [t.name for t in listed.topics] == ["orders"]
                assert client.target == broker_at
                await client.list_topics()
                assert fake.calls == 2
            async with ac.AdminClient([closed], timeout_ms=5000) as client:
                with pytest.raises(ac.AdminUnreachableError,
                                   match=f"cannot reach the admin service at {closed}: "):
                    await client.list_topics()
            async with ac.AdminClient(controller_at, timeout_ms=5000) as client:
                with pytest.raises(ac.AdminUnreachableError,
                                   match=f"no AdminService at {controller_at} "
                                         r"\(a controller's port\?"):
                    await client.list_topics()
            async with ac.AdminClient(f"{closed},{controller_at}", timeout_ms=5000) as client:
                with pytest.raises(ac.AdminUnreachableError) as failed:
                    await client.list_topics()
            message = str(failed.value)
            assert message.startswith(f"cannot reach the admin service at any of {closed} (")
            assert f"; {controller_at} (no AdminService)" in message
        finally:
            await controller.stop(None)
            await broker.stop(None)
    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_cli_bootstrap_server_errors_are_one_line(no_env: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    closed = closed_address()
    assert cli.main(["topics", "list", "--bootstrap-server", closed, "--timeout-ms", "2000"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"cannot reach the admin service at {closed}" in err
    no_env.setenv(tc.ADMIN_ENV, closed)
    no_env.setenv(tc.BOOTSTRAP_ENV, "nohost")  # not read: $KRAFTLOG_ADMIN wins
    assert cli.main(["cluster", "describe", "--timeout-ms", "2000"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"cannot reach the admin service at {closed}" in err
