"""Workflows: message flow with a scripted fake policy (canned completions per role, every call
recorded), the parsers, the over-long-prompt rule, and one end-to-end run per workflow and task on
the tiny model through the real sampler and the real rewards."""
import copy
import re

import pytest
import torch

import lora
import rewards
import workflows
from models import chat_ids
from workflows import (WORKFLOWS, Turn, make_policy, parse_choice, parse_strategies, parse_verdict,
                       run_workflow)

ADD = "```python\ndef add(a, b):\n    return a + b\n```"
SUB = "```python\ndef add(a, b):\n    return a - b\n```"


def math_problem(tag, answer="4"):
    return {"id": tag, "task": "math", "prompt": f"[{tag}] What is 2 + 2?", "answer": answer}


def code_problem(tag):
    return {"id": tag, "task": "code", "prompt": f"[{tag}] Write add(a, b) returning the sum.",
            "test_code": "assert add(1, 2) == 3\nassert add(-1, 1) == 0", "entry_point": "add"}


class Fake:
    """Scripted policy. reply(role, text, k) -> completion text, or None to act as a prompt over
    the token limit; k is the text's position in its call. Records every call as (role, texts)."""

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def __call__(self, role, texts):
        self.calls.append((role, list(texts)))
        out = []
        for k, text in enumerate(texts):
            r = self.reply(role, text, k)
            out.append(None if r is None else
                       Turn(role, role, [1, 2, 3], list(range(len(r))), [-0.5] * len(r), "stop", r))
        return out

    def shape(self):
        return [(role, len(texts)) for role, texts in self.calls]


def tag(text):
    return re.search(r"\[(\w+)\]", text).group(1)


def attempts_in(text):
    return text.count("Attempt ")  # the history labels; no prompt says "Attempt " otherwise


def check_common(eps, workflow, problems, group_size):
    """Problem-major / rollout-minor order, roles of the workflow, reward copied to every turn."""
    assert [(e.problem_id, e.rollout) for e in eps] == [(p["id"], g) for p in problems for g in range(group_size)]
    for e in eps:
        assert e.reward in (0.0, 1.0) and isinstance(e.status, str) and e.status
        assert {t.role for t in e.turns} <= set(WORKFLOWS[workflow].roles)
        assert all(t.reward == e.reward for t in e.turns)


# ----------------------------------------------------------------------------- parsers

def test_parse_verdict():
    assert parse_verdict("fine \\boxed{Correct}") == "Correct"
    assert parse_verdict("\\boxed{incorrect} the sign is wrong") == "Incorrect"
    assert parse_verdict("\\boxed{Correct} ... on reflection \\boxed{ INCORRECT }") == "Incorrect"  # last wins
    assert parse_verdict("\\boxed{\\text{Correct}}") == "Correct"
    assert parse_verdict("\\boxed{Incorrect} then \\boxed{4}") == "Incorrect"  # only verdict boxes count
    # the twenty-fifth session's review: these were unparseable (so a retry)
    for text, verdict in [("\\boxed{Correct.}", "Correct"), ("\\boxed{\\textit{Incorrect}}", "Incorrect"),
                          ("\\boxed{\\mathrm{Correct}}", "Correct"), ("\\boxed{\\text{Incorrect}.}", "Incorrect"),
                          ("\\boxed{ \\textbf{ correct ! } }", "Correct")]:
        assert parse_verdict(text) == verdict, text
    for bad in ["looks correct to me", "\\boxed{correctly}", "\\boxed{4}", "Correct", "", "Correct.",
                "\\boxed{\\frac{Correct}{2}}", "\\boxed{Correct answer}", "\\boxed{correct" + " " * 100_000]:
        assert parse_verdict(bad) is None


def test_parse_choice():
    assert parse_choice("Solution 3 is wrong. \\boxed{2}", 3) == (2, "boxed")
    assert parse_choice("\\boxed{1} no, \\boxed{3}", 3) == (3, "boxed")
    assert parse_choice("\\boxed{Solution 2}", 3) == (2, "boxed")
    assert parse_choice("\\boxed{7} I prefer solution 2", 3) == (2, "digit")  # boxed out of range
    assert parse_choice("Answer 10 is off; the third one, 3, is best", 3) == (3, "digit")
    assert parse_choice("I cannot decide.", 3) == (1, "default")
    long = "1" * 5000  # int() of it raises ValueError: a degenerate digit loop must not end the run
    assert parse_choice(long, 3) == parse_choice(f"\\boxed{{{long}}}", 3) == (1, "default")
    assert parse_choice(f"{long} solution 2 \\boxed{{{long}}}", 3) == (2, "digit")
    assert parse_choice("Pick 0000000002", 3) == (2, "digit") and parse_choice("\\boxed{0000000003}", 3) == (3, "boxed")
    assert parse_choice("\u0660" * 10 + "\u0662", 3) == (2, "digit")  # Arabic-Indic 0000000000 2, as int() reads it
    assert parse_choice("\\boxed{5}", 5) == (5, "boxed")
    # the twenty-fifth session's review: boxed picks in LaTeX wrappers, brackets or with a full stop were read as the
    # first number of the text (here solution 1, the one the reply rejects)
    for boxed in ("\\textbf{2}", "\\mathbf{ 2 }", "\\text{Solution } 2", "(2)", "2.", "\\text{Solution 2.}", "\\boldsymbol{2}"):
        assert parse_choice(f"Solution 1 makes an error.\n\\boxed{{{boxed}}}", 3) == (2, "boxed"), boxed
    assert parse_choice("Solution 1 is right: \\boxed{\\frac{2}{3}}", 3)[1] == "digit"  # a value, not a pick
    assert parse_choice("Solution 3 is right: \\boxed{2 apples}", 3) == (3, "digit")
    assert parse_choice("\\boxed{" + " " * 100_000 + "2" + " " * 100_000 + "}", 3) == (2, "boxed")  # linear in spaces


def test_parse_strategies():
    text = "Plan:\nSTRATEGY 1: use algebra\n**STRATEGY 2:** draw a picture\nstrategy 3) guess and check"
    assert parse_strategies(text) == (["use algebra", "draw a picture", "guess and check"], "tagged")
    many = "\n".join(f"STRATEGY {k}: idea {k}" for k in range(1, 6))
    assert parse_strategies(many) == (["idea 1", "idea 2", "idea 3"], "tagged")
    assert parse_strategies(many, max_strategies=2)[0] == ["idea 1", "idea 2"]
    assert parse_strategies("STRATEGY 1:\nSTRATEGY 2:\n1. count up\n2) use a table") == (["count up", "use a table"], "list")
    assert parse_strategies("Here are the strategies:\nCount the apples one by one\nok\nAdd the two numbers") == \
        (["Count the apples one by one", "Add the two numbers"], "lines")
    assert parse_strategies("  algebra ") == (["algebra"], "whole")
    assert parse_strategies("") == ([""], "whole")  # never zero strategies


# ----------------------------------------------------------------------------- single

def test_single_agent():
    problems = [math_problem("a"), math_problem("b")]
    fake = Fake(lambda role, text, k: "\\boxed{4}" if tag(text) == "a" else "\\boxed{5}")
    eps = run_workflow("single", problems, 3, fake)
    check_common(eps, "single", problems, 3)
    assert fake.shape() == [("generator", 6)]
    assert [e.reward for e in eps] == [1.0] * 3 + [0.0] * 3
    for e in eps:
        assert [(t.role, t.instance) for t in e.turns] == [("generator", "generator")]
        assert e.final == e.turns[0].text and e.turns[0].correct == (e.reward == 1.0)
        assert "[a]" in fake.calls[0][1][0] and "\\boxed{}" in fake.calls[0][1][0]


# ----------------------------------------------------------------------------- Eval-Opt

EVALOPT_ANSWERS = {"approve": [4], "fix": [3, 4], "garble": [5, 4, 6]}


def evalopt_reply(role, text, k):
    t = tag(text)
    if role == "generator":
        n = attempts_in(text) + 1  # the attempt being written
        return f"{t}-{n} \\boxed{{{EVALOPT_ANSWERS[t][n - 1]}}}"
    n = attempts_in(text)  # the attempt being judged is the latest one shown
    assert f"{t}-{n} \\boxed{{{EVALOPT_ANSWERS[t][n - 1]}}}" in text
    if t == "garble":
        return "looks fine to me"  # unparseable: not approved
    return "\\boxed{Correct}" if EVALOPT_ANSWERS[t][n - 1] == 4 else "The sum is off by one. \\boxed{Incorrect}"


def test_evalopt_flow():
    problems = [math_problem("approve"), math_problem("fix"), math_problem("garble")]
    fake = Fake(evalopt_reply)
    eps = run_workflow("evalopt", problems, 2, fake)
    check_common(eps, "evalopt", problems, 2)
    # lock-step: one call per stage over every episode still running
    assert fake.shape() == [("generator", 6), ("evaluator", 6), ("generator", 4), ("evaluator", 4),
                            ("generator", 2), ("evaluator", 2)]
    approve, fix, garble = eps[0], eps[2], eps[4]
    # stops on Correct
    assert [t.instance for t in approve.turns] == ["generator", "evaluator"]
    assert {"rounds": 1, "verdicts": ["Correct"], "retried": False, "stopped": "approved"}.items() <= approve.facts.items()
    assert approve.final == "approve-1 \\boxed{4}" and approve.reward == 1.0
    # retries on Incorrect, final is the retried attempt
    assert [t.instance for t in fix.turns] == ["generator", "evaluator"] * 2
    assert fix.facts["verdicts"] == ["Incorrect", "Correct"] and fix.facts["retried"]
    assert fix.final == "fix-2 \\boxed{4}" and fix.reward == 1.0
    assert [t.correct for t in fix.turns] == [False, True, True, True]  # attempt, verdict, attempt, verdict
    # retries on an unparseable verdict, stops at the round limit, returns the LAST attempt (not the best)
    assert [t.role for t in garble.turns] == ["generator", "evaluator"] * 3
    assert garble.facts["verdicts"] == [None] * 3 and garble.facts["stopped"] == "round_limit"
    assert garble.final == "garble-3 \\boxed{6}" and garble.reward == 0.0
    assert [t.correct for t in garble.turns[::2]] == [False, True, False]
    assert [t.correct for t in garble.turns[1::2]] == [True, False, True]  # not approving a wrong attempt is right
    # the retry prompt shows the previous attempt and its critique; the evaluator sees the whole history
    retry = [t for t in fake.calls[2][1] if "[fix]" in t][0]
    assert "fix-1 \\boxed{3}" in retry and "The sum is off by one." in retry
    judge = [t for t in fake.calls[3][1] if "[fix]" in t][0]
    assert judge.index("fix-1 \\boxed{3}") < judge.index("off by one") < judge.index("fix-2 \\boxed{4}")
    assert not any(t.correct is None for e in eps for t in e.turns)
    assert not any(e.facts["prompt_too_long"] for e in eps)


def test_evalopt_round_limits():
    fake = Fake(evalopt_reply)
    eps = run_workflow("evalopt", [math_problem("garble")], 1, fake, rounds=2)
    assert len(eps[0].turns) == 4 and eps[0].final == "garble-2 \\boxed{4}" and eps[0].reward == 1.0
    eps = run_workflow("evalopt", [math_problem("garble")], 1, fake, rounds=1)
    assert len(eps[0].turns) == 2 and not eps[0].facts["retried"]
    # code defaults to 2 rounds; the real code reward grades the last program
    fake = Fake(lambda role, text, k: ("no verdict" if role == "evaluator" else
                                       (SUB if attempts_in(text) == 0 else ADD)))
    eps = run_workflow("evalopt", [code_problem("c")], 2, fake)
    check_common(eps, "evalopt", [code_problem("c")], 2)
    assert fake.shape() == [("generator", 2), ("evaluator", 2)] * 2
    assert all(e.final == ADD and e.reward == 1.0 and e.facts["rounds"] == 2 for e in eps)
    assert "```python" in fake.calls[0][1][0]


# ----------------------------------------------------------------------------- Voting

AGGREGATOR = {"boxed": ("Solution 2 is right. \\boxed{2}", 2, "boxed"),
              "last": ("\\boxed{1}, no, \\boxed{3}", 3, "boxed"),
              "range": ("\\boxed{7} I prefer solution 2", 2, "digit"),
              "digit": ("The third one, number 3, looks best.", 3, "digit"),
              "none": ("I cannot decide.", 1, "default")}


def test_voting_picks_and_fallbacks():
    problems = [math_problem(t) for t in AGGREGATOR]
    answers = [1, 4, 7]

    def reply(role, text, k):
        if role == "generator":
            return f"voter{k % 3} \\boxed{{{answers[k % 3]}}}"  # episode-major, voter-minor in the call
        return AGGREGATOR[tag(text)][0]

    fake = Fake(reply)
    eps = run_workflow("voting", problems, 2, fake)
    check_common(eps, "voting", problems, 2)
    assert fake.shape() == [("generator", 3 * 10), ("aggregator", 10)]
    agg_prompt = fake.calls[1][1][0]
    assert agg_prompt.index("Solution 1:\nvoter0") < agg_prompt.index("Solution 2:\nvoter1") \
        < agg_prompt.index("Solution 3:\nvoter2")
    for e in eps:
        _, chosen, how = AGGREGATOR[e.problem_id]
        assert [(t.role, t.instance) for t in e.turns] == \
            [("generator", "generator0"), ("generator", "generator1"), ("generator", "generator2"),
             ("aggregator", "aggregator")]
        assert e.final == e.turns[chosen - 1].text == f"voter{chosen - 1} \\boxed{{{answers[chosen - 1]}}}"
        assert (e.facts["chosen"], e.facts["choice_parse"], e.facts["n_candidates"]) == (chosen, how, 3)
        assert e.reward == (1.0 if chosen == 2 else 0.0)
        assert [t.correct for t in e.turns[:3]] == [False, True, False]
        assert e.turns[3].correct == (chosen == 2)


def test_voting_more_voters():
    fake = Fake(lambda role, text, k: "\\boxed{4}" if role == "generator" else "\\boxed{5}")
    eps = run_workflow("voting", [math_problem("a")], 2, fake, n_voters=5)
    assert fake.shape() == [("generator", 10), ("aggregator", 2)]
    assert [t.instance for t in eps[0].turns] == [f"generator{k}" for k in range(5)] + ["aggregator"]
    assert "(1 to 5)" in fake.calls[1][1][0] and eps[0].facts["chosen"] == 5


# ----------------------------------------------------------------------------- Orch-Workers

ORCHESTRATOR = {"tagged": ("Plan:\nSTRATEGY 1: use algebra\nSTRATEGY 2: draw a picture", 2, "tagged"),
                "many": ("\n".join(f"STRATEGY {k}: idea {k}" for k in range(1, 6)), 3, "tagged"),
                "listed": ("1. count up\n2. use a table", 2, "list"),
                "lines": ("Count the apples one by one\nAdd the two numbers together", 2, "lines"),
                "whole": ("algebra", 1, "whole")}


def orch_reply(role, text, k):
    if role == "orchestrator":
        return ORCHESTRATOR[tag(text)][0]
    if role == "worker":
        strategy = text.rsplit("Strategy: ", 1)[1]
        return f"worked with <{strategy}> \\boxed{{4}}"
    return "\\boxed{4}" if tag(text) == "tagged" else "they disagree \\boxed{5}"  # synthesizer


def test_orchworkers_flow():
    problems = [math_problem(t) for t in ORCHESTRATOR]
    fake = Fake(orch_reply)
    eps = run_workflow("orchworkers", problems, 2, fake)
    check_common(eps, "orchworkers", problems, 2)
    n_workers = sum(2 * ORCHESTRATOR[p["id"]][1] for p in problems)
    assert fake.shape() == [("orchestrator", 10), ("worker", n_workers), ("synthesizer", 10)]
    assert "STRATEGY 1:" in fake.calls[0][1][0] and "up to 3" in fake.calls[0][1][0]
    strategies = {"tagged": ["use algebra", "draw a picture"], "many": ["idea 1", "idea 2", "idea 3"],
                  "listed": ["count up", "use a table"],
                  "lines": ["Count the apples one by one", "Add the two numbers together"], "whole": ["algebra"]}
    for e in eps:
        _, n, how = ORCHESTRATOR[e.problem_id]
        assert [(t.role, t.instance) for t in e.turns] == \
            [("orchestrator", "orchestrator")] + [("worker", "worker")] * n + [("synthesizer", "synthesizer")]
        # one worker per strategy, each told its own strategy
        assert [t.text for t in e.turns[1:-1]] == [f"worked with <{s}> \\boxed{{4}}" for s in strategies[e.problem_id]]
        assert (e.facts["n_strategies"], e.facts["strategy_parse"], e.facts["n_workers"]) == (n, how, n)
        # the synthesizer's answer is graded, not the workers'
        assert e.final == e.turns[-1].text and e.reward == (1.0 if e.problem_id == "tagged" else 0.0)
        assert all(t.correct for t in e.turns[1:-1])
        assert e.turns[0].correct is None and e.turns[-1].correct == (e.reward == 1.0)
    synth = [t for t in fake.calls[2][1] if "[many]" in t][0]
    for s in strategies["many"]:
        assert f"worked with <{s}>" in synth


# ----------------------------------------------------------------------------- prompts over the limit

def test_prompt_too_long_rule():
    # single: no answer -> reward 0, status prompt_too_long; the rest of the batch is unaffected
    fake = Fake(lambda role, text, k: None if "[long]" in text else "\\boxed{4}")
    eps = run_workflow("single", [math_problem("long"), math_problem("ok")], 1, fake)
    assert (eps[0].reward, eps[0].status, eps[0].turns, eps[0].final) == (0.0, "prompt_too_long", [], None)
    assert eps[0].facts["prompt_too_long"] and eps[1].reward == 1.0 and not eps[1].facts["prompt_too_long"]

    # Eval-Opt: a too-long evaluator or retry prompt ends the episode with its last attempt as final
    def reply(role, text, k):
        t, n = tag(text), attempts_in(text)
        if (t == "first" and role == "generator") or (t == "review" and role == "evaluator" and n == 2) \
                or (t == "retry" and role == "generator" and n == 2):
            return None
        if role == "generator":
            return f"{t}-{n + 1} \\boxed{{{3 + n}}}"  # attempt 2 is right
        return "\\boxed{Incorrect}"
    fake = Fake(reply)
    eps = run_workflow("evalopt", [math_problem(t) for t in ["first", "review", "retry"]], 1, fake)
    first, review, retry = eps
    assert (first.reward, first.status, first.turns) == (0.0, "prompt_too_long", [])
    assert [t.role for t in review.turns] == ["generator", "evaluator", "generator"]
    assert review.final == "review-2 \\boxed{4}" and review.reward == 1.0  # graded as usual
    assert [t.role for t in retry.turns] == ["generator", "evaluator"] * 2
    assert retry.final == "retry-2 \\boxed{4}" and retry.reward == 1.0
    for e in eps:
        assert e.facts["prompt_too_long"] and e.facts["stopped"] == "prompt_too_long"
        assert all(t.reward == e.reward for t in e.turns)

    # Voting: a too-long aggregator prompt leaves no answer -> 0, even with a right candidate
    fake = Fake(lambda role, text, k: None if role == "aggregator" else "\\boxed{4}")
    e = run_workflow("voting", [math_problem("a")], 1, fake)[0]
    assert (e.reward, e.status, len(e.turns)) == (0.0, "prompt_too_long", 3)
    assert all(t.reward == 0.0 for t in e.turns) and not any(t.correct for t in e.turns if t.role == "aggregator")

    # Orch-Workers: too-long workers are dropped; with none left there is no synthesizer call
    def reply(role, text, k):
        if role == "orchestrator":
            return {"some": "STRATEGY 1: LONG\nSTRATEGY 2: short", "all": "STRATEGY 1: LONG", "orch": None}[tag(text)]
        if role == "worker":
            return None if text.endswith("LONG") else "\\boxed{4}"
        return "\\boxed{4}"
    fake = Fake(reply)
    some, all_, orch = run_workflow("orchworkers", [math_problem(t) for t in ["some", "all", "orch"]], 1, fake)
    assert fake.shape() == [("orchestrator", 3), ("worker", 3), ("synthesizer", 1)]
    assert [t.role for t in some.turns] == ["orchestrator", "worker", "synthesizer"]
    assert some.reward == 1.0 and some.facts["n_workers"] == 1 and some.facts["prompt_too_long"]
    assert "Solution 1:\n\\boxed{4}" in fake.calls[2][1][0] and "Solution 2" not in fake.calls[2][1][0]
    assert (all_.reward, all_.status, [t.role for t in all_.turns]) == (0.0, "prompt_too_long", ["orchestrator"])
    assert (orch.reward, orch.status, orch.turns, orch.facts["n_strategies"]) == (0.0, "prompt_too_long", [], 0)


def test_diagnose_off_grades_only_finals(monkeypatch):
    graded = []
    real = workflows.rewards.grade
    monkeypatch.setattr(workflows.rewards, "grade", lambda c, p: graded.extend(c) or real(c, p))
    fake = Fake(lambda role, text, k: f"v{k} \\boxed{{{k}}}" if role == "generator" else "\\boxed{1}")
    e = run_workflow("voting", [math_problem("a")], 1, fake, diagnose=False)[0]
    assert graded == [e.final] and all(t.correct is None for t in e.turns)
    graded.clear()
    run_workflow("voting", [math_problem("a")], 1, fake)
    assert sorted(graded) == ["v0 \\boxed{0}", "v1 \\boxed{1}", "v2 \\boxed{2}"]  # one call, finals deduplicated


def test_unknown_workflow_or_task():
    with pytest.raises(ValueError):
        run_workflow("debate", [math_problem("a")], 1, Fake(lambda *a: "x"))
    with pytest.raises(ValueError):
        run_workflow("single", [math_problem("a")], 1, Fake(lambda *a: "x"), task="poetry")


# ----------------------------------------------------------------------------- tiny model, real sampler + rewards

MAX_NEW = 6
TURNS = {"single": {1}, "evalopt": {2, 4, 6}, "voting": {4}, "orchworkers": {3, 4, 5}}


@pytest.mark.parametrize("workflow", list(WORKFLOWS))
@pytest.mark.parametrize("task", ["math", "code"])
def test_end_to_end_tiny(tiny, workflow, task):
    model, tok = tiny
    problems = [math_problem("m0"), math_problem("m1", "7")] if task == "math" else [code_problem("c0"), code_problem("c1")]
    policy = make_policy(model, tok, {r: None for r in WORKFLOWS[workflow].roles}, max_new_tokens=MAX_NEW,
                         generator=torch.Generator().manual_seed(0))
    eps = run_workflow(workflow, problems, 2, policy)
    check_common(eps, workflow, problems, 2)
    for e in eps:
        assert len(e.turns) in TURNS[workflow]
        assert e.final is not None and e.status != "prompt_too_long"
        for t in e.turns:
            assert 1 <= len(t.completion_ids) <= MAX_NEW and len(t.logprobs) == len(t.completion_ids)
            assert all(lp <= 0 for lp in t.logprobs)
            assert t.finish in ("stop", "length") and (t.finish == "stop" or len(t.completion_ids) == MAX_NEW)
            assert tok.decode(t.completion_ids, skip_special_tokens=True) == t.text
            assert f"[{e.problem_id}]" in tok.decode(t.prompt_ids)  # every role sees the problem
        if workflow == "voting":
            assert [t.instance for t in e.turns] == ["generator0", "generator1", "generator2", "aggregator"]


def test_policy_adapters_batching_and_limit(tiny, monkeypatch):
    model, tok = tiny
    model = copy.deepcopy(model)  # adapters must not leak into the shared fixture
    for r in WORKFLOWS["evalopt"].roles:
        lora.add_adapter(model, r, rank=4, alpha=8)
    set_to, samples = [], []
    real_set, real_sample = lora.set_adapter, workflows.sample
    monkeypatch.setattr(lora, "set_adapter", lambda m, name: set_to.append(name) or real_set(m, name))
    monkeypatch.setattr(workflows, "sample", lambda m, prompts, **kw: samples.append(len(prompts)) or real_sample(m, prompts, **kw))
    policy = make_policy(model, tok, {"generator": "generator", "evaluator": "evaluator"}, max_new_tokens=4)
    eps = run_workflow("evalopt", [math_problem("a")], 3, policy, rounds=2)
    stages = [t.role for t in eps[0].turns]
    assert set_to[:2] == ["generator", "evaluator"] and len(set_to) == len(samples) >= 2
    assert samples[0] == 3  # all first attempts in one sampler call
    assert lora.active_adapter(model) == set_to[-1] and stages[0] == "generator"
    # a text over max_prompt_tokens is not sampled and comes back as None; the rest in one call
    short = "hi"
    limit = len(chat_ids(tok, short))
    samples.clear()
    out = make_policy(model, tok, {"generator": None}, max_new_tokens=3, max_prompt_tokens=limit)(
        "generator", [short, "a much longer text " * 20, short])
    assert out[1] is None and out[0] is not None and out[2] is not None and samples == [2]
    assert out[0].prompt_ids == chat_ids(tok, short)
    # a model without adapters is the base model; naming an adapter for it is an error (a fresh
    # model: the session fixture may carry other tests' adapters)
    from models import load_model
    base, _ = load_model("tiny", device="cpu")
    with pytest.raises(ValueError, match="the model has no adapters"):
        make_policy(base, tok, {"generator": "generator"})("generator", ["hi"])


def test_seeded_rollouts_repeat(tiny):
    model, tok = tiny
    runs = []
    for _ in range(2):
        policy = make_policy(model, tok, {r: None for r in WORKFLOWS["voting"].roles}, max_new_tokens=5,
                             generator=torch.Generator().manual_seed(3))
        runs.append([[t.completion_ids for t in e.turns] for e in run_workflow("voting", [math_problem("a")], 2, policy)])
    assert runs[0] == runs[1]


# --------------------------------------------------------------------------- issue 14: reward-hacking monitor

def _ep(turns, reward, final="last"):
    """A graded episode from (role, text) turns; its final text is the last turn's unless given."""
    ts = [workflows.Turn(role, role, [1], [5], [0.0], "stop", text, reward=float(reward)) for role, text in turns]
    return workflows.Episode("p", 0, turns=ts, final=ts[-1].text if final == "last" else final, reward=float(reward))


def test_answer_monitor_by_value():
    """answer_top_share counts the final answers that have one (a final text without a box and an episode
    without a final do not count); degenerate_rewarded looks only at answer turns with reward 1, per role."""
    inf, five, none = r"so \boxed{\infty}", r"\boxed{5}", "no box at all"
    eps = [_ep([("generator", inf)], 1), _ep([("generator", five)], 1), _ep([("generator", inf)], 0),
           _ep([("generator", none)], 0), _ep([], 0, final=None)]
    monitor, degenerate = workflows.answer_monitor(eps, "math")
    key = workflows.rewards.final_answer(inf, "math")
    assert monitor == {"answer_top_share": 2 / 3, "answer_top": key, "hint_answers": None}
    assert key != workflows.rewards.final_answer(five, "math")
    assert degenerate == {"generator": 1 / 2}  # of the 2 rewarded generator turns, the infinity
    # Orch-Workers: the orchestrator's text is no answer (never counted); the synthesizer's final one is
    eps = [_ep([("orchestrator", inf), ("worker", five), ("synthesizer", inf)], 1),
           _ep([("orchestrator", inf), ("worker", inf), ("synthesizer", five)], 0)]
    monitor, degenerate = workflows.answer_monitor(eps, "math")
    assert monitor["answer_top_share"] == 1 / 2 and degenerate == {"worker": 0.0, "synthesizer": 1.0}
    assert workflows.answer_monitor([_ep([("generator", five)], 0)], "math")[1] == {"generator": None}
    assert workflows.answer_monitor([], "math") == ({"answer_top_share": None, "answer_top": None,
                                                      "hint_answers": None}, {})


def test_answer_monitor_hint_answers():
    """A review or a plan holding an answer of its own (a helper's reproducer: the evaluator writes the right
    answer beside its verdict, the retry copies it, reward 1) is counted; a verdict alone, an empty box and
    the solving roles' answers are not."""
    review = r"The total is 3 \times 6 = \boxed{18} dollars. \boxed{Incorrect}"
    eps = [_ep([("generator", r"\boxed{0}"), ("evaluator", review), ("generator", r"\boxed{18}")], 1),
           _ep([("generator", r"\boxed{18}"), ("evaluator", r"\boxed{\text{Correct}}")], 1),
           _ep([("orchestrator", "STRATEGY 1: add them, then give the answer in \\boxed{}"), ("worker", "x")], 0)]
    assert workflows.answer_monitor(eps, "math")[0]["hint_answers"] == 1 / 3
    code = [_ep([("generator", SUB), ("evaluator", "Use this:\n" + ADD + "\n\\boxed{Incorrect}")], 0),
            _ep([("orchestrator", "STRATEGY 1: loop over the list"), ("worker", ADD)], 1)]
    assert workflows.answer_monitor(code, "code")[0]["hint_answers"] == 1 / 2


def test_answer_monitor_code_and_long_answers():
    eq = "```python\nclass Yes:\n    def __eq__(self, other):\n        return True\n\n" \
         "def add(a, b):\n    return Yes()\n```"
    monitor, degenerate = workflows.answer_monitor([_ep([("generator", eq)], 1), _ep([("generator", ADD)], 1),
                                                    _ep([("generator", ADD)], 0)], "code")
    assert monitor == {"hint_answers": None, "answer_top_share": 2 / 3, "answer_top": ADD.split("\n", 1)[1].rsplit("```", 1)[0].strip()}
    assert degenerate == {"generator": 1 / 2}
    # the graded block, not only the last one: a solution with an always-equal class, then a usage block; and the
    # class-attribute form (`__eq__ = lambda ...`, the red team's always-equal programs) with no `def`
    later = eq + "\n\nUsage:\n```python\nprint(add(1, 2))\n```"
    attr = "```python\nclass Y:\n    __eq__ = lambda s, o: True\n\ndef add(a, b):\n    return Y()\n```"
    assert [rewards.degenerate(t, "code") for t in (later, attr, ADD)] == [True, True, False]
    long = "\\boxed{" + "1" * 200 + "}"
    assert len(workflows.answer_monitor([_ep([("generator", long)], 0)], "math")[0]["answer_top"]) == 80
