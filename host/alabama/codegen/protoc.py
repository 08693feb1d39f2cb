"""Run grpc_tools.protoc on the schema: pb2 sources and a descriptor set; it must not interpret them."""
import os
import pathlib
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

from . import CodegenError


def _well_known_include():
    import grpc_tools
    return str(pathlib.Path(grpc_tools.__file__).parent / "_proto")


def version():
    """The protoc version string of the installed grpcio-tools, e.g. 'libprotoc 31.1'."""
    r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "--version"], capture_output=True, text=True)
    return r.stdout.strip()


def run(include_root, files):
    """Compile ``files`` (paths relative to ``include_root``).

    Returns ``(pb2, fds)``: ``pb2`` maps protoc's output path (e.g. 'alabama/v1/envelope_pb2.py')
    to its text, ``fds`` is the FileDescriptorSet with imports included.
    """
    include_root = pathlib.Path(include_root)
    with tempfile.TemporaryDirectory(prefix="alabama-codegen-") as tmp:
        out = pathlib.Path(tmp) / "py"
        out.mkdir()
        fds_path = pathlib.Path(tmp) / "schema.pb"
        cmd = [sys.executable, "-m", "grpc_tools.protoc",
               "-I", str(include_root), "-I", _well_known_include(),
               "--python_out=" + str(out),
               "--descriptor_set_out=" + str(fds_path), "--include_imports"] + [str(f) for f in files]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(include_root))
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().replace(str(include_root) + os.sep, "")
            raise CodegenError("protoc refused the schema in %s: %s" % (include_root, msg))
        pb2 = {}
        for p in sorted(out.rglob("*.py")):
            pb2[p.relative_to(out).as_posix()] = p.read_text(encoding="utf-8")
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(fds_path.read_bytes())
    return pb2, fds
