#!/usr/bin/env bash
# bench/campaign.py detached on the GPU machine, and its polling. A device call lasts at most 10 minutes and the
# machine goes back about 30 s after a call ends, so a cell runs detached from a copy of the checkout
# (/root/proj: a later call's checkout replaces the repo root) and every later call polls it, with no gap.
#
#   setsid nohup bash bench/detached.sh start CELL... [campaign flags] > /root/detached.log 2>&1 < /dev/null &
#   bash bench/detached.sh poll [SECONDS]    wait until the campaign has ended (at most SECONDS, default 240), print
#                                            its status; once it has ended, copy docs/results/campaign.jsonl and a
#                                            tar of the logs and the run folders' small files (no checkpoints) to $OUT
#
# start: the code reward's tests run beside the campaign (-> /root/logs/reward-tests.txt; "reward tests rc=" in
# /root/logs/progress), which checks the sandbox on that machine's Python. Data: GSM8K from DATA (default
# .campaign/data, carried: git ignores it) unless the flags name other files (the last flag wins), e.g.
#   ... start single-s0 --task code --train-data $DATA/mbpp/mbpp.jsonl --eval-data $DATA/humaneval/HumanEval.jsonl
#   ... start voting-ip-s0 voting-ip-merged-s0 --per-gpu 2 --model /root/mdl15/hf --model-name Qwen2.5-Coder-1.5B-Instruct
#   ... start voting-sp-s0 --extra "--steps 140"     (once it has finished, in the same lease: extends the cell)
# Runs go to /root/runs, logs to /root/logs. Nothing here outlives the machine: bring the record back the same lease.
set -u
DATA=${DATA:-.campaign/data}
case ${1:-} in
start)
    shift
    rm -rf /root/proj && cp -r . /root/proj && cd /root/proj || exit 1
    mkdir -p /root/logs /root/runs
    # a second start in the same lease (e.g. extending a finished cell): poll must wait for this campaign's end
    cat /root/logs/progress >> /root/logs/progress.before 2> /dev/null; : > /root/logs/progress
    echo "start $* $(date +%T)" >> /root/logs/progress
    (python -m pytest -q -p no:cacheprovider tests/test_rewards.py > /root/logs/reward-tests.txt 2>&1
     echo "reward tests rc=$? $(date +%T)" >> /root/logs/progress) &
    python bench/campaign.py --runs /root/runs --logs /root/logs --train-data "$DATA/gsm8k/train.jsonl" \
        --eval-data "$DATA/gsm8k/test.jsonl" "$@" > /root/logs/campaign.out 2>&1
    echo "campaign rc=$? $(date +%T)" >> /root/logs/progress
    wait ;;
poll)
    end=$((SECONDS + ${2:-240}))
    until grep -q "campaign rc=" /root/logs/progress 2> /dev/null || [ $SECONDS -ge "$end" ]; do sleep 5; done
    cat /root/logs/progress 2> /dev/null
    tail -n 2 /root/logs/campaign.out 2> /dev/null
    tail -n 1 /root/logs/reward-tests.txt 2> /dev/null
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2> /dev/null
    if grep -q "campaign rc=" /root/logs/progress 2> /dev/null && [ -n "${OUT:-}" ]; then
        cp /root/proj/docs/results/campaign.jsonl "$OUT/"
        (cd /root && find runs -maxdepth 2 -type f \( -name '*.json' -o -name '*.jsonl' -o -name samples.txt \) -print0 |
            tar czf "$OUT/runs.tmp" --null -T - logs) && mv "$OUT/runs.tmp" "$OUT/runs.tgz"
        echo "copied campaign.jsonl and runs.tgz to \$OUT"
    fi ;;
*) echo "usage: bash bench/detached.sh start CELL... [campaign flags] | poll [SECONDS]" >&2; exit 2 ;;
esac
