"""Facts with one owner and a mirror elsewhere: each mirror is checked against its owner here (issue 27)."""
import alabama
from alabama.core import server


def test_core_default_port_has_one_value():
    # alabama.CORE_PORT feeds the CLIs without importing the server; the server's default must be the same
    assert server.DEFAULT_PORT == alabama.CORE_PORT
