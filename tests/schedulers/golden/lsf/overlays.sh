#!/bin/bash
#BSUB -J train-abcd1234
#BSUB -Jd "tether:app=train;logs=%2Fshared%2Flogs%2Ftrain-abcd1234;roles=trainer%3A2%2Ceval%3A1;key=dag%2Frun%201%2Ftask"
#BSUB -q gpu-long
#BSUB -n 12
#BSUB -gpu "num=2"
#BSUB -cwd /shared/proj
#BSUB -o /shared/logs/train-abcd1234/lsf-%J.out
#BSUB -e /shared/logs/train-abcd1234/lsf-%J.err
#BSUB -G research
#BSUB -app ml
#BSUB -x
#BSUB -R "span[ptile=4] select[avx512]"

set -u
LOGS=/shared/logs/train-abcd1234
mkdir -p "$LOGS/trainer" "$LOGS/eval"
# the allocated hosts in order, one per replica ($LSB_MCPU_HOSTS: host slots ...)
read -r -a HOSTS <<< "$(echo "${LSB_MCPU_HOSTS:-localhost 1}" | awk '{for (i = 1; i <= NF; i += 2) printf "%s ", $i}')"
RANK0_HOST="${HOSTS[0]}"
PIDS=()
# trainer replica 0
( blaunch "${HOSTS[0 % ${#HOSTS[@]}]}" env LR=0.1 'HF_TOKEN=****' TETHER_ROLE_NAME=trainer TETHER_REPLICA_ID=0 TETHER_NUM_REPLICAS=2 "TETHER_RANK0_HOST=$RANK0_HOST" python -m train --rank 0 > "$LOGS/trainer/0.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/trainer/0.exit"; exit "$rc" ) &
PIDS+=($!)
# trainer replica 1
( blaunch "${HOSTS[1 % ${#HOSTS[@]}]}" env LR=0.1 'HF_TOKEN=****' TETHER_ROLE_NAME=trainer TETHER_REPLICA_ID=1 TETHER_NUM_REPLICAS=2 "TETHER_RANK0_HOST=$RANK0_HOST" python -m train --rank 1 > "$LOGS/trainer/1.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/trainer/1.exit"; exit "$rc" ) &
PIDS+=($!)
# eval replica 0
( blaunch "${HOSTS[2 % ${#HOSTS[@]}]}" env TETHER_ROLE_NAME=eval TETHER_REPLICA_ID=0 TETHER_NUM_REPLICAS=1 "TETHER_RANK0_HOST=$RANK0_HOST" python eval.py 'it'"'"'s' > "$LOGS/eval/0.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/eval/0.exit"; exit "$rc" ) &
PIDS+=($!)
# exit with the first failure of the 3 replica(s); LSF ends the other tasks
FAIL=0
for _ in "${PIDS[@]}"; do
    wait -n; rc=$?
    if [ "$rc" -ne 0 ]; then FAIL=$rc; break; fi
done
for f in "$LOGS"/*/*.exit; do
    [ -e "$f" ] || continue; c=$(cat "$f")
    r=${f#"$LOGS"/}; r=${r%.exit}
    [ "$c" = 0 ] || echo "tether: replica $r exited with code $c" >&2
done
exit "$FAIL"
