"""The guest's side of a session: a shell loop on the second serial port (raw mode).

The host writes ``ID.sh`` (the command), ``ID.cwd`` and ``ID.env`` into the exchange
folder and sends ``RUN ID TIMEOUT`` on the port; the agent runs the command under
``timeout`` with its output in ``ID.out`` and ``ID.err``, then answers ``DONE ID RC``.
``STOP`` (or the port closing) ends the agent, which powers the guest off (it is the
guest's process 1: should it die instead, the kernel panics and qemu, started with
``-no-reboot`` and ``panic=-1``, exits all the same). The
agent runs the host's own ``/bin/sh`` and tools (the guest's root is the host's).
"""

SCRIPT = r"""#!/bin/sh
X=$1
echo "pfc-lab: agent $(cat /proc/uptime)"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
ip link set lo up 2>/dev/null
PORT=/dev/ttyS1
stty -F "$PORT" raw -echo || { echo "pfc-lab: no control port"; exit 1; }
echo "pfc-lab: port $(cat /proc/uptime)"
exec 3<>"$PORT"
echo "READY $(uname -r)" >&3
while read -r verb id limit <&3; do
    case "$verb" in
    RUN)
        (
            cd "$(cat "$X/$id.cwd")" || exit 125
            set -a; . "$X/$id.env"; set +a
            exec timeout -k 5 "$limit" /bin/sh "$X/$id.sh"
        ) <"$X/$id.in" >"$X/$id.out" 2>"$X/$id.err"
        echo "DONE $id $?" >&3
        ;;
    STOP)
        break
        ;;
    esac
done
sync
echo o >/proc/sysrq-trigger
"""
