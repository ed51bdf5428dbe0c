"""`mpbroker cluster` and `mpbroker --version`."""
from __future__ import annotations

from importlib import metadata


def test_cluster_info_and_api_versions(cli):
    out = cli.json("cluster")
    assert out["cluster_id"] and out["controller"] == 1
    [b] = out["brokers"]
    assert (b["id"], f"{b['host']}:{b['port']}") == (1, cli.bootstrap)
    versions = {v["name"]: (v["min_version"], v["max_version"]) for v in b["api_versions"]}
    assert versions["DescribeLogDirs"] == (0, 4)
    assert versions["Produce"][1] >= 9 and "ApiVersions" in versions
    text = cli("cluster").stdout_text
    assert f"Cluster ID: {out['cluster_id']}" in text
    assert "\tDescribeLogDirs(35): 0 to 4" in text
    assert "api_versions" not in cli.json("cluster", "--no-api-versions")["brokers"][0]


def test_version(cli):
    r = cli("--version", bootstrap=False)
    assert r.stdout_text.strip() == f"mpbroker {metadata.version('mpbroker')}"
