import pytest

import devmem


@pytest.fixture
def scratch():
    """Device buffers a test hands over, freed at its teardown: not a leak."""
    buffers = []
    yield buffers
    for ptr in buffers:
        devmem.free(ptr)


@pytest.fixture(scope="module")
def module_buffer():
    """Made in the setup of the first test that uses it (that test grows by
    it, without leaking it) and freed after the module's last test."""
    ptr = devmem.alloc(1 * devmem.MiB)
    yield ptr
    devmem.free(ptr)
