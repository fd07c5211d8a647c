"""lagent -> lmaster -> [elasticsearch] -> es_test_server, read back with the official client.

lmaster also writes [hdf5], which tells exactly what it received; every sample of the agent must
be in Elasticsearch once, with the same values. Run with /usr/bin/python3 (Debian's h5py and
python3-elasticsearch 7.17).
"""
import base64
import collections
import datetime
import shutil
import socket
import subprocess
import unittest

from elasticsearch import Elasticsearch, helpers

from es_test_server import EsTestServer
from fructosa_test import FructosaTestCase, LAGENT, LMASTER, proc_with_fixture_mounts, read_text, wait_for
from read_hdf5 import read_file

SENSORS = ["VirtualMemory", "NetIOCounters", "CPUTimes", "DiskPartitions", "CPUCount"]
INTEGER_UNITS = ("bytes", "count", "bool")


def field_name(key):
    """The document field of a metric or label key (elasticsearch_field_name in C++)."""
    if key == "":
        return "value"
    return ".".join("_" if part.strip() == "" else part for part in key.split("."))


def sensor_part(sensor):
    return "".join(c.lower() if c.isascii() and c.isalnum() else "_" for c in sensor)


def utc(time_ns):
    return datetime.datetime.fromtimestamp(time_ns // 1_000_000_000, datetime.timezone.utc)


def iso_millis(time_ns):
    return utc(time_ns).strftime("%Y-%m-%dT%H:%M:%S") + f".{time_ns // 1_000_000 % 1000:03d}Z"


def document_id(host, sensor, job, time_ns):
    escape = lambda text: text.replace("%", "%25").replace("|", "%7C")
    return f"{escape(host)}|{escape(sensor)}|{job}|{time_ns}"


def received(h5_path, host="testnode"):
    """{_id: (sensor, time_ns, job, metrics, labels)} of every sample lmaster wrote to HDF5."""
    samples = {}
    for sensor, table in read_file(h5_path).get(host, {}).items():
        for row, (time_ns, job) in enumerate(zip(table["time"], table["job"])):
            metrics = {key: column["values"][row] for key, column in table["columns"].items()
                       if column["values"][row] is not None}
            labels = {key: values[row] for key, values in table["labels"].items() if values[row] != ""}
            samples[document_id(host, sensor, job, time_ns)] = (sensor, time_ns, job, metrics, labels)
    return samples


def from_lmaster(entry):
    return entry["headers"].get("user-agent", "").startswith("fructosa-lmaster/")


class ElasticsearchTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.server = self.start_server()

    def start_server(self, **tls):
        server = EsTestServer(**tls).start()
        self.addCleanup(server.stop)
        return server

    def start_es_master(self, es_keys="", name="lmaster", url=None):
        """lmaster with [hdf5] and [elasticsearch] (quick retries, stats every 0.5 s); (process, port)."""
        config = (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\ndata_dir = {self.path(name + '-data')}\n"
                  f"stats_interval = 0.5\n"
                  f"[hdf5]\npath = {self.path(name + '.h5')}\nflush_interval = 0.5\n"
                  f"[elasticsearch]\nurl = {url or self.server.url}\nflush_interval = 0.2\n"
                  f"retry_max_interval = 0.5\ntimeout = 3\n{es_keys}")
        path = self.write(name + ".conf", config)
        process = self.spawn(name, [LMASTER, "run", "-c", path, "-p", self.path(name + ".pid")])
        log = self.path(name + ".err")

        def listening():
            if process.poll() is not None:
                raise AssertionError(f"lmaster exited with {process.returncode}:\n{read_text(log)}")
            return self.listening_port(log)
        return process, wait_for(listening, what="lmaster to listen")

    def start_agent(self, port, sensors=SENSORS):
        # DiskPartitions reads a fixture mount table (partitions with labels on any machine).
        proc = proc_with_fixture_mounts(self.dir)
        config = self.write("lagent.conf", self.agent_config(port, sensors, extra=f"proc_root = {proc}\n"))
        return self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

    def run_pipeline(self, documents=8, before_stop=lambda: True, es_keys=""):
        """Agent and master until `documents` VirtualMemory documents arrived and `before_stop()`."""
        master, port = self.start_es_master(es_keys)
        agent = self.start_agent(port)
        wait_for(lambda: (len(self.server.documents("fructosa_virtualmemory-*")) >= documents and before_stop())
                 or agent.poll() is not None, timeout=60, what=f"{documents} VirtualMemory documents")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

    def read_back(self, server=None, **client):
        """{_id: hit} of every fructosa document, through the official client."""
        server = server or self.server
        with Elasticsearch([server.url], **client) as es:
            es.indices.refresh(index="fructosa_*")
            return {hit["_id"]: hit for hit in helpers.scan(es, index="fructosa_*", size=500)}

    def assert_stored_exactly(self, documents, expected):
        for doc_id, (sensor, time_ns, job, metrics, labels) in expected.items():
            self.assertIn(doc_id, documents, "a sample lmaster received is missing")
            hit = documents[doc_id]
            self.assertEqual(hit["_index"], f"fructosa_{sensor_part(sensor)}-{utc(time_ns):%Y.%m.%d}")
            source = hit["_source"]
            self.assertEqual((source["@timestamp"], source["host"], source["sensor"], source["job"]),
                             (iso_millis(time_ns), "testnode", sensor, job))
            stored = {key: value for key, value in source["metrics"].items() if value is not None}
            self.assertEqual(stored, {field_name(k): v for k, v in metrics.items()}, doc_id)
            self.assertEqual(source.get("labels", {}), {field_name(k): v for k, v in labels.items()}, doc_id)
        extra = sorted(i for i, hit in documents.items() if hit["_source"]["host"] == "testnode" and i not in expected)
        self.assertEqual(extra, [])

    def bulk_items(self):
        """{_id: [status of each time it was sent]} from the server's request log."""
        sent = collections.defaultdict(list)
        for entry in self.server.stats()["log"]:
            for item in entry.get("items", []):
                sent[item["id"]].append(item["status"])
        return sent

    def test_every_sample_is_stored_once_with_exact_values_and_typed_by_the_catalog(self):
        self.run_pipeline()
        expected = received(self.path("lmaster.h5"))
        self.assertLessEqual(set(SENSORS), {s for s, *_ in expected.values()})  # and the agent's own `lagent`
        documents = self.read_back()
        self.assert_stored_exactly(documents, expected)
        self.assertTrue(any(hit["_source"].get("labels") for hit in documents.values()), "DiskPartitions has labels")
        self.assertTrue(any(hit["_source"]["sensor"] == "CPUCount" and "value" in hit["_source"]["metrics"]
                            for hit in documents.values()), "a scalar sensor's value")
        # The master's own sensor reaches Elasticsearch too, with its counters for this output.
        own = [hit["_source"] for hit in documents.values() if hit["_source"]["sensor"] == "lmaster"]
        self.assertTrue(own)
        self.assertEqual(own[0]["host"], socket.gethostname().split(".")[0])
        self.assertGreater(max(doc["metrics"].get("elasticsearch.sent", 0) for doc in own), 0)
        # One kept-alive connection carried every request.
        log = [entry for entry in self.server.stats()["log"] if from_lmaster(entry)]
        self.assertEqual({entry["connection"] for entry in log}, {log[0]["connection"]})
        self.assertTrue(all(entry["status"] == 200 for entry in log))
        self.assertEqual(set(map(len, self.bulk_items().values())), {1}, "every document was sent once")

        # Each sensor's template types the keys as the catalog (the HDF5 attributes) describes them.
        tables = read_file(self.path("lmaster.h5"))["testnode"]
        with Elasticsearch([self.server.url]) as es:
            for sensor in SENSORS:
                name = f"fructosa_{sensor_part(sensor)}"
                (stored,) = es.indices.get_index_template(name=name)["index_templates"]
                template = stored["index_template"]
                self.assertEqual(template["index_patterns"], [name + "-*"])
                mappings = template["template"]["mappings"]
                properties = mappings["properties"]
                self.assertEqual({f: properties[f]["type"] for f in ("@timestamp", "host", "sensor", "job")},
                                 {"@timestamp": "date", "host": "keyword", "sensor": "keyword", "job": "long"})
                for key, column in tables[sensor]["columns"].items():
                    node = {"properties": properties["metrics"]["properties"]}
                    for part in field_name(key).split("."):
                        node = node["properties"][part]
                    self.assertEqual(node["type"], "long" if column["unit"] in INTEGER_UNITS else "double", key)
                    self.assertEqual(node["meta"]["kind"], column["kind"])
                    self.assertEqual(node["meta"].get("unit", ""), column["unit"])
                    self.assertEqual(mappings["_meta"]["metrics"][field_name(key)]["description"],
                                     column["description"])
                # The day's index was made from it.
                index = next(hit["_index"] for hit in documents.values() if hit["_source"]["sensor"] == sensor)
                mapping = es.indices.get_mapping(index=index)[index]["mappings"]
                self.assertEqual(mapping["properties"]["job"], {"type": "long"})
                self.assertEqual(mapping["properties"]["metrics"]["properties"].keys(),
                                 properties["metrics"]["properties"].keys())

    def test_429_500_and_a_dropped_connection_lose_and_duplicate_nothing(self):
        self.server.fail_next(1, status=429, path_contains="_bulk")
        self.server.fail_next(1, status=500, path_contains="_bulk")
        self.server.drop_next(2, path_contains="_bulk")  # libcurl retries a dead kept-alive connection once
        self.run_pipeline(before_stop=lambda: self.server.pending_failures() == 0)
        log = self.server.stats()["log"]
        self.assertEqual(sum(1 for e in log if e.get("dropped")), 2)
        self.assertEqual(sorted(e["status"] for e in log if e.get("injected")), [429, 500])
        self.assert_stored_exactly(self.read_back(), received(self.path("lmaster.h5")))
        for doc_id, statuses in self.bulk_items().items():
            self.assertEqual(statuses.count(201), 1, doc_id)
        self.assertIn(self.server.url, read_text(self.path("lmaster.err")), "the failures name the node")

    def test_items_refused_for_now_are_the_only_ones_sent_again(self):
        self.server.fail_items(every=3, status=429, limit=5)
        self.run_pipeline(before_stop=lambda: self.server.pending_failures() == 0)
        self.assert_stored_exactly(self.read_back(), received(self.path("lmaster.h5")))
        attempts = self.bulk_items()
        self.assertEqual(sum(statuses.count(429) for statuses in attempts.values()), 5)
        # A document is sent again only after a 429 for it (a retry may meet another one), and
        # never after it was stored.
        for doc_id, statuses in attempts.items():
            self.assertEqual(statuses, [429] * (len(statuses) - 1) + [201], doc_id)

    def test_a_document_refused_for_good_is_dropped_counted_and_logged(self):
        self.server.fail_items(every=4, status=400, limit=1, index_contains="virtualmemory")
        self.run_pipeline(before_stop=lambda: self.server.pending_failures() == 0)
        (refused,) = [doc_id for doc_id, statuses in self.bulk_items().items() if statuses == [400]]
        expected = received(self.path("lmaster.h5"))
        lost = expected.pop(refused)
        documents = self.read_back()
        self.assertNotIn(refused, documents)
        self.assert_stored_exactly(documents, expected)
        log = read_text(self.path("lmaster.err"))
        self.assertIn(f"{self.server.url}: fructosa_virtualmemory-{utc(lost[1]):%Y.%m.%d} refused", log)
        self.assertIn("mapper_parsing_exception", log)
        dropped = [hit["_source"]["metrics"].get("elasticsearch.dropped") for hit in documents.values()
                   if hit["_source"]["sensor"] == "lmaster"]
        self.assertEqual(max(dropped), len(lost[3]), "lmaster counts the refused points")

    def run_master_until_delivered(self, es_keys="", name="lmaster", url=None, server=None, deliver=True):
        """lmaster alone (its own sensor is all it sends) until a document arrived, or 2 s without."""
        server = server or self.server
        master, _ = self.start_es_master(es_keys, name=name, url=url)
        before = len(server.documents())
        if deliver:
            wait_for(lambda: len(server.documents()) > before, timeout=30, what="lmaster's own documents")
        else:
            log = self.path(name + ".err")
            wait_for(lambda: "output elasticsearch: " in read_text(log), timeout=30, what="a failure in the log")
        self.assertEqual(self.stop(master), 0, read_text(self.path(name + ".err")))
        return read_text(self.path(name + ".err"))

    def test_basic_auth_from_a_credentials_file_and_an_api_key(self):
        api_key = base64.b64encode(b"key-id:key-secret").decode()
        self.server.require_auth(users={"fructosa": "pa:ss word"}, api_keys=[api_key])
        self.write("es.credentials", "fructosa:pa:ss word\n")
        # A relative credentials_file is found next to the configuration file.
        self.run_master_until_delivered("credentials_file = es.credentials\n")
        self.run_master_until_delivered(f"api_key = {api_key}\n", name="lmaster2")
        seen = {entry["headers"].get("authorization") for entry in self.server.stats()["log"] if from_lmaster(entry)}
        self.assertEqual(seen, {"Basic " + base64.b64encode(b"fructosa:pa:ss word").decode(), "ApiKey " + api_key})
        # Wrong credentials: nothing goes in, the log says why and where.
        self.write("bad.credentials", "fructosa:wrong\n")
        log = self.run_master_until_delivered("credentials_file = bad.credentials\n", name="lmaster3", deliver=False)
        self.assertIn("401", log)
        self.assertIn(self.server.url, log)
        # An unreadable credentials_file stops lmaster at start, naming the file.
        config = self.write("missing.conf", f"[lmaster]\nincoming data port = 0\ndata_dir = {self.path('d')}\n"
                                            f"[elasticsearch]\ncredentials_file = nowhere.credentials\n")
        result = self.run_tool([LMASTER, "run", "-c", config, "-p", self.path("missing.pid")])
        self.assertEqual(result.returncode, 78)  # EX_CONFIG
        self.assertIn(self.path("nowhere.credentials"), result.stderr)

    def test_the_next_node_is_tried_when_one_is_unreachable(self):
        # Nobody listens on port 1 of the loopback: connections are refused at once.
        log = self.run_master_until_delivered(url=f"http://127.0.0.1:1, {self.server.url}")
        self.assertIn("http://127.0.0.1:1", log)
        self.assertIn(f"trying {self.server.url}", log)

    @unittest.skipUnless(shutil.which("openssl"), "needs the openssl command to make a certificate")
    def test_https_with_a_ca_file_or_without_verification(self):
        cert, key = self.path("cert.pem"), self.path("key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
        server = self.start_server(certfile=cert, keyfile=key)
        self.run_master_until_delivered("ca_file = cert.pem\n", url=server.url, server=server)
        self.assertEqual(server.state.tls_failures, 0)
        # Without the CA the certificate is refused; with verification off it is not checked.
        log = self.run_master_until_delivered(name="lmaster2", url=server.url, server=server, deliver=False)
        self.assertIn(server.url, log)
        self.assertGreater(server.state.tls_failures, 0)
        self.run_master_until_delivered("verify_certificates = false\n", name="lmaster3", url=server.url,
                                        server=server)
        documents = self.read_back(server, ca_certs=cert)
        self.assertTrue(all(hit["_source"]["sensor"] == "lmaster" for hit in documents.values()))


if __name__ == "__main__":
    unittest.main()
