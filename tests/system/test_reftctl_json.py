"""reftctl's JSON output validates against the schemas documented in docs/reftctl/schemas."""
import json
import os

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
        validate(node.ctl("status", json_output=True), "status.schema.json")
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
