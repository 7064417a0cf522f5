"""etcd's v3 gRPC API (``etcdserverpb``, ``mvccpb``, ``authpb``), generated from the
``.proto`` files here, which ``scripts/vendor_etcd_proto.py`` copies from etcd-io/etcd.

Only :mod:`pocketmq.controller.etcd` imports these modules.
"""
