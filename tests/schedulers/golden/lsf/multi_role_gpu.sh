# ---- bsub < job train-abcd1234.trainer ----
#!/bin/bash
#BSUB -J train-abcd1234.trainer
#BSUB -Jd "tether:app=train;logs=%2Fshared%2Flogs%2Ftrain-abcd1234;roles=trainer%3A2%2Ceval%3A1;role=trainer;key=dag%2Frun%201%2Ftask"
#BSUB -q gpu
#BSUB -P ml
#BSUB -n 8
#BSUB -R "span[ptile=4] rusage[mem=2048] select[type==X86_64]"
#BSUB -gpu "num=2:mode=exclusive_process"
#BSUB -W 2:00
#BSUB -cwd /shared/proj
#BSUB -o /shared/logs/train-abcd1234/lsf-%J.out
#BSUB -e /shared/logs/train-abcd1234/lsf-%J.err
#BSUB -G research
#BSUB -H

set -u
LOGS=/shared/logs/train-abcd1234
mkdir -p "$LOGS/trainer"
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
# exit with the first failure of the 2 replica(s); LSF ends the other tasks
FAIL=0
for _ in "${PIDS[@]}"; do
    wait -n; rc=$?
    if [ "$rc" -ne 0 ]; then FAIL=$rc; break; fi
done
for f in "$LOGS/trainer"/*.exit; do
    [ -e "$f" ] || continue; c=$(cat "$f")
    r=${f#"$LOGS"/}; r=${r%.exit}
    [ "$c" = 0 ] || echo "tether: replica $r exited with code $c" >&2
done
# a failed replica fails the app: end the jobs of the other roles
if [ "$FAIL" -ne 0 ]; then
    bkill -J train-abcd1234.eval 0 > /dev/null 2>&1 || true
fi
exit "$FAIL"

# ---- bsub < job train-abcd1234.eval ----
#!/bin/bash
#BSUB -J train-abcd1234.eval
#BSUB -Jd "tether:app=train;logs=%2Fshared%2Flogs%2Ftrain-abcd1234;roles=trainer%3A2%2Ceval%3A1;role=eval;key=dag%2Frun%201%2Ftask"
#BSUB -q gpu
#BSUB -P ml
#BSUB -n 4
#BSUB -R "span[ptile=4] rusage[mem=2048] select[type==X86_64]"
#BSUB -gpu "num=2:mode=exclusive_process"
#BSUB -W 2:00
#BSUB -cwd /shared/proj
#BSUB -o /shared/logs/train-abcd1234/lsf-%J.out
#BSUB -e /shared/logs/train-abcd1234/lsf-%J.err
#BSUB -G research
#BSUB -H
#BSUB -w 'started("train-abcd1234.trainer")'

set -u
LOGS=/shared/logs/train-abcd1234
mkdir -p "$LOGS/eval"
# the allocated hosts in order, one per replica ($LSB_MCPU_HOSTS: host slots ...)
read -r -a HOSTS <<< "$(echo "${LSB_MCPU_HOSTS:-localhost 1}" | awk '{for (i = 1; i <= NF; i += 2) printf "%s ", $i}')"
# the rank-0 host is the first host of job train-abcd1234.trainer (started before this one)
RANK0_HOST=$(bjobs -a -noheader -o first_host -J train-abcd1234.trainer 2>/dev/null | head -n 1)
case "$RANK0_HOST" in ""|-)
    echo "tether: no first host of job train-abcd1234.trainer; using ${HOSTS[0]}" >&2
    RANK0_HOST="${HOSTS[0]}" ;;
esac
PIDS=()
# eval replica 0
( blaunch "${HOSTS[0 % ${#HOSTS[@]}]}" env TETHER_ROLE_NAME=eval TETHER_REPLICA_ID=0 TETHER_NUM_REPLICAS=1 "TETHER_RANK0_HOST=$RANK0_HOST" python eval.py 'it'"'"'s' > "$LOGS/eval/0.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/eval/0.exit"; exit "$rc" ) &
PIDS+=($!)
# exit with the first failure of the 1 replica(s); LSF ends the other tasks
FAIL=0
for _ in "${PIDS[@]}"; do
    wait -n; rc=$?
    if [ "$rc" -ne 0 ]; then FAIL=$rc; break; fi
done
for f in "$LOGS/eval"/*.exit; do
    [ -e "$f" ] || continue; c=$(cat "$f")
    r=${f#"$LOGS"/}; r=${r%.exit}
    [ "$c" = 0 ] || echo "tether: replica $r exited with code $c" >&2
done
# a failed replica fails the app: end the jobs of the other roles
if [ "$FAIL" -ne 0 ]; then
    bkill -J train-abcd1234.trainer 0 > /dev/null 2>&1 || true
fi
exit "$FAIL"
