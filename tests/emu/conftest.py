from pathlib import Path

from ..conftest import requires_emulator

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).parent == _HERE:
            item.add_marker(requires_emulator)
