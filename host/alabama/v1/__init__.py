"""Generated protobuf classes of the alabama.v1 schema (`alabama codegen`); never edit the *_pb2 modules.

protoc writes ``from alabama.v1 import surface_pb2`` style imports, which resolve here because the
host package is ``alabama``. Regenerate with ``alabama codegen``; CI runs ``alabama codegen --check``.
"""
