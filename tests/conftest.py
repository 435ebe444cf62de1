import sys
from pathlib import Path

import pytest
import zmq

sys.path.insert(0, str(Path(__file__).parent))

from fleet import Fleet  # noqa: E402


@pytest.fixture
def fleet(tmp_path, request):
    """A :class:`fleet.Fleet` in a fresh directory; every process is stopped afterwards."""
    f = Fleet(tmp_path)
    yield f
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(f.logs())
    f.stop_all()


@pytest.fixture
def zctx():
    """A context for a test's own sockets, destroyed (linger 0) afterwards."""
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
