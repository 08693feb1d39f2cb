import asyncio

import pytest

from alabama.core.server import CoreServer
from alabama.core.testsat import TestSatellite


@pytest.fixture
def run():
    """Run an async test body on a fresh loop."""
    def _run(coro, timeout=60):
        return asyncio.run(asyncio.wait_for(coro, timeout))
    return _run


def make_server(tmp_path, **kw):
    kw.setdefault("port", 0)
    kw.setdefault("ping_interval", 0)
    return CoreServer(tmp_path / "core", host="127.0.0.1", **kw)


async def connect(srv, **kw):
    sat = TestSatellite("127.0.0.1", srv.port, **kw)
    await sat.connect()
    return sat
