"""Ansible connection plugin ``netns``: each inventory host is a network namespace of the
machine Ansible runs on (``ip netns list``), reached by ``ip netns exec``.

pfc's roll-out test (tests/deploy/test_fleet.py) runs the role against several such
"hosts": their own network stack and kernel state (nft tables, iptables rules, XDP and
tc programs) as separate machines would have, with the file system shared, so each
host's pfc directories are set per host in the inventory (``pfc_config``,
``pfc_lib_dir``, ``pfc_state_dir``). Needs root (``ip netns exec``). Usage::

    # inventory
    pfc:
      hosts:
        edge1: {pfc_config: /srv/edge1/etc/pfc.conf, ...}
      vars: {ansible_connection: netns}

The namespace's name is the host's ``ansible_host`` (default: its inventory name); a
namespace that does not exist makes the host unreachable, as a machine that is down.
Files are copied as by the ``local`` connection, which this extends.
"""

from __future__ import annotations

import os
import shlex

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection.local import Connection as LocalConnection

DOCUMENTATION = """
    name: netns
    short_description: run tasks in a network namespace of the controller (ip netns exec)
    description:
        - Each host is a network namespace of the machine Ansible runs on; commands run
          through C(ip netns exec NAME), files are copied locally (the file system is shared).
        - NAME is the host's C(ansible_host), else its inventory name.
    author: pfc
    options:
        become_success_timeout:
            type: int
            default: 10
            description: As for the local connection.
            vars:
                - name: ansible_local_become_success_timeout
        become_strip_preamble:
            type: bool
            default: true
            description: As for the local connection.
            vars:
                - name: ansible_local_become_strip_preamble
    extends_documentation_fragment:
        - connection_pipelining
"""

NETNS_DIR = "/run/netns"


class Connection(LocalConnection):
    """The local connection, every command prefixed with ``ip netns exec NAME``."""

    transport = "netns"

    @property
    def netns(self) -> str:
        return self._play_context.remote_addr

    def _connect(self):
        name = self.netns
        if not name or "/" in name or not os.path.exists(os.path.join(NETNS_DIR, name)):
            raise AnsibleConnectionFailure(
                f"network namespace {name!r} does not exist (ip netns list)")
        return super()._connect()

    def exec_command(self, cmd, in_data=None, sudoable=True):
        return super().exec_command(f"ip netns exec {shlex.quote(self.netns)} {cmd}",
                                    in_data=in_data, sudoable=sudoable)
