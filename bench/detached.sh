#!/usr/bin/env bash
# bench/campaign.py detached on the GPU machine, and its polling. A device call lasts at most 10 minutes and the
# machine goes back about 30 s after a call ends, so a cell runs detached from a copy of the checkout
# (/root/proj: a later call's checkout replaces the repo root) and every later call polls it, with no gap.
#
#   setsid nohup bash bench/detached.sh start CELL... [campaign flags] > /root/detached.log 2>&1 < /dev/null &
#   bash bench/detached.sh stop              end the campaign started here now, with the trainings and evaluations it
#                                            started (start's process group: start it under setsid, as above), e.g.
#                                            to carry a run the lease will not finish (bench/carry.sh pack: train.py
#                                            writes checkpoints atomically, so the last complete one is packed)
#   bash bench/detached.sh poll [SECONDS]    wait until the campaign has ended (at most SECONDS, default 240), print
#                                            its status; at its start, whenever the records or a run's
#                                            eval.jsonl change, and at the campaign's end, copy
#                                            docs/results/campaign.jsonl and a tar of the logs and the run folders'
#                                            small files (no checkpoints) to $OUT: a call cut off by the lease's end
#                                            still brings back the latest record
#
# start: the code reward's tests run beside the campaign (-> /root/logs/reward-tests.txt; "reward tests rc=" in
# /root/logs/progress), which checks the sandbox on that machine's Python. Data: GSM8K from DATA (default
# .campaign/data, carried: git ignores it) unless the flags name other files (the last flag wins), e.g.
#   ... start single-s0 --task code --train-data $DATA/mbpp/mbpp.jsonl --eval-data $DATA/humaneval/HumanEval.jsonl
#   ... start voting-ip-s0 voting-ip-merged-s0 --per-gpu 2 --model /root/mdl15/hf --model-name Qwen2.5-Coder-1.5B-Instruct
#   ... start voting-sp-s0 --extra "--steps 140"     (once it has finished, in the same lease: extends the cell)
#   ... start voting-sp-rb-s0 --grow 20     (then 20 steps more at a time, each recorded, until the lease's end)
# Runs go to /root/runs, logs to /root/logs. Nothing here outlives the machine: bring the record back the same lease.
# A later start in the same lease keeps the records the earlier ones wrote under /root/proj (when the checkout's
# results file is where they began), runs the reward tests only once, and is refused while a campaign still runs.
# DETACHED_ROOT (default /root) moves all of it (tests).
set -u
DATA=${DATA:-.campaign/data}
R=${DETACHED_ROOT:-/root}
case ${1:-} in
start)
    shift
    if [ -s "$R/logs/progress" ] && ! grep -q "campaign rc=" "$R/logs/progress"; then
        echo "error: a campaign started here is still running ($R/logs/progress): poll it" >&2; exit 1
    fi
    mkdir -p "$R/logs" "$R/runs"
    results=docs/results/campaign.jsonl
    [ -f "$R/proj/$results" ] && cp "$R/proj/$results" "$R/campaign.before.jsonl"
    rm -rf "$R/proj" && cp -r . "$R/proj" && cd "$R/proj" || exit 1
    if [ -f "$R/campaign.before.jsonl" ] && cmp -s -n "$(stat -c %s $results 2> /dev/null)" $results "$R/campaign.before.jsonl"; then
        cp "$R/campaign.before.jsonl" $results  # the checkout's records and those this lease added
    fi
    echo $$ > "$R/logs/detached.pid"  # for stop
    # poll waits for this campaign's end, not an earlier one's
    cat "$R/logs/progress" >> "$R/logs/progress.before" 2> /dev/null; : > "$R/logs/progress"
    echo "start $* $(date +%T)" >> "$R/logs/progress"
    if [ ! -e "$R/logs/reward-tests.txt" ]; then
        (python -m pytest -q -p no:cacheprovider tests/test_rewards.py > "$R/logs/reward-tests.txt" 2>&1
         echo "reward tests rc=$? $(date +%T)" >> "$R/logs/progress") &
    fi
    python bench/campaign.py --runs "$R/runs" --logs "$R/logs" --train-data "$DATA/gsm8k/train.jsonl" \
        --eval-data "$DATA/gsm8k/test.jsonl" "$@" > "$R/logs/campaign.out" 2>&1
    echo "campaign rc=$? $(date +%T)" >> "$R/logs/progress"
    wait ;;
poll)
    end=$((SECONDS + ${2:-240})) results="$R/proj/docs/results/campaign.jsonl"
    bring() {  # the records and the small files, to $OUT
        [ -n "${OUT:-}" ] && [ -f "$results" ] || return 1
        cp "$results" "$OUT/campaign.tmp" && mv "$OUT/campaign.tmp" "$OUT/campaign.jsonl" || return 1  # retried
        (cd "$R" && find runs -maxdepth 2 -type f \( -name '*.json' -o -name '*.jsonl' -o -name samples.txt \) -print0 |
            tar czf "$OUT/runs.tmp" --null -T - logs; [ $? -le 1 ]) && mv "$OUT/runs.tmp" "$OUT/runs.tgz"  # 1: a file grew
    }
    last=  # what was brought: the records and every run's evaluations (a run cut off by the lease keeps its curve)
    until grep -q "campaign rc=" "$R/logs/progress" 2> /dev/null || [ $SECONDS -ge "$end" ]; do
        now=$(cat "$results" "$R"/runs/*/eval.jsonl 2> /dev/null | cksum)
        [ "$now" = "$last" ] || { bring && last=$now; }
        sleep 2
    done
    cat "$R/logs/progress" 2> /dev/null
    tail -n 2 "$R/logs/campaign.out" 2> /dev/null
    tail -n 1 "$R/logs/reward-tests.txt" 2> /dev/null
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2> /dev/null
    if grep -q "campaign rc=" "$R/logs/progress" 2> /dev/null && bring; then
        echo "copied campaign.jsonl and runs.tgz to \$OUT"
    fi ;;
stop)
    pid=$(cat "$R/logs/detached.pid" 2> /dev/null)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2> /dev/null || grep -q "campaign rc=" "$R/logs/progress" 2> /dev/null; then
        echo "error: no campaign started here is running" >&2; exit 1
    fi
    # its own process group only (setsid): never the group of the shell that called stop
    [ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$pid" ] || { echo "error: start was not run under setsid" >&2; exit 1; }
    kill -TERM -- "-$pid"
    for _ in $(seq 60); do pgrep -g "$pid" > /dev/null || break; sleep 0.5; done
    pgrep -g "$pid" > /dev/null && kill -KILL -- "-$pid"
    echo "campaign rc=stopped $(date +%T)" >> "$R/logs/progress"
    echo "stopped; last checkpoint(s): $(cd "$R" && ls -d runs/*/step_* 2> /dev/null | sort | tail -n 3 | xargs)" ;;
*) echo "usage: bash bench/detached.sh start CELL... [campaign flags] | poll [SECONDS] | stop" >&2; exit 2 ;;
esac
