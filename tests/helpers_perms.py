"""File permissions that hold for root too: ``.ci/run`` runs the suite as root, and root's DAC capabilities
(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER) let it write through any ``chmod``. Linux capabilities are
per thread, so :func:`permissions_enforced` clears those three from the calling thread's effective set (no
privilege is needed to drop one) and restores them after; threads started inside inherit the reduced set."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
_DAC = (1 << 1) | (1 << 2) | (1 << 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _capset(header: _Header, data: ctypes.Array[_Data]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


@contextmanager
def permissions_enforced() -> Iterator[None]:
    """Inside, this thread obeys file permission bits even as root."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _Header(_VERSION_3, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    saved = data[0].effective
    data[0].effective = saved & ~_DAC
    _capset(header, data)
    try:
        yield
    finally:
        data[0].effective = saved
        _capset(header, data)
