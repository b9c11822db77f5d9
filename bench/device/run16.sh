#!/bin/bash
# On a lent machine of 16 cores or more (the device tool), after bench/device/bundle.sh here:
#     run(command="bash .dev/run16.sh 1200000 200 200", carry=[".dev"], timeout_s=430)
# The CPU-bound job at pool 1, 2, 4, 8 and 16 on 16 partitions (bench/cpu_scaling.py) and on one
# partition with factor = pool (bench/elasticity.py), each beside the machine's own N-process
# ceiling; about 5 minutes at 1,200,000 messages. Arguments: messages, and each bench's time limit
# in seconds. To $OUT: both benches' output (with each thread's share of the slices) and the
# containers' logs (with their metrics every 2 s: each worker's busy-ns, each task's queue).
# From the environment: POOLS (default 1,2,4,8,16), and CPU_ARGS and ELASTIC_ARGS, more arguments for
# each bench (e.g. --variant task.fetch.threshold=400000); a time limit of 0 skips that bench.
M=${1:-300000}; T1=${2:-90}; T2=${3:-90}; POOLS=${POOLS:-1,2,4,8,16}
set -o pipefail
start=$(date +%s)
tar -C / -xJf .dev/python.tar.xz || exit 3
mkdir -p /tmp/site && tar -C /tmp/site -xJf .dev/site.tar.xz || exit 3
tar -xJf .dev/extensions.tar.xz || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 BENCH_THREADS=1 BENCH_LOG_DIR=/tmp/bench-logs
export BENCH_FINISH_TIMEOUT_S=${BENCH_FINISH_TIMEOUT_S:-90}
mkdir -p "$BENCH_LOG_DIR"
PY=$(tar -tJf .dev/python.tar.xz | grep -m1 '/bin/python3')
PY=/$PY
nproc
$PY -c "import samzamp._ring, confluent_kafka, lmdb, msgspec, psutil; from samzamp.systems.kafka.embedded import tansu_binary; print('imports ok', tansu_binary())" || exit 4
echo "setup $(( $(date +%s) - start )) s"
if [ "$T1" != 0 ]; then
    # shellcheck disable=SC2086  # CPU_ARGS is a list of arguments
    timeout -k 5 "$T1" "$PY" bench/cpu_scaling.py --partitions 16 --pools "$POOLS" --messages "$M" \
        --set metrics.log.interval.ms=2000 $CPU_ARGS 2>&1 | tee "$OUT/cpu16.log"
    echo "cpu_scaling rc=$? at $(( $(date +%s) - start )) s"
fi
if [ "$T2" != 0 ]; then
    # shellcheck disable=SC2086
    timeout -k 5 "$T2" "$PY" bench/elasticity.py --pools "$POOLS" --messages "$M" \
        --set metrics.log.interval.ms=2000 $ELASTIC_ARGS 2>&1 | tee "$OUT/elastic16.log"
    echo "elasticity rc=$? at $(( $(date +%s) - start )) s"
fi
tar -C "$BENCH_LOG_DIR" -cJf "$OUT/container-logs.tar.xz" .
