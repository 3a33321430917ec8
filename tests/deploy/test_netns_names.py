"""Names of network namespaces in records and messages (new-user finding m10): the
init namespace is ``default`` also where pid 1's ``/proc`` entry is out of reach (a
sandbox's init: EACCES even for root), and a namespace ``ip`` cannot name
(``netns-INODE``) is never offered to ``ip -n`` in a hint."""

from __future__ import annotations

import os

import pytest

from pfc.deploy import base


def _in_init_netns() -> bool:
    try:
        with open("/proc/2/comm") as f:
            kthreadd = f.read().strip() == "kthreadd"
        return kthreadd and os.stat("/proc/2/ns/net").st_ino == \
            os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False


@pytest.mark.skipif(not _in_init_netns(), reason="needs the init network namespace and "
                    "kthreadd's /proc entry (a container has neither)")
def test_the_init_namespace_is_default_when_pid_1_is_out_of_reach(monkeypatch):
    real = base._ns_inode

    def no_pid_1(path: str):
        return None if path.startswith("/proc/1/") else real(path)

    monkeypatch.setattr(base, "_ns_inode", no_pid_1)
    assert base.current_netns() == "default"
    assert base.netns_path("default") == "/proc/2/ns/net"
    assert base.netns_alive("default", None)


def test_a_device_hint_never_names_a_namespace_ip_does_not_know(monkeypatch):
    monkeypatch.setattr(base, "netns_path", lambda name: "/proc/4242/ns/net")
    with pytest.raises(base.LoadError) as info:
        base.ifindex("pfc-no-such-dev", "netns-4026531833")
    assert "ip -n netns-" not in info.value.hint
    assert "nsenter --net=/proc/4242/ns/net ip link" in info.value.hint
    monkeypatch.setattr(base, "netns_path", lambda name: None)
    with pytest.raises(base.LoadError) as info:
        base.ifindex("pfc-no-such-dev", "netns-4026531833")
    assert "ip -n netns-" not in info.value.hint and "no name in /run/netns" in info.value.hint
