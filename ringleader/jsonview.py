"""Protobuf messages as plain JSON values (REST API, CLI -o json).

Unlike json_format.MessageToDict, 64-bit integers stay numbers and every field is present,
so clients and the OpenAPI schema see one stable shape. Enums become their names.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message


def to_json(msg: Message) -> dict:
    out = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = {k: to_json(v) if isinstance(v, Message) else v for k, v in value.items()}
        elif field.message_type is not None:
            if _is_repeated(field, value):
                out[field.name] = [to_json(v) for v in value]
            elif field.containing_oneof is not None and not msg.HasField(field.name):
                continue  # an unset oneof member (e.g. the other kinds of event) is left out
            else:
                out[field.name] = to_json(value)
        elif field.enum_type is not None:
            name = field.enum_type.values_by_number
            out[field.name] = [name[v].name for v in value] if _is_repeated(field, value) else name[value].name
        else:
            out[field.name] = list(value) if _is_repeated(field, value) else value
    return out


def _is_repeated(field: FieldDescriptor, value) -> bool:
    # FieldDescriptor.label is gone in protobuf 7; the value's type tells.
    return not isinstance(value, (str, bytes, int, float, bool, Message))
