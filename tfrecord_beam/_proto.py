"""tf.train.Example / SequenceExample message classes, built in a private descriptor pool.

TensorFlow registers `tensorflow.Example` in protobuf's default pool; registering it a second
time there fails. A private pool lets this package and TensorFlow live in one process.

Example or SequenceExample? The two messages share field 1 (`Example.features` and
`SequenceExample.context` are both `Features`), so every Example is also a valid
SequenceExample with only a context, and a SequenceExample parses as an Example with an unknown
field 2. `parse_record` therefore parses a record once as a SequenceExample: when it carries
field 2 (`feature_lists`, even an empty one) it is a SequenceExample record, otherwise an
Example record; when that parse fails it is parsed as an Example (the field-2 bytes may be some
other unknown field), and a record neither parse accepts is "invalid".
"""

from __future__ import annotations

from typing import Any, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError as _ProtoDecodeError

_LABEL_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_LABEL_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_T = descriptor_pb2.FieldDescriptorProto


def _field(msg, name, number, ftype, label=_LABEL_OPTIONAL, type_name=None, packed=None, oneof=None):
    field = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        field.type_name = type_name
    if packed is not None:
        field.options.packed = packed
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _map_entry(msg, entry_name, value_type):
    entry = msg.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _field(entry, "key", 1, _T.TYPE_STRING)
    _field(entry, "value", 2, _T.TYPE_MESSAGE, type_name=value_type)
    return entry


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="tfrecord_beam/example.proto", package="tensorflow", syntax="proto3")
    _field(f.message_type.add(name="BytesList"), "value", 1, _T.TYPE_BYTES, _LABEL_REPEATED)
    _field(f.message_type.add(name="FloatList"), "value", 1, _T.TYPE_FLOAT, _LABEL_REPEATED, packed=True)
    _field(f.message_type.add(name="Int64List"), "value", 1, _T.TYPE_INT64, _LABEL_REPEATED, packed=True)

    feature = f.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    _field(feature, "bytes_list", 1, _T.TYPE_MESSAGE, type_name=".tensorflow.BytesList", oneof=0)
    _field(feature, "float_list", 2, _T.TYPE_MESSAGE, type_name=".tensorflow.FloatList", oneof=0)
    _field(feature, "int64_list", 3, _T.TYPE_MESSAGE, type_name=".tensorflow.Int64List", oneof=0)

    features = f.message_type.add(name="Features")
    _map_entry(features, "FeatureEntry", ".tensorflow.Feature")
    _field(features, "feature", 1, _T.TYPE_MESSAGE, _LABEL_REPEATED, ".tensorflow.Features.FeatureEntry")

    feature_list = f.message_type.add(name="FeatureList")
    _field(feature_list, "feature", 1, _T.TYPE_MESSAGE, _LABEL_REPEATED, ".tensorflow.Feature")

    feature_lists = f.message_type.add(name="FeatureLists")
    _map_entry(feature_lists, "FeatureListEntry", ".tensorflow.FeatureList")
    _field(
        feature_lists,
        "feature_list",
        1,
        _T.TYPE_MESSAGE,
        _LABEL_REPEATED,
        ".tensorflow.FeatureLists.FeatureListEntry",
    )

    example = f.message_type.add(name="Example")
    _field(example, "features", 1, _T.TYPE_MESSAGE, type_name=".tensorflow.Features")

    seq = f.message_type.add(name="SequenceExample")
    _field(seq, "context", 1, _T.TYPE_MESSAGE, type_name=".tensorflow.Features")
    _field(seq, "feature_lists", 2, _T.TYPE_MESSAGE, type_name=".tensorflow.FeatureLists")
    return f


POOL = descriptor_pool.DescriptorPool()
POOL.Add(_build_file())


def _cls(name: str):
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(f"tensorflow.{name}"))


BytesList = _cls("BytesList")
FloatList = _cls("FloatList")
Int64List = _cls("Int64List")
Feature = _cls("Feature")
Features = _cls("Features")
FeatureList = _cls("FeatureList")
FeatureLists = _cls("FeatureLists")
Example = _cls("Example")
SequenceExample = _cls("SequenceExample")


EXAMPLE, SEQUENCE_EXAMPLE, INVALID = "Example", "SequenceExample", "invalid"


def parse_record(payload: bytes) -> Tuple[str, Any, Any]:
    """(record type, feature map of field 1, feature-list map or None); see the module docstring.

    The type is EXAMPLE, SEQUENCE_EXAMPLE or INVALID (both maps None then).
    """
    try:
        message = SequenceExample.FromString(payload)
    except _ProtoDecodeError:
        message = None
    if message is not None:
        if message.HasField("feature_lists"):
            return SEQUENCE_EXAMPLE, message.context.feature, message.feature_lists.feature_list
        return EXAMPLE, message.context.feature, None
    try:
        return EXAMPLE, Example.FromString(payload).features.feature, None
    except _ProtoDecodeError:
        return INVALID, None, None
