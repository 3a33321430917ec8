"""Read a ``BPF_MAP_TYPE_RINGBUF`` map through libbpf's ``ring_buffer__*`` (ctypes).

``RingBuffer(map_fd)`` reads records as ``bytes``: :meth:`~RingBuffer.drain` takes
what is there now (``ring_buffer__consume``), :meth:`~RingBuffer.poll` waits up to a
timeout for more (``ring_buffer__poll``: epoll on the map fd). The map fd is the
caller's (a loaded object's map, or one found by id with
:func:`pfc.kernel.bpf_attach.prog_map_fd`); libbpf mmaps the ring and duplicates
nothing, so the fd must stay open while the reader lives. :meth:`~RingBuffer.add`
reads more maps in the same stream (``pfc log`` on a device with XDP and tc).
``close()`` (or leaving the ``with`` block) frees libbpf's reader.
"""

from __future__ import annotations

import ctypes

from pfc.kernel import bpf
from pfc.kernel.bpf import BpfError

_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_SIGNATURES = {
    "ring_buffer__new": (ctypes.c_void_p, [ctypes.c_int, _SAMPLE_FN, ctypes.c_void_p,
                                           ctypes.c_void_p]),
    "ring_buffer__add": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, _SAMPLE_FN,
                                        ctypes.c_void_p]),
    "ring_buffer__poll": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ring_buffer__consume": (ctypes.c_int, [ctypes.c_void_p]),
    "ring_buffer__free": (None, [ctypes.c_void_p]),
}
_lib = bpf.typed(_SIGNATURES)


class RingBuffer:
    """The records of one ring buffer map, in the order the programs submitted them."""

    def __init__(self, map_fd: int):
        self._records: list[bytes] = []
        self._callback = _SAMPLE_FN(self._sample)  # kept: libbpf holds the pointer
        with bpf._Capture() as cap:
            handle = _lib().ring_buffer__new(map_fd, self._callback, None, None)
        if not handle:
            raise BpfError(ctypes.get_errno() or 22, f"ring_buffer__new on fd {map_fd}",
                           cap.text)
        self._handle: int | None = handle

    def add(self, map_fd: int) -> None:
        """Read another ring buffer map too (records of all come in one stream)."""
        ret = _lib().ring_buffer__add(self._handle, map_fd, self._callback, None)
        if ret < 0:
            raise BpfError(-ret, f"ring_buffer__add of fd {map_fd}")

    def _sample(self, ctx, data, size) -> int:
        self._records.append(ctypes.string_at(data, size))
        return 0

    def _take(self) -> list[bytes]:
        out, self._records = self._records, []
        return out

    def drain(self) -> list[bytes]:
        """Every record submitted so far and not read yet."""
        ret = _lib().ring_buffer__consume(self._handle)
        if ret < 0:
            raise BpfError(-ret, "ring_buffer__consume")
        return self._take()

    def poll(self, timeout_ms: int) -> list[bytes]:
        """Records, waiting up to ``timeout_ms`` for the first (EINTR: none)."""
        ret = _lib().ring_buffer__poll(self._handle, timeout_ms)
        if ret < 0 and ret != -4:  # -EINTR: a signal; the caller decides
            raise BpfError(-ret, "ring_buffer__poll")
        return self._take()

    def close(self) -> None:
        if self._handle:
            _lib().ring_buffer__free(self._handle)
            self._handle = None

    def __enter__(self) -> RingBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
