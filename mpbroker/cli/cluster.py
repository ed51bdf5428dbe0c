"""`mpbroker cluster` (rpk cluster info + kafka-broker-api-versions.sh).

    mpbroker cluster [--no-api-versions]

The cluster id, the controller, every broker (id, host:port, rack) from
DescribeCluster, and per broker the API versions it serves (ApiVersions, sent to each
broker with the project's own protocol client), printed as kafka-broker-api-versions:
`Produce(0): 0 to 11`.
"""
from __future__ import annotations

from mpbroker.cli import admin
from mpbroker.protocol import api_keys as K


def cmd_cluster(args) -> int:
    client = admin.admin_client(args)
    desc = admin.result(client.describe_cluster(request_timeout=admin.timeout_s(args)), args)
    brokers = sorted(desc.nodes, key=lambda n: n.id)
    out = {"cluster_id": desc.cluster_id,
           "controller": desc.controller.id if desc.controller is not None else None,
           "brokers": []}
    for n in brokers:
        b = {"id": n.id, "host": n.host, "port": n.port, "rack": n.rack}
        if not args.no_api_versions:
            versions = admin.api_versions(args, n.host, n.port)
            b["api_versions"] = [{"api_key": k, "name": K.NAMES.get(k, f"Unknown{k}"),
                                  "min_version": lo, "max_version": hi}
                                 for k, (lo, hi) in sorted(versions.items())]
        out["brokers"].append(b)
    if args.json:
        admin.emit_json(out)
        return 0
    print(f"Cluster ID: {out['cluster_id']}")
    print(f"Controller: {out['controller']}")
    admin.table(["ID", "HOST", "PORT", "RACK"],
            [[b["id"], b["host"], b["port"], b["rack"]] for b in out["brokers"]])
    for b in out["brokers"]:
        if "api_versions" not in b:
            continue
        print(f"{b['host']}:{b['port']} (id: {b['id']} rack: {b['rack'] or 'null'}) -> (")
        lines = [f"\t{v['name']}({v['api_key']}): {v['min_version']} to {v['max_version']}"
                 for v in b["api_versions"]]
        print(",\n".join(lines))
        print(")")
    return 0


def register(sub) -> None:
    p = sub.add_parser("cluster", help="cluster id, controller, brokers and their API versions")
    p.add_argument("--no-api-versions", action="store_true",
                   help="leave out the per-broker API versions")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run(cmd_cluster, a))
