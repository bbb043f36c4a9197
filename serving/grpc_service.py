"""gRPC: TF Serving's PredictionService and ModelService, on the official servicers."""

from __future__ import annotations

import time

import grpc
from tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.errors import ServingError
from serving.responses import metadata_response, status_response
from serving.service import InferenceService
from serving.tensors import fill_proto, from_protos


def _version_and_label(model_spec) -> tuple[int | None, str | None]:
    choice = model_spec.WhichOneof("version_choice")
    if choice == "version":
        return model_spec.version.value, None
    if choice == "version_label":
        return None, model_spec.version_label
    return None, None


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict and GetModelMetadata; Classify, Regress and MultiInference are UNIMPLEMENTED."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service

    async def Predict(self, request, context):  # noqa: N802 - gRPC method name
        start = time.perf_counter()
        name = request.model_spec.name
        try:
            version, label = _version_and_label(request.model_spec)
            servable, signature = self.service.resolve(
                name, version, label, request.model_spec.signature_name
            )
            outputs = await self.service.predict(
                servable, signature, from_protos(request.inputs), request.output_filter
            )
        except ServingError as error:
            self.service.record(name, "predict", "GRPC", error.code.name, start)
            await context.abort(error.code, error.message)
        response = predict_pb2.PredictResponse()
        response.model_spec.name = name
        response.model_spec.version.value = servable.version
        response.model_spec.signature_name = signature.name
        for key, value in outputs.items():
            fill_proto(response.outputs[key], value)
        self.service.record(name, "predict", "GRPC", "OK", start)
        return response

    async def GetModelMetadata(self, request, context):  # noqa: N802
        fields = list(request.metadata_field)
        if fields != ["signature_def"]:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metadata_field must be exactly ['signature_def'], got {fields}",
            )
        try:
            version, label = _version_and_label(request.model_spec)
            servable = self.service.manager.resolve(request.model_spec.name, version, label)
        except ServingError as error:
            await context.abort(error.code, error.message)
        return metadata_response(servable)

    async def Classify(self, request, context):  # noqa: N802
        await _unimplemented(context, "Classify")

    async def Regress(self, request, context):  # noqa: N802
        await _unimplemented(context, "Regress")

    async def MultiInference(self, request, context):  # noqa: N802
        await _unimplemented(context, "MultiInference")


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """GetModelStatus, and HandleReloadConfigRequest: a new model_config_list (models,
    version policies, version labels) replaces the served one."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service

    async def GetModelStatus(self, request, context):  # noqa: N802
        try:
            version, label = _version_and_label(request.model_spec)
            statuses = self.service.manager.status(request.model_spec.name, version, label)
        except ServingError as error:
            await context.abort(error.code, error.message)
        return status_response(statuses)

    async def HandleReloadConfigRequest(self, request, context):  # noqa: N802
        which = request.config.WhichOneof("config")
        if which != "model_config_list":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"expected a ModelServerConfig with model_config_list, got {which or 'none'}",
            )
        try:
            await self.service.manager.reload(list(request.config.model_config_list.config))
        except ServingError as error:
            await context.abort(error.code, error.message)
        return model_management_pb2.ReloadConfigResponse()


async def _unimplemented(context, method: str) -> None:
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented by viable-serve; use Predict"
    )
