"""Task data: problems from JSONL/JSON files, or built-in problems generated offline by our own seeded code.

Every problem is a plain dict, the shape rewards.py consumes:
  math {"id", "task": "math", "prompt", "answer"}      answer: the gold final answer ("#### 72" -> "72")
  code {"id", "task": "code", "prompt", "test_code"?, "entry_point"?, "setup_code"?, "io_tests"?, "solution"?}
test_code: asserts run after the solution (HumanEval's `check` is called on entry_point); setup_code: run before
it; io_tests: [{"input", "output"}] stdin/stdout cases; solution: a reference program, never shown to the model.
`prompt` is the problem text only: workflows.py adds the role instructions (e.g. "put the answer in \\boxed{}").

Row formats, detected per row by their keys, in any case (SVAMP writes Body, Question, Answer, ID): problem dicts
("task"); GSM8K (question, answer "#### N"); SVAMP / ASDiv (body, question, answer; the prompt is body + " " +
question; a gold 27.0 becomes "27", a number with a unit in parentheses, "9 (apples)", becomes "9"); MATH (problem,
answer or a \\boxed{} solution); DAPO (prompt or chat messages; solution or reward_model.ground_truth); MBPP (text,
test_list, the prompt showing the first test only; test_setup_code goes into test_code, as it uses the solution's classes); HumanEval (prompt, test,
entry_point); io-test rows (prompt/question/problem + io_tests, inputs/outputs or APPS-style input_output).
Also a run folder's JSONL logs (metrics.jsonl, eval.jsonl): append_jsonl drops a last line cut off by a kill before
it appends, read_jsonl skips one.
Left out: downloading data sets, splitting a user's file (pass separate train/test files).
"""
import ast
import builtins
import hashlib
import json
import random
import re
import sys
from pathlib import Path

from rewards import bad_problem, gold_answer, last_boxed


def _math_answer(value) -> str:
    # null, lists, NaN, 1e400 (JSON reads it as infinity): no gold
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or value != value or value in (1e999, -1e999):
        raise ValueError(f"the gold answer must be a string or a finite number, got {json.dumps(value)}")
    value = int(value) if isinstance(value, float) and value.is_integer() else value  # SVAMP writes 27.0
    gold = gold_answer(str(value)).strip()
    gold = gold.replace(",", "") if "####" in str(value) else gold  # GSM8K writes 1,000
    unit = re.fullmatch(r"([-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?)\s+\([^()]*[a-zA-Z][^()]*\)", gold)  # ASDiv: 9 (apples)
    return unit.group(1).replace(",", "") if unit else gold


def _need(ok, why: str) -> None:
    """A check of the input in one line: ValueError(why) unless ok (load_problems prefixes the file and row)."""
    if not ok:
        raise ValueError(why)


def _text(row: dict, key: str) -> str:
    _need(isinstance(v := row.get(key), str) and v.strip(), f"field {key!r} must be a non-empty string")
    return v.replace("\r\n", "\n")


def _parse_row(row: dict) -> tuple[str, dict]:
    """(format name, problem without id) for one raw row; ValueError says what is wrong."""
    _need(isinstance(row, dict), f"expected a JSON object, got {type(row).__name__}")
    keys = set(row)
    if "task" in keys:
        if row["task"] == "math":
            return "problem dict", {"task": "math", "prompt": _text(row, "prompt"), "answer": _text(row, "answer")}
        if row["task"] == "code":
            p = {"task": "code", "prompt": _text(row, "prompt")}
            p.update({k: row[k] for k in ("test_code", "entry_point", "setup_code", "io_tests", "solution") if k in row})
            _need(p.get("test_code") or p.get("io_tests"), "a code problem needs test_code or io_tests")
            return "problem dict", p
        raise ValueError(f"task must be 'math' or 'code', got {row['task']!r}")
    if {"text", "test_list"} <= keys:
        _need(isinstance(tests := row["test_list"], list) and tests and all(isinstance(t, str) for t in tests),
              "field 'test_list' must be a non-empty list of strings")
        asserts = "\n".join(t.replace("\r\n", "\n") for t in tests)
        setup = (row.get("test_setup_code") or "").replace("\r\n", "\n")
        # the prompt shows the first test only: with every test in view, a table of the asserts' inputs passes
        # them all, and a policy learns that instead of the task (the built-in problems show 2 of 5 likewise)
        p = {"task": "code", "prompt": f"{_text(row, 'text')}\nYour code should pass tests like this one:\n\n"
             f"{tests[0].strip()}", "test_code": (setup + "\n" if setup.strip() else "") + asserts,
             **({"solution": row["code"].replace("\r\n", "\n")} if isinstance(row.get("code"), str) else {})}
        # the entry point: the first function the tests call that the reference defines (it may be named like a
        # builtin, as mbpp-126's `sum`: only it may shadow one in the tests), else the first non-builtin one
        called = [n.func.id for n in ast.walk(ast.parse(asserts)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        defined = set(re.findall(r"(?m)^def\s+(\w+)", p.get("solution", "")))
        if ep := next((n for n in called if n in defined), None) or next((n for n in called if n not in dir(builtins)), None):
            p["entry_point"] = ep
        return "MBPP", p
    if {"prompt", "test", "entry_point"} <= keys:
        prompt = _text(row, "prompt")
        return "HumanEval", {"task": "code", "prompt": "Complete the following Python function. Write the complete function "
                             f"(signature and body, with any imports it needs).\n\n```python\n{prompt}```",
                             "setup_code": prompt, "test_code": _text(row, "test"), "entry_point": _text(row, "entry_point"),
                             **({"solution": prompt + row["canonical_solution"]} if isinstance(row.get("canonical_solution"), str) else {})}
    if (io := row.get("io_tests")) is None and isinstance(row.get("input_output"), str):  # APPS / TACO style
        io = json.loads(row["input_output"])
    if io is None and "inputs" in keys and "outputs" in keys:
        io = row
    if io is not None:
        if isinstance(io, dict):
            ins, outs = io.get("inputs"), io.get("outputs")
            if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
                raise ValueError("inputs and outputs must be lists of the same length")
            io = [{"input": i, "output": o} for i, o in zip(ins, outs)]
        _need(isinstance(io, list) and io and all(isinstance(c, dict) and isinstance(c.get("input"), str) and
              isinstance(c.get("output"), str) for c in io), "io tests must be a non-empty list of {'input': str, 'output': str}")
        key = next((k for k in ("prompt", "question", "problem", "description") if k in keys), "prompt")
        return "io-test", {"task": "code", "prompt": _text(row, key), "io_tests": io}
    if {"body", "question", "answer"} <= keys:  # the problem's story, then its question
        prompt = f"{_text(row, 'body').strip()} {_text(row, 'question').strip()}"
        return "SVAMP/ASDiv", {"task": "math", "prompt": prompt, "answer": _math_answer(row["answer"])}
    if {"question", "answer"} <= keys:
        fmt = "GSM8K" if "####" in str(row["answer"]) else "question/answer"
        return fmt, {"task": "math", "prompt": _text(row, "question"), "answer": _math_answer(row["answer"])}
    if "problem" in keys and ("answer" in keys or "solution" in keys):
        if (answer := row.get("answer")) is None and last_boxed(answer := _text(row, "solution")) is None:
            raise ValueError("field 'solution' has no \\boxed{} answer")
        return "MATH", {"task": "math", "prompt": _text(row, "problem"), "answer": _math_answer(answer)}
    if "prompt" in keys and ("solution" in keys or "reward_model" in keys):
        gold = row["solution"] if "solution" in keys else (row["reward_model"] or {}).get("ground_truth")
        if isinstance(prompt := row["prompt"], list):  # chat messages: the last user turn is the problem
            prompt = ([m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"] or [""])[-1]
        _need(isinstance(prompt, str) and prompt.strip(), "field 'prompt' must be a non-empty string or chat messages with a user turn")
        return "DAPO", {"task": "math", "prompt": prompt, "answer": _math_answer(gold if gold is not None else "")}
    raise ValueError(f"unrecognized row with keys {sorted(keys)}; expected GSM8K, MATH, DAPO, MBPP, HumanEval, "
                     "io-test rows or problem dicts (see data.py)")


def load_problems(path: str, task: str | None = None, limit: int | None = None) -> list[dict]:
    """Problems from a JSONL file (one row per line) or a JSON list; `task` ('math'/'code') checks every row."""
    if not (p := Path(path)).is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:  # the line of the first byte that is no UTF-8 (10: a newline's byte)
        raise ValueError(f"{path}:{p.read_bytes()[:e.start].count(10) + 1}: not UTF-8 text ({e.reason})") from None
    if p.suffix == ".json" or text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
        _need(isinstance(items, list), f"{path}: a .json data file must hold a list of rows")
        rows = [(f"item {i}", r) for i, r in enumerate(items, 1)]
    else:
        rows = [(str(i), ln) for i, ln in enumerate(text.split("\n"), 1) if ln.strip()]  # not splitlines(): U+2028 is text
    problems, seen = [], {}
    for where, row in rows[:limit]:
        try:
            row = json.loads(row) if isinstance(row, str) else row  # a JSONL line; a .json list's rows are parsed
            # SVAMP and ASDiv capitalise their keys (Body, Question, Answer, ID); JSON keys are always strings
            row = {k.lower(): v for k, v in row.items()} if isinstance(row, dict) else row
            fmt, prob = _parse_row(row)
            _need(prob["task"] != "math" or prob["answer"], "empty gold answer")
            _need(not (why := prob["task"] == "code" and bad_problem(prob)), f"no program can pass this problem: {why}")
        except (ValueError, TypeError, AttributeError, SyntaxError) as e:  # JSONDecodeError: a ValueError; tests' code
            raise ValueError(f"{path}:{where}: " + (f"invalid JSON ({e.msg})" if isinstance(e, json.JSONDecodeError)
                                                    else str(e))) from None
        if task is not None and prob["task"] != task:  # messages built only when raised: this loop runs per row
            raise ValueError(f"{path}:{where}: this {fmt} row is a {prob['task']} problem, but task={task!r} was asked for")
        rid = next((row[k] for k in ("id", "task_id", "problem_id", "unique_id") if k in row), None)
        pid = rid if isinstance(rid, str) else f"{p.stem}-{rid if rid is not None else where}"
        if pid in seen:  # ids are GRPO group keys: two problems must never share one
            raise ValueError(f"{path}:{where}: duplicate id {pid!r} (also at {seen[pid]})")
        seen[pid] = where
        problems.append({"id": pid, **prob})
    _need(problems, f"{path}: no problems in this file")
    return problems


# ------------------------------------------------------------------------------- a run folder's JSONL logs
# metrics.jsonl (train.py), eval.jsonl (eval.py, bench/campaign.py): one JSON line appended per record. A kill
# mid-write (a GPU lease ending) can leave the last line cut off, without its newline.

def read_jsonl(path, quiet=False) -> list:
    """The JSON lines of path ([] if there is none). A last line without its newline (an append cut off, or one
    being written) is skipped, with a warning naming the file unless quiet (a status poll)."""
    # tail: '' when the file ends in a newline
    *lines, tail = (Path(path).read_text() if Path(path).exists() else "").split("\n")
    if tail.strip() and not quiet:
        print(f"warning: {path}: its last line has no newline (an append cut off?): skipped", file=sys.stderr)
    return [json.loads(line) for line in lines if line.strip()]


def append_jsonl(path, *records, new=False) -> None:
    """Append each record to path (created if missing; emptied first if new) as one JSON line. A last line
    without its newline is dropped first, with a warning naming the file: appended after it, a record would
    merge with it into one broken line. With no records (any text file): only that. Readers never truncate:
    they may run while a line is being written."""
    with open(path, "w+b" if new else "a+b") as f:  # a+: reads from anywhere, writes at the end
        f.seek(0)
        if cut := len(text := f.read()) - text.rfind(b"\n") - 1:  # the bytes after the last newline
            f.truncate(len(text) - cut)
            print(f"warning: {path}: dropped a cut-off last line ({cut} bytes)", file=sys.stderr)
        f.writelines(json.dumps(r).encode() + b"\n" for r in records)


# ------------------------------------------------------------------------------------- built-in default

_NAMES = ["Ava", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jon", "Kemi", "Luis", "Mia", "Noah"]
_ITEMS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "shells", "cards", "stamps", "beads"]


def _math_problem(r: random.Random) -> tuple[str, dict]:
    """(split key, problem): a word problem with 2-4 arithmetic steps and a non-negative integer answer; the key
    is the prompt."""
    n, it, (a, b, c, d), k = r.choice(_NAMES), r.choice(_ITEMS), [r.randint(2, 12) for _ in range(4)], r.randrange(12)
    if k == 0:
        d = r.randint(1, a + b * c)
        prompt, answer = f"{n} has {a} {it}. {n} buys {b} packs with {c} {it} in each, then gives away {d}. How many {it} does {n} have now?", a + b * c - d
    elif k == 1:
        c = r.randrange((a * b) % 2, a * b, 2)  # the rest must halve evenly
        prompt, answer = f"A bakery bakes {a} trays of {b} muffins. It sells {c} muffins in the morning and half of the rest in the afternoon. How many muffins are left?", (a * b - c) // 2
    elif k == 2:
        d = r.randint(1, a * b * c - 1)
        prompt, answer = f"{n} earns ${a} an hour, works {b} hours a day for {c} days, and then spends ${d} on a bike. How many dollars does {n} have left?", a * b * c - d
    elif k == 3:
        c, d = r.randint(0, a * b // 2), r.randint(0, a * b // 2)
        prompt, answer = f"A hall has {a} rows of {b} seats. {c} seats are broken and {d} people are already seated in working seats. How many working seats are empty?", a * b - c - d
    elif k == 4:
        prompt, answer = f"{n} reads {a} pages a day for {b} days and then {c} pages a day for {d} days. How many pages does {n} read in total?", a * b + c * d
    elif k == 5:
        a, c = 10 * a, 10 * c
        prompt, answer = f"A train travels at {a} km per hour for {b} hours and then at {c} km per hour for {d} hours. How many kilometres does it travel?", a * b + c * d
    elif k == 6:
        prompt, answer = f"{n} has {a * b} {it} and shares them equally among {b} friends. Each friend then finds {c} more. How many {it} does each friend have?", a + c
    elif k == 7:
        c = r.randint(2, 4)
        prompt, answer = f"{n} is {a} years old. {n}'s sister is {b} years older, and their grandmother is {c} times as old as the sister. How old is the grandmother?", (a + b) * c
    elif k == 8:
        a = b * c + r.randint(0, 50)
        prompt, answer = f"A tank holds {a} litres of water. It leaks {b} litres every hour for {c} hours, and then {d} litres are added. How many litres are in the tank?", a - b * c + d
    elif k == 9:
        a *= 4
        prompt, answer = f"{n} saves ${a} every week for {b} weeks, spends a quarter of the savings, and then earns ${c} more. How many dollars does {n} have?", a * b * 3 // 4 + c
    elif k == 10:
        prompt, answer = f"A farm has {a} pens with {b} hens in each. Every hen lays {c} eggs a week. How many eggs are laid in {d} weeks?", a * b * c * d
    else:
        bill = (a * b + c * d) // 50 * 50 + 50
        prompt, answer = f"{n} buys {a} notebooks at ${b} each and {c} pens at ${d} each, and pays with ${bill}. How many dollars of change does {n} get?", bill - a * b - c * d
    return prompt, {"task": "math", "prompt": prompt, "answer": str(answer)}


_ints = lambda r: [r.randint(-20, 40) for _ in range(r.randint(0, 8))]
_nat = lambda r: r.randint(0, 60)
_word = lambda r: "".join(r.choice("abcdefghij") for _ in range(r.randint(0, 8)))
_sentence = lambda r: " ".join(_word(r) or "z" for _ in range(r.randint(1, 6)))
_K = lambda lo, hi: lambda r: {"k": r.randint(lo, hi)}
_C = lambda r: {"c": r.choice("abcdefghij")}

# (function, argument, what it returns, reference body, parameter sampler, input sampler); {k}/{c} are parameters,
# filled by str.format (so no other braces in these texts)
_CODE = [
    ("add_k", "xs", "a new list with {k} added to every element of the list of integers `xs`", "return [x + {k} for x in xs]", _K(1, 60), _ints),
    ("count_above", "xs", "how many elements of the list `xs` are greater than {k}", "return sum(1 for x in xs if x > {k})", _K(-10, 30), _ints),
    ("drop_multiples", "xs", "the elements of `xs` that are not multiples of {k}, in order", "return [x for x in xs if x % {k} != 0]", _K(2, 30), _ints),
    ("rotate_left", "xs", "the list `xs` rotated left by {k} positions (an empty list stays empty)", "return xs[{k} % len(xs):] + xs[:{k} % len(xs)] if xs else []", _K(1, 30), _ints),
    ("clamp_all", "xs", "a new list with every element of `xs` clamped to the range [-{k}, {k}]", "return [max(-{k}, min({k}, x)) for x in xs]", _K(1, 30), _ints),
    ("sum_multiples_below", "n", "the sum of the positive integers below `n` that are multiples of {k}", "return sum(i for i in range(1, n) if i % {k} == 0)", _K(2, 30), _nat),
    ("repeat_chars", "s", "the string `s` with every character repeated {k} times", "return ''.join(ch * {k} for ch in s)", _K(2, 30), _word),
    ("caesar", "s", "`s` with every lowercase letter shifted forward {k} places in the alphabet (z wraps to a) and other characters unchanged", "return ''.join(chr((ord(ch) - 97 + {k}) % 26 + 97) if 'a' <= ch <= 'z' else ch for ch in s)", _K(1, 25), _sentence),
    ("chunks", "xs", "`xs` split into consecutive chunks of length {k} (the last may be shorter), as a list of lists", "return [xs[i:i + {k}] for i in range(0, len(xs), {k})]", _K(1, 30), _ints),
    ("every_kth", "xs", "every {k}-th element of `xs`, starting with the first", "return xs[::{k}]", _K(2, 30), _ints),
    ("long_words", "s", "the number of words in `s` (split on spaces) with more than {k} letters", "return sum(1 for w in s.split() if len(w) > {k})", _K(1, 30), _sentence),
    ("digit_power_sum", "n", "the sum of the decimal digits of the non-negative integer `n`, each raised to the power {k}", "return sum(int(d) ** {k} for d in str(n))", _K(1, 30), _nat),
    ("first_above", "xs", "the index of the first element of `xs` greater than {k}, or -1 if there is none", "return next((i for i, x in enumerate(xs) if x > {k}), -1)", _K(-10, 30), _ints),
    ("pad_left", "s", "`s` padded on the left with '*' to length {k} (unchanged if it is already that long)", "return s.rjust({k}, '*')", _K(2, 30), _word),
    ("count_letter", "s", "how many times the letter '{c}' occurs in `s`", "return s.count('{c}')", _C, _sentence),
    ("remove_letter", "s", "`s` with every occurrence of the letter '{c}' removed", "return s.replace('{c}', '')", _C, _sentence),
    ("scale_evens", "xs", "a new list where the even elements of `xs` are multiplied by {k} and the odd ones are unchanged", "return [x * {k} if x % 2 == 0 else x for x in xs]", _K(2, 30), _ints),
    ("power_sum", "n", "1**{k} + 2**{k} + ... + n**{k} for a non-negative integer `n` (0 when n is 0)", "return sum(i ** {k} for i in range(1, n + 1))", _K(1, 6), _nat),
    ("mod_counts", "xs", "a list of length {k} whose i-th element counts the elements x of `xs` with x % {k} == i", "return [sum(1 for x in xs if x % {k} == i) for i in range({k})]", _K(2, 30), _ints),
    ("to_base", "n", "the digits of the non-negative integer `n` in base {k}, most significant first, as a list of ints ([0] for 0)",
     "digits = []\n    while n:\n        digits.append(n % {k})\n        n //= {k}\n    return digits[::-1] or [0]", _K(2, 30), _nat),
    ("running_total", "xs", "the running sums of `xs`, each plus {k}", "out, t = [], 0\n    for x in xs:\n        t += x\n        out.append(t + {k})\n    return out", _K(1, 60), _ints),
    ("max_window_sum", "xs", "the largest sum of {k} consecutive elements of `xs`, or None if `xs` has fewer than {k} elements", "return max((sum(xs[i:i + {k}]) for i in range(len(xs) - {k} + 1)), default=None)", _K(1, 5), _ints),
]


def _code_problem(r: random.Random) -> tuple[str, dict]:
    """(split key, problem): a small function-writing task; 2 of its 5 asserts are shown in the prompt."""
    name, arg, what, body, params, inputs = r.choice(_CODE)
    ps = params(r)
    src = f"def {name}({arg}):\n    {body.format(**ps)}\n"
    exec(src, ns := {})  # our own reference code: computes the expected outputs
    asserts = [f"assert {name}({x!r}) == {ns[name](x)!r}" for x in (inputs(r) for _ in range(5))]
    prompt = (f"Write a Python function `{name}({arg})` that returns {what.format(**ps)}.\n"
              "Your code should pass these tests:\n\n" + "\n".join(asserts[:2]))
    return f"{name}{sorted(ps.items())}", {"task": "code", "prompt": prompt, "test_code": "\n".join(asserts),
                                            "entry_point": name, "solution": src}


def builtin_problems(task: str, split: str = "train", n: int = 1000, seed: int = 0) -> list[dict]:
    """n distinct problems, deterministic for (task, split, seed). A problem's split is a hash of its key (the
    prompt for math, function + parameters for code), so train and test never overlap, whatever the seeds."""
    if task not in ("math", "code") or split not in ("train", "test"):
        raise ValueError(f"builtin_problems: task must be math/code and split train/test, got {task!r}, {split!r}")
    r, out = random.Random(f"{task}-{split}-{seed}"), {}   # prompt -> problem: distinct prompts, in drawing order
    for _ in range(200 * n):
        if len(out) == n:
            break
        key, prob = _math_problem(r) if task == "math" else _code_problem(r)
        in_test = int(hashlib.sha1(key.encode()).hexdigest(), 16) % 10 == 0  # 10% of keys are held out
        if in_test == (split == "test") and prob["prompt"] not in out:
            out[prob["prompt"]] = {"id": f"builtin-{task}-{split}-{seed}-{len(out)}", **prob}
    _need(len(out) >= n, f"builtin_problems: only {len(out)} distinct {task}/{split} problems, asked for {n}")
    return list(out.values())
