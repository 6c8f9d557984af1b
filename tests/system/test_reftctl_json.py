"""reftctl's JSON output validates against the schemas documented in docs/reftctl/schemas."""
import json
import os
import re
import time

import jsonschema
from jsonschema.validators import validator_for

from reft_cluster import LocalCluster
from trainer import SampleTrainer

SCHEMAS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reftctl", "schemas")


def load(name):
    with open(os.path.join(SCHEMAS, name)) as f:
        return json.load(f)


def validate(doc, name):
    schema = load(name)
    rank = load("rank.schema.json")
    registry_store = {"rank.schema.json": rank}
    resolver = jsonschema.RefResolver(base_uri="", referrer=schema, store=registry_store)
    cls = validator_for(schema)
    cls.check_schema(schema)
    cls(schema, resolver=resolver).validate(doc)


def test_json_outputs_match_their_schemas():
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        t = SampleTrainer(cluster, node, "schema", steps=3, size=4097, buffers=2)
        assert t.finish() == 0
        check_etcd_status(cluster, node)
        listing = node.ctl("snapshots", "list", json_output=True)
        assert listing["snapshots"], listing
        validate(listing, "snapshots-list.schema.json")
        validate(node.ctl("snapshots", "verify", "--job", "schema", json_output=True),
                 "snapshots-verify.schema.json")
        validate(node.ctl("persist", "--job", "schema", json_output=True), "persist.schema.json")
        validate(node.ctl("restore-check", "--job", "schema", json_output=True),
                 "restore-check.schema.json")
        validate(node.ctl("rebuild", "--job", "schema", json_output=True), "rebuild.schema.json")
        validate(node.ctl("status", json_output=True), "status.schema.json")
        older = min(s["step"] for s in listing["snapshots"])
        if older < 2:
            validate(node.ctl("snapshots", "drop", "--job", "schema", "--step", str(older),
                              json_output=True), "snapshots-drop.schema.json")
        # The newest committed step is protected against an accidental drop.
        r = node.ctl("snapshots", "drop", "--job", "schema", "--step", "2", check=False)
        assert r.returncode == 1 and "--force" in r.stderr
        validate(node.ctl("snapshots", "drop", "--job", "schema", "--step", "2", "--force",
                          json_output=True), "snapshots-drop.schema.json")
        # The job's records (etcd's here; a node's own without etcd: test_job_records.py).
        jobs = node.ctl("jobs", "list", json_output=True)
        validate(jobs, "jobs-list.schema.json")
        assert [j["job"] for j in jobs["jobs"]] == ["schema"], jobs
        validate(node.ctl("jobs", "release", "--job", "schema", "--force", json_output=True),
                 "jobs-release.schema.json")
        check_status_without_etcd(cluster, node)


def check_etcd_status(cluster, node):
    """Status names etcd's members, healthy with one leader, and each job's coordinator as
    etcd records it."""
    status = node.ctl("status", json_output=True)
    validate(status, "status.schema.json")
    cp = status["control_plane"]
    assert cp["kind"] == "etcd" and cp["error"] is None, cp
    assert [e["address"] for e in cp["endpoints"]] == cluster.etcd.endpoints.split(","), cp
    assert all(e["healthy"] and e["error"] is None for e in cp["endpoints"]), cp
    assert sum(e["leader"] for e in cp["endpoints"]) == 1, cp
    key = cluster.etcd.get("/reft/v1/jobs/schema/coordinator")
    assert key is not None, "the job has no coordinator key in etcd"
    assert [j["coordinator"] for j in status["jobs"]] == [json.loads(key)["node"]], status["jobs"]
    table = node.ctl("status").stdout
    assert f"control   etcd {cluster.etcd.endpoints} (leader)" in table, table
    # JOB RANKS COMMITTED PERSISTED GENERATION COORDINATOR OWNER
    assert re.search(rf"^schema(\s+\S+){{4}}\s+{node.node_id}\s", table, re.M), table


def check_status_without_etcd(cluster, node):
    """etcd paused (SIGSTOP: connections hang, the slowest way to fail) and then killed
    (connections refused): status answers promptly and reports it, in the JSON and the table;
    in between, once etcd runs again, it is healthy again."""
    member = cluster.etcd.members[0]
    member.pause()
    try:
        check_etcd_down(node, member, "no answer within")
    finally:
        member.resume()
    deadline = time.monotonic() + 10
    while node.ctl("status", json_output=True)["control_plane"]["error"] is not None:
        assert time.monotonic() < deadline, "status still reports etcd down after it resumed"
        time.sleep(0.1)
    member.kill()
    check_etcd_down(node, member, "")  # gRPC's words for a refused or reset connection vary


def check_etcd_down(node, member, why):
    """Status within the bound, naming the member down (its error containing `why`)."""
    start = time.monotonic()
    status = node.ctl("status", json_output=True)
    took = time.monotonic() - start
    assert took < 2.5, f"status took {took:.1f}s with etcd down"
    validate(status, "status.schema.json")
    cp = status["control_plane"]
    assert cp["kind"] == "etcd", cp
    assert [(e["healthy"], e["leader"]) for e in cp["endpoints"]] == [(False, False)], cp
    assert cp["endpoints"][0]["error"] and why in cp["endpoints"][0]["error"], cp
    assert cp["error"].startswith("no etcd member is healthy"), cp
    assert all(j["coordinator"] is None for j in status["jobs"]), status["jobs"]
    table = node.ctl("status").stdout
    assert f"{member.endpoint} (DOWN: " in table and "UNREACHABLE: no etcd member" in table, table


def test_status_without_a_control_plane_store():
    """One node without etcd or peers: kind none, no endpoints, no coordinator."""
    with LocalCluster(nodes=1, etcd=0) as cluster:
        node = cluster.nodes[0]
        t = SampleTrainer(cluster, node, "alone", steps=1, size=4097, buffers=1)
        assert t.finish() == 0
        status = node.ctl("status", json_output=True)
        validate(status, "status.schema.json")
        assert status["control_plane"] == {"kind": "none", "endpoints": [], "error": None}
        assert [j["coordinator"] for j in status["jobs"]] == [None], status["jobs"]
        assert "control   none (one node, no peers)" in node.ctl("status").stdout
