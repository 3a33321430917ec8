"""libbpf through ctypes: open and load ELF objects, test-run programs, read maps.

Debian's ``libbpf.so.1`` (libbpf 1.1) does the ELF work; this module only marshals.
Every object is a context manager: leaving the block closes the object, which closes
every program and map file descriptor it owns (no fd leaks).

Errors become :class:`BpfError` (an ``OSError``) carrying errno, libbpf's own messages
(captured through ``libbpf_set_print``) and, when a program load fails, the verifier
log (libbpf retries a failed load with log level 1 into ``kernel_log_buf``).

Needs CAP_BPF (root) for loading and ``BPF_PROG_TEST_RUN``; Linux ≥ 5.18 for the
test-run options used here (``repeat``, data in/out). Limits of the test-run interface
(measured on Linux 6.18, see docs/ebpf.md and ``net/bpf/test_run.c``):

- skb programs (tc, socket filter) and XDP refuse ``data_size_in < ETH_HLEN`` (14)
  and more than ``PAGE_SIZE`` minus head- and tailroom (:data:`MAX_SKB_DATA`,
  :data:`MAX_XDP_DATA`) with ``EINVAL``;
- ``bpf_prog_test_run_skb`` runs ``eth_type_trans`` on the data: ``skb->protocol`` is
  the frame's EtherType, and for types that are not L2 programs (socket filters)
  ``skb->data`` points at the byte after the Ethernet header during the run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

LIBBPF = "libbpf.so.1"
LOG_SIZE = 1 << 22  # verifier log buffer: 4 MiB
# net/bpf/test_run.c: bpf_test_init() limits (x86-64, 4 KiB pages), measured.
MAX_SKB_DATA = 4096 - 64 - 320  # PAGE_SIZE - NET_SKB_PAD - SKB_DATA_ALIGN(shinfo)
MAX_XDP_DATA = 4096 - 256 - 320  # PAGE_SIZE - XDP_PACKET_HEADROOM - shinfo
MIN_DATA = 14  # ETH_HLEN

BPF_MAP_TYPE_PERCPU_ARRAY = 6
ENOTSUPP = 524  # the kernel's internal "operation not supported" (not in errno.h)
PERCPU_TYPES = frozenset((5, 6, 10, 29))  # PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU, PERCPU_CG


class BpfError(OSError):
    """A libbpf or kernel error: errno, what failed, libbpf's messages, verifier log."""

    def __init__(self, err: int, what: str, messages: str = "", log: str = ""):
        self.log = log
        self.messages = messages
        text = f"{what}: {os.strerror(err)}"
        if messages:
            text += "\n" + messages.rstrip()
        if log:
            text += "\n--- verifier log ---\n" + log.rstrip()
        super().__init__(err, text)

    def __str__(self) -> str:
        return self.strerror or ""


# ------------------------------------------------------------------------ the library

class OpenOpts(ctypes.Structure):
    """``struct bpf_object_open_opts`` of libbpf 1.1 (libbpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("object_name", ctypes.c_char_p),
                ("relaxed_maps", ctypes.c_bool), ("pin_root_path", ctypes.c_char_p),
                ("_attach_prog_fd", ctypes.c_uint32), ("kconfig", ctypes.c_char_p),
                ("btf_custom_path", ctypes.c_char_p), ("kernel_log_buf", ctypes.c_void_p),
                ("kernel_log_size", ctypes.c_size_t), ("kernel_log_level", ctypes.c_uint32)]


class BatchOpts(ctypes.Structure):
    """``struct bpf_map_batch_opts`` (bpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("elem_flags", ctypes.c_uint64),
                ("flags", ctypes.c_uint64)]


class TestRunOpts(ctypes.Structure):
    """``struct bpf_test_run_opts`` (bpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p),
                ("data_out", ctypes.c_void_p), ("data_size_in", ctypes.c_uint32),
                ("data_size_out", ctypes.c_uint32), ("ctx_in", ctypes.c_void_p),
                ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_messages = threading.local()


@_PRINT_FN
def _print(level: int, fmt: bytes, args: int) -> int:
    """libbpf's print callback: format with vsnprintf (va_list passed through as a
    pointer, x86-64 and arm64 ABI) and keep the text for the next error."""
    buf = ctypes.create_string_buffer(4096)
    _libc().vsnprintf(buf, len(buf), fmt, ctypes.c_void_p(args))
    sink = getattr(_messages, "lines", None)
    if sink is not None:
        sink.append(buf.value.decode(errors="replace"))
    return 0


@cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                               ctypes.c_void_p]
    return libc


_SIGNATURES = {
    "bpf_object__open_mem": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t,
                                               ctypes.POINTER(OpenOpts)]),
    "bpf_object__load": (ctypes.c_int, [ctypes.c_void_p]),
    "bpf_object__close": (None, [ctypes.c_void_p]),
    "bpf_object__next_program": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_void_p]),
    "bpf_object__next_map": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_void_p]),
    "bpf_program__name": (ctypes.c_char_p, [ctypes.c_void_p]),
    "bpf_program__fd": (ctypes.c_int, [ctypes.c_void_p]),
    "bpf_program__type": (ctypes.c_int, [ctypes.c_void_p]),
    "bpf_program__section_name": (ctypes.c_char_p, [ctypes.c_void_p]),
    "bpf_program__set_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "bpf_program__set_expected_attach_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "bpf_map__name": (ctypes.c_char_p, [ctypes.c_void_p]),
    "bpf_map__fd": (ctypes.c_int, [ctypes.c_void_p]),
    "bpf_map__type": (ctypes.c_int, [ctypes.c_void_p]),
    "bpf_map__key_size": (ctypes.c_uint32, [ctypes.c_void_p]),
    "bpf_map__value_size": (ctypes.c_uint32, [ctypes.c_void_p]),
    "bpf_map__max_entries": (ctypes.c_uint32, [ctypes.c_void_p]),
    "bpf_map__lookup_elem": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_size_t, ctypes.c_void_p,
                                            ctypes.c_size_t, ctypes.c_uint64]),
    "bpf_map__update_elem": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_size_t, ctypes.c_void_p,
                                            ctypes.c_size_t, ctypes.c_uint64]),
    "bpf_map_update_elem": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_uint64]),
    "bpf_map_update_batch": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.POINTER(ctypes.c_uint32),
                                            ctypes.POINTER(BatchOpts)]),
    "bpf_prog_test_run_opts": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(TestRunOpts)]),
    "libbpf_num_possible_cpus": (ctypes.c_int, []),
    "libbpf_set_print": (ctypes.c_void_p, [_PRINT_FN]),
    "libbpf_get_error": (ctypes.c_long, [ctypes.c_void_p]),
}


@cache
def lib() -> ctypes.CDLL:
    """libbpf.so.1 with argument and result types set; raises OSError if missing."""
    so = ctypes.CDLL(LIBBPF, use_errno=True)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(so, name)
        fn.restype, fn.argtypes = restype, argtypes
    so.libbpf_set_print(_print)
    return so


def typed(signatures: dict[str, tuple]) -> Callable[[], ctypes.CDLL]:
    """A ``lib()`` for a module with libbpf functions of its own: :func:`lib` with
    ``signatures`` (name: (restype, argtypes)) set on first use."""
    done: list[bool] = []

    def get() -> ctypes.CDLL:
        so = lib()
        if not done:
            for name, (restype, argtypes) in signatures.items():
                fn = getattr(so, name)
                fn.restype, fn.argtypes = restype, argtypes
            done.append(True)
        return so
    return get


class _Capture:
    """Collects libbpf's messages printed while the block runs (this thread)."""

    def __enter__(self) -> _Capture:
        self.lines: list[str] = []
        _messages.lines = self.lines
        return self

    def __exit__(self, *exc) -> None:
        _messages.lines = None

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _check(ret: int, what: str, messages: str = "", log: str = "") -> int:
    """libbpf 1.x returns -errno from int-returning calls."""
    if ret < 0:
        raise BpfError(-ret, what, messages, log)
    return ret


@cache
def num_possible_cpus() -> int:
    """How many values a per-CPU map lookup returns (``libbpf_num_possible_cpus``)."""
    return _check(lib().libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")


# --------------------------------------------------------------------- test-run results

@dataclass(frozen=True)
class TestRun:
    """One ``BPF_PROG_TEST_RUN``: the program's return value, the packet after the run
    and the mean duration of one repetition in nanoseconds (kernel-measured)."""

    __test__ = False  # not a pytest class
    retval: int
    data_out: bytes
    duration: int
    ctx_out: bytes = b""  # the context after the run (``ctx``: the same size)


class Program:
    """A loaded program of an :class:`Object` (its fd is owned by the object)."""

    def __init__(self, handle: int):
        self._handle = handle
        self.name = lib().bpf_program__name(handle).decode()
        self.type = lib().bpf_program__type(handle)

    @property
    def fd(self) -> int:
        return _check(lib().bpf_program__fd(self._handle), f"program {self.name}: fd")

    def test_run(self, data: bytes, repeat: int = 1, out_size: int | None = None,
                 ctx: bytes | None = None) -> TestRun:
        """``bpf_prog_test_run_opts`` on ``data``; ``repeat`` ≥ 1 runs it that many
        times (duration is the mean). ``ctx``: the program's context to start from
        (``struct __sk_buff``: ``mark``, ``ifindex``, ``ingress_ifindex``; ``struct
        xdp_md``: ``ingress_ifindex``, ``data_end``; ``struct nf_hook_state``: ``hook``,
        ``pf``), read back into ``ctx_out``. Raises BpfError (EINVAL for data the
        test-run interface refuses, see the module docstring)."""
        size = out_size if out_size is not None else len(data) + 4096
        data_in = ctypes.create_string_buffer(data, len(data))
        data_out = ctypes.create_string_buffer(size)
        opts = TestRunOpts(sz=ctypes.sizeof(TestRunOpts),
                           data_in=ctypes.cast(data_in, ctypes.c_void_p),
                           data_out=ctypes.cast(data_out, ctypes.c_void_p),
                           data_size_in=len(data), data_size_out=size, repeat=repeat)
        if ctx is not None:
            ctx_in = ctypes.create_string_buffer(ctx, len(ctx))
            ctx_out = ctypes.create_string_buffer(len(ctx))
            opts.ctx_in = ctypes.cast(ctx_in, ctypes.c_void_p)
            opts.ctx_out = ctypes.cast(ctx_out, ctypes.c_void_p)
            opts.ctx_size_in = opts.ctx_size_out = len(ctx)
        _check(lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)),
               f"test run of {self.name} on {len(data)} bytes")
        return TestRun(opts.retval, data_out.raw[:opts.data_size_out], opts.duration,
                       ctx_out.raw[:opts.ctx_size_out] if ctx is not None else b"")


class Map:
    """A map of a loaded :class:`Object`, read and written by integer key."""

    def __init__(self, handle: int):
        self._handle = handle
        so = lib()
        self.name = so.bpf_map__name(handle).decode()
        self.type = so.bpf_map__type(handle)
        self.key_size = so.bpf_map__key_size(handle)
        self.value_size = so.bpf_map__value_size(handle)
        self.max_entries = so.bpf_map__max_entries(handle)

    @property
    def percpu(self) -> bool:
        return self.type in PERCPU_TYPES

    @property
    def fd(self) -> int:
        return _check(lib().bpf_map__fd(self._handle), f"map {self.name}: fd")

    def _stride(self) -> int:
        """Per-CPU values are each rounded up to 8 bytes (kernel ``round_up(size, 8)``)."""
        return (self.value_size + 7) // 8 * 8

    def _buffer_size(self) -> int:
        return self._stride() * num_possible_cpus() if self.percpu else self.value_size

    def lookup(self, key: int) -> list[bytes]:
        """The value of ``key``: one entry per possible CPU for per-CPU maps, else one."""
        k = key.to_bytes(self.key_size, "little")
        buf = ctypes.create_string_buffer(self._buffer_size())
        _check(lib().bpf_map__lookup_elem(self._handle, k, len(k), buf, len(buf), 0),
               f"lookup in map {self.name}, key {key}")
        if not self.percpu:
            return [buf.raw]
        stride = self._stride()
        return [buf.raw[i * stride:i * stride + self.value_size]
                for i in range(num_possible_cpus())]

    def update(self, key: int, value: bytes) -> None:
        """Set ``key`` to ``value`` (on every CPU for per-CPU maps)."""
        if len(value) != self.value_size:
            raise ValueError(f"map {self.name}: value must be {self.value_size} bytes")
        k = key.to_bytes(self.key_size, "little")
        copies = num_possible_cpus() if self.percpu else 1
        raw = b"".join(value.ljust(self._stride() if self.percpu else len(value), b"\0")
                       for _ in range(copies))
        buf = ctypes.create_string_buffer(raw, len(raw))
        _check(lib().bpf_map__update_elem(self._handle, k, len(k), buf, len(raw), 0),
               f"update of map {self.name}, key {key}")

    def update_bytes(self, key: bytes, value: bytes) -> None:
        """Set the entry of a raw ``key`` (``key_size`` bytes, e.g. an LPM_TRIE key)."""
        self.update_batch(key, value)

    def update_batch(self, keys: bytes, values: bytes) -> None:
        """Set many entries: ``keys`` and ``values`` concatenated, ``key_size`` and
        ``value_size`` bytes each. One ``BPF_MAP_UPDATE_BATCH`` call when the map type
        has it (LPM_TRIE and ARRAY do on Linux 6.18: 100k LPM entries in 0.11 s); one
        update per entry otherwise (EINVAL / ENOTSUPP from the batch call: 0.32 s for
        the same 100k; Linux 5.10 has no batch op for LPM_TRIE, docs/kernels.md)."""
        count = self._batch_count(keys, values)
        if count == 0:
            return
        kbuf = ctypes.create_string_buffer(keys, len(keys))
        vbuf = ctypes.create_string_buffer(values, len(values))
        n = ctypes.c_uint32(count)
        opts = BatchOpts(sz=ctypes.sizeof(BatchOpts))
        ret = lib().bpf_map_update_batch(self.fd, kbuf, vbuf, ctypes.byref(n),
                                         ctypes.byref(opts))
        if ret in (-errno.EINVAL, -ENOTSUPP, -errno.EOPNOTSUPP):
            # no batch op for this map type (LPM_TRIE before Linux 5.11?: 5.10 answers
            # ENOTSUPP and echoes the count it was given): one by one, which sets
            # every entry again (idempotent) whatever the batch call reported
            self._update_each(kbuf, vbuf, count)
            return
        _check(ret, f"batch update of map {self.name} ({n.value} of {count} done)")

    def _batch_count(self, keys: bytes, values: bytes) -> int:
        count, rest = divmod(len(keys), self.key_size)
        if rest or len(values) != count * self.value_size or self.percpu:
            raise ValueError(f"map {self.name}: {len(keys)} key bytes and {len(values)} "
                             f"value bytes are not whole {self.key_size}/{self.value_size}"
                             "-byte entries of one map that is not per CPU")
        return count

    def _update_each(self, kbuf, vbuf, count: int) -> None:
        fd, update = self.fd, lib().bpf_map_update_elem
        base_k, base_v = ctypes.addressof(kbuf), ctypes.addressof(vbuf)
        for i in range(count):
            _check(update(fd, base_k + i * self.key_size, base_v + i * self.value_size, 0),
                   f"update of map {self.name}, entry {i}")

    def sum_u64(self, key: int) -> tuple[int, ...]:
        """The value as little-endian u64 fields, summed over CPUs."""
        total = [0] * (self.value_size // 8)
        for value in self.lookup(key):
            for i in range(len(total)):
                total[i] += int.from_bytes(value[8 * i:8 * i + 8], "little")
        return tuple(total)

    def reset(self) -> None:
        """Zero every entry of an array map."""
        zero = bytes(self.value_size)
        for key in range(self.max_entries):
            self.update(key, zero)


NEW_SECTIONS = {"netfilter": (32, 45)}  # prog, attach type libbpf 1.1 lacks (Linux 6.4)


def _type_new_sections(handle: int) -> None:  # before load: the type by the section
    so, prog = lib(), None
    while prog := so.bpf_object__next_program(handle, prog):
        types = NEW_SECTIONS.get(so.bpf_program__section_name(prog).decode())
        if types and so.bpf_program__type(prog) == 0:  # BPF_PROG_TYPE_UNSPEC
            so.bpf_program__set_type(prog, types[0])
            so.bpf_program__set_expected_attach_type(prog, types[1])


class Object:
    """An ELF object opened from memory and loaded into the kernel.

    ``with Object(elf_bytes, "name") as obj:`` then ``obj.programs["xdp_pfc"]``,
    ``obj.maps["counters"]``. The block's end closes every fd.
    """

    def __init__(self, elf: bytes, name: str = "pfc", log_level: int = 0):
        self.name = name
        self.log_level = log_level  # 4 (BPF_LOG_STATS): ``log`` ends "processed N insns"
        self.log = ""
        self._elf = ctypes.create_string_buffer(elf, len(elf))
        self._log = ctypes.create_string_buffer(LOG_SIZE)
        self._handle: int | None = None
        self.programs: dict[str, Program] = {}
        self.maps: dict[str, Map] = {}
        self._open_and_load()

    def _open_and_load(self) -> None:
        so = lib()
        opts = OpenOpts(sz=ctypes.sizeof(OpenOpts), object_name=self.name.encode(),
                        kernel_log_buf=ctypes.cast(self._log, ctypes.c_void_p),
                        kernel_log_size=LOG_SIZE, kernel_log_level=self.log_level)
        with _Capture() as cap:
            handle = so.bpf_object__open_mem(self._elf, len(self._elf), ctypes.byref(opts))
            if not handle:
                raise BpfError(ctypes.get_errno() or errno.EINVAL,
                               f"cannot open BPF object {self.name}", cap.text)
            self._handle = handle
            _type_new_sections(handle)
            ret = so.bpf_object__load(handle)
        if ret < 0:
            log = self._log.value.decode(errors="replace")
            self.close()
            raise BpfError(-ret, f"cannot load BPF object {self.name}", cap.text, log)
        self.log = self._log.value.decode(errors="replace")
        self._collect()

    def _collect(self) -> None:
        so, prog, bmap = lib(), None, None
        while prog := so.bpf_object__next_program(self._handle, prog):
            p = Program(prog)
            self.programs[p.name] = p
        while bmap := so.bpf_object__next_map(self._handle, bmap):
            m = Map(bmap)
            self.maps[m.name] = m

    def close(self) -> None:
        if self._handle:
            lib().bpf_object__close(self._handle)
            self._handle = None
            self.programs.clear()
            self.maps.clear()

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> Object:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
