"""viable-serve: TF Serving's gRPC and REST protocols over exported viable_tf SavedModels.

Built on the official `tensorflow-serving-api` protos and servicers, so that the
same clients work against this server and against `tensorflow_model_server`.
"""
