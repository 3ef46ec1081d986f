#!/bin/bash
#BSUB -J hello-x.echo
#BSUB -Jd "tether:app=hello;logs=%2Fl%2Fhello-x;roles=echo%3A1;role=echo"
#BSUB -n 1
#BSUB -R "span[ptile=1]"
#BSUB -cwd /w
#BSUB -o /l/hello-x/lsf-%J.out
#BSUB -e /l/hello-x/lsf-%J.err

set -u
LOGS=/l/hello-x
mkdir -p "$LOGS/echo"
# the allocated hosts in order, one per replica ($LSB_MCPU_HOSTS: host slots ...)
read -r -a HOSTS <<< "$(echo "${LSB_MCPU_HOSTS:-localhost 1}" | awk '{for (i = 1; i <= NF; i += 2) printf "%s ", $i}')"
RANK0_HOST="${HOSTS[0]}"
PIDS=()
# echo replica 0
( blaunch "${HOSTS[0 % ${#HOSTS[@]}]}" env TETHER_ROLE_NAME=echo TETHER_REPLICA_ID=0 TETHER_NUM_REPLICAS=1 "TETHER_RANK0_HOST=$RANK0_HOST" echo hi > "$LOGS/echo/0.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/echo/0.exit"; exit "$rc" ) &
PIDS+=($!)
# exit with the first failure of the 1 replica(s); LSF ends the other tasks
FAIL=0
for _ in "${PIDS[@]}"; do
    wait -n; rc=$?
    if [ "$rc" -ne 0 ]; then FAIL=$rc; break; fi
done
for f in "$LOGS/echo"/*.exit; do
    [ -e "$f" ] || continue; c=$(cat "$f")
    r=${f#"$LOGS"/}; r=${r%.exit}
    [ "$c" = 0 ] || echo "tether: replica $r exited with code $c" >&2
done
exit "$FAIL"
