"""The Elasticsearch test server answers the official client (elasticsearch-py 7.17) like ES 8 does.

Run with /usr/bin/python3 (Debian's python3-elasticsearch).
"""
import base64
import os
import shutil
import subprocess
import tempfile
import unittest
import warnings

import elasticsearch
from elasticsearch import Elasticsearch, helpers

from es_test_server import EsTestServer, glob_overlap


class EsTestServerTest(unittest.TestCase):
    def setUp(self):
        self.server = EsTestServer().start()
        self.addCleanup(self.server.stop)
        self.es = Elasticsearch([self.server.url], max_retries=0)
        self.addCleanup(self.es.close)

    def test_info_passes_the_product_check(self):
        info = self.es.info()
        self.assertTrue(info["version"]["number"].startswith("8."))
        self.assertEqual(info["tagline"], "You Know, for Search")
        self.assertEqual(info["version"]["build_flavor"], "default")
        self.assertTrue(self.es.ping())
        # Every answer says what it is, errors included.
        self.server.fail_next(1, status=500)
        with self.assertRaises(elasticsearch.TransportError):
            self.es.count()
        for entry in self.server.stats()["log"]:
            self.assertEqual(entry["headers"].get("user-agent", "")[:13], "elasticsearch")

    def test_index_then_get_then_overwrite(self):
        first = self.es.index(index="books", id="1", document={"title": "Dune", "pages": 412})
        self.assertEqual(first["result"], "created")
        self.assertEqual(first["_version"], 1)
        self.assertEqual(first["_shards"], {"total": 2, "successful": 1, "failed": 0})
        second = self.es.index(index="books", id="1", document={"title": "Dune", "pages": 896})
        self.assertEqual((second["result"], second["_version"]), ("updated", 2))
        self.assertEqual(self.es.get(index="books", id="1")["_source"], {"title": "Dune", "pages": 896})
        generated = self.es.index(index="books", document={"title": "Emma"})
        self.assertEqual(len(generated["_id"]), 20)
        with self.assertRaises(elasticsearch.NotFoundError):
            self.es.get(index="books", id="missing")

    def test_bulk_index_and_create_with_per_item_results(self):
        body = ('{"index": {"_index": "logs", "_id": "a"}}\n{"n": 1}\n'
                '{"create": {"_index": "logs", "_id": "b"}}\n{"n": 2}\n'
                '{"create": {"_index": "logs", "_id": "a"}}\n{"n": 3}\n')
        result = self.es.bulk(body=body)
        self.assertTrue(result["errors"])
        statuses = [(action, item["status"]) for entry in result["items"] for action, item in entry.items()]
        self.assertEqual(statuses, [("index", 201), ("create", 201), ("create", 409)])
        conflict = result["items"][2]["create"]["error"]
        self.assertEqual(conflict["type"], "version_conflict_engine_exception")
        self.assertIn("document already exists", conflict["reason"])
        # Not searchable before a refresh, all of them after it.
        self.assertEqual(self.es.count(index="logs")["count"], 0)
        self.es.indices.refresh()
        self.assertEqual(self.es.count(index="logs")["count"], 2)
        self.assertEqual(self.es.get(index="logs", id="a")["_source"], {"n": 1})
        # A bulk body must end with a newline.
        with self.assertRaises(elasticsearch.RequestError) as caught:
            self.es.transport.perform_request("POST", "/_bulk", body='{"index": {"_index": "logs"}}\n{"n": 1}',
                                              headers={"content-type": "application/x-ndjson"})
        self.assertEqual(caught.exception.error, "illegal_argument_exception")

    def test_helpers_bulk_and_scan(self):
        actions = ({"_index": "metrics-a" if i % 2 else "metrics-b", "_id": str(i),
                    "@timestamp": f"2024-05-01T00:00:{i % 60:02d}.{i:03d}Z", "value": i * 0.1}
                   for i in range(250))
        self.assertEqual(helpers.bulk(self.es, actions, chunk_size=100), (250, []))
        self.assertEqual(self.server.stats()["requests"], 4)  # GET / (product check) + 3 chunks
        self.es.indices.refresh(index="metrics-*")
        scanned = list(helpers.scan(self.es, index="metrics-*", size=40))
        self.assertEqual(sorted(int(hit["_id"]) for hit in scanned), list(range(250)))
        self.assertEqual({hit["_id"]: hit["_source"]["value"] for hit in scanned},
                         {str(i): i * 0.1 for i in range(250)})
        # helpers.bulk reports refused documents.
        self.server.fail_items(every=100, status=400, limit=1)
        with self.assertRaises(helpers.BulkIndexError) as caught:
            helpers.bulk(self.es, ({"_index": "metrics-a", "value": i} for i in range(150)))
        (failure,) = caught.exception.errors
        self.assertEqual(failure["index"]["status"], 400)
        self.assertEqual(failure["index"]["error"]["type"], "mapper_parsing_exception")

    def test_search_term_terms_size_and_sort(self):
        for i, host in enumerate(["n1", "n2", "n3", "n1", "n2"]):
            self.es.index(index="fructosa_x-2024.05.01", id=str(i), document={
                "@timestamp": f"2024-05-01T00:00:0{i}.500Z", "host": host, "job": i % 2, "v": i})
        self.es.indices.refresh()
        result = self.es.search(index="fructosa_x-*", query={"term": {"host.keyword": "n1"}})
        self.assertEqual(result["hits"]["total"], {"value": 2, "relation": "eq"})
        self.assertEqual(sorted(hit["_id"] for hit in result["hits"]["hits"]), ["0", "3"])
        self.assertEqual(result["hits"]["max_score"], 1.0)
        result = self.es.search(index="fructosa_x-*", query={"terms": {"host.keyword": ["n2", "n3"]}}, size=2,
                                sort=[{"@timestamp": {"order": "desc"}}])
        self.assertEqual(result["hits"]["total"]["value"], 3)
        hits = result["hits"]["hits"]
        self.assertEqual([hit["_id"] for hit in hits], ["4", "2"])
        self.assertEqual(hits[0]["sort"], [1714521604500])  # dates sort as epoch milliseconds
        self.assertIsNone(hits[0]["_score"])
        self.assertIsNone(result["hits"]["max_score"])
        self.assertEqual(self.es.count(index="fructosa_x-*", body={"query": {"term": {"job": 1}}})["count"], 2)
        both = {"bool": {"filter": [{"term": {"job": 1}}], "must_not": [{"ids": {"values": ["1"]}}]}}
        hits = self.es.search(index="fructosa_x-*", query=both)["hits"]["hits"]
        self.assertEqual([hit["_id"] for hit in hits], ["3"])
        ordered = self.es.search(index="fructosa_x-2024.05.01", sort="@timestamp:asc", size=10)
        self.assertEqual([hit["_id"] for hit in ordered["hits"]["hits"]], ["0", "1", "2", "3", "4"])
        # A text field cannot be sorted on, like in ES.
        with self.assertRaises(elasticsearch.RequestError):
            self.es.search(index="fructosa_x-*", sort=["host"])

    def test_index_template_shapes_new_indices(self):
        template = {
            "index_patterns": ["fructosa_vm-*"], "priority": 200,
            "template": {
                "settings": {"index.mapping.total_fields.limit": 5000, "number_of_replicas": 0},
                "mappings": {
                    "dynamic_templates": [{"metrics": {"path_match": "metrics.*", "match_mapping_type": "double",
                                                       "mapping": {"type": "double"}}}],
                    "properties": {"@timestamp": {"type": "date"}, "host": {"type": "keyword"},
                                   "job": {"type": "long"},
                                   "metrics": {"properties": {"total": {"type": "long", "meta": {"unit": "bytes"}}}}}}}}
        self.assertEqual(self.es.indices.put_index_template(name="fructosa_vm", body=template), {"acknowledged": True})
        stored = self.es.indices.get_index_template(name="fructosa_vm")["index_templates"][0]
        self.assertEqual(stored["name"], "fructosa_vm")
        self.assertEqual(stored["index_template"]["template"]["settings"],
                         {"index": {"mapping": {"total_fields": {"limit": "5000"}}, "number_of_replicas": "0"}})
        self.assertEqual(stored["index_template"]["composed_of"], [])
        self.es.index(index="fructosa_vm-2024.05.01", id="1", document={
            "@timestamp": "2024-05-01T00:00:00.000Z", "host": "n1", "job": 0,
            "metrics": {"total": 1024, "percent": 12.5, "eth0.bytes_sent": 7.0}, "note": "free text", "count": 3,
            "seen": 0.25})
        mapping = self.es.indices.get_mapping(index="fructosa_vm-2024.05.01")["fructosa_vm-2024.05.01"]["mappings"]
        properties = mapping["properties"]
        self.assertEqual(properties["host"], {"type": "keyword"})
        metrics = properties["metrics"]["properties"]
        self.assertEqual(metrics["total"], {"type": "long", "meta": {"unit": "bytes"}})
        self.assertEqual(metrics["percent"], {"type": "double"})  # the dynamic template
        self.assertEqual(metrics["eth0"]["properties"]["bytes_sent"], {"type": "double"})  # dots are objects
        self.assertEqual(properties["seen"], {"type": "float"})  # ES's default for a JSON float
        self.assertEqual(properties["count"], {"type": "long"})
        self.assertEqual(properties["note"], {"type": "text", "fields": {"keyword": {"type": "keyword",
                                                                                      "ignore_above": 256}}})
        # Values that do not fit the mapping are refused, like ES does.
        with self.assertRaises(elasticsearch.RequestError) as caught:
            self.es.index(index="fructosa_vm-2024.05.01", document={"metrics": {"total": "lots"}})
        self.assertEqual(caught.exception.error, "mapper_parsing_exception")
        with self.assertRaises(elasticsearch.RequestError) as caught:
            self.es.index(index="fructosa_vm-2024.05.01", document={"metrics": {"eth0": 1.0}})
        self.assertEqual(caught.exception.error, "mapper_parsing_exception")
        # Bad mappings and overlapping patterns at the same priority are refused.
        with self.assertRaises(elasticsearch.RequestError) as caught:
            self.es.indices.put_index_template(name="bad", body={
                "index_patterns": ["other-*"], "template": {"mappings": {"properties": {
                    "x": {"type": "long", "meta": {"description": "x" * 60}}}}}})
        self.assertEqual(caught.exception.error, "mapper_parsing_exception")
        with self.assertRaises(elasticsearch.RequestError) as caught:
            self.es.indices.put_index_template(name="overlap", body={"index_patterns": ["fructosa_*"], "priority": 200})
        self.assertEqual(caught.exception.error, "illegal_argument_exception")
        self.es.indices.put_index_template(name="lower", body={"index_patterns": ["fructosa_*"], "priority": 100})
        with self.assertRaises(elasticsearch.NotFoundError):
            self.es.indices.get_index_template(name="missing")

    def test_errors_look_like_elasticsearch_errors(self):
        with self.assertRaises(elasticsearch.NotFoundError) as caught:
            self.es.search(index="nothing-here")
        self.assertEqual(caught.exception.error, "index_not_found_exception")
        self.assertEqual(caught.exception.info["error"]["index"], "nothing-here")
        # A wildcard that matches nothing is no error.
        self.assertEqual(self.es.search(index="nothing-*")["hits"]["total"]["value"], 0)
        with self.assertRaises(elasticsearch.RequestError) as caught:
            self.es.index(index="UpperCase", document={"a": 1})
        self.assertEqual(caught.exception.error, "invalid_index_name_exception")
        with self.assertRaises(elasticsearch.RequestError), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # an unknown key needs a raw body
            self.es.search(index="*", body={"query": {"match_all": {}}, "bogus": 1})
        self.server.fail_next(1, status=429)
        with self.assertRaises(elasticsearch.TransportError) as caught:
            self.es.count()
        self.assertEqual(caught.exception.status_code, 429)
        self.assertEqual(caught.exception.error, "es_rejected_execution_exception")

    def test_injected_item_failures_and_dropped_connections(self):
        self.server.fail_items(every=2, status=429, limit=2)
        body = "".join(f'{{"create": {{"_index": "m", "_id": "{i}"}}}}\n{{"v": {i}}}\n' for i in range(5))
        result = self.es.bulk(body=body)
        statuses = [item["create"]["status"] for item in result["items"]]
        self.assertEqual(statuses, [201, 429, 201, 429, 201])
        self.assertEqual(result["items"][1]["create"]["error"]["type"], "es_rejected_execution_exception")
        self.assertEqual([i["status"] for i in self.server.stats()["log"][-1]["items"]], statuses)
        # The client retries on a dropped connection (it would on a real node restart too).
        client = Elasticsearch([self.server.url], max_retries=2)
        self.addCleanup(client.close)
        client.info()
        self.es.indices.refresh()
        self.server.drop_next(1)
        self.assertEqual(client.count(index="m")["count"], 3)
        log = self.server.stats()["log"]
        self.assertTrue(log[-2].get("dropped"))
        self.assertEqual(log[-1]["path"], "/m/_count")
        self.assertEqual(log[-1]["status"], 200)

    def test_connections_are_kept_alive(self):
        for i in range(20):
            self.es.index(index="k", document={"i": i})
        stats = self.server.stats()
        self.assertEqual(stats["requests"], 21)
        self.assertEqual(stats["connections"], 1)

    def test_basic_auth_and_api_key(self):
        self.server.require_auth(users={"elastic": "s3cret"}, api_keys=[base64.b64encode(b"id1:key1").decode()])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "unable to verify that the server is Elasticsearch"
            with self.assertRaises(elasticsearch.AuthenticationException) as caught:
                self.es.count()
        self.assertEqual(caught.exception.error, "security_exception")
        with Elasticsearch([self.server.url], http_auth=("elastic", "s3cret")) as user:
            self.assertEqual(user.count()["count"], 0)
        with Elasticsearch([self.server.url], api_key=("id1", "key1")) as keyed:
            self.assertEqual(keyed.count()["count"], 0)
        headers = [e["headers"].get("authorization") for e in self.server.stats()["log"] if e["status"] == 200]
        self.assertIn("Basic " + base64.b64encode(b"elastic:s3cret").decode(), headers)
        self.assertIn("ApiKey " + base64.b64encode(b"id1:key1").decode(), headers)

    def test_glob_overlap(self):
        self.assertFalse(glob_overlap("fructosa_cpu-*", "fructosa_cpupercent-*"))
        self.assertTrue(glob_overlap("fructosa_*", "fructosa_cpu-*"))
        self.assertTrue(glob_overlap("a*c", "ab*"))
        self.assertFalse(glob_overlap("a*c", "b*"))


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command to make a certificate")
class EsTestServerTlsTest(unittest.TestCase):
    def test_https_with_a_self_signed_certificate(self):
        directory = tempfile.mkdtemp(prefix="es-tls-")
        self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        cert, key = make_certificate(directory)
        server = EsTestServer(certfile=cert, keyfile=key).start()
        self.addCleanup(server.stop)
        self.assertTrue(server.url.startswith("https://"))
        with Elasticsearch([server.url], ca_certs=cert) as es:
            self.assertEqual(es.info()["tagline"], "You Know, for Search")
        with Elasticsearch([server.url], max_retries=0) as untrusting:
            with self.assertRaises(elasticsearch.ConnectionError):
                untrusting.info()


def make_certificate(directory):
    """A self-signed certificate for 127.0.0.1 and localhost (openssl CLI); returns (cert, key)."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    return cert, key


if __name__ == "__main__":
    unittest.main()
