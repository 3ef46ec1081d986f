# ---- bsub < job te-abcd1234.trainer ----
#!/bin/bash
#BSUB -J te-abcd1234.trainer
#BSUB -Jd "tether:app=te;logs=%2Fshared%2Flogs%2Fte-abcd1234;roles=trainer%3A2%2Cevaluator%3A1;role=trainer"
#BSUB -q gpu
#BSUB -n 8
#BSUB -R "span[ptile=4] rusage[mem=2048]"
#BSUB -gpu "num=2"
#BSUB -cwd /shared/proj
#BSUB -o /shared/logs/te-abcd1234/lsf-%J.out
#BSUB -e /shared/logs/te-abcd1234/lsf-%J.err
#BSUB -H

set -u
LOGS=/shared/logs/te-abcd1234
mkdir -p "$LOGS/trainer"
# the allocated hosts in order, one per replica ($LSB_MCPU_HOSTS: host slots ...)
read -r -a HOSTS <<< "$(echo "${LSB_MCPU_HOSTS:-localhost 1}" | awk '{for (i = 1; i <= NF; i += 2) printf "%s ", $i}')"
RANK0_HOST="${HOSTS[0]}"
PIDS=()
# trainer replica 0
( blaunch "${HOSTS[0 % ${#HOSTS[@]}]}" env TETHER_ROLE_NAME=trainer TETHER_REPLICA_ID=0 TETHER_NUM_REPLICAS=2 "TETHER_RANK0_HOST=$RANK0_HOST" python -c 'train()' > "$LOGS/trainer/0.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/trainer/0.exit"; exit "$rc" ) &
PIDS+=($!)
# trainer replica 1
( blaunch "${HOSTS[1 % ${#HOSTS[@]}]}" env TETHER_ROLE_NAME=trainer TETHER_REPLICA_ID=1 TETHER_NUM_REPLICAS=2 "TETHER_RANK0_HOST=$RANK0_HOST" python -c 'train()' > "$LOGS/trainer/1.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/trainer/1.exit"; exit "$rc" ) &
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
    bkill -J te-abcd1234.evaluator 0 > /dev/null 2>&1 || true
fi
exit "$FAIL"

# ---- bsub < job te-abcd1234.evaluator ----
#!/bin/bash
#BSUB -J te-abcd1234.evaluator
#BSUB -Jd "tether:app=te;logs=%2Fshared%2Flogs%2Fte-abcd1234;roles=trainer%3A2%2Cevaluator%3A1;role=evaluator"
#BSUB -q gpu
#BSUB -n 1
#BSUB -R "span[ptile=1] rusage[mem=1024]"
#BSUB -cwd /shared/proj
#BSUB -o /shared/logs/te-abcd1234/lsf-%J.out
#BSUB -e /shared/logs/te-abcd1234/lsf-%J.err
#BSUB -H
#BSUB -w 'started("te-abcd1234.trainer")'

set -u
LOGS=/shared/logs/te-abcd1234
mkdir -p "$LOGS/evaluator"
# the allocated hosts in order, one per replica ($LSB_MCPU_HOSTS: host slots ...)
read -r -a HOSTS <<< "$(echo "${LSB_MCPU_HOSTS:-localhost 1}" | awk '{for (i = 1; i <= NF; i += 2) printf "%s ", $i}')"
# the rank-0 host is the first host of job te-abcd1234.trainer (started before this one)
RANK0_HOST=$(bjobs -a -noheader -o first_host -J te-abcd1234.trainer 2>/dev/null | head -n 1)
case "$RANK0_HOST" in ""|-)
    echo "tether: no first host of job te-abcd1234.trainer; using ${HOSTS[0]}" >&2
    RANK0_HOST="${HOSTS[0]}" ;;
esac
PIDS=()
# evaluator replica 0
( blaunch "${HOSTS[0 % ${#HOSTS[@]}]}" env TETHER_ROLE_NAME=evaluator TETHER_REPLICA_ID=0 TETHER_NUM_REPLICAS=1 "TETHER_RANK0_HOST=$RANK0_HOST" python -c 'evaluate()' > "$LOGS/evaluator/0.log" 2>&1; rc=$?; echo "$rc" > "$LOGS/evaluator/0.exit"; exit "$rc" ) &
PIDS+=($!)
# exit with the first failure of the 1 replica(s); LSF ends the other tasks
FAIL=0
for _ in "${PIDS[@]}"; do
    wait -n; rc=$?
    if [ "$rc" -ne 0 ]; then FAIL=$rc; break; fi
done
for f in "$LOGS/evaluator"/*.exit; do
    [ -e "$f" ] || continue; c=$(cat "$f")
    r=${f#"$LOGS"/}; r=${r%.exit}
    [ "$c" = 0 ] || echo "tether: replica $r exited with code $c" >&2
done
# a failed replica fails the app: end the jobs of the other roles
if [ "$FAIL" -ne 0 ]; then
    bkill -J te-abcd1234.trainer 0 > /dev/null 2>&1 || true
fi
exit "$FAIL"
