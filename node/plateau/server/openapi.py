"""The OpenAPI document, completed where the routes parse their own input.

The data routes and ``PUT /admin/topics`` parse bodies and parameters
themselves (``params``, ``codecs``, ``routes_admin``), so FastAPI cannot
describe them. This fills in what a client or a fuzzer needs to produce
input that reaches the engine instead of a 400: the name rule on every
topic and partition, the JSON shapes of append bodies and cursors, time
bounds, operation ids, and links from creating a topic to using it (so that
schemathesis's stateful phase, and a reader of ``/docs``, see the flow).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from plateau import protocol
from plateau.protocol import JSON
from plateau.protocol.names import NAME_PATTERN, NAME_RULE
from plateau.protocol.replies import Records, TopicRecords
from plateau.protocol.topic_config import TopicConfigRequest

NAME_SCHEMA = {
    "type": "string",
    "pattern": f"^{NAME_PATTERN.pattern}$",
    "minLength": 1,
    "maxLength": 128,
    "description": NAME_RULE,
}
TIME_SCHEMA = {
    "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "integer", "minimum": 0, "maximum": 2**53},
    ],
}
RECORD = {
    "type": "object",
    "description": "One record. Each field keeps one JSON type across the records of a body "
    "(numbers shown here; strings, booleans and nested objects work the same way). `time`: "
    "epoch milliseconds; stamped with the arrival time when left out.",
    "properties": {"time": {"type": "integer", "minimum": 0, "maximum": 2**53}},
    "additionalProperties": {"type": "number"},
    "minProperties": 1,
}
RECORDS = {"type": "array", "items": RECORD, "minItems": 1, "maxItems": 1000}
APPEND_JSON = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"records": RECORDS},
            "required": ["records"],
            "additionalProperties": False,
        },
        RECORDS,
    ]
}
CURSOR = {
    "type": "object",
    "description": "The next index to read of each partition; `{}` starts at the oldest.",
    "propertyNames": NAME_SCHEMA,
    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 2**62},
}

EXAMPLES = {"topic": "events", "partition": "0"}
OPERATION_IDS = {
    ("get", protocol.TOPICS_PATH): "listTopics",
    ("get", protocol.TOPIC_PATH): "topicPartitions",
    ("post", protocol.APPEND_PATH): "appendRecords",
    ("get", protocol.READ_PARTITION_PATH): "readPartition",
    ("post", protocol.ITERATE_PATH): "iterateTopic",
    ("put", protocol.ADMIN_TOPIC_PATH): "putTopic",
    ("get", protocol.ADMIN_TOPIC_PATH): "getTopic",
    ("delete", protocol.ADMIN_TOPIC_PATH): "deleteTopic",
    ("get", protocol.ADMIN_NODE_PATH): "nodeUsage",
}

_TOPIC = {"topic": "$request.path.topic"}
TOPIC_LINKS = {
    "AppendRecords": {"operationId": "appendRecords", "parameters": {**_TOPIC, "partition": "0"}},
    "ReadPartition": {
        "operationId": "readPartition",
        "parameters": {**_TOPIC, "partition": "0", "start": 0},
    },
    "IterateTopic": {"operationId": "iterateTopic", "parameters": _TOPIC},
    "GetTopic": {"operationId": "getTopic", "parameters": _TOPIC},
    "TopicPartitions": {"operationId": "topicPartitions", "parameters": _TOPIC},
    "DeleteTopic": {"operationId": "deleteTopic", "parameters": _TOPIC},
}
APPEND_LINKS = {
    "ReadAppended": {
        "operationId": "readPartition",
        "parameters": {
            **_TOPIC,
            "partition": "$request.path.partition",
            "start": "$response.body#/span/start",
        },
    },
}


def complete(app: FastAPI) -> None:
    """Wrap ``app.openapi`` so the generated document gets the additions, once."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _completed(base())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _completed(schema: dict[str, Any]) -> dict[str, Any]:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    # models the routes describe by reference (the read replies' envelope form included)
    for cls in (TopicConfigRequest, Records, TopicRecords):
        model = cls.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model.pop("$defs", {}))
        components[cls.__name__] = model
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            op["operationId"] = OPERATION_IDS.get((method, path), op.get("operationId"))
            for param in op.get("parameters", []):
                if param["in"] == "path" and param["name"] in ("topic", "partition"):
                    param["schema"] = dict(NAME_SCHEMA)
                    param["example"] = EXAMPLES[param["name"]]
                elif param["name"] in ("time.start", "time.end"):
                    param["schema"] = dict(TIME_SCHEMA)
            content = op.get("requestBody", {}).get("content", {})
            if op["operationId"] == "appendRecords" and JSON in content:
                content[JSON]["schema"] = APPEND_JSON
            if op["operationId"] == "iterateTopic" and JSON in content:
                content[JSON]["schema"] = CURSOR
            links = {"putTopic": TOPIC_LINKS, "appendRecords": APPEND_LINKS}.get(op["operationId"])
            for status in ("200", "201"):
                if links and status in op.get("responses", {}):
                    op["responses"][status]["links"] = links
    return schema
