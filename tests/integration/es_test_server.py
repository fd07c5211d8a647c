"""A small Elasticsearch 8 look-alike for tests: the REST calls lmaster and the tests make.

Python standard library only. Run it as a program (`python3 es_test_server.py --port 0` prints
the port it listens on, then serves until SIGTERM) or use EsTestServer from a test.

What it speaks, as Elasticsearch 8.7 answers it (status codes, JSON bodies, error types):
  GET|HEAD /                               cluster info (passes the official clients' product check)
  PUT|GET|DELETE /_index_template/<name>   composable index templates (patterns, priority, overlap
                                           check, mapping validation, settings normalised)
  POST|PUT /_bulk, /<index>/_bulk          NDJSON index / create / delete actions, per-item results
  POST|PUT /<index>/_doc[/<id>], /<index>/_create/<id>, GET|DELETE /<index>/_doc/<id>
  POST|GET /_refresh, /<index>/_refresh    documents become searchable at a refresh (or after 1 s)
  POST|GET /_count, /<index>/_count        query: match_all, term, terms, bool (must/filter/must_not)
  POST|GET /_search, /<index>/_search      the same queries; size, from, sort, scroll
  POST|DELETE /_search/scroll
  GET /<index>/_mapping, HEAD|GET|DELETE /<index>
Indices are created on first write, with the mappings of the matching template of highest
priority; unmapped fields are mapped dynamically (dynamic_templates first, then ES's defaults),
and a value that does not fit its mapping fails with mapper_parsing_exception (400). Every
response carries `X-Elastic-Product: Elasticsearch`; connections are kept alive (HTTP/1.1).

Test controls (on the EsTestServer object, or over HTTP under /_test/ with JSON bodies):
  fail_next(count, status=429, path_contains="")   the next matching requests answer `status`
  drop_next(count, path_contains="")                ... are read, then the connection is closed
  fail_items(every=1, status=429, type=..., limit=None, index_contains="")
                                                    every k-th bulk item fails with `status`
  require_auth(users={user: password}, api_keys=[...])   401 without valid credentials
  clear_failures(), stats() (requests, connections, request log), reset()
HTTP: POST /_test/fail, /_test/drop, /_test/fail_items, /_test/auth, /_test/clear, /_test/reset;
GET /_test/stats.
"""
import argparse
import base64
import copy
import datetime
import fnmatch
import gzip
import http.server
import json
import os
import re
import secrets
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse

VERSION = {
    "number": "8.7.1",
    "build_flavor": "default",
    "build_type": "deb",
    "build_hash": "f229ed3f893a515d590d0f39b05f68913e2d9b53",
    "build_date": "2023-04-27T04:33:42.127815583Z",
    "build_snapshot": False,
    "lucene_version": "9.5.0",
    "minimum_wire_compatibility_version": "7.17.0",
    "minimum_index_compatibility_version": "7.0.0",
}

INTEGER_TYPES = {"long", "integer", "short", "byte", "unsigned_long"}
FLOAT_TYPES = {"double", "float", "half_float", "scaled_float"}
LEAF_TYPES = INTEGER_TYPES | FLOAT_TYPES | {
    "keyword", "text", "date", "date_nanos", "boolean", "ip", "wildcard", "constant_keyword",
    "match_only_text", "flattened", "binary"}
OBJECT_TYPES = {"object", "nested"}
# Mapping parameters accepted on a field (a superset over the types this server knows).
FIELD_PARAMETERS = {
    "type", "meta", "index", "doc_values", "store", "null_value", "ignore_malformed", "coerce",
    "fields", "copy_to", "boost", "ignore_above", "norms", "format", "analyzer", "search_analyzer",
    "similarity", "eager_global_ordinals", "index_options", "scaling_factor", "time_series_metric",
    "time_series_dimension", "properties", "dynamic", "enabled", "subobjects", "value",
    "split_queries_on_whitespace", "normalizer", "locale", "term_vector", "position_increment_gap"}
MAPPING_ROOT_PARAMETERS = {
    "properties", "dynamic", "dynamic_templates", "_meta", "_source", "_routing", "date_detection",
    "numeric_detection", "dynamic_date_formats", "enabled", "subobjects", "runtime"}
INVALID_INDEX_CHARS = set('\\/*?"<>| ,#:')
ISO_DATE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"(Z|[+-]\d{2}:?\d{2})?$")


class EsError(Exception):
    """An error answered the way Elasticsearch answers it."""

    def __init__(self, status, error_type, reason, **extra):
        super().__init__(reason)
        self.status, self.type, self.reason, self.extra = status, error_type, reason, extra

    def cause(self):
        cause = {"type": self.type, "reason": self.reason}
        cause.update(self.extra)
        return cause

    def body(self):
        error = {"root_cause": [self.cause()]}
        error.update(self.cause())
        return {"error": error, "status": self.status}


def index_not_found(name):
    return EsError(404, "index_not_found_exception", f"no such index [{name}]",
                   **{"resource.type": "index_or_alias", "resource.id": name, "index_uuid": "_na_",
                      "index": name})


def validate_index_name(name):
    def invalid(why):
        return EsError(400, "invalid_index_name_exception", f"Invalid index name [{name}], {why}",
                       index_uuid="_na_", index=name)
    if not name:
        raise invalid("must not be empty")
    if name != name.lower():
        raise invalid("must be lowercase")
    bad = sorted(INVALID_INDEX_CHARS & set(name))
    if bad:
        raise invalid(f"must not contain the following characters {bad}")
    if name[0] in "_-+":
        raise invalid("must not start with '_', '-', or '+'")
    if name in (".", ".."):
        raise invalid("must not be '.' or '..'")
    if len(name.encode()) > 255:
        raise invalid("index name is too long, (" + str(len(name.encode())) + " > 255)")


def parse_date_millis(value):
    """Epoch milliseconds of an ISO 8601 date or an epoch_millis number; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if not isinstance(value, str):
        return None
    if re.fullmatch(r"-?\d+", value) and len(value) > 4:
        return int(value)
    match = ISO_DATE.match(value)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                                   int(second or 0), tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    millis = int(moment.timestamp()) * 1000 + int((fraction or "0").ljust(9, "0")[:3])
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        millis -= sign * (int(digits[:2]) * 60 + int(digits[2:])) * 60000
    return millis


def glob_overlap(first, second):
    """True when some string matches both patterns (`*` wildcards only): a product of the two
    patterns' automata, searched for a common accepting state."""
    def closure(pattern, positions):
        reached = set()
        for i in positions:
            reached.add(i)
            while i < len(pattern) and pattern[i] == "*":
                i += 1
                reached.add(i)
        return frozenset(reached)

    def step(pattern, positions, char):
        following = set()
        for i in positions:
            if i < len(pattern) and pattern[i] == "*":
                following.add(i)
            elif i < len(pattern) and pattern[i] == char:
                following.add(i + 1)
        return closure(pattern, following)

    alphabet = (set(first) | set(second)) - {"*"} | {"\0"}  # "\0": any other character
    start = (closure(first, {0}), closure(second, {0}))
    seen, todo = {start}, [start]
    while todo:
        a, b = todo.pop()
        if len(first) in a and len(second) in b:
            return True
        for char in alphabet:
            following = (step(first, a, char), step(second, b, char))
            if following[0] and following[1] and following not in seen:
                seen.add(following)
                todo.append(following)
    return False


def normalize_settings(settings):
    """Settings as ES answers them: nested under "index", values as strings."""
    flat = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat[prefix if prefix.startswith("index.") else "index." + prefix] = (
                json.dumps(value) if isinstance(value, bool) else str(value))
    walk("", settings or {})
    nested = {}
    for key, value in sorted(flat.items()):
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def validate_mapping(mapping, where=""):
    """Raises mapper_parsing_exception for what ES would refuse in a mapping."""
    if not isinstance(mapping, dict):
        raise EsError(400, "mapper_parsing_exception", "Root mapping definition has unsupported parameters")
    unknown = [k for k in mapping if k not in MAPPING_ROOT_PARAMETERS]
    if unknown and not where:
        raise EsError(400, "mapper_parsing_exception",
                      f"Root mapping definition has unsupported parameters:  [{unknown[0]} : "
                      f"{json.dumps(mapping[unknown[0]])}]")
    for name, field in (mapping.get("properties") or {}).items():
        validate_field(f"{where}{name}", field)
    for entry in mapping.get("dynamic_templates") or []:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise EsError(400, "mapper_parsing_exception", "A dynamic template must be defined with a name")
        (name, template), = entry.items()
        if "mapping" not in template:
            raise EsError(400, "mapper_parsing_exception",
                          f"Failed to parse mapping: dynamic template [{name}] has no mapping")
        mapping_type = template.get("match_mapping_type", "*")
        if mapping_type not in ("*", "string", "long", "double", "boolean", "date", "object", "binary"):
            raise EsError(400, "mapper_parsing_exception",
                          f"Failed to parse mapping: No field type matched on [{mapping_type}], possible "
                          "values are [object, string, long, double, boolean, date, binary]")


def validate_field(path, field):
    if not isinstance(field, dict):
        raise EsError(400, "mapper_parsing_exception",
                      f"Expected map for property [fields] on field [{path}] but got a class java.lang.String")
    field_type = field.get("type", "object" if "properties" in field else None)
    if field_type is None:
        raise EsError(400, "mapper_parsing_exception", f"No type specified for field [{path}]")
    if field_type not in LEAF_TYPES and field_type not in OBJECT_TYPES:
        raise EsError(400, "mapper_parsing_exception",
                      f"No handler for type [{field_type}] declared on field [{path}]")
    for parameter in field:
        if parameter not in FIELD_PARAMETERS:
            raise EsError(400, "mapper_parsing_exception",
                          f"unknown parameter [{parameter}] on mapper [{path}] of type [{field_type}]")
    meta = field.get("meta")
    if meta is not None:
        if not isinstance(meta, dict) or len(meta) > 5:
            raise EsError(400, "mapper_parsing_exception",
                          f"[meta] can't have more than 5 entries, but got {len(meta)} on field [{path}]")
        for key, value in meta.items():
            if len(key) > 20:
                raise EsError(400, "mapper_parsing_exception",
                              f"[meta] keys can't be longer than 20 chars, but got [{key}] for field [{path}]")
            if not isinstance(value, str):
                raise EsError(400, "mapper_parsing_exception",
                              f"[meta] values can only be strings, but got {type(value).__name__} "
                              f"[{value}] for field [{path}]")
            if len(value) > 50:
                raise EsError(400, "mapper_parsing_exception",
                              f"[meta] values can't be longer than 50 chars, but got [{value}] for field [{path}]")
    if field_type in OBJECT_TYPES:
        for name, inner in (field.get("properties") or {}).items():
            validate_field(f"{path}.{name}", inner)


class Index:
    def __init__(self, name, mappings, settings):
        self.name = name
        self.uuid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")[:22]
        self.mappings = mappings
        self.settings = settings
        self.docs = {}          # id -> {"source", "version", "seq_no"}
        self.searchable = {}    # the docs as of the last refresh
        self.seq_no = 0
        self.last_refresh = time.monotonic()

    def refresh(self):
        self.searchable = dict(self.docs)
        self.last_refresh = time.monotonic()


class Mapper:
    """Checks a document against an index's mappings and maps new fields, like ES does."""

    def __init__(self, index, doc_id):
        self.index, self.doc_id = index, doc_id
        self.updates = []  # (properties dict, name, field mapping) applied only if the doc is good

    def parse(self, source):
        if not isinstance(source, dict):
            raise EsError(400, "mapper_parsing_exception", "failed to parse, document is empty")
        root = self.index.mappings
        self.walk_object(root.setdefault("properties", {}), source, "", root.get("dynamic", True))
        for properties, name, mapping in self.updates:
            properties.setdefault(name, mapping)

    def failed(self, path, field_type, value):
        preview = value if not isinstance(value, dict) else "{" + ", ".join(
            f"{k}={v}" for k, v in value.items()) + "}"
        return EsError(400, "mapper_parsing_exception",
                       f"failed to parse field [{path}] of type [{field_type}] in document with id "
                       f"'{self.doc_id}'. Preview of field's value: '{preview}'")

    def walk_object(self, properties, source, prefix, dynamic):
        for raw_name, value in source.items():
            if raw_name == "" or raw_name.strip() == "":
                raise EsError(400, "mapper_parsing_exception",
                              "field name cannot be an empty string" if raw_name == "" else
                              "field name cannot contain only whitespace: [" + prefix + raw_name + "]")
            if raw_name.startswith(".") or raw_name.endswith(".") or ".." in raw_name:
                raise EsError(400, "mapper_parsing_exception",
                              f"object field starting or ending with a [.] makes object resolution "
                              f"ambiguous: [{raw_name}]")
            if not prefix and raw_name.startswith("_"):
                raise EsError(400, "mapper_parsing_exception",
                              f"Field [{raw_name}] is a metadata field and cannot be added inside a document. "
                              "Use the index API request parameters.")
            # "a.b.c": c inside object b inside object a.
            parts = raw_name.split(".")
            target, path = properties, prefix
            for part in parts[:-1]:
                path = f"{path}{part}"
                target = self.object_properties(target, part, path, dynamic, prefix + raw_name)
                path += "."
                if target is None:
                    break
            if target is None:
                continue
            self.field(target, parts[-1], f"{path}{parts[-1]}", value, dynamic)

    def object_properties(self, properties, name, path, dynamic, full_path):
        existing = properties.get(name) or self.pending(properties, name)
        if existing is not None:
            if existing.get("type", "object") not in OBJECT_TYPES:
                raise EsError(400, "mapper_parsing_exception",
                              f"Could not dynamically add mapping for field [{full_path}]. Existing "
                              f"mapping for [{path}] must be of type object but found [{existing['type']}].")
            return existing.setdefault("properties", {})
        if dynamic == "strict":
            raise EsError(400, "strict_dynamic_mapping_exception",
                          f"[{path}] dynamic introduction of [{name}] within [_doc] is not allowed")
        if dynamic is False or dynamic == "false":
            return None
        mapping = {"properties": {}}
        self.updates.append((properties, name, mapping))
        return mapping["properties"]

    def pending(self, properties, name):
        for target, pending_name, mapping in self.updates:
            if target is properties and pending_name == name:
                return mapping
        return None

    def field(self, properties, name, path, value, dynamic):
        if value is None:
            return
        if isinstance(value, list):
            for item in value:
                self.field(properties, name, path, item, dynamic)
            return
        mapping = properties.get(name) or self.pending(properties, name)
        if mapping is None:
            if dynamic == "strict":
                raise EsError(400, "strict_dynamic_mapping_exception",
                              f"[{path.rpartition('.')[0] or '_doc'}] dynamic introduction of [{name}] "
                              "within [_doc] is not allowed")
            if dynamic is False or dynamic == "false":
                return
            mapping = self.dynamic_mapping(name, path, value)
            self.updates.append((properties, name, mapping))
        field_type = mapping.get("type", "object")
        if field_type in OBJECT_TYPES:
            if not isinstance(value, dict):
                raise EsError(400, "mapper_parsing_exception",
                              f"object mapping for [{path}] tried to parse field [{name}] as object, but "
                              "found a concrete value")
            self.walk_object(mapping.setdefault("properties", {}), value, path + ".",
                             mapping.get("dynamic", dynamic))
            return
        if isinstance(value, dict):
            raise self.failed(path, field_type, value)
        self.check_value(path, field_type, mapping, value)

    def check_value(self, path, field_type, mapping, value):
        coerce = mapping.get("coerce", True)
        if field_type in INTEGER_TYPES or field_type in FLOAT_TYPES:
            number = value
            if isinstance(value, bool):
                raise self.failed(path, field_type, value)
            if isinstance(value, str):
                if not coerce:
                    raise self.failed(path, field_type, value)
                try:
                    number = float(value)
                except ValueError:
                    raise self.failed(path, field_type, value) from None
            if field_type in INTEGER_TYPES and isinstance(number, float):
                if not coerce and not number.is_integer():
                    raise self.failed(path, field_type, value)
                if abs(number) >= 2 ** 63:
                    raise self.failed(path, field_type, value)
        elif field_type in ("date", "date_nanos"):
            if parse_date_millis(value) is None:
                raise self.failed(path, field_type, value)
        elif field_type == "boolean":
            if value not in (True, False, "true", "false", ""):
                raise self.failed(path, field_type, value)

    def dynamic_mapping(self, name, path, value):
        if isinstance(value, bool):
            detected = "boolean"
        elif isinstance(value, int):
            detected = "long"
        elif isinstance(value, float):
            detected = "double"
        elif isinstance(value, dict):
            detected = "object"
        elif isinstance(value, str) and self.index.mappings.get("date_detection", True) and \
                ISO_DATE.match(value) and len(value) >= 10:
            detected = "date"
        else:
            detected = "string"
        for entry in self.index.mappings.get("dynamic_templates") or []:
            (_, template), = entry.items()
            if template.get("match_mapping_type", "*") not in ("*", detected):
                continue
            if "match" in template and not fnmatch.fnmatchcase(name, template["match"]):
                continue
            if "unmatch" in template and fnmatch.fnmatchcase(name, template["unmatch"]):
                continue
            if "path_match" in template and not fnmatch.fnmatchcase(path, template["path_match"]):
                continue
            if "path_unmatch" in template and fnmatch.fnmatchcase(path, template["path_unmatch"]):
                continue
            mapping = copy.deepcopy(template["mapping"])
            if "type" not in mapping or mapping["type"] == "{dynamic_type}":
                mapping["type"] = {"string": "text", "double": "float"}.get(detected, detected)
            return mapping
        return {
            "boolean": {"type": "boolean"},
            "long": {"type": "long"},
            "double": {"type": "float"},  # ES maps a JSON floating point number to float
            "object": {"properties": {}},
            "date": {"type": "date"},
            "string": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}},
        }[detected]


def field_mapping(mappings, path):
    """The mapping of a dotted field path (a `.keyword` sub-field included), or None."""
    properties = mappings.get("properties", {})
    parts = path.split(".")
    for i, part in enumerate(parts):
        field = properties.get(part)
        if field is None:
            return None
        if i == len(parts) - 1:
            return field
        if "properties" in field:
            properties = field["properties"]
        elif "fields" in field and i == len(parts) - 2:
            return field["fields"].get(parts[-1])
        else:
            return None
    return None


def source_values(source, path):
    """Every value at a dotted path in a _source (dotted names in the source count too)."""
    found = []

    def walk(node, rest):
        if not rest:
            found.extend(node if isinstance(node, list) else [node])
            return
        if isinstance(node, list):
            for item in node:
                walk(item, rest)
            return
        if not isinstance(node, dict):
            return
        for i in range(1, len(rest) + 1):
            key = ".".join(rest[:i])
            if key in node:
                walk(node[key], rest[i:])
    walk(source, path.split("."))
    return [v for v in found if v is not None]


class Searcher:
    """Queries, sorting and paging over the searchable documents of some indices."""

    def __init__(self, indices):
        self.indices = indices

    def resolve_field(self, index, path):
        # A multi-field ("host.keyword") reads the values of its parent field.
        parent, _, last = path.rpartition(".")
        base = field_mapping(index.mappings, parent) if parent else None
        if base is not None and last in base.get("fields", {}):
            return parent, base["fields"][last]
        return path, field_mapping(index.mappings, path)

    def term_matches(self, index, source, field, wanted):
        path, mapping = self.resolve_field(index, field)
        field_type = (mapping or {}).get("type", "keyword")
        for value in source_values(source, path):
            if field_type in INTEGER_TYPES | FLOAT_TYPES:
                try:
                    if float(value) == float(wanted):
                        return True
                except (TypeError, ValueError):
                    pass
            elif field_type in ("date", "date_nanos"):
                if parse_date_millis(value) == parse_date_millis(wanted):
                    return True
            elif field_type == "boolean":
                if str(value).lower() == str(wanted).lower():
                    return True
            elif field_type == "text":
                if str(wanted) in re.findall(r"\w+", str(value).lower()):
                    return True
            else:
                as_text = json.dumps(value) if isinstance(value, bool) else str(value)
                wanted_text = json.dumps(wanted) if isinstance(wanted, bool) else str(wanted)
                if as_text == wanted_text:
                    return True
        return False

    def matches(self, index, doc_id, source, query):
        if not query:
            return True
        if not isinstance(query, dict) or len(query) != 1:
            raise EsError(400, "parsing_exception", "[_na] query malformed, must start with start_object",
                          line=1, col=1)
        (kind, body), = query.items()
        if kind == "match_all":
            return True
        if kind == "match_none":
            return False
        if kind == "term":
            (field, wanted), = body.items()
            if isinstance(wanted, dict):
                wanted = wanted.get("value")
            return self.term_matches(index, source, field, wanted)
        if kind == "terms":
            fields = [(k, v) for k, v in body.items() if k != "boost"]
            (field, wanted), = fields
            return any(self.term_matches(index, source, field, w) for w in wanted)
        if kind == "ids":
            return doc_id in body.get("values", [])
        if kind == "exists":
            return bool(source_values(source, body["field"]))
        if kind == "bool":
            def clauses(name):
                value = body.get(name, [])
                return value if isinstance(value, list) else [value]
            if not all(self.matches(index, doc_id, source, q) for q in clauses("must") + clauses("filter")):
                return False
            if any(self.matches(index, doc_id, source, q) for q in clauses("must_not")):
                return False
            should = clauses("should")
            minimum = body.get("minimum_should_match", 1 if should and not (
                clauses("must") or clauses("filter")) else 0)
            return sum(self.matches(index, doc_id, source, q) for q in should) >= int(minimum)
        raise EsError(400, "parsing_exception", f"unknown query [{kind}]", line=1, col=14)

    def hits(self, query):
        found = []
        for index in self.indices:
            for doc_id, doc in index.searchable.items():
                if self.matches(index, doc_id, doc["source"], query):
                    found.append((index, doc_id, doc))
        return found

    def sort_spec(self, sort):
        if sort is None:
            return []
        if isinstance(sort, (str, dict)):
            sort = [sort]
        spec = []
        for item in sort:
            if isinstance(item, str):
                field, _, order = item.partition(":")
                spec.append((field, order or ("desc" if field == "_score" else "asc")))
            else:
                (field, how), = item.items()
                order = how if isinstance(how, str) else how.get("order", "asc")
                spec.append((field, order))
        return spec

    def sort_value(self, index, doc_id, doc, field):
        if field == "_doc":
            return doc["seq_no"]
        if field == "_id":
            return doc_id
        if field == "_score":
            return 1.0
        path, mapping = self.resolve_field(index, field)
        if mapping is None:
            raise EsError(400, "query_shard_exception", f"No mapping found for [{field}] in order to sort on",
                          index_uuid=index.uuid, index=index.name)
        field_type = mapping.get("type")
        values = source_values(doc["source"], path)
        if not values:
            return None
        if field_type in ("date", "date_nanos"):
            return min(parse_date_millis(v) for v in values)
        if field_type in INTEGER_TYPES:
            return min(int(float(v)) for v in values)
        if field_type in FLOAT_TYPES:
            return min(float(v) for v in values)
        if field_type == "text":
            raise EsError(400, "illegal_argument_exception",
                          f"Text fields are not optimised for operations that require per-document field "
                          f"data like aggregations and sorting, so these operations are disabled by default. "
                          f"Please use a keyword field instead. Alternatively, set fielddata=true on [{field}] "
                          "in order to load field data by uninverting the inverted index. Note that this can "
                          "use significant memory.")
        return min(str(v) for v in values)

    def sorted_hits(self, found, spec):
        order = {id(index): i for i, index in enumerate(self.indices)}
        found.sort(key=lambda hit: (order[id(hit[0])], hit[2]["seq_no"]))
        if not spec:
            return found, False
        keyed = [(hit, [self.sort_value(hit[0], hit[1], hit[2], f) for f, _ in spec]) for hit in found]
        for position in reversed(range(len(spec))):
            descending = spec[position][1] == "desc"
            present = [k for k in keyed if k[1][position] is not None]
            missing = [k for k in keyed if k[1][position] is None]
            present.sort(key=lambda k: k[1][position], reverse=descending)
            keyed = present + missing  # missing values sort last either way
        return keyed, True


class State:
    """Everything the server holds, behind one lock."""

    def __init__(self):
        self.lock = threading.RLock()
        self.templates = {}
        self.indices = {}
        self.scrolls = {}
        self.requests = 0
        self.connections = 0
        self.tls_failures = 0
        self.log = []
        self.failures = []      # [{"count", "status", "path_contains"}]
        self.drops = []         # [{"count", "path_contains"}]
        self.item_failures = []  # [{"every", "status", "type", "reason", "limit", "seen", "failed"}]
        self.users = {}
        self.api_keys = set()

    def reset(self):
        with self.lock:
            self.templates.clear()
            self.indices.clear()
            self.scrolls.clear()
            self.log.clear()
            self.failures.clear()
            self.drops.clear()
            self.item_failures.clear()
            self.users.clear()
            self.api_keys.clear()
            self.requests = 0
            self.connections = 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "es-test-server"
    sys_version = ""
    timeout = 60  # an idle keep-alive connection is closed after this
    disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms delayed-ACK stall

    def setup(self):
        super().setup()
        with self.server.state.lock:
            self.server.state.connections += 1
            self.connection_number = self.server.state.connections

    def log_message(self, format, *args):  # noqa: A002 - quiet unless asked
        if self.server.verbose:
            sys.stderr.write("es-test-server: " + format % args + "\n")

    def do_GET(self):
        self.serve("GET")

    def do_HEAD(self):
        self.serve("HEAD")

    def do_POST(self):
        self.serve("POST")

    def do_PUT(self):
        self.serve("PUT")

    def do_DELETE(self):
        self.serve("DELETE")

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            body = b"".join(chunks)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        return body

    def serve(self, method):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        body = self.read_body()
        state = self.server.state
        if path.startswith("/_test/"):
            self.answer(method, 200, self.server.control(method, path, body))
            return
        entry = {"method": method, "path": path, "params": params, "connection": self.connection_number,
                 "headers": {k.lower(): v for k, v in self.headers.items()}, "status": None}
        with state.lock:
            state.requests += 1
            state.log.append(entry)
            drop = self.take(state.drops, path)
            failure = None if drop else self.take(state.failures, path)
        if drop:
            entry["dropped"] = True
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            if failure:
                entry["injected"] = True
                raise injected_error(failure["status"])
            self.check_auth(path)
            status, answer = self.server.route(method, path, params, body, self.headers, entry)
        except EsError as error:
            status, answer = error.status, error.body()
            if status == 401:
                self.extra_headers = [("WWW-Authenticate", 'Basic realm="security" charset="UTF-8"'),
                                      ("WWW-Authenticate", "ApiKey")]
        entry["status"] = status
        self.answer(method, status, answer)

    @staticmethod
    def take(rules, path):
        for rule in rules:
            if rule["count"] > 0 and rule["path_contains"] in path:
                rule["count"] -= 1
                return rule
        return None

    def check_auth(self, path):
        state = self.server.state
        if not state.users and not state.api_keys:
            return
        header = self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic" and state.users:
            try:
                user, _, password = base64.b64decode(value).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                user, password = None, None
            if user in state.users and state.users[user] == password:
                return
            raise EsError(401, "security_exception",
                          f"unable to authenticate user [{user}] for REST request [{path}]",
                          header={"WWW-Authenticate": ['Basic realm="security" charset="UTF-8"', "ApiKey"]})
        if scheme.lower() == "apikey" and state.api_keys:
            if value in state.api_keys:
                return
            raise EsError(401, "security_exception", "unable to authenticate with provided credentials and "
                          "anonymous access is not allowed for this request",
                          header={"WWW-Authenticate": ['Basic realm="security" charset="UTF-8"', "ApiKey"]})
        raise EsError(401, "security_exception", f"missing authentication credentials for REST request [{path}]",
                      header={"WWW-Authenticate": ['Basic realm="security" charset="UTF-8"', "ApiKey"]})

    def answer(self, method, status, answer):
        accept = self.headers.get("Accept", "")
        content_type = "application/json"
        if "application/vnd.elasticsearch+json" in accept:
            content_type = "application/vnd.elasticsearch+json;compatible-with=8"
        data = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("X-Elastic-Product", "Elasticsearch")
        for name, value in getattr(self, "extra_headers", []):
            self.send_header(name, value)
        self.extra_headers = []
        if answer is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)


def injected_error(status):
    if status == 429:
        return EsError(429, "es_rejected_execution_exception",
                       "rejected execution of coordinating operation [coordinating_and_primary_bytes=0, "
                       "replica_bytes=0, all_bytes=0, coordinating_operation_bytes=1, "
                       "max_coordinating_and_primary_bytes=1] (injected by the test)")
    if status == 503:
        return EsError(503, "cluster_block_exception",
                       "blocked by: [SERVICE_UNAVAILABLE/2/no master]; (injected by the test)")
    return EsError(status, "exception", f"injected failure with status {status}")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, tls_context=None, verbose=False):
        super().__init__(address, Handler)
        self.state = State()
        self.tls_context = tls_context
        self.verbose = verbose
        self.open_sockets = set()
        self.sockets_lock = threading.Lock()

    def finish_request(self, request, client_address):
        # The TLS handshake runs here, on the connection's own thread.
        if self.tls_context is not None:
            try:
                request = self.tls_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                with self.state.lock:
                    self.state.tls_failures += 1
                return
        with self.sockets_lock:
            self.open_sockets.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with self.sockets_lock:
                self.open_sockets.discard(request)
            if self.tls_context is not None:
                request.close()  # the plain socket under it is closed by shutdown_request

    def handle_error(self, request, client_address):
        if self.verbose:
            super().handle_error(request, client_address)

    def close_connections(self):
        with self.sockets_lock:
            for connection in list(self.open_sockets):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    # ---- test controls over HTTP -------------------------------------------------------------
    def control(self, method, path, body):
        request = json.loads(body) if body.strip() else {}
        state = self.state
        with state.lock:
            if path == "/_test/stats":
                return stats_of(state)
            if path == "/_test/fail":
                state.failures.append({"count": int(request.get("count", 1)),
                                       "status": int(request.get("status", 429)),
                                       "path_contains": request.get("path_contains", "")})
            elif path == "/_test/drop":
                state.drops.append({"count": int(request.get("count", 1)),
                                    "path_contains": request.get("path_contains", "")})
            elif path == "/_test/fail_items":
                state.item_failures.append(item_failure_rule(**request))
            elif path == "/_test/auth":
                state.users = dict(request.get("users", {}))
                state.api_keys = set(request.get("api_keys", []))
            elif path == "/_test/clear":
                state.failures.clear()
                state.drops.clear()
                state.item_failures.clear()
            elif path == "/_test/reset":
                state.reset()
            else:
                return {"error": f"unknown control {path}"}
        return {"acknowledged": True}

    # ---- the Elasticsearch API ---------------------------------------------------------------
    def route(self, method, path, params, body, headers, entry):
        parts = [p for p in path.split("/") if p]
        with self.state.lock:
            if not parts:
                if method in ("GET", "HEAD"):
                    return 200, None if method == "HEAD" else self.info()
                raise wrong_method(path, method, "GET, HEAD")
            if parts[0] == "_index_template":
                return self.index_template(method, path, parts[1:], body, headers)
            if parts[0] == "_search" and len(parts) == 2 and parts[1] == "scroll":
                return self.scroll(method, params, body, headers)
            # /_bulk, /_refresh, /_count, /_search or /<index>/<api>
            target = None
            if not parts[0].startswith("_"):
                target, parts = parts[0], parts[1:]
            api = parts[0] if parts else None
            if api == "_bulk":
                if method not in ("POST", "PUT"):
                    raise wrong_method(path, method, "POST, PUT")
                return self.bulk(target, params, body, headers, entry)
            if api == "_refresh":
                if method not in ("POST", "GET"):
                    raise wrong_method(path, method, "POST, GET")
                indices = self.resolve(target, params)
                for index in indices:
                    index.refresh()
                return 200, {"_shards": {"total": 2 * len(indices), "successful": len(indices), "failed": 0}}
            if api == "_count":
                if method not in ("POST", "GET"):
                    raise wrong_method(path, method, "POST, GET")
                return self.count(target, params, body, headers)
            if api == "_search":
                if method not in ("POST", "GET"):
                    raise wrong_method(path, method, "POST, GET")
                return self.search(target, params, body, headers)
            if api == "_mapping" and target is not None and method == "GET":
                return 200, {i.name: {"mappings": copy.deepcopy(i.mappings)} for i in self.resolve(target, params)}
            if api in ("_doc", "_create") and target is not None:
                return self.single_document(method, target, api, parts[1:], params, body, headers)
            if api is None and target is not None:
                return self.whole_index(method, target, params)
        raise EsError(400, "illegal_argument_exception", f"no handler found for uri [{path}] and method [{method}]")

    def info(self):
        return {"name": "es-test-server", "cluster_name": "fructosa-test",
                "cluster_uuid": "n0iUyVSuT7e3l2zMcjB6Cg", "version": dict(VERSION),
                "tagline": "You Know, for Search"}

    def index_template(self, method, path, parts, body, headers):
        templates = self.state.templates
        if method == "GET":
            pattern = parts[0] if parts else "*"
            names = [n for n in sorted(templates) if any(fnmatch.fnmatchcase(n, p) for p in pattern.split(","))]
            if parts and not names and "*" not in pattern:
                raise EsError(404, "resource_not_found_exception", f"index template matching [{pattern}] not found")
            return 200, {"index_templates": [{"name": n, "index_template": copy.deepcopy(templates[n])}
                                             for n in names]}
        if not parts:
            raise wrong_method(path, method, "GET")
        name = parts[0]
        if method == "DELETE":
            if name not in templates:
                raise EsError(404, "resource_not_found_exception", f"index_template [{name}] missing")
            del templates[name]
            return 200, {"acknowledged": True}
        if method not in ("PUT", "POST"):
            raise wrong_method(path, method, "DELETE, GET, POST, PUT")
        request = self.json_body(body, headers)
        patterns = request.get("index_patterns")
        if isinstance(patterns, str):
            patterns = [patterns]
        if not patterns:
            raise EsError(400, "action_request_validation_exception",
                          "Validation Failed: 1: index patterns are missing;")
        template = request.get("template") or {}
        unknown = [k for k in template if k not in ("settings", "mappings", "aliases", "lifecycle")]
        if unknown:
            raise EsError(400, "x_content_parse_exception", f"[1:2] [template] unknown field [{unknown[0]}]")
        if "mappings" in template:
            validate_mapping(template["mappings"])
        priority = int(request.get("priority", 0))
        for other_name, other in templates.items():
            if other_name == name or int(other.get("priority", 0)) != priority:
                continue
            overlapping = [p for p in patterns if any(glob_overlap(p, q) for q in other["index_patterns"])]
            if overlapping:
                raise EsError(400, "illegal_argument_exception",
                              f"index template [{name}] has index patterns {json_list(patterns)} matching patterns "
                              f"from existing templates [{other_name}] with patterns ({other_name} => "
                              f"{json_list(other['index_patterns'])}) that overlap with the same priority; this is "
                              "not allowed: this would make the template selection non-deterministic")
        stored = {"index_patterns": list(patterns)}
        if template:
            stored["template"] = copy.deepcopy(template)
            if "settings" in template:
                stored["template"]["settings"] = normalize_settings(template["settings"])
        stored["composed_of"] = list(request.get("composed_of", []))
        for key in ("priority", "version", "_meta", "data_stream", "allow_auto_create"):
            if key in request:
                stored[key] = copy.deepcopy(request[key])
        templates[name] = stored
        return 200, {"acknowledged": True}

    def template_for(self, index_name):
        best = None
        for name, template in self.state.templates.items():
            if any(fnmatch.fnmatchcase(index_name, p) for p in template["index_patterns"]):
                if best is None or template.get("priority", 0) > best.get("priority", 0):
                    best = template
        return best

    def index_for_write(self, name):
        validate_index_name(name)
        index = self.state.indices.get(name)
        if index is None:
            template = self.template_for(name) or {}
            body = template.get("template", {})
            index = Index(name, copy.deepcopy(body.get("mappings", {})), copy.deepcopy(body.get("settings", {})))
            self.state.indices[name] = index
        return index

    def resolve(self, expression, params, must_exist=True):
        """Indices named by a comma-separated list with wildcards (ES's rules for missing ones)."""
        indices = self.state.indices
        if expression in (None, "", "_all", "*"):
            return [indices[n] for n in sorted(indices) if not n.startswith(".")]
        found = []
        ignore_unavailable = params.get("ignore_unavailable") == "true"
        for part in expression.split(","):
            if "*" in part:
                found += [indices[n] for n in sorted(indices) if fnmatch.fnmatchcase(n, part)]
            elif part in indices:
                found.append(indices[part])
            elif must_exist and not ignore_unavailable:
                raise index_not_found(part)
        unique = []
        for index in found:
            if index not in unique:
                unique.append(index)
        return unique

    @staticmethod
    def json_body(body, headers, required=True):
        if not body.strip():
            if required:
                raise EsError(400, "parse_exception", "request body is required")
            return {}
        check_content_type(headers)
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise EsError(400, "x_content_parse_exception", f"[1:1] {error}") from None
        if not isinstance(value, dict):
            raise EsError(400, "x_content_parse_exception", "[1:1] request body must be an object")
        return value

    def bulk(self, default_index, params, body, headers, entry):
        check_content_type(headers)
        if body and not body.endswith(b"\n"):
            raise EsError(400, "illegal_argument_exception", "The bulk request must be terminated by a newline [\\n]")
        lines = body.split(b"\n")[:-1] if body else []
        started = time.monotonic()
        items, touched, position = [], [], 0
        entry["items"] = []
        while position < len(lines):
            if not lines[position].strip():
                position += 1
                continue
            try:
                action_line = json.loads(lines[position])
            except ValueError as error:
                raise EsError(400, "x_content_parse_exception", f"[1:1] Malformed action/metadata line "
                              f"[{position + 1}]: {error}") from None
            if not isinstance(action_line, dict) or len(action_line) != 1:
                raise EsError(400, "illegal_argument_exception",
                              f"Malformed action/metadata line [{position + 1}], expected START_OBJECT")
            (action, meta), = action_line.items()
            if action not in ("index", "create", "delete", "update"):
                raise EsError(400, "illegal_argument_exception",
                              f"Malformed action/metadata line [{position + 1}], expected one of [create, delete, "
                              f"index, update] but found [{action}]")
            position += 1
            source = None
            if action != "delete":
                if position >= len(lines):
                    raise EsError(400, "illegal_argument_exception", "The bulk request must be terminated by a "
                                  "newline [\\n]")
                try:
                    source = json.loads(lines[position])
                except ValueError as error:
                    raise EsError(400, "x_content_parse_exception", f"[1:1] {error}") from None
                position += 1
            index_name = meta.get("_index", default_index)
            if index_name is None:
                raise EsError(400, "action_request_validation_exception", "Validation Failed: 1: index is missing;")
            doc_id = meta.get("_id")
            if doc_id is None and action in ("delete", "update"):
                raise EsError(400, "action_request_validation_exception", "Validation Failed: 1: id is missing;")
            if doc_id is not None:
                doc_id = str(doc_id)
            if doc_id is not None and len(doc_id.encode()) > 512:
                raise EsError(400, "action_request_validation_exception", "Validation Failed: 1: id [" + doc_id +
                              "] is too long, must be no longer than 512 bytes but was: " +
                              str(len(doc_id.encode())) + ";")
            result = self.bulk_item(action, index_name, doc_id, source, touched)
            items.append({action: result})
            entry["items"].append({"action": action, "index": index_name, "id": result.get("_id", doc_id),
                                   "status": result["status"],
                                   "error": result.get("error", {}).get("type")})
        if params.get("refresh") in ("", "true", "wait_for"):
            for index in touched:
                index.refresh()
        errors = any("error" in next(iter(item.values())) for item in items)
        return 200, {"took": int((time.monotonic() - started) * 1000), "errors": errors, "items": items}

    def injected_item_failure(self, index_name):
        for rule in self.state.item_failures:
            if rule["index_contains"] not in index_name:
                continue
            if rule["limit"] is not None and rule["failed"] >= rule["limit"]:
                continue
            rule["seen"] += 1
            if rule["seen"] % rule["every"] == 0:
                rule["failed"] += 1
                return rule
        return None

    def bulk_item(self, action, index_name, doc_id, source, touched):
        try:
            rule = self.injected_item_failure(index_name)
            if rule:
                raise EsError(rule["status"], rule["type"], rule["reason"])
            if action == "update":
                raise EsError(400, "illegal_argument_exception", "update is not supported by this test server")
            result = self.write_document(action, index_name, doc_id, source)
            index = self.state.indices[index_name]
            if index not in touched:
                touched.append(index)
            return result
        except EsError as error:
            cause = error.cause()
            index = self.state.indices.get(index_name)
            if index is not None and error.status != 429:
                cause.update({"index_uuid": index.uuid, "shard": "0", "index": index_name})
            result = {"_index": index_name, "status": error.status, "error": cause}
            if doc_id is not None:
                result["_id"] = doc_id
            return result

    def write_document(self, action, index_name, doc_id, source):
        index = self.index_for_write(index_name)
        if action == "delete":
            existing = index.docs.pop(doc_id, None)
            index.seq_no += 1
            return {"_index": index_name, "_id": doc_id, "_version": (existing or {"version": 0})["version"] + 1,
                    "result": "deleted" if existing else "not_found", "_shards": shards(),
                    "_seq_no": index.seq_no - 1, "_primary_term": 1, "status": 200 if existing else 404}
        if doc_id is None:
            doc_id = base64.urlsafe_b64encode(secrets.token_bytes(15)).decode()
        existing = index.docs.get(doc_id)
        if action == "create" and existing is not None:
            raise EsError(409, "version_conflict_engine_exception",
                          f"[{doc_id}]: version conflict, document already exists (current version "
                          f"[{existing['version']}])", index_uuid=index.uuid, shard="0", index=index_name)
        Mapper(index, doc_id).parse(source)
        version = existing["version"] + 1 if existing else 1
        index.docs[doc_id] = {"source": source, "version": version, "seq_no": index.seq_no}
        index.seq_no += 1
        return {"_index": index_name, "_id": doc_id, "_version": version,
                "result": "updated" if existing else "created", "_shards": shards(),
                "_seq_no": index.seq_no - 1, "_primary_term": 1, "status": 200 if existing else 201}

    def single_document(self, method, index_name, api, rest, params, body, headers):
        doc_id = rest[0] if rest else None
        if method == "GET" and api == "_doc" and doc_id is not None:
            index = self.state.indices.get(index_name)
            if index is None:
                raise index_not_found(index_name)
            doc = index.docs.get(doc_id)
            if doc is None:
                return 404, {"_index": index_name, "_id": doc_id, "found": False}
            return 200, {"_index": index_name, "_id": doc_id, "_version": doc["version"], "_seq_no": doc["seq_no"],
                         "_primary_term": 1, "found": True, "_source": doc["source"]}
        if method == "DELETE" and api == "_doc" and doc_id is not None:
            result = self.write_document("delete", index_name, doc_id, None)
            status = result.pop("status")
            return status, result
        if method not in ("PUT", "POST") or (method == "PUT" and doc_id is None):
            raise wrong_method(f"/{index_name}/{api}", method, "POST")
        action = "create" if api == "_create" or params.get("op_type") == "create" else "index"
        source = self.json_body(body, headers)
        result = self.write_document(action, index_name, doc_id, source)
        if params.get("refresh") in ("", "true", "wait_for"):
            self.state.indices[index_name].refresh()
        status = result.pop("status")
        return status, result

    def whole_index(self, method, index_name, params):
        if method in ("GET", "HEAD"):
            indices = self.resolve(index_name, params)
            if method == "HEAD":
                return 200, None
            return 200, {i.name: {"aliases": {}, "mappings": copy.deepcopy(i.mappings),
                                  "settings": {"index": {"uuid": i.uuid, "provided_name": i.name,
                                                         **copy.deepcopy(i.settings.get("index", {}))}}}
                         for i in indices}
        if method == "DELETE":
            for index in self.resolve(index_name, params):
                del self.state.indices[index.name]
            return 200, {"acknowledged": True}
        if method == "PUT":
            validate_index_name(index_name)
            if index_name in self.state.indices:
                raise EsError(400, "resource_already_exists_exception", f"index [{index_name}/"
                              f"{self.state.indices[index_name].uuid}] already exists", index=index_name)
            self.index_for_write(index_name)
            return 200, {"acknowledged": True, "shards_acknowledged": True, "index": index_name}
        raise wrong_method(f"/{index_name}", method, "DELETE, GET, HEAD, PUT")

    def auto_refresh(self, indices):
        # ES refreshes every index each second by default (index.refresh_interval = 1s).
        now = time.monotonic()
        for index in indices:
            if now - index.last_refresh >= 1.0:
                index.refresh()

    def query_of(self, params, body, headers):
        request = self.json_body(body, headers, required=False)
        unknown = [k for k in request if k not in (
            "query", "size", "from", "sort", "_source", "track_total_hits", "search_after", "track_scores",
            "seq_no_primary_term", "version")]
        if unknown:
            raise EsError(400, "parsing_exception", f"Unknown key for a START_OBJECT in [{unknown[0]}].",
                          line=1, col=len(unknown[0]) + 4)
        return request

    def count(self, target, params, body, headers):
        indices = self.resolve(target, params)
        request = self.query_of(params, body, headers)
        self.auto_refresh(indices)
        total = len(Searcher(indices).hits(request.get("query")))
        return 200, {"count": total, "_shards": {"total": len(indices), "successful": len(indices),
                                                 "skipped": 0, "failed": 0}}

    def search(self, target, params, body, headers):
        started = time.monotonic()
        indices = self.resolve(target, params)
        request = self.query_of(params, body, headers)
        self.auto_refresh(indices)
        size = int(params.get("size", request.get("size", 10)))
        start = int(params.get("from", request.get("from", 0)))
        if size < 0 or start < 0:
            raise EsError(400, "illegal_argument_exception", "[size] parameter cannot be negative")
        if "scroll" not in params and start + size > 10000:
            raise EsError(400, "illegal_argument_exception",
                          f"Result window is too large, from + size must be less than or equal to: [10000] but was "
                          f"[{start + size}]. See the scroll api for a more efficient way to request large data "
                          "sets. This limit can be set by changing the [index.max_result_window] index level "
                          "setting.")
        sort = request.get("sort")
        if "sort" in params:
            sort = params["sort"].split(",")
        searcher = Searcher(indices)
        spec = searcher.sort_spec(sort)
        found, sorted_by_field = searcher.sorted_hits(searcher.hits(request.get("query")), spec)
        hits = [self.hit(item, sorted_by_field, spec) for item in found]
        answer = {"took": int((time.monotonic() - started) * 1000), "timed_out": False,
                  "_shards": {"total": len(indices), "successful": len(indices), "skipped": 0, "failed": 0}}
        if "scroll" in params:
            scroll_id = base64.b64encode(secrets.token_bytes(24)).decode()
            self.state.scrolls[scroll_id] = {"hits": hits[start + size:], "size": size, "total": len(hits)}
            answer["_scroll_id"] = scroll_id
        answer["hits"] = self.hits_body(hits[start:start + size], len(hits), sorted_by_field)
        return 200, answer

    @staticmethod
    def hit(item, sorted_by_field, spec):
        if sorted_by_field:
            (index, doc_id, doc), values = item
        else:
            index, doc_id, doc = item
        hit = {"_index": index.name, "_id": doc_id, "_score": None if sorted_by_field else 1.0,
               "_source": copy.deepcopy(doc["source"])}
        if sorted_by_field:
            hit["sort"] = values
        return hit

    @staticmethod
    def hits_body(page, total, sorted_by_field):
        max_score = None if sorted_by_field or not page else 1.0
        return {"total": {"value": total, "relation": "eq"}, "max_score": max_score, "hits": page}

    def scroll(self, method, params, body, headers):
        request = self.json_body(body, headers, required=False)
        ids = request.get("scroll_id", params.get("scroll_id"))
        if method == "DELETE":
            ids = ids if isinstance(ids, list) else [ids] if ids else list(self.state.scrolls)
            freed = sum(1 for i in ids if self.state.scrolls.pop(i, None) is not None)
            return 200, {"succeeded": True, "num_freed": freed}
        if method not in ("GET", "POST"):
            raise wrong_method("/_search/scroll", method, "DELETE, GET, POST")
        scroll = self.state.scrolls.get(ids)
        if scroll is None:
            raise EsError(404, "search_phase_execution_exception", "all shards failed",
                          phase="query", grouped=True, failed_shards=[])
        page, scroll["hits"] = scroll["hits"][:scroll["size"]], scroll["hits"][scroll["size"]:]
        return 200, {"_scroll_id": ids, "took": 0, "timed_out": False,
                     "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                     "hits": self.hits_body(page, scroll["total"], bool(page and page[0]["_score"] is None))}


def shards():
    return {"total": 2, "successful": 1, "failed": 0}


def json_list(values):
    return "[" + ", ".join(values) + "]"


def wrong_method(path, method, allowed):
    return EsError(405, "method_not_allowed",
                   f"Incorrect HTTP method for uri [{path}] and method [{method}], allowed: [{allowed}]")


def check_content_type(headers):
    content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if content_type not in ("application/json", "application/x-ndjson", "application/vnd.elasticsearch+json",
                            "application/vnd.elasticsearch+x-ndjson"):
        # ES answers this one with a bare string as the error.
        raise ContentTypeError(content_type)


class ContentTypeError(EsError):
    def __init__(self, content_type):
        super().__init__(406, "content_type", f"Content-Type header [{content_type}] is not supported")

    def body(self):
        return {"error": self.reason, "status": 406}


def item_failure_rule(every=1, status=429, type=None, reason=None, limit=None, index_contains=""):  # noqa: A002
    if type is None:
        type = {429: "es_rejected_execution_exception", 400: "mapper_parsing_exception"}.get(status, "exception")
    if reason is None:
        reason = {429: "rejected execution of primary operation [coordinating_and_primary_bytes=0, "
                       "replica_bytes=0, all_bytes=0, primary_operation_bytes=1, "
                       "max_coordinating_and_primary_bytes=1] (injected by the test)",
                  400: "failed to parse (injected by the test)"}.get(status, "injected item failure")
    return {"every": int(every), "status": int(status), "type": type, "reason": reason,
            "limit": None if limit is None else int(limit), "index_contains": index_contains,
            "seen": 0, "failed": 0}


def stats_of(state):
    return {"requests": state.requests, "connections": state.connections, "tls_failures": state.tls_failures,
            "log": copy.deepcopy(state.log)}


class EsTestServer:
    """The server on a thread of the calling process: start(), the controls, stop()."""

    def __init__(self, host="127.0.0.1", port=0, certfile=None, keyfile=None, verbose=False):
        context = None
        if certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile, keyfile)
        self.server = Server((host, port), context, verbose)
        self.scheme = "https" if context else "http"
        self.thread = None

    @property
    def port(self):
        return self.server.server_address[1]

    @property
    def url(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self):
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="es-test-server", daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.close_connections()
        self.server.server_close()
        self.thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def state(self):
        return self.server.state

    def fail_next(self, count, status=429, path_contains=""):
        with self.state.lock:
            self.state.failures.append({"count": count, "status": status, "path_contains": path_contains})

    def drop_next(self, count, path_contains=""):
        with self.state.lock:
            self.state.drops.append({"count": count, "path_contains": path_contains})

    def fail_items(self, **rule):
        with self.state.lock:
            self.state.item_failures.append(item_failure_rule(**rule))

    def require_auth(self, users=None, api_keys=()):
        with self.state.lock:
            self.state.users = dict(users or {})
            self.state.api_keys = set(api_keys)

    def clear_failures(self):
        with self.state.lock:
            self.state.failures.clear()
            self.state.drops.clear()
            self.state.item_failures.clear()

    def pending_failures(self):
        """Injected failures not used up yet (request-level and item-level)."""
        with self.state.lock:
            return (sum(r["count"] for r in self.state.failures + self.state.drops) +
                    sum((r["limit"] or 0) - r["failed"] for r in self.state.item_failures))

    def stats(self):
        with self.state.lock:
            return stats_of(self.state)

    def reset(self):
        self.state.reset()

    def documents(self, pattern="*"):
        """{(index, id): source} of every stored document (refreshed or not)."""
        with self.state.lock:
            return {(name, doc_id): copy.deepcopy(doc["source"])
                    for name, index in self.state.indices.items() if fnmatch.fnmatchcase(name, pattern)
                    for doc_id, doc in index.docs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument("--certfile", help="serve HTTPS with this PEM certificate chain")
    parser.add_argument("--keyfile", help="the certificate's private key (PEM)")
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")
    args = parser.parse_args()
    server = EsTestServer(args.host, args.port, args.certfile, args.keyfile, args.verbose)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    print(server.port, flush=True)
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
