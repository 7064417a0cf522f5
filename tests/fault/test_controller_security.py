"""The controller behind the nameserver's ACL and TLS, with real processes.

* ACL on: controller RPCs are admin requests (not in security/interceptor.py's
  RULES); brokers in controller mode sign their heartbeats, watch streams and
  in-sync-set changes with their admin keys, so a failover works, and a
  non-admin key is refused with PERMISSION_DENIED naming the rule.
* TLS on the nameserver: brokers reach the controller over TLS, trusting
  ``namesrv_tls_ca_file``, register, and fail over through it.
"""

from __future__ import annotations

import signal
import time

import aclmode
import grpc
import pytest
from controllerkit import ControllerGroup
from faultkit import wait_for
from pki import HAVE_OPENSSL, make_pki

from pocketmq.common.auth import Credentials, signed_metadata
from pocketmq.v1 import controller_pb2, controller_pb2_grpc

pytestmark = pytest.mark.timeout(120)

ADMIN = Credentials("ctl-admin", "ctl-admin-secret")
USER = Credentials("ctl-user", "ctl-user-secret")
# The test-ACL mode's admin too (POCKETMQ_TEST_ACL=1 signs the test's raw channels as it).
ACL = (
    aclmode.ACL
    + f"""
[[accounts]]
access_key = "{ADMIN.access_key}"
secret_key = "{ADMIN.secret_key}"
admin = true

[[accounts]]
access_key = "{USER.access_key}"
secret_key = "{USER.secret_key}"
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"
"""
)


async def _sss_size(group: ControllerGroup, name: str) -> int:
    return len((await group.roles()).get(name, {}).get("sync_state_set", "").split())


async def _fail_over(group: ControllerGroup) -> tuple[str, str, float]:
    """Start a and b, wait until b is in the in-sync set, kill -9 the master; returns
    (old master, new master, seconds to the new master)."""
    await group.start("a")
    master = await group.wait_master()
    await group.start("b")
    await wait_for(
        lambda: _in_sync(group, master), timeout_s=30, what="the replica in the in-sync set"
    )
    group.procs[master].signal(signal.SIGKILL)
    killed = time.monotonic()
    await group.procs[master].proc.wait()
    new_master = await group.wait_master(other_than=master, timeout_s=15)
    return master, new_master, time.monotonic() - killed


async def _in_sync(group: ControllerGroup, master: str) -> bool:
    return await _sss_size(group, master) == 2


class _Plain(grpc.aio.UnaryUnaryClientInterceptor):
    """Passes calls as they are (an explicit interceptor: the test-ACL mode signs
    channels built without one as its admin)."""

    async def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return await continuation(details, request)


async def _get_replica_info(
    addr: str, credentials: Credentials | None, creds: grpc.ChannelCredentials | None = None
) -> controller_pb2.ReplicaInfo:
    """GetReplicaInfo signed with *credentials* (unsigned when None), TLS with *creds*."""
    request = controller_pb2.GetReplicaInfoRequest(broker_name="broker-a")
    method = "/pocketmq.v1.Controller/GetReplicaInfo"
    metadata = None if credentials is None else signed_metadata(credentials, method, request)
    channel = (
        grpc.aio.secure_channel(addr, creds, interceptors=[_Plain()])
        if creds is not None
        else grpc.aio.insecure_channel(addr, interceptors=[_Plain()])
    )
    async with channel:
        return await controller_pb2_grpc.ControllerStub(channel).GetReplicaInfo(
            request, metadata=metadata, timeout=5
        )


async def test_with_the_acl_on_brokers_sign_as_admin_and_fail_over_and_a_user_key_is_refused(
    kit, tmp_path
):
    acl_file = tmp_path / "ctl-acl.toml"
    acl_file.write_text(ACL)
    acl = {"acl_enable": True, "acl_file": str(acl_file)}
    # The nameserver (and its controller) checks the ACL; brokers sign with ctl-admin's
    # keys. Their own ACL stays off (the test reads their runtime info unsigned) unless
    # the test-ACL mode is on, and then it is this file too.
    group = ControllerGroup(
        kit,
        "SYNC_MASTER",
        acl_enable=aclmode.enabled(),
        acl_file=str(acl_file),
        access_key=ADMIN.access_key,
        secret_key=ADMIN.secret_key,
    )
    ns = await group.start_namesrv(**acl)
    old, new, to_master_s = await _fail_over(group)
    print(f"\nACL on: kill -9 of {old} -> {new} master in {to_master_s:.2f} s")
    info = await _get_replica_info(ns.addr, ADMIN)
    assert info.master_addr == group.procs[new].addr
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _get_replica_info(ns.addr, USER)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "GetReplicaInfo is an admin request" in refused.value.details()
    assert USER.access_key in refused.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as unsigned:
        await _get_replica_info(ns.addr, None)
    assert unsigned.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert to_master_s <= 30.0  # happened; the 5 s target is failover_bench.py's


@pytest.mark.skipif(not HAVE_OPENSSL, reason="no openssl command to make the test PKI")
async def test_brokers_register_and_fail_over_through_a_tls_nameserver_and_controller(
    kit, tmp_path
):
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    ca = str(pki / "ca.pem")
    group = ControllerGroup(kit, "SYNC_MASTER", namesrv_tls_ca_file=ca)
    ns = await group.start_namesrv(
        tls_cert_file=str(pki / "server.pem"), tls_key_file=str(pki / "server.key")
    )
    old, new, to_master_s = await _fail_over(group)
    print(f"\nTLS controller: kill -9 of {old} -> {new} master in {to_master_s:.2f} s")
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes())
    info = await _get_replica_info(ns.addr, aclmode.ADMIN if aclmode.enabled() else None, creds)
    assert info.master_addr == group.procs[new].addr
    assert {m.broker_addr for m in info.members} == {p.addr for p in group.procs.values()}
    # plaintext is not served: the controller is reached over TLS only
    with pytest.raises(grpc.aio.AioRpcError):
        await _get_replica_info(ns.addr, None)
    assert to_master_s <= 30.0  # happened; the 5 s target is failover_bench.py's
