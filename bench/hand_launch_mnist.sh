#!/usr/bin/env bash
# The MNIST replica job (1 ps, 2 workers) launched by hand, the way one would
# without tfrun: pick three free ports, start the ps and both workers, wait for
# the workers, then kill the ps (it never exits by itself).
#
#   bench/hand_launch_mnist.sh [extra mnist_replica.py flags, e.g. --train_steps 200]
#
# PYTHON picks the interpreter (default python3). The workers' output goes to
# this script's stdout, the ps's to PS_LOG (default /dev/null). With
# OWN_SESSIONS=1 each task runs in a session of its own (setsid), as each task
# does under tfrun's local backend; on Linux with autogroup scheduling that
# also makes each task a scheduling group of its own. Exits with the first
# failing worker's status, else 0.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
example="$here/examples/mnist/mnist_replica.py"

# Bind port 0 three times at once and release: the kernel's choice of free ports.
read -r p0 p1 p2 < <("$python" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')

run=()
if [ "${OWN_SESSIONS:-0}" = 1 ]; then
    run=(setsid) # a background job is no group leader, so setsid execs in place: $! stays the task
fi

cluster=(--ps_hosts="127.0.0.1:$p0" --worker_hosts="127.0.0.1:$p1,127.0.0.1:$p2")

"${run[@]}" "$python" "$example" "${cluster[@]}" --job_name=ps --task_index=0 "$@" >"${PS_LOG:-/dev/null}" 2>&1 &
ps_pid=$!
trap 'kill "$ps_pid" 2>/dev/null || true' EXIT

"${run[@]}" "$python" "$example" "${cluster[@]}" --job_name=worker --task_index=0 "$@" 2>&1 &
w0=$!
"${run[@]}" "$python" "$example" "${cluster[@]}" --job_name=worker --task_index=1 "$@" 2>&1 &
w1=$!

status=0
wait "$w0" || status=$?
if [ "$status" -ne 0 ]; then
    kill "$w1" 2>/dev/null || true
fi
wait "$w1" || { s=$?; [ "$status" -ne 0 ] || status=$s; }

kill "$ps_pid" 2>/dev/null || true
wait "$ps_pid" 2>/dev/null || true
trap - EXIT
exit "$status"
