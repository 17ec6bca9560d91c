"""mTLS over gRPC, in one process: who gets in, who they are, rotation without restart,
and a raft request naming a voter refused from any other certificate."""

from __future__ import annotations

import asyncio
import os
import pathlib
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog import health_server, rpc
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import ConfigError
from kraftlog.raft import messages as m
from kraftlog.raft import transport
from kraftlog.security import certificates, principal, tls
from kraftlog.security import config as sc
from kraftlog.v1 import common_pb2, raft_pb2, raft_pb2_grpc

CA = certificates.CertificateAuthority()


def client(issued: certificates.Issued | None, ca: certificates.CertificateAuthority = CA,
           ) -> tls.ClientTls:
    pair = None if issued is None else tls.KeyPair(private_key=issued.key_pem,
                                                   certificate_chain=issued.certificate_pem)
    return tls.ClientTls(trusted=ca.certificate_pem, keypair=pair)


def server_tls(tmp: pathlib.Path, *, rules: str = "DEFAULT", client_auth: str = "required",
               common_name: str = "controller-1") -> tls.ServerTls:
    (tmp / "ca.pem").write_bytes(CA.certificate_pem)
    (tmp / "node.pem").write_bytes(CA.issue(common_name).keystore_pem())
    return tls.ServerTls(sc.server_ssl(sc.mapping_lookup({
        "ssl.keystore.location": str(tmp / "node.pem"),
        "ssl.truststore.location": str(tmp / "ca.pem"),
        "ssl.client.auth": client_auth, "ssl.principal.mapping.rules": rules}), listener="T"),
        listener="T")


async def check(port: int, who: tls.ClientTls) -> grpc.StatusCode:
    async with rpc.aio_channel(f"127.0.0.1:{port}", client_tls=who) as channel:
        try:
            await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


class Handler:
    """A raft driver stand-in that records what reached it and grants every vote."""

    def __init__(self) -> None:
        self.requests: list[m.RaftRequest] = []

    async def handle_request(self, source: int, request: m.RaftRequest) -> m.RaftResponse:
        self.requests.append(request)
        return m.VoteResponse(error_code=ErrorCode.NONE, leader_epoch=3, leader_id=-1,
                              vote_granted=True)

    def leader_and_epoch(self) -> tuple[int, int]:
        return -1, 3


async def serve(secured: tls.ServerTls, handler: Handler | None = None) -> tuple[Any, int]:
    servicer = transport.RaftServicer(
        handler, voter_identity=principal.NodePrincipal.parse("CN:controller-{id}", key="k"),
        voters=frozenset({1, 2, 3}))
    server = transport.create_server(servicer, server_tls=secured)
    health = health_server.ServerHealth(server, service="kraftlog.v1.RaftService")
    port = rpc.bind(server, "127.0.0.1:0", server_tls=secured)
    await server.start()
    await health.start(serving=True)
    return server, port


def test_mtls_admits_a_signed_certificate_and_refuses_the_rest(tmp_path: pathlib.Path) -> None:
    async def scenario() -> None:
        server, port = await serve(server_tls(tmp_path))
        try:
            assert await check(port, client(CA.issue("admin"))) is grpc.StatusCode.OK
            # No certificate, or one from another CA: the handshake fails.
            assert await check(port, client(None)) is grpc.StatusCode.UNAVAILABLE
            stranger = certificates.CertificateAuthority(common_name="other CA")
            assert await check(port, tls.ClientTls(
                trusted=CA.certificate_pem, keypair=tls.KeyPair(
                    private_key=stranger.issue("admin").key_pem,
                    certificate_chain=stranger.issue("admin").certificate_pem))) \
                is grpc.StatusCode.UNAVAILABLE
            # A plaintext client never gets an answer either.
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=5)
                assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        finally:
            await server.stop(0)
    asyncio.run(scenario())


def test_a_subject_no_rule_maps_is_unauthenticated(tmp_path: pathlib.Path) -> None:
    async def scenario() -> None:
        server, port = await serve(server_tls(
            tmp_path, rules=r"RULE:^CN=(controller-[0-9]+),O=kraftlog$/$1/"))
        try:
            assert await check(port, client(CA.issue("controller-2"))) is grpc.StatusCode.OK
            assert await check(port, client(CA.issue("admin"))) \
                is grpc.StatusCode.UNAUTHENTICATED
        finally:
            await server.stop(0)
    asyncio.run(scenario())


def _vote(candidate: int) -> raft_pb2.VoteRequest:
    return raft_pb2.VoteRequest(cluster_id="c", candidate_id=candidate, candidate_epoch=3,
                                voter_id=1, last_offset_epoch=0, last_offset=0)


def test_a_vote_naming_voter_n_counts_only_from_controller_n(tmp_path: pathlib.Path) -> None:
    async def scenario() -> None:
        handler = Handler()
        server, port = await serve(server_tls(tmp_path), handler)
        try:
            for who, candidate, granted in ((CA.issue("controller-2"), 2, True),
                                            (CA.issue("broker-101"), 2, False),
                                            (CA.issue("controller-3"), 2, False)):
                async with rpc.aio_channel(f"127.0.0.1:{port}",
                                           client_tls=client(who)) as channel:
                    answer = await raft_pb2_grpc.RaftServiceStub(channel).Vote(
                        _vote(candidate), timeout=5)
                assert answer.vote_granted is granted
                if not granted:
                    assert answer.error.code == common_pb2.CLUSTER_AUTHORIZATION_FAILED
            assert len(handler.requests) == 1, "the forged votes never reached the core"
        finally:
            await server.stop(0)
    asyncio.run(scenario())


def test_rotated_certificates_are_served_without_a_restart(tmp_path: pathlib.Path) -> None:
    async def scenario() -> None:
        secured = server_tls(tmp_path)
        server, port = await serve(secured)
        try:
            assert await check(port, client(CA.issue("admin"))) is grpc.StatusCode.OK
            # The Secret rotates to a new CA: new keystore and truststore, written as
            # Kubernetes does (a new file renamed over the old one).
            rotated = certificates.CertificateAuthority(common_name="rotated CA")
            for name, data in (("ca.pem", rotated.certificate_pem),
                               ("node.pem", rotated.issue("controller-1").keystore_pem())):
                (tmp_path / f".{name}").write_bytes(data)
                os.replace(tmp_path / f".{name}", tmp_path / name)
            assert await check(port, client(CA.issue("admin"), CA)) \
                is grpc.StatusCode.UNAVAILABLE
            assert await check(port, client(rotated.issue("admin"), rotated)) \
                is grpc.StatusCode.OK
            assert secured.reloads == 1
            # A half-written rotation keeps the certificates being served.
            (tmp_path / "node.pem").write_bytes(b"-----BEGIN PRIVATE KEY-----\nAAA")
            assert await check(port, client(rotated.issue("admin"), rotated)) \
                is grpc.StatusCode.OK
            assert secured.reloads == 1
        finally:
            await server.stop(0)
    asyncio.run(scenario())


def test_unreadable_or_incomplete_stores_refuse_to_start(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ca.pem").write_bytes(CA.certificate_pem)
    (tmp_path / "node.pem").write_bytes(CA.issue("x").certificate_pem)  # no key
    get = sc.mapping_lookup({"ssl.keystore.location": str(tmp_path / "node.pem"),
                             "ssl.truststore.location": str(tmp_path / "ca.pem")})
    with pytest.raises(ConfigError, match="expected one PEM private key"):
        tls.ServerTls(sc.server_ssl(get, listener="T"), listener="T")
    get = sc.mapping_lookup({"ssl.keystore.location": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigError, match=r"missing\.pem"):
        tls.ServerTls(sc.server_ssl(get, listener="T"), listener="T")


def test_channels_dial_with_the_process_default_when_a_caller_names_none(
        tmp_path: pathlib.Path) -> None:
    """What an entry point (or --command-config) sets once is what every channel of the
    process uses: the raft peers, the broker's controller client, the admin client."""
    async def scenario() -> list[grpc.StatusCode]:
        server, port = await serve(server_tls(tmp_path))
        codes = []
        try:
            for default in (None, client(CA.issue("controller-2"))):
                rpc.configure_client(default)
                async with rpc.aio_channel(f"127.0.0.1:{port}") as channel:
                    try:
                        await health_pb2_grpc.HealthStub(channel).Check(
                            health_pb2.HealthCheckRequest(service=""), timeout=5)
                        codes.append(grpc.StatusCode.OK)
                    except grpc.aio.AioRpcError as exc:
                        codes.append(exc.code())
        finally:
            rpc.configure_client(None)
            await server.stop(0)
        return codes
    assert asyncio.run(scenario()) == [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK]
