"""Tests for data.py: every row format, malformed rows named by file and line, wrong-task files, the built-in
problems (deterministic, train/test disjoint, their reference answers and programs check out), and the real
data in ../shared/data when present. Run: python -m pytest -q tests/test_data.py
"""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import data  # noqa: E402
import rewards  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_jsonl(path: Path, rows) -> str:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


ROWS = {  # format -> (row, task, expected fields)
    "gsm8k": ({"question": "Q?", "answer": "3 + 4 = 7\n#### 1,007"}, "math", {"answer": "1007", "prompt": "Q?"}),
    "math_answer": ({"problem": "P?", "answer": "\\frac{1}{2}", "unique_id": "u1"}, "math", {"answer": "\\frac{1}{2}", "id": "u1"}),
    "math_solution": ({"problem": "P?", "solution": "So $\\boxed{\\frac{\\sqrt3}{2}}$."}, "math", {"answer": "\\frac{\\sqrt3}{2}"}),
    "dapo": ({"prompt": "D?", "solution": "34"}, "math", {"answer": "34", "prompt": "D?"}),
    "dapo_chat": ({"prompt": [{"role": "user", "content": "C?"}], "reward_model": {"ground_truth": "12"}}, "math",
                  {"answer": "12", "prompt": "C?"}),
    "mbpp": ({"text": "Add.", "task_id": 7, "code": "def add(a, b):\r\n  return a + b", "test_setup_code": "",
              "test_list": ["assert add(1, 2) == 3"]}, "code",
             {"id": "f-7", "test_code": "assert add(1, 2) == 3", "solution": "def add(a, b):\n  return a + b"}),
    "humaneval": ({"task_id": "HumanEval/9", "prompt": "def f(x):\n    \"\"\"Doc.\"\"\"\n", "canonical_solution": "    return x\n",
                   "test": "def check(candidate):\n    assert candidate(1) == 1\n", "entry_point": "f"}, "code",
                  {"id": "HumanEval/9", "entry_point": "f", "setup_code": "def f(x):\n    \"\"\"Doc.\"\"\"\n"}),
    "io": ({"prompt": "Sum.", "io_tests": [{"input": "1 2\n", "output": "3\n"}]}, "code", {"io_tests": [{"input": "1 2\n", "output": "3\n"}]}),
    "io_lists": ({"question": "Sum.", "inputs": ["1 2\n"], "outputs": ["3\n"]}, "code", {"io_tests": [{"input": "1 2\n", "output": "3\n"}]}),
    "apps": ({"question": "Sum.", "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}, "code",
             {"io_tests": [{"input": "1 2\n", "output": "3\n"}]}),
    "problem_dict": ({"id": "x", "task": "math", "prompt": "P", "answer": "5"}, "math", {"id": "x", "answer": "5"}),
}


@pytest.mark.parametrize("name", ROWS)
def test_each_row_format(tmp_path, name):
    row, task, expected = ROWS[name]
    (p,) = data.load_problems(write_jsonl(tmp_path / "f.jsonl", [row]), task=task)
    assert p["task"] == task and p["prompt"] and isinstance(p["id"], str)
    assert {k: p[k] for k in expected} == expected


def test_ids_default_to_file_and_line(tmp_path):
    probs = data.load_problems(write_jsonl(tmp_path / "train.jsonl", ["", ROWS["dapo"][0], ROWS["dapo"][0]]))
    assert [p["id"] for p in probs] == ["train-2", "train-3"]  # blank lines are skipped but counted


def test_json_list_and_limit(tmp_path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps([ROWS["dapo"][0]] * 5))
    assert len(data.load_problems(str(path), limit=3)) == 3


@pytest.mark.parametrize("line,fragment", [
    ("{not json", "invalid JSON"),
    ('{"question": "Q?"}', "unrecognized row"),
    ('{"text": "T", "test_list": "assert 1"}', "test_list"),
    ('{"question": "", "answer": "#### 1"}', "question"),
    ('{"problem": "P", "solution": "no box here"}', "boxed"),
    ('{"prompt": "P", "io_tests": [{"input": 1, "output": "2"}]}', "io tests"),
    ('{"prompt": "P", "io_tests": []}', "io tests must be a non-empty list"),
    ('{"prompt": [{"role": "system", "content": "S"}], "solution": "5"}', "chat messages with a user turn"),
    ('{"task": "code", "prompt": "P"}', "test_code or io_tests"),
    ('[1, 2]', "JSON object"),
    ('{"question": "Q?", "answer": null}', "gold answer must be"),
    ('{"text": "T", "test_list": ["assert f(1 == 2"]}', "never closed"),  # a test that does not parse: no traceback
    # rows no program can pass (they loaded and trained on reward 0): tests asserting nothing, a setup that does not parse
    ('{"task_id": "H/1", "prompt": "def f():", "test": "x = 1", "entry_point": "f"}', "no program can pass this problem"),
    ('{"text": "T", "test_list": ["while True: pass"]}', "tests assert nothing"),
    ('{"text": "T", "test_list": ["assert f(1)"], "test_setup_code": "def ("}', "test_code does not parse"),
    ('{"task": "code", "prompt": "P", "test_code": "assert f(1) =="}', "test_code does not parse"),
    ('{"question": "Q?", "answer": NaN}', "a string or a finite number, got NaN"),  # a gold nothing equals
    ('{"question": "Q?", "answer": 1e400}', "a string or a finite number, got Infinity"),  # JSON's infinity
])
def test_malformed_row_names_file_and_line(tmp_path, line, fragment):
    path = write_jsonl(tmp_path / "bad.jsonl", [ROWS["dapo"][0], ROWS["dapo"][0], line])
    with pytest.raises(ValueError) as e:
        data.load_problems(path)
    assert f"{path}:3:" in str(e.value) and fragment in str(e.value)


def test_line_separators_inside_a_json_string_are_text(tmp_path):
    """Regression: the file was split with splitlines(), which also splits at U+2028, U+0085 and the like, which
    json.dumps(ensure_ascii=False) writes raw inside strings: a valid file was refused as invalid JSON."""
    rows = [{"question": f"A\u2028B\x85C\x1cD {i}?", "answer": "#### 1"} for i in range(2)]
    (path := tmp_path / "u.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), "utf-8")
    assert [p["prompt"] for p in data.load_problems(str(path))] == [r["question"] for r in rows]


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"question": "1+1?", "answer": "#### 2"}\n{"question": "caf\xe9?", "answer": "#### 2"}\n')
    with pytest.raises(ValueError, match=f"^{path}:2: not UTF-8 text"):
        data.load_problems(str(path))


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(ValueError, match="empty.jsonl: no problems"):
        data.load_problems(str(path))


def test_duplicate_ids_are_an_error(tmp_path):
    with pytest.raises(ValueError, match="duplicate id"):
        data.load_problems(write_jsonl(tmp_path / "f.jsonl", [ROWS["problem_dict"][0]] * 2))


def test_wrong_task_and_missing_file(tmp_path):
    path = write_jsonl(tmp_path / "f.jsonl", [ROWS["gsm8k"][0]])
    with pytest.raises(ValueError, match=r"f\.jsonl:1: this GSM8K row is a math problem, but task='code'"):
        data.load_problems(path, task="code")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        data.load_problems(str(tmp_path / "nope.jsonl"))


# ------------------------------------------------------------------------------------------- built-in

@pytest.mark.parametrize("task", ["math", "code"])
def test_builtin_deterministic_and_disjoint(task):
    train, test = data.builtin_problems(task, "train", n=300), data.builtin_problems(task, "test", n=100)
    assert train == data.builtin_problems(task, "train", n=300)
    assert data.builtin_problems(task, "train", n=300, seed=1) != train
    assert len({p["prompt"] for p in train}) == 300 and len({p["id"] for p in train + test}) == 400
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in test}
    other_seed = data.builtin_problems(task, "test", n=100, seed=5)
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in other_seed}
    if task == "code":  # split by task (function + parameter), not only by prompt
        key = lambda p: (p["entry_point"], p["solution"])
        assert not {key(p) for p in train} & {key(p) for p in test}


def test_builtin_math_answers():
    probs = data.builtin_problems("math", n=500)
    assert all(p["answer"].isdigit() for p in probs)
    assert len({p["prompt"].split()[1] for p in probs}) > 5  # varied templates
    assert all(rewards.math_check(f"\\boxed{{{p['answer']}}}", p["answer"])[0] == 1.0 for p in probs)


def test_builtin_code_reference_passes_and_wrong_fails():
    probs = data.builtin_problems("code", n=60, seed=3)
    assert len({p["entry_point"] for p in probs}) >= 15
    out = rewards.grade([f"```python\n{p['solution']}```" for p in probs], probs)
    assert out == [(1.0, "pass")] * len(probs)
    wrong = rewards.grade([f"```python\ndef {p['entry_point']}(x):\n    return None\n```" for p in probs], probs)
    assert all(r == 0.0 for r, _ in wrong)


def test_builtin_bad_arguments():
    with pytest.raises(ValueError):
        data.builtin_problems("poetry")
    with pytest.raises(ValueError):
        data.builtin_problems("math", split="dev")


# ------------------------------------------------------------------------------------------- real data

@pytest.mark.parametrize("rel,task,count", [("gsm8k/train.jsonl", "math", 7473), ("gsm8k/test.jsonl", "math", 1319),
                                            ("mbpp/mbpp.jsonl", "code", 974), ("humaneval/HumanEval.jsonl", "code", 164)])
def test_real_files_load(rel, task, count):
    path = DATA / rel
    if not path.is_file():
        pytest.skip(f"{rel} not present")
    probs = data.load_problems(str(path), task=task)
    assert len(probs) == count and len({p["id"] for p in probs}) == count
    assert all(p["task"] == task and p["prompt"] for p in probs)
    if task == "code":
        assert all(p["solution"] and p["test_code"] for p in probs)
        other = "math"
    else:
        assert all(p["answer"].lstrip("-").replace(".", "").isdigit() for p in probs)
        other = "code"
    with pytest.raises(ValueError, match=":1: "):
        data.load_problems(str(path), task=other)


# --------------------------------------------------------------------------- issue 14: SVAMP / ASDiv rows

def test_svamp_and_asdiv_rows(tmp_path):
    """Regression: body + question rows lost their body (the prompt could not be answered), and SVAMP rows,
    whose keys are capitalised, did not load at all. The gold 27.0 reads as 27, "9 (apples)" as 9."""
    svamp = {"ID": "chal-1", "Body": "Each pack has 9 pencils. Ann buys 3 packs.",
             "Question": "How many pencils does Ann have?", "Equation": "( 9.0 * 3.0 )", "Answer": 27.0,
             "Type": "Multiplication"}
    asdiv = {"body": "Tom had 12 apples. He gave 3 away.", "question": "How many apples does he have now?",
             "answer": "9 (apples)", "formula": "12-3=9", "solution-type": "Subtraction"}
    rows = [svamp, asdiv, {**asdiv, "answer": "1,250 (dollars)"}, {**asdiv, "answer": "-2.5 (degrees)"},
            {**asdiv, "answer": "3/4 (of the cake)"}, {**asdiv, "answer": "9 (3)"}, {**asdiv, "answer": "two (apples)"},
            {**svamp, "ID": "chal-2", "Answer": 2.5}]
    probs = data.load_problems(write_jsonl(tmp_path / "svamp.jsonl", rows), task="math")
    assert probs[0] == {"id": "chal-1", "task": "math", "answer": "27",
                        "prompt": "Each pack has 9 pencils. Ann buys 3 packs. How many pencils does Ann have?"}
    assert probs[1]["prompt"] == "Tom had 12 apples. He gave 3 away. How many apples does he have now?"
    # a number before the unit: the number; anything else stays the gold text as it is
    assert [p["answer"] for p in probs[1:]] == ["9", "1250", "-2.5", "3/4", "9 (3)", "two (apples)", "2.5"]
    assert [p["id"] for p in probs[1:3]] == ["svamp-2", "svamp-3"]
    assert rewards.math_check(r"\boxed{9}", probs[1]["answer"])[0] == 1.0


@pytest.mark.parametrize("row,fragment", [
    ({"Body": "  ", "Question": "How many?", "Answer": 3}, "'body'"),
    ({"Body": "Tom has 3.", "Question": "How many?", "Answer": None}, "gold answer must be"),
    ({"body": "Tom has 3.", "question": 7, "answer": "3"}, "'question'"),
])
def test_bad_body_question_row_names_file_and_line(tmp_path, row, fragment):
    path = write_jsonl(tmp_path / "asdiv.jsonl", [{"Body": "B.", "Question": "Q?", "Answer": 1}, row])
    with pytest.raises(ValueError) as e:
        data.load_problems(path)
    assert f"{path}:2:" in str(e.value) and fragment in str(e.value)


# --------------------------------------------------------------------------- a run folder's JSONL logs

def test_append_jsonl_drops_a_cut_off_last_line_and_read_jsonl_skips_it(tmp_path, capsys):
    """Regression: train.py and eval.py appended after a line cut off by a kill (no newline), merging it and
    the next record into one broken line. append_jsonl truncates the file after its last newline first, with
    one warning naming the file; read_jsonl (which never truncates: it may run beside a writer) skips it."""
    path = tmp_path / "eval.jsonl"
    data.append_jsonl(path, {"step": 0})  # created
    path.write_text(path.read_text() + '{"step": 1, "pass')
    assert data.read_jsonl(path) == [{"step": 0}] and path.read_text().endswith('"pass')  # read only
    assert capsys.readouterr().err == f"warning: {path}: its last line has no newline (an append cut off?): skipped\n"
    data.append_jsonl(path, {"step": 1}, {"step": 2})
    assert path.read_text() == '{"step": 0}\n{"step": 1}\n{"step": 2}\n'
    assert capsys.readouterr().err == f"warning: {path}: dropped a cut-off last line (17 bytes)\n"
    path.write_text('{"step": 3}')  # a whole record without its newline is cut off too: the write did not finish
    data.append_jsonl(path)  # no records: only the repair (train.py's resume, before it rewrites the log)
    assert path.read_text() == "" and "dropped a cut-off last line (11 bytes)" in capsys.readouterr().err
    data.append_jsonl(path, {"step": 4})
    data.append_jsonl(path, {"step": 5}, new=True)  # train.py's step 0: the log starts over
    assert data.read_jsonl(path) == [{"step": 5}] and not capsys.readouterr().err
    assert data.read_jsonl(tmp_path / "missing.jsonl") == []
