"""The response messages both front ends build (gRPC sends them, REST writes them as
JSON): a model's metadata and its version statuses."""

from __future__ import annotations

from google.protobuf import any_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2


def metadata_response(servable) -> get_model_metadata_pb2.GetModelMetadataResponse:
    """GetModelMetadata's answer: the version's SignatureDefs (internal ones left out)."""
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = servable.name
    response.model_spec.version.value = servable.version
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    for key, signature_def in servable.signature_defs.items():
        if key.startswith("__"):  # internal signatures (e.g. __saved_model_init_op)
            continue
        signature_map.signature_def[key].CopyFrom(signature_def)
    packed = any_pb2.Any()
    packed.Pack(signature_map)
    response.metadata["signature_def"].CopyFrom(packed)
    return response


def status_response(statuses) -> get_model_status_pb2.GetModelStatusResponse:
    """GetModelStatus's answer from the manager's ModelVersionStatus protos."""
    return get_model_status_pb2.GetModelStatusResponse(model_version_status=statuses)
