"""The sample suite of tests/integration/pytest_plugin: each test allocates
device memory through ctypes; check_pytest_plugin.py knows what each one's
peak, leaked bytes and growth must be (EXPECTED there), and finds the lines
marked "# line:NAME" to check that failures name them."""
import pytest

import devmem
from devmem import KiB, MiB


def test_uses_module_buffer(module_buffer):
    # Growth 1 MiB (the module fixture's), peak 512 KiB, nothing leaked.
    devmem.free(devmem.alloc(512 * KiB))


def test_frees_everything():
    a = devmem.alloc(3 * MiB)
    b = devmem.alloc(1 * MiB)
    devmem.free(a)
    devmem.free(b)


def test_leaks_two_mib():
    devmem.KEPT.append(devmem.alloc(2 * MiB))  # line:leak_unlimited


def test_freed_at_teardown(scratch):
    scratch.append(devmem.alloc(5 * MiB))


@pytest.mark.limit_device_memory("4 MiB")
def test_under_peak_limit():
    devmem.free(devmem.alloc(3 * MiB))


@pytest.mark.limit_device_memory("4 MiB")
def test_over_peak_limit():
    small = devmem.alloc(1 * MiB)
    big = devmem.alloc(5 * MiB)  # line:over_peak
    devmem.free(big)
    devmem.free(small)


@pytest.mark.limit_device_leaks("0 B")
def test_leak_over_limit():
    devmem.KEPT.append(devmem.alloc(1 * MiB))  # line:leak_over_limit


@pytest.mark.limit_device_leaks("0 B")
def test_no_leak_under_limit(scratch):
    # Held past the call, freed by the fixture's teardown; the module
    # fixture goes after this last test: growth -1 MiB.
    scratch.append(devmem.alloc(1 * MiB))
