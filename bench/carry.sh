#!/usr/bin/env bash
# Carry a run folder's last checkpoint from one GPU session to the next. Nothing on the GPU machine outlives
# its session, files come back only through $OUT (at most 8 files a call, 16 MiB each, 64 MiB together) and
# go there only as carried paths of this checkout (64 MiB a call with the checkout, 8 paths). So: pack the
# run folder (config.json, metrics.jsonl, samples.txt, eval.jsonl and only its last step_N checkpoint) into
# one tar cut into parts, bring the parts back a batch per call, keep them in .carry/NAME/ here (ignored by
# git: never committed, never sent unless carried), and in a later session carry them back a few per call,
# unpack, and let bench/campaign.py resume the run (it resumes any folder holding a checkpoint).
#
#   bash bench/carry.sh pack RUN_DIR [CARRY_DIR]        GPU: CARRY_DIR/NAME.tar.000 ... + NAME.sha256
#   bash bench/carry.sh out NAME K [CARRY_DIR]          GPU: copy batch K (0, 1, ...) of those files to $OUT
#   bash bench/carry.sh keep NAME FROM_DIR...           here: the files the device tool brought -> .carry/NAME/
#   bash bench/carry.sh check NAME                      here: the parts in .carry/NAME/ complete and intact?
#   bash bench/carry.sh plan NAME                       here: the carry list and command of each call back
#   bash bench/carry.sh in NAME [CARRY_DIR]             GPU: move the carried .carry/NAME/ files to CARRY_DIR/NAME/
#   bash bench/carry.sh unpack NAME RUNS_DIR [CARRY_DIR] GPU: check them, restore RUNS_DIR/NAME (last checkpoint)
#
# NAME is the run folder's name (e.g. voting-ip-s0); CARRY_DIR defaults to /root/carry. A device-tool call
# lasts at most 10 minutes, so the campaign runs detached from a copy of the checkout (each call's checkout
# replaces the repo root; /root/proj stays) and later calls poll it. A round trip, e.g. the first half of
# voting-ip-s0 in one session and the rest in the next (device-tool calls are marked ->, all on one machine:
# /root is lost when it goes back):
#
#   -> cp -r . /root/proj && cd /root/proj && (setsid nohup python bench/campaign.py voting-ip-s0 --runs \
#        /root/runs --logs /root/logs --until 40 > /root/c.out 2>&1 & echo $! > /root/c.pid)
#        (the copy overwrites /root/proj/docs/results/campaign.jsonl: bring a record back before it)
#   -> kill -0 $(cat /root/c.pid) 2> /dev/null && echo running || echo exited; tail -3 /root/c.out
#        tail -5 /root/logs/voting-ip-s0.log       ... each call (one per few minutes) until "exited" and the
#                                                  last line of c.out is "campaign: 0 of 1 run(s) finished ..."
#   -> bash bench/carry.sh pack /root/runs/voting-ip-s0 && bash bench/carry.sh out voting-ip-s0 0
#        prints "voting-ip-s0: 79 parts, sha256 ... (step_000040; 20 batch(es) for out)" and "batch 0 of 20 ..."
#   -> bash bench/carry.sh out voting-ip-s0 1          ... and so on to batch 19
#   bash bench/carry.sh keep voting-ip-s0 /work/.device/47/ /work/.device/48/ ...   (where these calls' files
#                                                      landed; a different file of the same name is refused)
#   bash bench/carry.sh check voting-ip-s0             "voting-ip-s0: ok, 79 parts ..." or what is missing
#   bash bench/carry.sh plan voting-ip-s0              27 calls, each: carry [".carry/voting-ip-s0/...", ...]
#   -> (carry the first list) bash bench/carry.sh in voting-ip-s0      ... one call per list, then:
#   -> bash bench/carry.sh unpack voting-ip-s0 /root/runs
#        "voting-ip-s0: restored /root/runs/voting-ip-s0 at step 40"
#   -> the first two commands above again without --until: campaign resumes it to step 100 (train.py --out ...
#      --resume --steps 100) and, once c.out ends "campaign: 1 of 1 run(s) finished", has written its record
#      under the copy: mkdir -p $OUT && cp /root/proj/docs/results/campaign.jsonl $OUT/ brings it back (the
#      checkout's file plus the new record: it replaces docs/results/campaign.jsonl here).
#
# pack refuses (one line, exit 1) while a campaign runs the folder: bench/campaign.py holds LOGS/NAME.lock
# (flock) while a run's job lives, and pack tests it with flock -n, LOGS being CARRY_LOGS (default /root/logs)
# and RUN_DIR/../logs (campaign's default --logs); and while the folder holds a step_N.tmp (a checkpoint being
# written, or cut off: then remove it). unpack tests the same lock. pack warns (on stderr, and packs) when
# eval.jsonl has no line for a checkpoint that stays behind (every step_N but the last): that point of the
# curve is lost (the record's missing_steps will list it). plan warns when the checkout (tracked files and
# untracked ones git does not ignore, as the device tool sends it) and a call's parts exceed 64 MiB
# (CARRY_CALL_BYTES). unpack extracts into RUNS_DIR/.NAME.unpack.tmp and renames it RUNS_DIR/NAME.
#
# A multi-agent checkpoint is 0.85-1.3 GB (fp32 adapters and AdamW states): 52-79 parts, 13-20 calls out
# and 18-27 calls in, all within one machine's lease each way. Measured 2026-12-01: one `out` call (4 parts
# and 2 logs, 64 MiB) cost 18.5 s of lease time, so 1.2 GB out is about 6 minutes: stop training early enough. Parts are 15.75 MiB (CARRY_PART_BYTES, at
# most 16 MiB), so that 4 of them and NAME.sha256 fit under $OUT's 64 MiB (CARRY_OUT_BYTES, 64 MiB - 64 KiB)
# and 3 with the checkout under a call's 64 MiB. Every error is one line on stderr and a non-zero exit.
# Only bash, coreutils, tar, sha256sum, flock and git (keep, plan). CARRY_ROOT (default: this checkout) is
# where .carry/ goes (tests).
set -euo pipefail
shopt -s nullglob

PART=${CARRY_PART_BYTES:-16515072}
OUT_BYTES=${CARRY_OUT_BYTES:-67043328}
ROOT=${CARRY_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
PER_CALL=3  # parts carried per call back: 3 x 15.75 MiB + the checkout < 64 MiB

die() { echo "carry.sh: error: $*" >&2; exit 1; }
# the campaign cell of a run folder's NAME: CONFIG-sSEED, plus the flags a -TASK / -MODEL suffix stands for
cell() {
    [[ $1 =~ ^(.*-s[0-9]+)(-.+)?$ ]] || { echo "$1"; return; }
    local c=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]#-}
    [ -z "$rest" ] && { echo "$c"; return; }
    [[ $rest == code || $rest == code-* ]] && { c+=" --task code"; rest=${rest#code}; rest=${rest#-}; }
    [ -n "$rest" ] && c+=" --model MODEL --model-name $rest"
    echo "$c"
}
warn() { echo "carry.sh: warning: $*" >&2; }

# NAME PARENT: die while a campaign runs NAME: bench/campaign.py holds LOGS/NAME.lock (flock) while a run's job
# lives; LOGS is CARRY_LOGS (default /root/logs, the detached form's --logs) and PARENT/logs (campaign's default)
check_idle() {
    local name=$1 parent=$2 lock
    for lock in "${CARRY_LOGS:-/root/logs}/$name.lock" "$parent/logs/$name.lock"; do
        [ -f "$lock" ] || continue
        command -v flock > /dev/null || die "flock (util-linux) is needed to test $lock"
        flock -n "$lock" true || die "$lock is held: a campaign is still running $name (wait until it has exited)"
    done
}

check_name() {
    [[ ${1:-} =~ ^[A-Za-z0-9._-]+$ ]] || die "a NAME (the run folder's name, of letters, digits, '.', '_', '-') is needed, got '${1:-}'"
}

parts() {  # the part files of NAME in DIR, in order
    PARTS=("$1/$2".tar.[0-9][0-9][0-9])
}

# DIR NAME: every part 000..N there and their sha256 the one in NAME.sha256, else die saying what is wrong
verify() {
    local dir=$1 name=$2 i=0 num missing=() sum want hint=""
    [ -f "$dir/$name.sha256" ] || die "$dir/$name.sha256 is missing"
    parts "$dir" "$name"
    [ ${#PARTS[@]} -gt 0 ] || die "no parts $name.tar.NNN in $dir"
    for p in "${PARTS[@]}"; do
        num=$((10#${p##*.}))
        while [ $i -lt "$num" ]; do missing+=("$(printf %03d $i)"); i=$((i + 1)); done
        i=$((num + 1))
    done
    LAST=${PARTS[-1]##*.}
    [ ${#missing[@]} -eq 0 ] || die "$name: missing part(s) ${missing[*]} of 000-$LAST in $dir"
    read -r want _ < "$dir/$name.sha256"
    sum=$(cat "${PARTS[@]}" | sha256sum | cut -d' ' -f1)
    if [ "$sum" != "$want" ]; then
        [ "$(stat -c %s "${PARTS[-1]}")" = "$(stat -c %s "${PARTS[0]}")" ] && [ ${#PARTS[@]} -gt 1 ] &&
            hint=" (the last, $LAST, is full size: parts after it may be missing)"
        die "$name: the ${#PARTS[@]} parts 000-$LAST in $dir have sha256 $sum, not $want of $name.sha256$hint"
    fi
    SUM=$want
}

# HOW SRC DEST [HINT]: copy (or with mv, move) SRC to DEST unless DEST is the same file; never overwrite a
# different one (HINT: what to do then)
put() {
    local how=$1 src=$2 dest=$3 hint=${4:-}
    if [ -e "$dest" ]; then
        [ "$(sha256sum < "$src")" = "$(sha256sum < "$dest")" ] || die "$dest exists and differs from $src: not overwritten$hint"
        [ "$how" = mv ] && rm -f "$src"
        return 0
    fi
    $how "$src" "$dest"
}

# DIR NAME: the batches of files for $OUT -> BATCH (file -> batch index) and NBATCH
batches() {
    local count=0 bytes=0 size f
    parts "$1" "$2"
    BATCH_FILES=("$1/$2.sha256" "${PARTS[@]}")
    BATCH_OF=()
    NBATCH=1
    for f in "${BATCH_FILES[@]}"; do
        size=$(stat -c %s "$f")
        if [ $count -gt 0 ] && { [ $count -ge 8 ] || [ $((bytes + size)) -gt "$OUT_BYTES" ]; }; then
            NBATCH=$((NBATCH + 1)); count=0; bytes=0
        fi
        BATCH_OF+=($((NBATCH - 1)))
        count=$((count + 1)); bytes=$((bytes + size))
    done
}

cmd_pack() {
    local run=${1:-} carry=${2:-/root/carry} name parent last="" d files=() f sum unevaluated=()
    [ -n "$run" ] || die "usage: pack RUN_DIR [CARRY_DIR]"
    [ -d "$run" ] || die "no run folder $run"
    [ "$PART" -ge 1 ] && [ "$PART" -le 16777216 ] || die "CARRY_PART_BYTES=$PART: parts must be 1 byte to 16 MiB (\$OUT's limit)"
    run=$(cd "$run" && pwd); name=$(basename "$run"); parent=$(dirname "$run")
    check_name "$name"
    check_idle "$name" "$parent"
    for d in "$run"/step_*; do
        [[ -d $d && ${d##*/} =~ ^step_[0-9]+$ ]] && last=${d##*/}
    done
    [ -n "$last" ] || die "$run holds no checkpoint (a step_N folder): nothing to carry"
    [ -f "$run/config.json" ] || die "$run has no config.json: not a run of train.py"
    for d in "$run"/step_*.tmp; do
        die "$run holds ${d##*/}, a checkpoint being written (is train.py running?) or cut off (then remove it)"
    done
    for d in "$run"/step_*; do  # the checkpoints that stay behind: evaluated (with any settings)?
        [[ -d $d && ${d##*/} =~ ^step_[0-9]+$ && ${d##*/} != "$last" ]] || continue
        # complete lines only (head -n: as many lines as newlines): a line cut off by a kill is no evaluation
        # (grep without -q reads to the end: with -q, head could die of SIGPIPE and pipefail fail the test)
        head -n "$(wc -l 2> /dev/null < "$run/eval.jsonl" || echo 0)" "$run/eval.jsonl" 2> /dev/null \
            | grep -E "\"step\": $((10#${d##*/step_}))[,}]" > /dev/null || unevaluated+=("${d##*/}")
    done
    [ ${#unevaluated[@]} -eq 0 ] || warn "$run/eval.jsonl has no line for ${unevaluated[*]}, which will not travel (only $last does): their points are lost from the run's curve"
    for f in config.json metrics.jsonl samples.txt eval.jsonl; do
        [ -f "$run/$f" ] && files+=("$name/$f")
    done
    mkdir -p "$carry"
    rm -f "$carry/$name".tar.[0-9][0-9][0-9] "$carry/$name.sha256"
    tar -C "$parent" -cf - "${files[@]}" "$name/$last" | split -b "$PART" -d -a 3 - "$carry/$name.tar."
    parts "$carry" "$name"
    sum=$(cat "${PARTS[@]}" | sha256sum | cut -d' ' -f1)
    echo "$sum  $name.tar" > "$carry/$name.sha256"
    batches "$carry" "$name"
    echo "$name: ${#PARTS[@]} parts, sha256 $sum ($last; $NBATCH batch(es) for out)"
}

cmd_out() {
    local name=${1:-} k=${2:-} carry=${3:-/root/carry} i copied=()
    check_name "$name"
    [[ $k =~ ^[0-9]+$ ]] || die "usage: out NAME K [CARRY_DIR] (K = 0, 1, ...)"
    [ -n "${OUT:-}" ] && [ -d "$OUT" ] || die "\$OUT is not a folder: out runs on the device machine"
    [ -f "$carry/$name.sha256" ] || die "$carry/$name.sha256 is missing: run pack first"
    batches "$carry" "$name"
    [ "$k" -lt "$NBATCH" ] || die "$name has $NBATCH batch(es), 0-$((NBATCH - 1)): no batch $k"
    for i in "${!BATCH_FILES[@]}"; do
        if [ "${BATCH_OF[$i]}" -eq "$k" ]; then
            cp "${BATCH_FILES[$i]}" "$OUT/"
            copied+=("${BATCH_FILES[$i]##*/}")
        fi
    done
    echo "$name: batch $k of $NBATCH (0-$((NBATCH - 1))): copied ${copied[*]} to \$OUT"
}

git_exclude() {  # the exclude file git reads for the checkout (a worktree's is its main one's), else nothing
    local path
    path=$(git -C "$ROOT" rev-parse --git-path info/exclude 2> /dev/null) || return 0
    [[ $path = /* ]] && echo "$path" || echo "$ROOT/$path"
}

cmd_keep() {
    local name=${1:-} from f n=0 exclude line seen=""
    check_name "$name"
    shift
    [ $# -gt 0 ] || die "usage: keep NAME FROM_DIR... (the folders the device tool put the files in)"
    exclude=$(git_exclude)
    if [ -n "$exclude" ]; then
        mkdir -p "$(dirname "$exclude")"
        touch "$exclude"
        while IFS= read -r line || [ -n "$line" ]; do [ "$line" = "/.carry/" ] && seen=1; done < "$exclude"
        if [ -z "$seen" ]; then
            [ -s "$exclude" ] && [ -n "$(tail -c 1 "$exclude")" ] && echo >> "$exclude"  # end its last line first
            echo "/.carry/" >> "$exclude"
        fi
    fi
    mkdir -p "$ROOT/.carry/$name"
    for from in "$@"; do
        [ -d "$from" ] || die "no folder $from"
        for f in "$from/$name.sha256" "$from/$name".tar.[0-9][0-9][0-9]; do
            [ -f "$f" ] || continue
            put cp "$f" "$ROOT/.carry/$name/${f##*/}" " (if .carry/$name holds an old pack: rm -rf $ROOT/.carry/$name, then keep again)"
            n=$((n + 1))
        done
    done
    [ $n -gt 0 ] || die "no $name.sha256 or $name.tar.NNN in $*"
    parts "$ROOT/.carry/$name" "$name"
    echo "$name: kept $n file(s) in $ROOT/.carry/$name/, which holds ${#PARTS[@]} part(s)$([ -f "$ROOT/.carry/$name/$name.sha256" ] || echo ", no $name.sha256 yet") (check says whether they are all there)"
}

cmd_check() {
    local name=${1:-}
    check_name "$name"
    [ -d "$ROOT/.carry/$name" ] || die "no folder .carry/$name (keep puts the files there)"
    verify "$ROOT/.carry/$name" "$name"
    echo "$name: ok, ${#PARTS[@]} parts (000-$LAST), sha256 $SUM"
}

# NAME (after verify): warn when the checkout as the device tool sends it (tracked files and untracked ones git
# does not ignore) plus the largest call's carried files exceed a call's 64 MiB (CARRY_CALL_BYTES)
checkout_fits() {
    local name=$1 limit=${CARRY_CALL_BYTES:-67108864} size total=0 parts=0 i f
    local sizes
    git -C "$ROOT" rev-parse --git-dir > /dev/null 2>&1 || { warn "$ROOT is no git checkout: its size is not checked"; return 0; }
    sizes=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -L -c %s -- 2> /dev/null || true)
    for size in $sizes; do total=$((total + size)); done
    for ((i = 0; i < ${#PARTS[@]}; i += PER_CALL)); do  # the largest call's parts (the first carries NAME.sha256 too)
        size=0
        for f in "${PARTS[@]:i:PER_CALL}"; do size=$((size + $(stat -c %s "$f"))); done
        [ $i -eq 0 ] && size=$((size + $(stat -c %s "$ROOT/.carry/$name/$name.sha256")))
        [ $size -gt $parts ] && parts=$size
    done
    [ $((total + parts)) -le "$limit" ] ||
        warn "the checkout ($total bytes: tracked files and untracked ones git does not ignore, in $ROOT) and a call's $parts bytes of parts exceed a call's $limit: make the checkout smaller (git status lists the untracked files that travel) or the parts (CARRY_PART_BYTES, then pack again)"
}

cmd_plan() {
    local name=${1:-} i calls list p
    check_name "$name"
    [ -d "$ROOT/.carry/$name" ] || die "no folder .carry/$name (keep puts the files there)"
    verify "$ROOT/.carry/$name" "$name"
    calls=$(( (${#PARTS[@]} + PER_CALL - 1) / PER_CALL ))
    checkout_fits "$name"
    echo "$name: ${#PARTS[@]} parts, $calls call(s) with the same machine, each: bash bench/carry.sh in $name"
    for ((i = 0; i < calls; i++)); do
        list=""
        [ $i -eq 0 ] && list="\".carry/$name/$name.sha256\", "
        for p in "${PARTS[@]:i*PER_CALL:PER_CALL}"; do list+="\".carry/$name/${p##*/}\", "; done
        echo "call $((i + 1)) of $calls: bash bench/carry.sh in $name"
        echo "  carry: [${list%, }]"
    done
    echo "then: bash bench/carry.sh unpack $name /root/runs, and start bench/campaign.py $(cell "$name") --runs /root/runs --logs /root/logs detached (the header of bench/carry.sh shows how)"
}

cmd_in() {
    local name=${1:-} carry=${2:-/root/carry} src f n=0 have
    check_name "$name"
    src="$ROOT/.carry/$name"
    mkdir -p "$carry/$name"
    for f in "$src/$name.sha256" "$src/$name".tar.[0-9][0-9][0-9]; do
        [ -f "$f" ] || continue
        put mv "$f" "$carry/$name/${f##*/}"
        n=$((n + 1))
    done
    [ $n -gt 0 ] || die "nothing carried in $src/ (name its files in the call's carry)"
    parts "$carry/$name" "$name"
    have="${#PARTS[@]} part(s)"
    [ ${#PARTS[@]} -eq 0 ] || have+=" up to ${PARTS[-1]##*.}"
    echo "$name: moved $n file(s) from $src/ to $carry/$name/, which holds $have$([ -f "$carry/$name/$name.sha256" ] || echo ", no $name.sha256 yet")"
}

cmd_unpack() {  # into RUNS/.NAME.unpack.tmp, then renamed RUNS/NAME: a cut-off unpack leaves no half run folder
    local name=${1:-} runs=${2:-} carry=${3:-/root/carry} d last="" e tmp replaced=""
    check_name "$name"
    [ -n "$runs" ] || die "usage: unpack NAME RUNS_DIR [CARRY_DIR]"
    [ -d "$carry/$name" ] || die "no folder $carry/$name (in puts the carried files there)"
    verify "$carry/$name" "$name"
    check_idle "$name" "$runs"
    for d in "$runs/$name"/step_*; do
        [[ -d $d && ${d##*/} =~ ^step_[0-9]+$ ]] && die "$runs/$name already holds checkpoint ${d##*/}: not overwritten (move it away first)"
    done
    while IFS= read -r e; do
        [[ $e = "$name" || $e = "$name/"* ]] && [[ $e != *..* ]] || die "$name.tar holds $e, outside $name/"
    done < <(cat "${PARTS[@]}" | tar -tf -)
    tmp="$runs/.$name.unpack.tmp"
    rm -rf "$tmp"  # a stale one of an unpack cut off
    mkdir -p "$tmp"
    cat "${PARTS[@]}" | tar -xf - -C "$tmp" --strip-components=1
    for d in "$tmp"/step_*; do
        [[ -d $d && ${d##*/} =~ ^step_[0-9]+$ ]] && last=${d##*/}
    done
    [ -n "$last" ] || { rm -rf "$tmp"; die "$name.tar held no checkpoint"; }
    if [ -e "$runs/$name" ]; then  # no checkpoint in it (see above): campaign.py would start it over anyway
        rm -rf "$runs/$name"
        replaced=" (replacing a folder without a checkpoint)"
    fi
    mv -T "$tmp" "$runs/$name"
    echo "$name: restored $runs/$name at step $((10#${last#step_})) ($last)$replaced; bench/campaign.py $(cell "$name") --runs $runs resumes it"
}

case ${1:-} in
    pack|out|keep|check|plan|in|unpack) sub=$1; shift; "cmd_$sub" "$@" ;;
    *) die "usage: bash bench/carry.sh pack|out|keep|check|plan|in|unpack ... (the header of bench/carry.sh says how)" ;;
esac
