"""Rewards: math answer checking and sandboxed code execution, the only signal GRPO learns from.

math_check: the last \\boxed{} (or \\fbox, `\\boxed 5`) vs the gold answer after normalization (LaTeX, units, 1,000,
percent, ...), exactly as numbers, else as values by sympy in a timed helper process; element-wise for tuples/intervals/
lists. Status correct | wrong | no_answer (no or empty box) | error (sympy timeout, over 1000 characters, empty gold).
Guaranteed (tests/test_rewards.py): an infinity equals only the same infinity; NaN, complex infinity and overflowing
values equal nothing; finite values agree exactly (rationals) or to a relative 1e-9 at 50 digits (no absolute floor,
so 10^{-400} is not 0); arithmetic on infinity (\\infty^0) equals no finite gold; juxtaposed numbers ('9 9', '9(9)')
are not a product; 'A%' is A, or A/100 only where that is no integer (never two integer golds); Python past
the math subset (0x10, //, 5j, a second decimal point) is refused; symbolic answers are compared at four exact
points, never by unbounded simplification; normalisation is linear (whitespace collapsed first, long answers refused).
code_check: the last fenced block (```python first; for function tests the last binding the entry point, if any)
must pass every test. Status pass | fail | timeout (wall clock, CPU limit or batch budget) | no_code | bad_problem (no
tests, tests that assert nothing or do not parse, check() with no entry point, an io test expecting no output) | error
(the sandbox failed). grade() scores a batch in parallel under a total time budget. Everything fails closed (scores 0).

Code tests are decided outside the program's process. The program's process (the sandbox) runs setup + program,
then serves calls over two pipes: it never sees the tests and holds no secret. A judge process (python -S, started
here, not forked from it; no program code ever runs in it) runs the problem's setup and tests; each name the tests
use that neither the setup nor builtins define (and the entry point) is fetched from the program (but a standard
library module, which the judge imports itself: the program's `sys` would answer for sys.getsizeof): a plain value
(tagged JSON of exact built-in types: None, bool, int, float, complex, str, bytes, list, tuple, set, frozenset,
dict, OrderedDict, Counter, deque; an iterator as its first 100,000 items; a subclass of int, float, str, bytes or
tuple that overrides none of what ==, hash, truth, len, `in` and iteration use, such as a namedtuple or an IntEnum, as
the plain value it holds; a bytearray as bytes), decoded by the judge into fresh objects (bounded size and nesting,
never eval or pickle), or a handle to any other object: calling it, getting or setting
its attributes runs in the program's process; it compares with nothing and has no truth value. Its exceptions come
back by the name of their built-in class (else Exception; never SystemExit / KeyboardInterrupt / StopIteration).
Pass: the judge exits 0 after every test ran. A failing assert is recorded (its message not run) and the tests go
on, and every io case runs whatever the earlier ones gave, so what a program is asked never tells it whether an
answer passed (with a way to keep notes across runs, such as FIFOs in /tmp before mkfifo was deleted, that oracle
taught a program that computed nothing MBPP's hidden answers). The judge runs with -P (not the caller's directory
on its path) and a 2x memory limit. Guaranteed, each by an adversarial test:
- Nothing the program does in its process reaches the verdict: a StopIteration re-raised into the tests' map or
  filter (it arrives as Exception), finalizers or gc callbacks running in the harness's frame, impostor dict keys,
  always-equal objects or int subclasses overriding a comparison (they cross as handles), rebound builtins (the
  judge's are its own; only the entry point may be named like one), redefined setup helpers (the judge runs the
  setup), exiting 0 before the tests (the judge first waits for the program to run to its end). Values are encoded
  in the program's process, which trusts nothing there (the program may rebind what the encoder uses, and could send
  any plain value itself): the judge decodes fresh ones.
- The sandbox, per run: `python -S` in its own session, temp dir and scrubbed environment, killed with its process
  group at the time limit (the judge's too). As root where namespaces and mounts are allowed (unshare -m -n -i -p),
  the run has its own root, network, IPC and PIDs (its processes die with it): every dir in it a fresh tmpfs of its
  own, holding the host's files it needs bound one by one, read-only and noatime (the standard library as one zip,
  lib-dynload's .so files, their libraries, Python), /dev/null, /dev/urandom and its own dir (no /proc: below), noexec
  (no file the program writes can be loaded as code, the way two reviews' .so reached libcrypto), nosuid, nodev, 64
  MiB in all, gone with the run; no_new_privs (setpriv: a set-uid program gives it nothing). Where that root cannot be
  made (no namespaces, no ldd, ...), one line on stderr says so, once per process, and runs go on as without it. It
  costs time (2-core machine, shared): a one-line program 50-57 ms vs 27 ms in a plain dir (main's root of bound dirs:
  37-43 ms); 100 MBPP references in parallel 1.5-1.7x the plain dir's time (main's: 1.3x). So what the audit hook
  guards does not rest on it alone: a CPython use-after-free (pure Python, io.BufferedReader) gave a program memory
  access and it undid the hook, reading the data's gold solutions (nineteenth review); in its own root it finds none.
  Keep gold data out of the files bound there. It forks: the parent keeps the caller's identity and waits; the child
  drops to a uid of its own (2^30 + the caller's thread id) when the caller is root, sets rlimits (CPU, memory, file
  size, NPROC 1, no core, 64 fds), installs an audit hook refusing kill, process creation, ctypes, sockets (the
  _socket module: socketpair has no audit event), sqlite, tracing, other audit hooks, frame/gc introspection, changing
  the environment, file locks, nis (network), glibc's gettext, writing outside its dir and reading outside it and the
  standard library (so not /proc, site-packages, the data's gold answers or other runs' files), and more than 10,000
  files written or dirs made (a refused import raises ModuleNotFoundError, so a `try: import ssl / except
  ImportError:` fallback goes on; the fallback is another import, checked). Its path checks resolve paths with C
  functions bound before the program runs and accept exact str / bytes only. The hook's own state (its closure) must
  stay out of reach: a refused call's traceback holds the hook's frame (frames are refused: sys._getframe,
  tracebacks', generators', gc.set_debug removed; traceback.print_exc and logging.exception print the exception
  without its frames), and a signal handler's frame argument led to the main thread's (the program runs in a second
  thread, where Python refuses signal handlers; the main thread only waits and ignores SIGINT). The routes to the
  process's memory are refused too: ctypes, _testcapi, /proc, os.open relative to a dir_fd, building or unmarshalling
  code objects.
- No inode a run can make is numbered by a machine-wide counter. The kernel numbers pipes', sockets' and /proc's
  inodes from one, in per-CPU batches of 1024: a correct program made inodes until its batch number spelled its
  answers, and a later one computing nothing read them in a fresh inode's number and passed MBPP / HumanEval problems
  (40/40 right after the solver in one grade() call, 5/5 in a later call, 1-4/40 alone; twenty-sixth review). Its own
  root has no /proc; everywhere the _socket module is refused (socketpair and if_nameindex made sockets with no audit
  event; deleting them is undone by a fresh import), and so are C modules that made sockets themselves, each a writer
  a later run read in its own pipes' inode numbers: _uuid (uuid1 to uuidd, one per call: 300 calls moved the next
  run's by 301), pwd and grp (glibc's lookups to nscd, one per 100 calls; os.getgrouplist and initgroups deleted).
  os.pipe, memfd_create (numbered by the kernel's own tmpfs) and pidfd_open (numbered by a count of the machine's
  processes) are deleted; eventfd, epoll and timerfd share one inode, and files are numbered by the run's own tmpfs.
  Tests make each, and run a solver and a listener through /proc and through socketpair (the reviewer's: 20/20 and
  20/20 on the previous code, 0/20 now). Still readable: the run's two pipes' inode numbers (made by the caller), the
  counter's position as it starts; no way for a program to move the counter is known. Without its own root, /proc is
  the host's and the channel open: do not trust code rewards then against an optimiser.
- The caller compares stdin/stdout tests itself and kills the process groups; malformed problems never pass.

NOT supported / NOT protected against (run large-scale untrusted code in a container or VM):
- Tests that need the program's objects by value: comparing two objects of the program's classes, mutating an
  argument in place and checking it (the program gets a copy), a program global changed by a later call (fetched
  once, before the tests), a defaultdict (arrives as a dict), iterators past 100,000 items, nesting past 100 levels.
  A Fraction, Decimal, dict view, range or IntFlag returned crosses as a handle (compares with nothing), and so does
  a namedtuple or IntEnum a test reads fields of (it arrives as a plain tuple / int: no .x, no .name).
- A memory-safety bug of CPython or of an extension module the program may import escapes the audit hook (one is
  public: the nineteenth review's use-after-free). Without its own root (not root, or no namespaces) the program
  can then read what its uid can (the data's gold answers, if world-readable), and use the network; in its own root,
  the files bound in it (the standard library, Python, their libraries). The verdict stays the judge's either way.
- os.setsid / setpgid / setpgrp / login_tty (not audited) are deleted before the program runs, so it cannot leave
  the process group killed at the end; another way out of it would let a process outlive its run and keep notes
  (file locks on standard-library files, its mere existence) for later runs. The page cache kept notes with no
  process (pages of standard-library files evicted and probed): posix_fadvise, preadv, pwritev are deleted and mmap
  refused; reading a rarely used file still leaves a bit a later run could time, in its own root too: the files bound
  there (the zip, the .so files, the libraries) are the host's, their pages shared (open, not fixed; atimes no
  longer: bound read-only and noatime, twenty-fifth review). The kernel's cached failed lookups did too (os.stat is
  not audited: a later run times a missing name's lookup; 64 bits survived 20 other runs, twenty-first review), and
  **these notes reached a verdict**: a correct program can write its answers as missing names it looks up, and a
  later program computing nothing, run on the same problem, read them back by timing one lookup per bit and passed
  (twenty-fifth review, real MBPP problems: 8/10 and 22/30 right after the solver in one grade() call on 3.11, 15/20
  on 3.12, 14/20 with three other runs between in separate calls; 0/10 alone). grade() running one problem's programs
  one after another does not help (the notes outlast a run). Closed in its own root, where every dir is fresh and
  gone with the run (the reproducer's listener: 0/20 right after the solver and 0/20 in a later call, 13/20 and 11/20
  on the previous root); without one (not root, no namespaces, or the root could not be made), open: do not trust
  code rewards then against an optimiser that could find it. An `and` inside one assert still runs its later calls
  only if the earlier ones held (none in HumanEval or MBPP).
- Wrong-but-passing answers the tests cannot see: special-casing the (often visible) tests, a test that only checks
  that a call does not raise (a program that sends its reply early then hangs passes tests that call nothing).
- As non-root the program runs as you, behind only the audit hook, which can be evaded (os.pidfd_open +
  signal.pidfd_send_signal, not audited, let it kill the judge, which only failed it, and the others of its batch, all
  you; pidfd_open is deleted now, twenty-sixth review, but other such ways surely remain). A file opened by C code
  without an audit event is not checked (the known modules that do are refused: readline, shared memory, dbm, syslog,
  Tcl); os.mkfifo, os.mknod and os.memfd_create (no audit event) are deleted before the program runs; directories
  outside can be listed (names, not contents).
- In its own root, past the audit hook (the use-after-free): the kernel's per-uid keyrings (add_key, keyctl; no
  namespace covers them) let a run leave a key that a later run reads (twentieth review). A seccomp filter would close
  it. Such notes reach a verdict as the lookup cache's do (above: a solving program's answers, read by a later one).
  Each uid's keys also hold about 76 kB of kernel memory that is never given back (measured: 40 runs, 3 MB), which a
  seccomp filter would also stop; and AF_VSOCK sockets (not network-namespaced) can be made, reaching the hypervisor
  on a VM.
- Runs graded at the same time (one grade() call) share the machine: statvfs, fstatvfs and sysconf (free blocks of the
  filesystem their stdout files share, free memory: a program computing nothing passed beside a correct one that
  signalled its answers, twenty-third review) and os.pipe / pipe2 (a pipe's inode number comes from a kernel-wide
  counter: twenty-fourth review; sockets' and /proc's too, above) are deleted and file locks refused, and in its own
  root a run sees no other's pids. Other such channels surely remain (the CPU they share: a program can time its own
  speed while another burns CPU), so grade() never runs two programs of one problem (the same tests) at once: a
  sibling beside it solves another problem, whose answers are no use to it. This costs parallelism only when a call
  has fewer distinct problems than workers, and a program at its time limit delays its siblings: under total_timeout a
  hanging one can leave correct siblings after it 'timeout' (twenty-fifth review; training sets no total_timeout). Two
  grade() calls at once (two processes) are not kept apart.
- The serial order was a channel itself (twenty-seventh review): a program starts a near-constant time after the last
  reply of the one before it (75 +- 12 ms, 2-core machine), so a correct program sending its last reply at a
  wall-clock phase spelling its answers (time.time() mod 1 s, 8 symbols) told them to the next program of its
  problem, which read the clock as it started: one computing nothing passed 111 of MBPP's 116 problems with three
  boolean answers right after a solver in one grade() call (13/116 alone). Now each worker's lane interleaves two or
  more problems, so another problem's program runs between two of one problem's (20 problems: 2/20, and 0/20 with the
  listener's constant recalibrated, vs 20/20; alone 1-4/20). That only blurs it (twenty-eighth review): the program
  between takes a steady 0.15-0.25 s, so wider symbols (a 2-4 s cycle) and a calibrated gap get through, 18-20/20 with
  one program between, 8/10 with seven (alone 1-2). OPEN: closing it needs start times independent of earlier ends
  (slots of the time limit, ~6 s per program of a problem per call), too slow for training. Also open: a relay by a
  program of another problem; a call with one problem (or one holding more than half its lane's programs) runs them
  back to back. The cost of the lanes: fewer than workers when a call has fewer than twice as many problems.
- A correct program writing more than 64 MiB in all fails in its own root (the tmpfs's size), not without it.
- Without its own root (not root, no namespaces, or it could not be made): network is refused only by the audit
  hook, disk use is bounded per file (16 MiB) and by the 10,000-file cap only, so a run can fill the disk for its few
  seconds, and a file it writes is not kept from being mapped as code; its dir is removed after it (a run that
  defeats that scores 0, 'error').
Cost of the memory guards: a program importing anything outside the standard library fails (site-packages are not
on its path, and native modules load only from the standard library's files), and so does one importing subprocess or
asyncio (their _posixsubprocess starts processes with no audit event; RLIMIT_NPROC 1 alone stopped that: as root
only because the program runs as another user), and one starting a thread (RLIMIT_NPROC 1 again: the competitive-
programming idiom threading.Thread(target=main).start() for deep recursion fails; raising the limit would need the
run's own PID namespace, and without root it is the caller's uid, already over any small limit). A script sees
exit() / quit() (as sys.exit), sys.argv == ['solution.py'], and its atexit functions run at its end (in its thread).
Also failing (twenty-fourth review and the fixes of the twenty-second): shutil.rmtree of a dir with files in it and
so tempfile.TemporaryDirectory's cleanup (os.open relative to a dir fd is refused), shutil.disk_usage (statvfs is
deleted), pickling the program's own classes and typing.get_type_hints under `from __future__ import annotations`
(sys.modules["__main__"] is the harness's module, not the program's), collections.UserList / UserString results
(handles, though Python's == equates them with a list / str), signal.signal in a script (the program runs in a
second thread: ValueError; the SIGPIPE idiom), opening /dev/stdin (twenty-fifth review). And since the twenty-sixth
(sockets, _uuid and glibc's user lookups refused): socket and all that imports it (email.utils, email.message,
logging.handlers / config, urllib.request, http.server, xmlrpc.client), multiprocessing, importlib.metadata, pwd, grp
and getpass.getuser (uuid.uuid1 works, with a random node). In the run's own root (same review):
locale.setlocale(LC_ALL, "") and "C.UTF-8" raise locale.Error (no locale files; Python runs in UTF-8 mode), lib2to3,
idlelib, ensurepip, tkinter and turtle are not in its zip, nor package data that is not .py
(importlib.resources.files("email") finds no .rst). Under 3.13 importlib.util does not import (a frozen module:
ImportError 'Frozen object ... is invalid', with or without the root, before this review too).
Needs Linux >= 5.3 (pidfd) and sympy (a dependency of torch).
Tests: python -m pytest -q tests/test_rewards.py; throughput: python bench/rewards.py.
"""
import ast
import contextlib
import functools
import inspect
import json
import os
import re
import select
import signal
import subprocess
import symtable
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction

TIMEOUT_S = 5.0        # wall-clock seconds per program run (HumanEval's harness uses 3)
MEMORY_MB = 1024       # address-space limit per program, MiB
OUTPUT_MB = 16         # cap on stdout/stderr and on any file the program writes, MiB
MAX_ANSWER_CHARS = 1000  # a longer boxed answer (or gold) scores 0 with status 'error' before any parsing
SYMPY_TIMEOUT_S = 2.0  # per symbolic comparison; the helper process is killed and restarted past it
WORKDIR_PREFIX = "grpo-sbx-"  # of each run's temp dir, which is on the sandbox's command line: find strays by it


class _Undecided(Exception):
    """The checker could not decide (timeout, too large): score 0 with status 'error'."""


def _readable(fd, timeout: float) -> bool:
    """Whether fd has something to read within timeout seconds (poll, not select(): the caller may hold fds numbered
    past 1024): a reply from the sympy helper, a run's end."""
    (poll := select.poll()).register(fd, select.POLLIN)
    return bool(poll.poll(timeout * 1000))


# ----------------------------------------------------------------------------------------------- math

def _arg(s: str, i: int) -> tuple[str, int]:
    """One LaTeX argument at s[i:]: a {group}, a \\command or a single character."""
    i = len(s) - len(s[i:].lstrip(" "))  # past the spaces
    if i >= len(s):
        raise ValueError(s)
    if s[i] == "{":
        depth = 0
        for k in range(i, len(s)):
            depth += {"{": 1, "}": -1}.get(s[k], 0)
            if depth == 0:
                return s[i + 1:k], k + 1
        raise ValueError(s)
    m = re.match(r"\\[a-zA-Z]+", s[i:])
    return (m.group(0), i + m.end()) if m else (s[i], i + 1)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} / \\fbox{...} (brace-matched) or `\\boxed 5`; None if absent or unclosed."""
    if (i := max(text.rfind("\\boxed"), text.rfind("\\fbox"))) < 0:
        return None
    j = i + (6 if text.startswith("\\boxed", i) else 5)
    if text[j:j + 1] == "{":
        with contextlib.suppress(ValueError):  # unclosed: None
            return _arg(text, j)[0]
        return None
    return m.group(1) if (m := re.match(r"\s+([^\s$]+)", text[j:])) else None  # `\boxed 5`: one token


def gold_answer(answer: str) -> str:
    """A gold answer may be a plain value, a GSM8K solution ending in `#### N`, or a solution with a box."""
    # no box, or an empty or unclosed one: the text as it is
    return answer.rsplit("####", 1)[1].strip() if "####" in answer else last_boxed(answer) or answer


_SUBS = [("\\\\", " \\cr "), ("\u2212", "-"), ("\u00d7", "\\times "), ("\u00b7", "\\cdot "), ("\u00f7", "\\div "),
         ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"), ("\\left", ""), ("\\right", ""),
         ("\\displaystyle", ""), ("\\!", ""), ("\\,", " "), ("\\;", " "), ("\\:", " "), ("\\quad", " "),
         ("\\ ", " "), ("~", " "), ("\\$", ""), ("$", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\circ", ""),
         ("°", ""), ("\\degree", ""), ("\\{", "{"), ("\\}", "}"), ("{,}", ","), ("\\%", "%"), ("percent", "%")]
_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|boldsymbol|mbox|operatorname)\s*\{([^{}]*)\}")
_UNIT = re.compile(r"(?<=[\d}])\s*(?:sq\.?|square|cubic)?\s*(?:units?|dollars?|cents?|degrees?|cm|mm|km|meters?|"
                   r"metres?|inches|inch|feet|foot|ft|yards?|miles?|mph|hours?|hrs?|minutes?|mins?|seconds?|"
                   r"days?|weeks?|months?|years?|kg|grams?|pounds?|lbs?|ounces?|oz|liters?|litres?|ml|gallons?|"
                   r"points?)(?:\^\{?\d\}?)?\.?\s*$")


def _normalize(s: str) -> tuple[str, bool]:
    """Canonical spelling of an answer (single spaces kept for the LaTeX parser) and whether it was a percentage.
    Whitespace runs are collapsed first, so no pattern below ever scans a run of spaces (linear time)."""
    s = re.sub(r"(?<=\d)\\,(?=\d)", "", re.sub(r"\s+", " ", s).strip())  # 1\,000: a digit group; else \, is a space
    for a, b in _SUBS:
        s = s.replace(a, b)
    while (t := _TEXT.sub(r"\1", s)) != s:
        s = t
    pct, s = "%" in s, _UNIT.sub("", s.replace("%", "")).strip().rstrip(".").strip()
    if s.count("=") == 1 and re.match(r"^\\?[a-zA-Z]+(_\{?\w+\}?)?\s*=", s):  # "x = 5" -> "5"
        s = s.split("=")[1].strip()
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s.replace(" ", "")):   # 1,000 -> 1000
        s = s.replace(",", "").replace(" ", "")
    return re.sub(r"\s+", " ", re.sub(r"_\{(\w+)\}", r"_\1", s)), pct  # base subscripts: 4210_{5} -> 4210_5


def _depths(s: str):
    depth = 0
    for ch in s:
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        yield ch, depth


def _balanced(s: str) -> bool:
    return all(d >= 0 for _, d in _depths(s)) and sum(s.count(c) for c in "([{") == sum(s.count(c) for c in ")]}")


def _container(s: str) -> tuple[str, list[str]] | None:
    """(bracket kind, items) for tuples/intervals/lists/sets; kind '' for a bare comma list."""
    wrapped = len(s) >= 2 and s[0] in "([{" and s[-1] in ")]}" and all(d > 0 for _, d in _depths(s[:-1]))
    kind, inner = (s[0] + s[-1], s[1:-1]) if wrapped else ("", s)
    cuts = [k for k, (ch, d) in enumerate(_depths(inner)) if ch == "," and d == 0]  # the top-level commas
    items = [inner[a + 1:b].strip() for a, b in zip([-1] + cuts, cuts + [len(inner)])]
    return (kind, items) if len(items) > 1 else None


# refused in an answer's sympy source: juxtaposed numbers are no product ("9 9", "(9)9", "9(9)", "{9}{9}"), a second
# decimal point ("1.000.000" would be 1.000 * .000; "512.0.n(1)" an attribute), and Python past the math subset:
# 0x / 0b / 0o literals, // and ** apart ("/ /" would be read as //), 5j, names with digits (sympy's E1); the
# whitelist below does the rest
_REFUSED = re.compile(r"(?<!\d)\.(?!\d)|[\d.]\s+[\d.]|\)\s*[\d.]|[\d.)]\s*\(\s*[\d.]+\s*\)|\.\d*\.|"
                      r"(?<![\d.])(0[xXbBoO]|[a-zA-Z]\d)|/\s*/|\*\s+\*|\d[jJ]")  # (1e5 stays a number)
_NAMES = {"pi": "pi", "infty": "oo", "cdot": "*", "times": "*", "div": "/", "sin": "sin", "cos": "cos",
          "tan": "tan", "log": "log", "ln": "log", "exp": "exp"}


def _latex_to_sympy(s: str) -> str:
    """Translate the small LaTeX subset answers use into sympy syntax; ValueError for anything else."""
    out, i = [], 0
    while i < len(s):
        if s.startswith("\\frac", i):
            a, i = _arg(s, i + 5)
            b, i = _arg(s, i)
            whole = re.fullmatch(r"\s*(-?)\s*\d+\s*", "".join(out))  # a mixed number: 2\frac{1}{3} = 2 + 1/3
            out.append(("-" if whole and whole.group(1) else "+" if whole else "") +
                       f"(({_latex_to_sympy(a)})/({_latex_to_sympy(b)}))")
        elif s.startswith("\\sqrt", i):
            n, i = None, i + 5
            if s[i:i + 1] == "[":
                j = s.index("]", i)
                n, i = _latex_to_sympy(s[i + 1:j]), j + 1
            a, i = _arg(s, i)
            out.append(f"sqrt({_latex_to_sympy(a)})" if n is None else f"(({_latex_to_sympy(a)})**(1/({n})))")
        elif s[i] == "\\":
            if not (m := re.match(r"\\([a-zA-Z]+)", s[i:])) or m.group(1) not in _NAMES:
                raise ValueError(s)
            out.append(f" {_NAMES[m.group(1)]} ")
            i += m.end()
        else:
            out.append({"{": "(", "}": ")", "^": "**"}.get(s[i], s[i]))
            i += 1
    return "".join(out)


def _to_sympy(s: str) -> str | None:
    """Sympy source for an answer, or None if it is not plain math. The whitelist is what makes it safe to hand
    to parse_expr (which evals): digits, operators, brackets, known function names and single-letter symbols."""
    if len(s) > 200:
        return None
    try:
        t = re.sub(r"(?<![\d.])0+(?=\d)", "", _latex_to_sympy(s))  # "072" is 72 (Python would read "0 72", so 0)
    except (ValueError, IndexError):
        return None
    words = set(re.findall(r"[a-zA-Z]{2,}", t)) - {"sqrt", "pi", "oo", "sin", "cos", "tan", "log", "exp"}
    if words or not re.fullmatch(r"[0-9a-zA-Z+\-*/().\s]*", t) or _REFUSED.search(t):  # other characters, words
        return None
    if "**" in t and (re.search(r"\*\*\s*(\(+[^)]*|[\w.]+\s*)\*\*", t) or re.search(r"\d{5,}", t)  # towers, huge
                      or len(re.findall(r"\*\*\W*\d{3}", t)) > 1):  # powers, powers of big powers
        raise _Undecided("exponent too large to evaluate safely")
    return t


def _number(t: str) -> Fraction | None:
    """The exact value of a plain number or fraction ("((1)/(2))", "-0.75"); None for anything else.
    Brackets are dropped only around a bare number that no digit precedes, so "2(3)" or "1 1/2" stay
    non-numbers (and go to sympy) instead of being read as 23 or 11/2."""
    u = t.strip()
    while (v := re.sub(r"(?<![\d.)])\(\s*([-+]?[\d.]+(?:\s*/\s*[\d.]+)?)\s*\)", r"\1", u)) != u:
        u = v
    u = re.sub(r"\s*/\s*", "/", u)
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)(/(\d+\.?\d*|\.\d+))?", u):
        return None
    num, _, den = u.partition("/")
    with contextlib.suppress(ValueError, ZeroDivisionError):  # e.g. a zero denominator: not a number
        return Fraction(num) / Fraction(den or 1)
    return None


def _sympy_worker():  # runs as its own program (python -c): this function's source, then a call
    import sys, json, string, functools
    import sympy  # a dependency of torch, so always there
    from sympy.parsing.sympy_parser import parse_expr, standard_transformations, implicit_multiplication_application
    # plain symbols: no E, I, N, S, O, Q surprises
    T, L = standard_transformations + (implicit_multiplication_application,), {c: sympy.Symbol(c) for c in string.ascii_letters}
    print("ready", flush=True)
    def close(a, b):  # finite values within a relative 1e-9 at 50 digits (mpmath: no float overflow or underflow)
        d = a - b
        if d == 0 or d.is_Rational:  # exact: 2^1024 + 1 is not 2^1024
            return d == 0
        va, vb, vd = (sympy.N(v, 50) for v in (a, b, d))
        return all(v.is_number and v.is_finite for v in (va, vb, vd)) and \
            bool(abs(vd) <= sympy.Float("1e-9", 50) * max(abs(va), abs(vb)))
    def same(x, y):  # as values: an infinity equals only the same infinity, NaN and complex infinity equal nothing;
        # with symbols, equal at four exact points (no simplify: its time is unbounded)
        if any(v.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo) for v in (x, y)):
            return x == y and not x.has(sympy.nan, sympy.zoo)
        syms = sorted(x.free_symbols | y.free_symbols, key=str)
        points = [{v: sympy.Rational((-137 + 211 * t + 53 * k) * (k * t + 1), 100) for k, v in enumerate(syms)}
                  for t in range(4 if syms else 1)]  # variable k grows like t^(k+1): no two are affinely related
        return all(close(x.subs(p), y.subs(p)) for p in points)
    parse = functools.lru_cache(4096)(lambda s: parse_expr(s, local_dict=L, transformations=T))
    for line in sys.stdin:
        try:
            ok = same(*map(parse, json.loads(line)))
        except Exception:
            ok = False
        print(int(bool(ok)), flush=True)


_SYMPY_WORKER = inspect.getsource(_sympy_worker) + "_sympy_worker()\n"


class _Sympy:
    """A long-lived helper process for sympy: a comparison past the time limit kills it (a limit that works in any
    thread, unlike signal.alarm), and the next call starts a new one."""

    proc, lock = None, threading.Lock()  # one helper per process (_SYMPY below)

    def _readline(self, timeout: float) -> str:
        if not _readable(self.proc.stdout, timeout):
            raise _Undecided("sympy timed out")
        return self.proc.stdout.readline().strip()

    def equal(self, a: str, b: str) -> bool:
        with self.lock:
            try:
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = subprocess.Popen([sys.executable, "-P", "-c", _SYMPY_WORKER], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, text=True)
                    if self._readline(60.0) != "ready":  # sympy imports in about a second
                        raise _Undecided("the sympy helper did not start")
                print(json.dumps([a, b]), file=self.proc.stdin, flush=True)
                return self._readline(SYMPY_TIMEOUT_S) == "1"
            except (OSError, _Undecided) as e:  # timed out, died or did not start: killed, the next call starts anew
                if self.proc is not None:  # (None: its start failed)
                    self.proc.kill(), self.proc.wait()
                self.proc = None
                raise _Undecided(repr(e)) from None


_SYMPY = _Sympy()


def _equal(p: str, g: str) -> bool:
    kp, kg = p.replace(" ", ""), g.replace(" ", "")
    if kp == kg:  # identical text counts only if it is well-formed: two broken answers are never equal
        return _balanced(kp) and any(c.isalnum() for c in kp)
    cp, cg = _container(p), _container(g)
    if cp or cg:
        if not (cp and cg) or cp[0] != cg[0] or len(cp[1]) != len(cg[1]):
            return False
        if cp[0] in ("", "{}"):  # bare lists ("find all x") and sets: order does not matter
            rest = list(cg[1])
            for a in cp[1]:
                if (j := next((j for j, b in enumerate(rest) if _equal(a, b)), None)) is None:
                    return False
                rest.pop(j)
            return True
        return all(_equal(a, b) for a, b in zip(cp[1], cg[1]))  # tuples and intervals: ordered, same brackets
    tp, tg = _to_sympy(p), _to_sympy(g)
    if tp is None or tg is None or ("oo" in tp) != ("oo" in tg):  # \infty^0 is 1 to sympy, and no answer of 1
        return False
    np_, ng = _number(tp), _number(tg)
    return np_ == ng if np_ is not None and ng is not None else _SYMPY.equal(tp, tg)  # exact: 0.5 == 1/2, 0.33 != 1/3


def _drop_words(s: str, other: str) -> str:
    """'12 apples', '9 (apples)', '72 m^2', '72 km/h' or '72/hour' -> '12' / '9' / '72' when the other side is a plain
    number: a noun (a unit) after the number, or a word after a slash that follows it, is not part of the answer. Only
    then, so '5 x' still differs from gold '5x'; and not after a hedge ('5 or 6'), a multiplier ('5 thousand', '12
    squared', '2 k'), a constant or function ('5 pi', '5/oo', '5/sqrt', '5 \\text{Pi}': any case) or a number word after
    the slash ('144/two'), which change what the number says. Letters
    only: '72/8' and '72/8 hr' keep their digits (9, or no match); after the number's slash a word, not one letter,
    so gold '2/x' is no '2' (and the number never ends in that slash: '72/ hr' is 72, not '72/')."""
    m = re.fullmatch(r"([-+]?\d[\d.,/]*(?<!/))(?:\s+|\s*/\s*(?=[a-zA-Z]{2}))"
                     r"(?:[a-zA-Z][a-zA-Z .'/-]*(?:\^\{?\d\}?)?|\([a-zA-Z][a-zA-Z .'-]+\))", s)
    hedge = m and re.search(r"\b(or|and|to|than|more|less|least|most|about|around|approx\w*|between|plus|minus|not|divided"
                            r"|hundreds?|thousands?|millions?|billions?|trillions?|dozens?|grand|squared|cubed|twice|thrice|half"
                            r"|double|triple|k|pi|oo|inf|infty|infinity|nan|sqrt|sin|cos|tan|cot|csc|arc\w+|log|ln|exp|erf|tau|phi|gamma"
                            r")\b|/\s*(zero|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\w+teen|\w+ty)\b", s, re.I)
    return m.group(1) if m and not hedge and re.fullmatch(r"[-+]?\d[\d.,/]*", other) else s


def math_check(completion: str, answer: str) -> tuple[float, str]:
    """(reward, status) of a math completion against a gold answer."""
    # runs of whitespace collapsed (linear; they do not count); no box, or an empty one: no answer
    pred, gold = " ".join((last_boxed(completion) or "").split()), " ".join(gold_answer(answer).split())
    if not pred:
        return 0.0, "no_answer"
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS or not _normalize(gold)[0]:
        return 0.0, "error"  # too long to be an answer (never normalised, so no input can be slow), or no gold
    (p, p_pct), (g, g_pct) = _normalize(pred), _normalize(gold)
    p, g = (_normalize(_drop_words(a, b))[0] for a, b in ((p, g), (g, p)))  # "1,000 apples" -> 1,000 -> 1000
    # "A%" is A, or (a number A) A/100 when that is no integer: never two integer golds by value ("500%" for 5 and
    # 500, "800%" for 2^{3} and 800), whatever form the gold takes
    with contextlib.suppress(_Undecided):  # undecided (sympy timed out, a power too large): "error" below
        n = m / 100 if p_pct and not g_pct and (m := _number(p)) is not None else None
        return (1.0, "correct") if _equal(p, g) or (getattr(n, "denominator", 1) != 1 and _equal(str(n), g)) else (0.0, "wrong")
    return 0.0, "error"


def final_answer(completion: str, task: str) -> str | None:
    """What a completion answers, as a key for counting equal answers (the reward-hacking monitor): math the
    normalised boxed answer without spaces, code the extracted program stripped; None when it has none."""
    text = extract_code(completion) if task == "code" else last_boxed(completion)
    if not text or not text.strip() or task == "code":
        return text.strip() if text else None
    return (_normalize(text)[0] if len(text) <= MAX_ANSWER_CHARS else text[:MAX_ANSWER_CHARS]).replace(" ", "")


def degenerate(completion: str, task: str) -> bool:
    """A reward-hacking tell (for the monitor, never for the reward): a math answer that is not a finite value
    (infinity, NaN, an overflowing power or exponent, no digit at all); code naming __eq__ / __ne__ anywhere (in any
    block, the graded one or not, or the prose: an upper bound; no HumanEval or MBPP reference solution names them)."""
    if task == "code":
        return bool(re.search(r"__(eq|ne)__", completion))
    # infinity / NaN as whole tokens in the boxed text as written (the key has no spaces: "40books", "2\cdotinfinity"),
    # so "40 books" and "12 infants" are units, not oo or inf; an exponent of 3+ digits after a number (1e400) or a power
    box, not_finite = last_boxed(completion) or "", r"(?<![a-z])(infinity|infty|oo|nan|inf)(?![a-z])|(?<=[\d.])e\+?\d{3}|\^\{?\d{3}"
    return (key := final_answer(completion, "math")) is not None and (not re.search(r"\d", key) or bool(re.search(not_finite, box, re.I)))


# ----------------------------------------------------------------------------------------------- code

_CHECK = re.compile(r"(?m)^def check\(")  # HumanEval's tests: a top-level check(candidate), called on the entry point
# A block opens at a line's start (after spaces), its tag and the rest of that line read without backtracking (the
# possessive *+: an unclosed fence line of many spaces took seconds), and ends at the next ``` (even inside a line).
_FENCE = re.compile(r"^([ \t]*)```[ \t]*+([\w+.#-]*+)[^\n]*\n(.*?)```", re.S | re.M)
warnings.filterwarnings("ignore", module="<extract_code>")  # what compiling a program warns of (escapes): its own business


def extract_code(completion: str, name: str | None = None) -> str | None:
    """The program a completion answers with: of its ```python blocks (else of all its fenced blocks) the last, or the
    last that binds `name` at module level if one does (symtable), so that a usage example or a test after the solution
    does not replace it (code_check passes the entry point of function tests; stdin programs take the last block);
    less its fence's indentation when every line has it (a block in a list item); None if there is none. A fence
    opens a block only at the start of a line (after spaces, as in Markdown): ```py written inside a sentence is no
    block, so prose after the solution that quotes a fence cannot replace it (the thirty-first review found that
    scoring correct solutions 0)."""
    off = lambda c, ind: re.sub(f"(?m)^{ind}", "", c) if ind and not re.search(f"(?m)^(?!{ind})[ \t]*\\S", c) else c
    blocks = [(lang.lower(), off(c, ind)) for ind, lang, c in _FENCE.findall(completion)]  # indentation off if all have it
    py = [c for lang, c in blocks if lang in ("python", "py", "python3")] or [c for _, c in blocks]

    def binds(c):  # the module binds `name` (def, class, =, an import, also in if / try), read without running it
        with contextlib.suppress(SyntaxError, ValueError, KeyError, RecursionError, MemoryError):
            return (s := symtable.symtable(c, "<extract_code>", "exec").lookup(name)).is_assigned() or s.is_imported()
    code = ([c for c in py if len(py) > 1 and isinstance(name, str) and binds(c)] or py or [None])[-1]  # one: no choice
    return code if code and code.strip() else None


@dataclass
class ExecResult:
    status: str              # pass | fail | timeout | error
    returncode: int | None   # of the intermediate: the program's exit code or 128+signal (-9: killed at the limit)
    stdout: str              # at most OUTPUT_MB (scripts; a test run exits without flushing it)
    stderr: str              # the last 2000 characters, for debugging
    seconds: float


# Runs in the sandbox process. Everything it uses once the program runs is a local (or a default argument) bound
# beforehand: a program can rebind globals and builtins (__main__.exec = ...), but not the frames holding these,
# and it runs in a second thread, where Python refuses to install signal handlers (a handler's frame argument
# would lead back to these frames); frames are otherwise refused by the audit hook.
def _sandbox_main():
    import _imp, _signal, _stat, _thread, gc, json, os, resource, sys, traceback  # no ctypes
    unsafe = lambda part: part in ("ctypes", "readline", "_multiprocessing", "_dbm", "_gdbm", "syslog", "_curses", "_tkinter",
        "_ssl", "mmap", "nis", "spwd", "_socket", "_uuid", "pwd", "grp") or part.startswith(
        ("_ctypes", "_test", "_xx", "_interp", "_posix", "_cffi"))
    if sys.argv[1] == "root":  # _own_root: the files of the runs' root, this harness's imports as .pyc
        return _root_files(sys.argv[2], set(sys.modules), unsafe)
    job_fd, req_fd, resp_fd = map(int, sys.argv[1:4])
    sys.argv[:] = ["solution.py"]  # as `python solution.py` would show it (fileinput reads files named there)
    with open(job_fd) as f:
        job = json.load(f)
    # sys.path: the standard library only (-S -P): not the cwd (the program could plant math.py there), not
    # site-packages (native modules such as _cffi_backend read memory and files)
    if child := os.fork():   # the intermediate: keeps the caller's identity and waits; the caller keeps the clock
        os.close(req_fd), os.close(resp_fd)
        code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        os._exit(code if code >= 0 else 128 - code)
    if os.geteuid() == 0:
        # its uid may not be able to enter the directories above Python's (e.g. /root is 0700): reach the import
        # path through directory fds opened now; /proc/self/fd/N skips the permission checks of the parents
        # (none in its own root: no /proc there, and its dirs are open to every uid)
        fds = {p: "/proc/self/fd/%d" % os.open(p, os.O_DIRECTORY)
               for p in sys.path if os.path.isdir(p)} if os.path.isdir("/proc") else {}
        via = lambda p: next((v + p[len(k):] for k, v in fds.items() if p == k or p.startswith(k + os.sep)), p)
        sys.path[:] = [via(p) for p in sys.path]
        for m in list(sys.modules.values()):             # packages already imported (collections, encodings)
            if isinstance(getattr(m, "__path__", None), list):
                m.__path__[:] = [via(p) for p in m.__path__]
        # a uid of its own (job["uid"]: 2^30 + the caller's thread id, unique while it runs; a run in its own root
        # sees no /proc), not nobody: as nobody every run could signal the others (pidfd, or SIGIO by F_SETOWN), and one
        # program failed every correct one of its batch (eighteenth review)
        os.chown(".", uid := job["uid"], uid), os.setgroups([]), os.setgid(uid), os.setuid(uid)
    # No PR_SET_PDEATHSIG: it needs ctypes, and a _ctypes this process has loaded can be loaded again by file
    # path with no audit event, giving the program pointers into its own memory (and the hook's state). The caller
    # kills the process group instead (a program could leave it with os.setsid).
    stat, readlink, getcwd = os.stat, os.readlink, os.getcwd
    def resolve(p, rel=True, type=type, str=str, bytes=bytes, OSError=OSError, PermissionError=PermissionError):
        # os.path.realpath from C functions bound now: posixpath's are Python and call what the program can patch.
        # An exact str or bytes only: a PathLike or a str subclass could answer this check and the call differently
        p = p.decode("utf-8", "surrogateescape") if type(p) is bytes else p
        # a relative path is resolved here against the cwd, by os.open maybe against a dir_fd that its open event
        # (mode None) does not show: absolute paths only there (the other events show their dir_fd: refused below)
        if type(p) is not str or not (rel or p.startswith("/")):
            raise PermissionError("sandbox: a path that is not a str or bytes, or a relative one given to os.open")
        # (a symbolic link loop would run to the time limit and fail: none can be made, os.symlink is refused)
        todo, done = (p if p.startswith("/") else getcwd() + "/" + p).split("/"), []
        while todo:
            part = todo.pop(0)
            if part in ("", ".", ".."):
                done = done[:-1] if part == ".." else done
                continue
            try:
                target = readlink("/".join(["", *done, part]))
            except OSError:  # not a symbolic link (or no such path)
                done.append(part)
            else:  # a symbolic link: its target takes its place (from the root when absolute)
                todo[:0], done = target.split("/"), [] if target.startswith("/") else done
        return "/".join(["", *done]) or "/"
    # r: a resolved path; strictly below the work dir (removing the dir itself and putting a file in its place left
    # the file in /tmp after the run, a note store for later runs: fourteenth review)
    work, inside = resolve(".") + "/", lambda r: r == "/dev/null" or r.startswith(work)
    # what the program may read outside its dir: the standard library (its import path), /dev/urandom. Not
    # site-packages, which pyenv, Docker's and conda's Pythons keep inside it (_cffi_backend from there called libc
    # with no audit event: it read the data's gold solutions, all 1,138 passed; fifteenth review)
    # (or the standard library's zip, which is the file itself in its own root: _own_root)
    dirs = tuple(resolve(p) + "/" * os.path.isdir(p) for p in sys.path if os.path.exists(p))
    readable = lambda r: r.startswith(dirs) and "/site-packages/" not in r and "/dist-packages/" not in r
    deny = frozenset("os.kill os.killpg os.fork os.forkpty os.exec os.posix_spawn os.spawn os.system subprocess.Popen "
                     "resource.prlimit sys.settrace sys.setprofile sys._current_frames sys._current_exceptions "
                     "os.symlink sys.addaudithook gc.get_objects gc.get_referrers gc.get_referents code.__new__ "
                     "marshal.loads marshal.load sqlite3.connect os.chmod os.putenv os.unsetenv os.lockf".split())
    # no chmod: all it makes is removable. No environment changes: OPENSSL_CONF made _hashlib's libcrypto dlopen a
    # .so the program wrote, with no audit event (it read the gold solutions: sixteenth review)
    # sockets (_socket: socketpair, if_nameindex make them with no audit event) and C modules making them (_uuid's
    # uuid1 to uuidd; pwd, grp through glibc to nscd): their inode numbers come from a machine-wide counter, where a
    # correct program wrote its answers for a later one (twenty-sixth review)
    # memory access (ctypes, the test modules), interpreters without this hook (_xxsubinterpreters, _interpreters),
    # modules that read or write files in C with no audit event (readline's history files, shared memory (_posixshmem),
    # dbm, syslog, Tcl's own open / read / puts; spwd, deprecated, warned on stderr), processes with none
    # (_posixsubprocess.fork_exec: only RLIMIT_NPROC stopped it; subprocess and asyncio, which import it, cannot be
    # imported)
    path_events = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chown": 1, "os.utime": 1,
                   "os.rename": 2, "os.link": 2, "os.truncate": 0, "shutil.rmtree": 1, "os.setxattr": 0, "os.removexattr": 0}
    wflags, not_paths = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC, (int, tuple, type(None))
    made = []  # one item per file written or dir made
    def hook(event, args, any=any, str=str, int=int, len=len, type=type, PermissionError=PermissionError, ValueError=ValueError,
             AttributeError=AttributeError, ModuleNotFoundError=ModuleNotFoundError, S_ISDIR=_stat.S_ISDIR):
        if event in deny or event.startswith(("ctypes.", "socket.", "fcntl.")) or event == "import" and (  # by a plain str name,
                type(args[0]) is not str or any(unsafe(part) for part in args[0].split("."))  # a native module only
                or args[1] is not None and not readable(resolve(args[1]))):  # from the standard library's files
            # a refused import as a missing module, so `try: import ssl / except ImportError:` goes on without it. Still
            # refused (the hook's raise refuses it, whatever the class); a fallback is another import, checked again
            raise (ModuleNotFoundError if event == "import" else PermissionError)("sandbox: " + event)
        # frames: a traceback of a refused call holds this hook's frame, whose locals lead to its closure's cells
        if event == "sys._getframe" or event == "object.__getattr__" and args[1] in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
            # ValueError for sys._getframe: namedtuple, typing and enum tolerate it there
            raise (ValueError if event == "sys._getframe" else AttributeError)("sandbox: no frames")
        writes = event in ("os.mkdir", "os.link")  # or an open for writing, below
        if event == "open" and type(args[0]) is not int:
            writes = (type(args[1]) is str and any(c in args[1] for c in "wax+")) or (args[2] or 0) & wflags
            # inside the work dir (or the dir itself: tempfile.TemporaryFile opens it with O_TMPFILE, and correct
            # programs using it failed: twenty-first review), or reading a file (not a directory) of the standard
            # library. The directory test stats the path as given (the resolved one may be out of its uid's reach);
            # no such path: its OSError refuses the open, which would fail too
            p = resolve(args[0], args[1] is not None)
            if not (inside(p) or p + "/" == work or not writes and (readable(p) or p == "/dev/urandom")
                    and not S_ISDIR(stat(args[0]).st_mode)):
                raise PermissionError("sandbox: open " + p)
        elif (n := path_events.get(event)) is not None:  # n: how many dir_fd arguments end its args
            if any(type(a) not in not_paths and not inside(resolve(a)) for a in args) or \
                    any(a not in (None, -1) for a in args[len(args) - n:] if n):
                raise PermissionError("sandbox: " + event)
        # files written and dirs made (once allowed): at most 10,000, so the cleanup's walk stays short (fifteenth
        # review: it took 19 s, outside the run's time limit, for 158k dirs)
        if writes and (made.append(1) or len(made) > 10_000):
            raise PermissionError("sandbox: over 10,000 files written or dirs made")
    # The program runs in a second thread (_program): Python refuses it signal handlers, whose frame argument led
    # back to this frame, whose locals (the hook's closure) the program could then rewrite; that thread's frames
    # lead nowhere. SIGINT (the only signal whose default runs Python code here: KeyboardInterrupt) is ignored.
    go, wait = _thread.allocate_lock(), _thread.allocate_lock()
    go.acquire(), wait.acquire()
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    _thread.start_new_thread(_program, (job, go, req_fd, resp_fd))
    # rlimits (NPROC 1 refuses new threads: set once the program's thread exists), the hook
    for name, lim in (("CPU", (job["cpu"], job["cpu"] + 1)), ("AS", (job["mem"],) * 2), ("FSIZE", (job["fsize"],) * 2),
                      ("NPROC", (1, 1)), ("CORE", (0, 0)), ("NOFILE", (64, 64))):
        resource.setrlimit(getattr(resource, "RLIMIT_" + name), lim)
    # imports compile from source from now on (no cache under this prefix), so marshal can be refused: crafted
    # bytecode (a .pyc) reads memory, and with it could undo the hook
    sys.pycache_prefix = work + "no-pycache"
    # nor from the .pyc files in the standard library's zip (_own_root), which the harness imported from until now
    sys.modules["zipimport"]._zip_searchorder = (("/__init__.py", False, True), (".py", False, False))  # (no .pyc)
    sys.addaudithook(hook)
    # gc.set_debug(DEBUG_SAVEALL) kept dead frames in gc.garbage (this hook's, in a refused call's traceback);
    # a fresh gc module (with it back) needs _imp.create_builtin: every builtin module is imported now (but
    # refused ones: Debian's Python has syslog and _posixsubprocess built in), then both go (below)
    [__import__(name) for name in sys.builtin_module_names if not unsafe(name)]
    # ways to keep notes across runs, none with an audit event: FIFOs or files outside (mkfifo, mknod), a process
    # outliving the run by leaving the process group killed at its end (it kept notes in file locks), pages of
    # standard-library files evicted and probed in the page cache; memfd_create (shared memory past RLIMIT_AS: 2x the
    # memory limit); renicing or pinning other runs to one CPU (they time out: sixteenth review). Gone from os and
    # from posix, where they come from. And sys.monitoring (3.12+, no audit event): callbacks on the tests' code, whose
    # constants hold the expected answers (the GPU machine's Python 3.12 has it: a test's program passed; CI's 3.11 not);
    # the perf trampoline (3.12+: C code wrote /tmp/perf-PID.map, never removed, notes across runs: nineteenth review).
    # Signals between runs graded at once, none with an audit event: free blocks of the filesystem shared by their
    # stdout files (statvfs: a program passed by reading a sibling's answers, twenty-third review), free memory
    # (sysconf), a kernel-wide counter of inode numbers (a burst of pipes a sibling sees in its own pipes' inode
    # numbers: twenty-fourth review, 28/28 passes beside a solver; across runs too, and pidfd_open's numbers count
    # the machine's processes: twenty-sixth review; and glibc's user and group lookups, getgrouplist and initgroups,
    # make a socket per 100 calls, to nscd). And glibc's gettext (in _locale, no audit event),
    # which read .mo files anywhere and loaded the gconv library they named (nis, refused above, sent network traffic:
    # seventeenth review)
    for name in ("mkfifo", "mknod", "setsid", "setpgid", "setpgrp", "login_tty", "posix_fadvise", "preadv", "pwritev",
                 "memfd_create", "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "monitoring",
                 "activate_stack_trampoline", "statvfs", "fstatvfs", "sysconf", "getloadavg", "pipe", "pipe2", "pidfd_open",
                 "getgrouplist", "initgroups", "bindtextdomain", "bind_textdomain_codeset", "textdomain", "gettext",
                 "dgettext", "dcgettext", "set_debug", "create_builtin"):
        [delattr(m, name) for m in (os, sys.modules[os.name], sys, __import__("_locale"), gc, _imp) if hasattr(m, name)]
    # traceback.print_exc / format_exc and logging.exception walk a traceback's frames, which are refused (the hook's
    # own frame is in a refused call's): they print the exception alone, as for an empty traceback (3.12+ also read
    # the last frame's names for a NameError's suggestion)
    traceback.walk_tb = traceback._walk_tb_with_full_positions = traceback._compute_suggestion_error = lambda *a: ()
    go.release()
    wait.acquire()  # forever (nothing can interrupt it: no signal has a Python handler): the program's thread ends it


def _program(job, go, req_fd, resp_fd):  # the program's thread: nothing of the sandbox among its locals or args
    """Setup and program (a script in io mode), then (tests) their top-level names served to the judge, a request a
    line. Nothing here is trusted (the program may rebind all of it): the judge decides, from the values it decodes."""
    import atexit, builtins, json, os, sys
    go.acquire()
    status, g, (enc, dec) = 1, {"__name__": job["name"], "__file__": "solution.py", "__builtins__": builtins}, _wire(job["depth"])
    builtins.exit = builtins.quit = sys.exit  # site's (python -S has none): a script's exit() ends it as in Python
    try:
        for name in "setup", "code":
            exec(compile(job[name], "<%s>" % name, "exec"), g)
        requests, replies, reply, line = os.fdopen(req_fd, "rb"), os.fdopen(resp_fd, "wb"), ["ok", ["atom", None]], b"-"
        while job["mode"] == "test" and line:  # the first reply: the program ran to its end (the judge waits for it)
            replies.write(json.dumps(reply).encode() + b"\n")
            replies.flush()
            line = requests.readline()  # b"" once the judge is done
            try:  # get a global, or call / getattr / setattr an object
                op, target, args, kwargs = json.loads(line)
                obj, args, kw = g[target] if op == "get" else dec(["ref", target]), [*map(dec, args)], {k: dec(v) for k, v in kwargs}
                reply = ["ok", enc(obj if op == "get" else obj(*args, **kw) if op == "call" else
                                   (getattr, setattr)[op == "setattr"](obj, *args))]
            except BaseException as e:  # noqa: B036 (SystemExit from the program is an answer too)
                reply = ["raise", type(e).__name__ if getattr(builtins, type(e).__name__, None) is type(e) else "Exception"]
        status = 0
    except SystemExit as e:  # as a script's exit status
        status = 0 if e.code is None else e.code if type(e.code) is int else 1
    except BaseException as e:  # noqa: B036 (its traceback cannot be printed: frames are refused)
        sys.stderr.write("program: %s\n" % type(e).__name__)
    finally:
        try:  # as Python's exit: the program's atexit functions (their errors printed, the status kept), then its
            # files flushed, the original stdout too (fast-output templates swap sys.stdout and write there at exit)
            atexit._run_exitfuncs(), sys.stdout.flush(), sys.__stdout__.flush(), sys.stderr.flush()
        finally:
            os._exit(status)


def _wire(depth, handle=None):
    """The values judge and program exchange: tagged JSON of exact built-in types, decoded into fresh objects
    (never eval or pickle), nesting and (by the caller) size bounded; an iterator as its first items. Anything else
    the program sends is a handle ("ref", i) into its table, which the judge decodes as handle(i) and may only send
    back; the judge sends nothing else (TypeError). Returns (encode, decode); source shared by both processes."""
    import builtins, collections, itertools
    builtin_type = lambda v: getattr(builtins, v) if type(getattr(builtins, v, None)) is type else {}[v]
    atoms = {int: ("int", hex, lambda v: int(v, 16)), float: ("float", float.hex, float.fromhex),  # hex: no digit
             bytes: ("bytes", bytes.hex, bytes.fromhex), type: ("type", lambda t: t.__name__, builtin_type)}  # limit
    kinds = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "deque": collections.deque,
             "iter": iter, "complex": lambda v: complex(*v), "dict": dict, "OrderedDict": collections.OrderedDict,
             "Counter": lambda v: collections.Counter(dict(v))}
    names = {t: k for k, t in kinds.items()} | {collections.defaultdict: "dict", collections.Counter: "Counter", complex: "complex"}
    # A subclass of a plain type overriding none of what a test's ==, hash, truth, len, `in` and iteration use (a
    # namedtuple, an IntEnum, a str subclass; not an always-equal int) crosses as the plain value it holds, read by the
    # plain type's own method; a bytearray as bytes (== alike). Exact: a plain value is what Python compared there.
    # (This side is the program's, so no wall: it could send any plain value itself; the judge decodes fresh ones)
    held = {int: int.__int__, float: float.__float__, str: str.__str__, bytes: bytes.__bytes__, bytearray: bytes,
            tuple: lambda x: tuple.__add__((), x)}
    uses = "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __bool__ __len__ __contains__ __iter__ __getitem__".split()
    plain = lambda t, b: issubclass(t, b) and all(getattr(b, m, None) is next(  # each found first in t's MRO where b has it
        (c.__dict__[m] for c in t.__mro__ if m in c.__dict__), None) for m in uses)
    parse, table, handles = {tag: f for tag, _, f in atoms.values()}, [], {}
    def enc(x, d=0):
        t, k = type(x), names.get(type(x))
        if d > depth:
            raise ValueError("too deeply nested")
        if x is None or t in (bool, str):
            return ["atom", x]
        if t in atoms and (t is not type or getattr(builtins, x.__name__, None) is x):
            return [atoms[t][0], atoms[t][1](x)]
        if k or hasattr(t, "__next__") and t.__module__ in ("builtins", "itertools"):  # a built-in iterator or a
            # generator: its first items (not a file: it is one too)
            items = x.items() if k in ("dict", "OrderedDict", "Counter") else [x.real, x.imag] if t is complex else x
            return [k or "iter", [enc(v, d + 1) for v in itertools.islice(items, 100_000 if k is None else None)]]
        if (b := next((b for b in held if plain(t, b)), None)) is not None:
            return enc(held[b](x), d)
        if handle is None:
            table.append(x)
        elif t is not handle:
            raise TypeError("cannot send a %s to the program" % t.__name__)
        return ["ref", len(table) - 1 if handle is None else x.i]
    def dec(m, d=0):
        if d > depth or type(m) is not list or len(m) != 2 or type(m[0]) is not str:
            raise ValueError("malformed")
        tag, v = m
        if tag == "atom" and (v is None or type(v) in (bool, str)) or tag in parse and type(v) is str:
            return v if tag == "atom" else parse[tag](v)
        if tag == "ref" and type(v) is int and v >= 0:
            return table[v] if handle is None else handles.setdefault(v, handle(v))
        if tag not in kinds or type(v) is not list:
            raise ValueError("malformed")
        return kinds[tag]([dec(x, d + 1) for x in v])
    return enc, dec


def _judge_main():  # runs as its own program (python -S -c; argv: request fd, reply fd; the job on stdin)
    """The tests, outside the program's process; no code of the program runs here. The setup (the problem's) runs
    here, then the names the tests need from the program are fetched: fresh plain values, or handles whose calls
    run there. Pass: exit status 0, only after every test ran."""
    import ast, builtins, contextlib, json, os, resource, sys
    job, requests, replies = json.load(sys.stdin), os.fdopen(int(sys.argv[1]), "wb"), os.fdopen(int(sys.argv[2]), "rb")
    resource.setrlimit(resource.RLIMIT_AS, (job["mem"], job["mem"]))  # trusted, but it decodes what the program sends
    class Handle:  # an object of the program's: calls and attribute access run in its process; or it is sent back
        __slots__ = ("i",)
        def __init__(self, i):
            object.__setattr__(self, "i", i)
        def __call__(self, *args, **kwargs):
            return ask("call", self.i, args, kwargs)
        def __getattr__(self, name):
            return ask("getattr", self.i, [name], {})
        def __setattr__(self, name, value):
            ask("setattr", self.i, [name, value], {})
        def __eq__(self, other):  # its value is out of reach: no comparison or truth value
            raise TypeError("a value of the program's own class")
        __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __eq__
        __hash__ = object.__hash__
    enc, dec = _wire(job["depth"], Handle)
    def ask(op=None, target=None, args=(), kwargs=None):  # a request, or none: the reply to wait for first
        if op:
            requests.write(json.dumps([op, target, [*map(enc, args)], [[k, enc(v)] for k, v in kwargs.items()]]).encode() + b"\n")
            requests.flush()
        try:
            status, value = json.loads(replies.readline(job["cap"] + 1))
            if status == "ok":
                return dec(value)
            kind = getattr(builtins, value) if type(value) is str and value.isidentifier() else None
        except Exception:  # a malformed reply, or none: the program failed, whatever the tests would catch
            os._exit(1)
        # not StopIteration: raised into the tests' map or filter it would end them early, as if all had passed
        known = type(kind) is type and issubclass(kind, Exception) and kind not in (StopIteration, StopAsyncIteration)
        raise kind() if known else Exception()
    # Pass: exit status 0 at the end, with no assert failed; an exception the tests let out exits 1. An assert that
    # fails is recorded and the tests go on, so what the program is asked next never tells it whether its last answer
    # passed (an oracle it could learn hidden tests from, keeping the answers across runs). `assert X` becomes
    # `failed.append(not X)`: a failure raises nothing, so it costs the judge no more time than a pass (the extra raise
    # was an oracle too: the program timed the gaps between its calls, twenty-first review); its message never runs
    # (calling the program there told it)
    class Soft(ast.NodeTransformer):
        def visit_Assert(self, node):
            soft = ast.parse("try:\n    _sbx_failed.append(not 0)\nexcept Exception:\n    _sbx_failed.append(True)").body[0]
            soft.body[0].value.args[0].operand = node.test
            return ast.copy_location(soft, node)
    failed, tree = [], ast.fix_missing_locations(Soft().visit(ast.parse(job["tests"])))
    ns = {"__name__": "__main__", "__builtins__": builtins, "_sbx_failed": failed}
    ask()  # the program ran to its end
    exec(compile(job["setup"], "<setup>", "exec"), ns)
    # each name the tests use that neither the setup nor builtins define, and the entry point: the program's
    # (those the tests define themselves replace it when they run)
    for name in sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(ns) - set(vars(builtins))
                       | {job["entry_point"]} - {None}):
        ns.pop(name, None)
        with contextlib.suppress(Exception):  # not defined by the program: the tests' NameError. A module the tests
            # use without importing it (mbpp-596's sys) is the judge's own: the program's could answer for it
            ns[name] = __import__(name) if name in sys.stdlib_module_names and name != job["entry_point"] else \
                ask("get", name, [], {})
    exec(compile(tree, "<tests>", "exec"), ns)
    if job["check"]:
        ns["check"](ns[job["entry_point"]])
    os._exit(1 if any(failed) else 0)


def _root_files(top, pre, unsafe):  # the harness's other job (_own_root: python -I -S -c _HARNESS root TOP): in top,
    import glob, importlib.util, marshal, os, re, shlex, subprocess, sys, zipfile  # the files of the runs' root (_ROOT)
    # sys.path under -I -S: the zip Python looks for first, the standard library, lib-dynload
    (zpath, lib, dyn), skip = sys.path, {"site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter",
                                         "turtledemo", "lib2to3", "ensurepip", "__pycache__", "lib-dynload"}
    with zipfile.ZipFile(os.path.join(top, "stdlib.zip"), "w") as z:  # stored, not compressed
        for d, subs, files in os.walk(lib):
            subs[:] = sorted(n for n in subs if n not in skip)
            for rel in (os.path.relpath(os.path.join(d, n), lib) for n in sorted(files) if n.endswith(".py")):
                z.write(os.path.join(lib, rel), rel)  # with a .pyc (hash-based, unchecked) of each module imported so
                if rel[:-3].replace("/", ".").removesuffix(".__init__") in pre:  # far (the harness's); the rest as .py
                    z.writestr(rel + "c", importlib.util.MAGIC_NUMBER + b"\1\0\0\0" + bytes(8) + marshal.dumps(
                        compile(z.read(rel), f"{zpath}/{rel}", "exec", dont_inherit=True, optimize=0)))
    # lib-dynload's .so files but those of the modules the sandbox refuses
    so = [p for p in sorted(glob.glob(glob.escape(dyn) + "/*.so")) if not unsafe(os.path.basename(p).split(".")[0])]
    libs = re.findall(r"(/\S+) \(0x", subprocess.run(["ldd", sys.executable, *so], capture_output=True, text=True).stdout)
    files = {zpath: z.filename, **{p: p for p in ("/etc/ld.so.cache", sys.executable, *so, *libs) if os.path.isfile(p)}}
    open(os.path.join(top, "env"), "w").write(f"export PYTHONHOME={shlex.quote(sys.base_prefix + ':' + sys.base_exec_prefix)}\n")
    e = lambda p: p.translate({32: r"\040", 9: r"\011", 10: r"\012", 92: r"\134"})  # a path as fstab spells it
    with open(os.path.join(top, "fstab"), "w") as fstab:
        for p, f in files.items():  # each file alone, on an empty file of the skeleton
            os.makedirs(os.path.dirname(top + "/skel" + p), exist_ok=True)
            open(top + "/skel" + p, "w").close()
            fstab.write(f"{e(f)} {e(top + '/root' + p)} none bind,ro,noatime,nosuid,nodev 0 0\n")


# The sandbox and the judge run as their own programs (python -S -c): these functions' sources, then a call.
_HARNESS = "".join(map(inspect.getsource, (_wire, _program, _root_files, _sandbox_main))) + "_sandbox_main()\n"
_JUDGE = inspect.getsource(_wire) + inspect.getsource(_judge_main) + "_judge_main()\n"

def _remove(top: str) -> bool:
    """Delete top and everything in it, whatever a program left there (shutil.rmtree recursed and failed on a chain
    of 3,000 directories, leaving it: fourteenth review): chmod -R (a dir may be unreadable) and rm -rf, which walk it
    with no recursion and no long paths; a run dir left empty (always so in its own root) by rmdir alone, with no
    process started. True if top stays."""
    with contextlib.suppress(OSError):
        os.rmdir(os.path.join(top, "box"))
        os.rmdir(top)
    if os.path.lexists(top):
        subprocess.run(["sh", "-c", 'chmod -R u+rwx -- "$1"; rm -rf -- "$1"', "sh", top], capture_output=True)
    return os.path.lexists(top)


# The run's own root and network, where it has one (_own_root): in new mount, network, IPC (no System V or POSIX
# queues or shared memory shared with other runs: notes and memory that outlived a run, twentieth review) and PID
# namespaces (every process of the run dies with it, one that left its session too), from $1 (_root_files: env, skel,
# fstab): PYTHONHOME set, a fresh tmpfs at $1/root, the skeleton's dirs and empty files copied in, the host's files
# bound on these by one `mount -a`, no /proc (its inode numbers come from a machine-wide counter: twenty-sixth review),
# the run's dir a fresh tmpfs at its own path (nr_inodes caps the
# files: 854k empty ones took 870 MB of kernel memory), /dev/null and /dev/urandom made, then the harness started
# with that root (unshare -R) in its dir, with no_new_privs (a set-uid program gives no one root: a program that
# undid the audit hook could exec one)
_ROOT = ("unshare", "-m", "-n", "-i", "-p", "--fork", "sh", "-c", 'T=$1 R=$1/root B=$PWD && shift && . "$T/env" && mount -t '
         'tmpfs -o mode=755,size=1m,nr_inodes=512,X-mount.mkdir root "$R" && cp -a "$T/skel/." "$R" && mount -a -T "$T/fstab" && '
         f'mount -t tmpfs -o noexec,nosuid,nodev,size={4 * OUTPUT_MB}m,nr_inodes=16k,mode=700,X-mount.mkdir box "$R$B" && '
         'mkdir "$R/dev" && mknod -m 666 "$R/dev/null" c 1 3 && mknod "$R/dev/urandom" c 1 9 && exec setpriv --no-new-privs '
         'unshare -R "$R" -w "$B" "$@"', "sh")


@functools.cache
def _own_root(python: str) -> str:
    """As root where namespaces and mounts are allowed, the dir from which _ROOT makes the runs' root for this Python
    (else ""): their root holds no dir of the host, only the host's files it needs, each bound alone. So not the data's
    gold answers, other runs' dirs or /tmp, even past the audit hook (a CPython use-after-free undid it: nineteenth
    review); and every dir a run can look a name up in is its own, gone with it: the kernel caches failed lookups per
    filesystem, and a later run timed a lookup of a name a correct program had looked up, reading its answers
    (twenty-fifth review). The files (_root_files, made once per Python by that Python: the harness itself, so that
    the modules it imports come compiled): the standard library's .py files in one zip at the path of sys.path's
    zip (first on the path, imported from with no lookups; .pyc only for the harness's own imports), lib-dynload's .so
    files but refused ones, the libraries they and Python need (ldd), ld.so.cache and Python. No network; its dir a
    fresh tmpfs, noexec (no file it writes can be loaded as code, the way two reviews' .so reached libcrypto), 64 MiB
    in all, gone with the run. Made once, then tried (a Python importing from the zip and a .so in it); where that
    fails (no namespaces, no ldd, ...) one line on stderr says so, once, and the runs go on in a plain dir with the
    audit hook their only wall: the lookup-cache notes are open there."""
    if os.geteuid():  # not root: no namespaces or mounts
        return ""
    import atexit
    atexit.register(_remove, top := tempfile.mkdtemp(prefix="grpo-root-"))
    try:  # the files (_root_files), then one run in the root: a Python importing from its zip and lib-dynload (_json)
        for argv in [python, "-I", "-S", "-c", _HARNESS, "root", top], [*_ROOT, top, python, "-S", "-c", "import json"]:
            subprocess.run(argv, cwd=top, env={}, capture_output=True, text=True, check=True)
        return top
    except (OSError, subprocess.CalledProcessError) as e:  # one line, once (cached)
        why = (getattr(e, "stderr", None) or repr(e)).strip().splitlines()[-1][:200]
        print(f"rewards: WARNING: the runs get no root of their own ({why}): each runs in a plain dir behind the audit "
              "hook alone, so the lookup-cache channel (rewards.py) is open", file=sys.stderr)
        return ""


def run_python(code: str, tests: str = "", *, setup: str = "", entry_point: str | None = None,
               stdin: str | None = None, timeout: float = TIMEOUT_S, memory_mb: int = MEMORY_MB) -> ExecResult:
    """Run setup + code in the sandbox and the tests in a judge process calling it (pass = every test ran and
    passed), or, when stdin is given, code as a script reading it (pass = exit status 0; the caller compares stdout)."""
    t0 = time.monotonic()
    if timeout <= 0:
        return ExecResult("timeout", None, "", "batch time budget spent", 0.0)
    cap, testing = OUTPUT_MB << 20, stdin is None
    job = dict(mode="test" if testing else "io", setup=setup, code=code, depth=100, cpu=int(timeout) + 1, fsize=cap,
               uid=(1 << 30) + threading.get_native_id(), mem=memory_mb << 20, name="solution" if testing else "__main__")
    # a solution under test is not __main__ (nor in HumanEval's or MBPP's harness): its `if __name__ == "__main__":`
    # tail (doctest.testmod(), unittest.main(), input()) does not run; all 1,138 references failed with a doctest
    # tail (twenty-second review). A script (io) is __main__
    judge_job = dict(setup=setup, tests=tests, entry_point=entry_point, depth=100, cap=cap, mem=2 * memory_mb << 20,
                     check=bool(entry_point and _CHECK.search(tests)))
    # the program's dir is box in the caller's dir top (0711): it can neither remove nor replace its own dir
    top, procs, fds = tempfile.mkdtemp(prefix=WORKDIR_PREFIX), [], [*os.pipe(), *os.pipe()]  # requests, replies
    work, root = os.path.join(top, "box"), _own_root(sys.executable)
    files = [tempfile.TemporaryFile() for _ in range(6)]  # stdin, stdout, stderr: files cannot fill up and block;
    try:                                                  # the judge's job, its output; the sandbox's job
        os.chmod(top, 0o711), os.mkdir(work, 0o700)  # (the sandbox gives it to its uid)
        for f, text in zip((files[0], files[3], files[5]), (stdin or "", json.dumps(judge_job), json.dumps(job))):
            f.write(text.encode()), f.seek(0)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}
        start = lambda script, fds, **kw: procs.append(subprocess.Popen(  # each in its own session (process group)
            [*kw.pop("prefix", ()), sys.executable, "-S", "-P", "-c", script, *map(str, fds), *kw.pop("argv", [])],
            env=env, pass_fds=fds, start_new_session=True, **kw))
        start(_HARNESS, [files[5].fileno(), *fds[::3]], stdin=files[0], stdout=files[1], stderr=files[2], cwd=work,
              prefix=(*_ROOT, root) if root else (), argv=[work])  # the work dir on its command line: strays are found by it
        if testing:  # the judge: not forked from the program's process, holding none of its fds but the pipes
            start(_JUDGE, fds[1:3], stdin=files[3], stdout=files[4], stderr=files[4])
        while fds:  # each removed as it is closed: the finally below must not close a number another run reuses
            os.close(fds.pop())
        fds.append(os.pidfd_open(procs[-1].pid))  # the judge's when testing, closed by the finally below
        exited = _readable(fds[0], timeout)  # the wall clock
    except OSError as e:
        return ExecResult("error", None, "", repr(e), time.monotonic() - t0)
    finally:  # every process group killed (at the time limit, or failed half-way) before its leader is reaped (its
        for p in procs:  # id could be reused after), then the outputs read and every fd and file closed
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
            p.kill(), p.wait()
        out, err = os.pread(files[1].fileno(), cap, 0).decode("utf-8", "replace"), ""
        for f in files[2], files[4]:
            f.seek(max(0, f.seek(0, 2) - 1000))
            err += f.read().decode("utf-8", "replace")
        [os.close(fd) for fd in fds]
        [f.close() for f in files]
        err += f"\nsandbox: could not remove {top}" if (kept := _remove(top)) else ""
    rc, verdict = procs[0].returncode, procs[-1].returncode  # the program's exit status, the judge's
    # tests: the judge's verdict only; a dir the program made unremovable: no reward ('error'), and the caller is told
    status = "error" if kept else "timeout" if not exited or rc == 128 + signal.SIGXCPU else "pass" if verdict == 0 else "fail"
    return ExecResult(status, rc, out, err, time.monotonic() - t0)


def bad_problem(problem: dict) -> str | None:
    """Why a code problem cannot tell a right program from a wrong one (then nothing passes), or None."""
    tests, io_tests, ep = problem.get("test_code") or "", problem.get("io_tests") or [], problem.get("entry_point")
    try:
        tree = ast.parse(tests)
    except SyntaxError:
        return "test_code does not parse"
    return next((why for bad, why in (
        (not tests.strip() and not io_tests, "no tests"),
        (tests.strip() and not any(isinstance(n, (ast.Assert, ast.Raise)) for n in ast.walk(tree)), "tests assert nothing"),
        (_CHECK.search(tests) and not (isinstance(ep, str) and ep.isidentifier()), "check(candidate) but no entry_point"),
        (any(not str(case.get("output", "")).strip() for case in io_tests), "an io test expects no output")) if bad), None)


def code_check(completion: str, problem: dict, deadline: float | None = None) -> tuple[float, str]:
    """(reward, status) of a code completion. Each run gets problem.get("timeout", TIMEOUT_S) seconds, capped by
    `deadline` (a time.monotonic() value). A malformed problem (see bad_problem) scores 0 with 'bad_problem'."""
    if bad_problem(problem):
        return 0.0, "bad_problem"
    tests, io_tests = problem.get("test_code") or "", problem.get("io_tests") or []
    if (code := extract_code(completion, problem.get("entry_point") if tests.strip() else None)) is None:
        return 0.0, "no_code"
    limit = lambda: min(problem.get("timeout", TIMEOUT_S), float("inf") if deadline is None else deadline - time.monotonic())
    lines = lambda s: [ln.rstrip() for ln in s.rstrip().splitlines()]  # trailing whitespace is ignored
    # every run happens whatever the earlier ones gave: being run never tells a program that it passed before
    runs = [(run_python(code, tests, setup=problem.get("setup_code") or "", entry_point=problem.get("entry_point"),
                        timeout=limit()), None)] if tests.strip() else []
    runs += [(run_python(code, stdin=case["input"], timeout=limit()), case["output"]) for case in io_tests]
    status = next(("fail" if r.status == "pass" else r.status for r, out in runs
                   if r.status != "pass" or out is not None and lines(r.stdout) != lines(out)), "pass")
    return float(status == "pass"), status


# ----------------------------------------------------------------------------------------------- batch

def _safe(check, *args) -> tuple[float, str]:
    try:
        return check(*args)
    except Exception as e:  # a checker bug must not stop training: it scores 0 and shows up as 'error'
        warnings.warn(f"rewards.{check.__name__} raised {e!r}")
        return 0.0, "error"


def grade(completions: list[str], problems: list[dict], max_workers: int | None = None,
          total_timeout: float | None = None) -> list[tuple[float, str]]:
    """(reward, status) per item, dispatched on problem["task"]. Programs run in parallel (max_workers, default
    one per CPU), but never two of one problem (same tests) at once; a program not finished within total_timeout
    seconds of the call scores 0 with 'timeout'."""
    if len(completions) != len(problems):
        raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
    if bad := {p.get("task") for p in problems} - {"math", "code"}:
        raise ValueError(f"unknown task(s) {bad}: expected 'math' or 'code'")
    deadline = None if total_timeout is None else time.monotonic() + total_timeout
    # One problem's programs run one after another (other problems' beside them): two programs of one problem at once
    # could signal its answers to each other through what the machine shares (free blocks, file locks, inode numbers:
    # twenty-third and twenty-fourth reviews; the CPU), so that one computing nothing passed beside one solving it.
    # Nor right after one another: a program starts a near-constant time after the last reply of the one before it, so
    # a solver that sent its last reply at a wall-clock phase spelling its answers told them to the next program of its
    # problem (twenty-seventh review). So a lane (a worker's runs, one after another) holds two or more problems, each
    # problem's programs spread evenly over it: another problem's program runs between two of one problem's, and how
    # long it takes is its own. Fewer lanes than workers when a call has fewer than twice as many problems.
    # That blurs the channel, it does not close it: symbols wider than the neighbour's run-time spread and the gap
    # calibrated, a listener passed 18-20/20 with one program between, 8/10 with seven (twenty-eighth review). Closing
    # it needs start times that do not depend on earlier ends (slots of the time limit: ~6 s per program of a problem,
    # ~48 s a call for groups of 8): too slow for training, so left open (README, "The serial order")
    # "One problem" is one test text: problems asking the same under other names or formatting (MBPP 600 / 820 and 736 /
    # 786 in its training part) can run at once, open to the CPU channel above (thirty-first review; not exploited, rare)
    same: dict = {}  # the code items' indices by their tests
    [same.setdefault(json.dumps([p.get("test_code"), p.get("io_tests")], default=str), []).append(i)
     for i, p in enumerate(problems) if p["task"] == "code"]
    n = min(max_workers or len(os.sched_getaffinity(0)), len(same) // 2) or 1  # lanes, each of two or more problems
    at = {i: (j + .5) / len(g) for g in same.values() for j, i in enumerate(g)}  # a run's place in its problem's
    with ThreadPoolExecutor(n) as pool:
        lanes = [sorted((i for g in [*same.values()][k::n] for i in g), key=at.get) for k in range(n)]
        runs = pool.map(lambda ix: [(i, _safe(code_check, completions[i], problems[i], deadline)) for i in ix], lanes)
        scored = {i: _safe(math_check, c, p["answer"])  # math is cheap: here, while programs run
                  for i, (c, p) in enumerate(zip(completions, problems)) if p["task"] == "math"}
        scored.update(r for rs in runs for r in rs)
        return [scored[i] for i in range(len(problems))]
