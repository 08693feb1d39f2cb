"""`alabama codegen`: proto/alabama/v1 -> host pb2 modules + the firmware codec; never hand-edit output.

Pipeline (each step its own module): ``protoc`` runs grpc_tools.protoc (pb2 sources and a
descriptor set), ``options`` reads the nanopb-style bounds file, ``schema`` turns descriptors +
bounds into a checked model (refusing what the firmware codec does not support and computing
worst-case sizes from one table of wire facts), ``emit_firmware`` writes the MicroPython module,
and ``generate`` ties them together and compares against the committed files (``--check``).
"""
from ..errors import AlabamaError


class CodegenError(AlabamaError):
    """The schema, the options file or protoc refused: the message names the field/file to fix."""


class DriftError(AlabamaError):
    """A committed generated file differs from a fresh generation."""
