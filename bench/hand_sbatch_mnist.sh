#!/usr/bin/env bash
# The MNIST replica job (1 ps, 2 workers) as one hand-written Slurm batch job,
# the way one would write it without tfrun: three tasks of 1 CPU and 1 GiB in
# one allocation, three free ports picked on the batch node, each task a job
# step, the ps killed once both workers are done.
#
#   sbatch --output=FILE bench/hand_sbatch_mnist.sh [mnist_replica.py flags]
#
# PYTHON picks the interpreter (default python3). Like most such scripts it
# assumes its steps run on the batch node (a one-node allocation): on several
# nodes each task's host would come from `scontrol show hostnames`.
#SBATCH --ntasks=3
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=1024M
#SBATCH --job-name=hand-mnist
set -euo pipefail

python=${PYTHON:-python3}
example="$SLURM_SUBMIT_DIR/examples/mnist/mnist_replica.py"
host=$(hostname)

read -r p0 p1 p2 < <("$python" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("", 0))
print(*(s.getsockname()[1] for s in socks))
')
cluster=(--ps_hosts="$host:$p0" --worker_hosts="$host:$p1,$host:$p2")
step=(srun --ntasks=1 --nodes=1 --exact --cpus-per-task=1 --mem-per-cpu=1024M --quiet)

"${step[@]}" "$python" "$example" "${cluster[@]}" --job_name=ps --task_index=0 "$@" >/dev/null 2>&1 &
ps_pid=$!
"${step[@]}" "$python" "$example" "${cluster[@]}" --job_name=worker --task_index=0 "$@" 2>&1 &
w0=$!
"${step[@]}" "$python" "$example" "${cluster[@]}" --job_name=worker --task_index=1 "$@" 2>&1 &
w1=$!

status=0
wait "$w0" || status=$?
wait "$w1" || { s=$?; [ "$status" -ne 0 ] || status=$s; }
kill "$ps_pid" 2>/dev/null || true
wait "$ps_pid" 2>/dev/null || true
exit "$status"
