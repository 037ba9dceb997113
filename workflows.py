"""The four workflows of the paper (single agent, Eval-Opt, Voting, Orch-Workers) for math and code,
run as lock-step batches of episodes, and the records (Turn, Episode) that training consumes. Each
workflow is defined once, in WORKFLOWS (a Workflow: its function, roles, parallel roles, diagnostics);
train.py and eval.py hold no per-workflow code, so a new workflow is its prompts, its function and
its entry here.

`run_workflow(workflow, problems, group_size, policy)` rolls out every problem `group_size` times.
All episodes advance together: each stage is ONE call `policy(role, texts)` over every episode still
active at that stage (all first generator calls, then all evaluator calls, then the retries of the
episodes not approved, ...), so a stage is one batched sampler call under one adapter.
`make_policy` builds that callable from a model: it renders each text as one chat user message
(thinking disabled), activates the adapter `adapters[role]` and samples. Train and eval share
this code; they differ only in the adapters mapping (SP {r: "shared"}, IP {r: r}, base {r: None},
single-agent transfer {r: "generator"}).

The final answer is graded with `rewards.grade`: its 0/1 is the episode's outcome (Episode.reward;
every accuracy reads Episode.correct), and the outcome plus `reward_shaping`'s term (0 unless a fork
adds one) is every turn's training reward (the reference's outcome broadcast: no role gets its own
credit). With `diagnose=True` the intermediate answers are graded too (each Eval-Opt attempt, each
voter, each worker) to fill `Turn.correct`, which each workflow's stats sum up: for logging only,
never for training. `answer_monitor` reads graded
episodes for the reward-hacking monitor of train.py and eval.py (the most common answer, degenerate ones).

Over-long prompts (the one rule): a prompt longer than `max_prompt_tokens` is not sampled and gives
no turn, and the episode stops there with facts["prompt_too_long"] = True. Its final answer is the
latest one it has: in Eval-Opt the last generator attempt, graded as usual. An episode with no answer
yet (its first generator, voter, orchestrator, aggregator or synthesizer prompt was too long) gets
reward 0 and status "prompt_too_long". Workers whose prompt is too long are dropped and the
synthesizer compares the rest; with none left the episode has no answer (reward 0).

Left out: multi-turn chat (every call is a fresh single user message holding the whole history, as in
the reference), system prompts, tools, per-role rewards, asynchronous or early-exit scheduling.
Tests: python -m pytest -q tests/test_workflows.py
"""
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import lora
import rewards
from models import chat_ids, stop_ids
from sampler import sample

# ----------------------------------------------------------------------------- prompts
# Our own words. Fields: {problem} the problem text, {history} attempts and reviews so far,
# {solutions} numbered candidate solutions, {n} how many, {k} max strategies, {strategy} one strategy.
_MATH_ANSWER = "Reason step by step, then give the final answer in \\boxed{{}}."
_CODE_ANSWER = "Put your complete solution in a single ```python code block."
_PICK = ("\n\nCompare them and decide which one is most likely correct. End with \\boxed{{N}}, where N is the number "
         "of the best solution (1 to {n}).")
_PLAN = "Write each strategy on its own line as 'STRATEGY 1: ...', 'STRATEGY 2: ...', and so on.\n\n"
PROMPTS = {
    "math": {
        "generator": "Solve the following math problem. " + _MATH_ANSWER + "\n\nProblem: {problem}",
        "evaluator": "You are reviewing a solution to a math problem.\n\nProblem: {problem}\n\n{history}\n\n"
                     "Check the latest attempt carefully. If its final answer is right, end with "
                     "\\boxed{{Correct}}. Otherwise state the main issue in one or two sentences, without "
                     "giving the answer, and end with \\boxed{{Incorrect}}.",
        "aggregator": "Here are {n} solutions to the same math problem.\n\nProblem: {problem}\n\n{solutions}" + _PICK,
        "orchestrator": "Propose up to {k} different strategies for solving the math problem below. Do not solve it. "
                        + _PLAN + "Problem: {problem}",
        "worker": "Solve the following math problem using the given strategy. " + _MATH_ANSWER +
                  "\n\nProblem: {problem}\n\nStrategy: {strategy}",
        "synthesizer": "Below are {n} solution(s) to the same math problem, each following a different "
                       "strategy.\n\nProblem: {problem}\n\n{solutions}\n\nCompare them, resolve any "
                       "disagreement, and write the final solution. " + _MATH_ANSWER,
    },
    "code": {
        "generator": "Solve the following programming task in Python. " + _CODE_ANSWER + "\n\nTask: {problem}",
        "evaluator": "You are reviewing a Python solution to a programming task.\n\nTask: {problem}\n\n"
                     "{history}\n\nCheck the latest attempt carefully: does it solve the task on every "
                     "input? If yes, end with \\boxed{{Correct}}. Otherwise state the main issue in one or "
                     "two sentences, without writing the fixed code, and end with \\boxed{{Incorrect}}.",
        "aggregator": "Here are {n} Python solutions to the same programming task.\n\nTask: {problem}\n\n"
                      "{solutions}" + _PICK,
        "orchestrator": "Propose up to {k} different strategies (algorithms or approaches) for the programming task "
                        "below. Do not write code. " + _PLAN + "Task: {problem}",
        "worker": "Solve the following programming task in Python using the given strategy. " +
                  _CODE_ANSWER + "\n\nTask: {problem}\n\nStrategy: {strategy}",
        "synthesizer": "Below are {n} Python solution(s) to the same programming task, each following "
                       "a different strategy.\n\nTask: {problem}\n\n{solutions}\n\nCompare them, fix any "
                       "mistakes, and write the final program. " + _CODE_ANSWER,
    },
}
for _p, _answer in ((PROMPTS["math"], _MATH_ANSWER), (PROMPTS["code"], _CODE_ANSWER)):  # generator + history
    _p["retry"] = (_p["generator"] + "\n\nYour earlier attempts and a reviewer's feedback on them:\n\n{history}"
                   "\n\nWrite a new, complete solution that fixes the issues the reviewer raised. " + _answer)
ATTEMPT, REVIEW, SOLUTION = "Attempt {k}:\n{text}", "Review of attempt {k}:\n{text}", "Solution {k}:\n{text}"

DEFAULT_ROUNDS = {"math": 3, "code": 2}  # Eval-Opt generator attempts, as the reference
ANSWER_ROLES = ("generator", "worker")  # turns that are a full answer (graded when diagnosing)
MONITORED_ROLES = ANSWER_ROLES + ("synthesizer",)  # turns that are answers: + the synthesizer's final one


# ----------------------------------------------------------------------------- parsers (pure)

# \boxed{Correct}, {\text{Correct}}, {\textit{Incorrect}}, {Correct.}, {\text{Incorrect}.}: linear in spaces
_VERDICT = re.compile(r"\\boxed\{\s*(?:\\(?:text|textbf|textit|mathrm|mathbf|boldsymbol)\{\s*)?(correct|incorrect)"
                      r"[\s.!]*(?:\}[\s.!]*)?\}", re.I)
# \boxed{2}, {\text{Solution 2}}, {\text{Solution } 2}, {\textbf{2}}, {(2)}, {2.}: read on whitespace-collapsed text
_BOXED_INT = re.compile(r"\\boxed\{ ?(?:\\(?:text|textbf|mathbf|mathrm|boldsymbol) ?\{ ?)?\(? ?(?:solution ?)?(?:\} ?)?"
                        r"\(?(\d+)\)?\.? ?\}? ?\}", re.I)
_STRATEGY = re.compile(r"^[ \t*#>_-]*strategy[ \t]*\d+[ \t*]*[:.)-][ \t*]*(\S.*?)[ \t*]*$", re.I | re.M)
_LIST_ITEM = re.compile(r"^[ \t]*(?:\(?\d+[.)]|[-*\u2022])[ \t]+(\S.*?)[ \t]*$", re.M)


def parse_verdict(text):
    """'Correct' / 'Incorrect' from the last \\boxed{Correct|Incorrect} (any case; \\text{} and the like, a full stop);
    None when there is none (unparseable: the workflow treats it as not approved)."""
    return found[-1].capitalize() if (found := _VERDICT.findall(text)) else None


def parse_choice(text, n):
    """(choice in 1..n, how): the last \\boxed{N} with N in range, also in \\text{} / \\textbf{}, after 'Solution', in
    brackets or with a full stop ('boxed'); else the first number
    in 1..n anywhere in the text ('digit'); else 1 ('default'), as the reference's fallbacks. A run of
    4,300 digits or more is no number here (int() refuses it: a degenerate reply must not crash)."""
    if boxed := [int(m) for m in _BOXED_INT.findall(" ".join(text.split())) if len(m) < 4300 and 1 <= int(m) <= n]:
        return boxed[-1], "boxed"
    first = next((int(m) for m in re.findall(r"(?<!\d)\d+(?!\d)", text) if len(m) < 4300 and 1 <= int(m) <= n), None)
    return (first, "digit") if first else (1, "default")


def parse_strategies(text, max_strategies=3):
    """(strategies, how), never empty, at most max_strategies: 'STRATEGY k: ...' lines ('tagged');
    else numbered or bulleted list items ('list'); else lines of 3+ words that do not end with ':'
    (a heading like 'Here are the strategies:' is not a strategy) ('lines'); else the whole text."""
    lines = [l.strip() for l in text.splitlines() if len(l.split()) >= 3 and not l.strip().endswith(":")]
    return next(((found[:max_strategies], how) for how, found in (("tagged", _STRATEGY.findall(text)),
                ("list", _LIST_ITEM.findall(text)), ("lines", lines)) if found), ([text.strip()], "whole"))


# ----------------------------------------------------------------------------- records

@dataclass
class Turn:
    role: str                    # role type = the adapter it trains under IP
    instance: str                # GRPO group name within a problem (generator0, worker, ...)
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]        # (len(completion_ids),)
    finish: str
    text: str
    reward: float = 0.0          # the training reward: the episode's outcome + shaping, copied (outcome broadcast)
    correct: bool | None = None  # diagnostic only: was this attempt / verdict / pick right


@dataclass
class Episode:
    """facts: always prompt_too_long. Eval-Opt: rounds (attempts), verdicts ('Correct' / 'Incorrect' /
    None = unparseable), retried, stopped ('approved' / 'round_limit' / 'prompt_too_long'). Voting:
    n_candidates, chosen (1-based), choice_parse. Orch-Workers: n_strategies, strategy_parse, n_workers.
    Which answers, verdicts and picks were right (diagnose) is in Turn.correct."""
    problem_id: str
    rollout: int                 # index within its problem's group
    turns: list[Turn] = field(default_factory=list)
    final: str | None = None     # the final answer text; None when the episode never got one
    reward: float = 0.0          # the outcome: rewards.py's 0/1 for the final answer, never shaped
    status: str = ""             # grading status from rewards, or "prompt_too_long"
    facts: dict = field(default_factory=lambda: {"prompt_too_long": False})
    shaping: float = 0.0         # reward_shaping's term: in the turns' training reward, never in the outcome

    @property
    def correct(self):
        """The 0/1 outcome as a bool: what every accuracy counts (train.py's, pass@1, right picks), so that a
        shaping term in the training reward never changes them. A fork whose grader gives partial credit
        (an outcome between 0 and 1) says here what counts as right."""
        return self.reward == 1.0


@dataclass
class Workflow:
    """One workflow, defined once: train.py and eval.py read everything workflow-specific from its entry
    in WORKFLOWS. Its prompts are PROMPTS[task][role]. Role names mean the same in every workflow:
    ANSWER_ROLES' turns are answers (graded when diagnosing, given to the solvers' adapter by
    --transfer solvers), "evaluator" turns are verdicts (_verdicts)."""
    run: Callable          # run(eps, probs, tasks, policy, **settings): fills every episode's turns, final, facts
    roles: list[str]       # role types, in update order; under IP each trains its own adapter
    parallel: tuple = ()   # roles with several instances per episode sharing one adapter: under IP one
                           # optimizer step per instance (--parallel-steps per-instance) or one merged step
    stats: Callable = lambda episodes, task: ({}, {})  # -> (train.py's metrics["workflow"], eval.py's sections)
    headline: Callable = lambda sections: ""          # the sections in a few words, for eval.py's tables


# ----------------------------------------------------------------------------- policy

def adapter_map(workflow, mode):
    """role -> adapter name, the `adapters` of make_policy. mode: base, sp (train.py's SP), ip (IP: each role type its
    own), or all / solvers (a single-agent adapter, loaded as "transfer", on every role / on the answer roles only)."""
    return {r: {"base": None, "sp": "shared", "ip": r, "all": "transfer",
                "solvers": "transfer" if r in ANSWER_ROLES else None}[mode] for r in WORKFLOWS[workflow].roles}


def make_policy(model, tokenizer, adapters, max_new_tokens=512, temperature=0.7, top_p=1.0, top_k=0,
                max_prompt_tokens=4096, generator=None):
    """policy(role, texts) -> [Turn | None]: each text as one chat user message, all of them sampled
    in one batched call (n=1) under adapter `adapters[role]`; None for a text whose rendered prompt
    is longer than max_prompt_tokens (not sampled). max_new_tokens: per call (the reference used
    5120 math / 2048 code; far less at our scale); max_prompt_tokens: holds an Eval-Opt history of
    3 attempts + 3 reviews at 512 tokens each. The role's adapter stays active afterwards: trainers
    set their own before an update. policy.stages lists each call as [role, rows, new tokens, seconds]."""
    stops = stop_ids(model, tokenizer)

    def policy(role, texts):
        start, name = time.perf_counter(), adapters[role]
        if lora.adapter_names(model):   # a plain model (no LoRA wrappers) is the base model already
            lora.set_adapter(model, name)
        elif name is not None:
            raise ValueError(f"role {role!r} uses adapter {name!r} but the model has no adapters")
        prompts = [chat_ids(tokenizer, t) for t in texts]
        keep = [i for i, p in enumerate(prompts) if len(p) <= max_prompt_tokens]
        with lora.merged(model):  # the adapter folded in: sampling costs what the base model does
            done = sample(model, [prompts[i] for i in keep], n=1, max_new_tokens=max_new_tokens, temperature=temperature,
                          top_p=top_p, top_k=top_k, stop_ids=stops, pad_id=tokenizer.pad_token_id, generator=generator)
        turns = {i: Turn(role, role, prompts[i], c.tokens, c.logprobs, c.finish,
                         tokenizer.decode(c.tokens, skip_special_tokens=True)) for i, c in zip(keep, done)}
        policy.stages.append([role, len(done), sum(len(c.tokens) for c in done), time.perf_counter() - start])
        return [turns.get(i) for i in range(len(texts))]  # None: not sampled
    policy.stages = []
    return policy


def _stage(policy, role, episodes, jobs):
    """One lock-step stage: jobs [(episode index, instance, text)] -> [(episode index, Turn)] from ONE
    policy call (none without jobs); turns are appended to their episodes. A too-long prompt gives no turn
    (every caller skips it) and marks its episode's facts["prompt_too_long"]."""
    out = []
    for (i, instance, _), t in zip(jobs, policy(role, [text for _, _, text in jobs]) if jobs else []):
        if t is None:
            episodes[i].facts["prompt_too_long"] = True
        else:
            t.instance = instance  # the policy knows the role; the stage names the instance (the GRPO group)
            episodes[i].turns.append(t)
            out.append((i, t))
    return out


def _history(ep):
    """Attempt 1, Review of attempt 1, Attempt 2, ...: an Eval-Opt episode's turns so far, as the evaluator
    and a retry see them. They alternate, generator then evaluator, so turn n is of attempt n // 2 + 1."""
    return "\n\n".join((ATTEMPT if t.role == "generator" else REVIEW).format(k=n // 2 + 1, text=t.text)
                       for n, t in enumerate(ep.turns))


# ----------------------------------------------------------------------------- diagnostics helpers
# Logging only, never training: what train.py logs per step and eval.py reports, from graded episodes.

def mean(xs):
    return float(np.mean(xs)) if len(xs) else None


def fmt(x, spec=".3f"):
    """A number for a table: '-' for None (no data)."""
    return "-" if x is None else format(x, spec)


def _answers_right(ep):
    """Was each answer turn (ANSWER_ROLES) of the episode graded right, in order (not graded: False)."""
    return [bool(t.correct) for t in ep.turns if t.role in ANSWER_ROLES]


def _verdicts(ep):
    """Eval-Opt's verdict accounting, its one place: [(turn, verdict, kind)] per evaluator turn. verdict:
    parse_verdict's, None when unparseable, which counts as not approved (as the workflow acts on it).
    kind: approved_right, approved_wrong, rejected_right or rejected_wrong, by whether the attempt it
    judged (the latest answer turn before it) is right by its Turn.correct; None when that was not graded.
    A verdict is right when it approves exactly the right attempts: kind in RIGHT_VERDICTS."""
    out, judged = [], None
    for t in ep.turns:
        if t.role in ANSWER_ROLES:
            judged = t.correct
        elif t.role == "evaluator":
            out.append((t, verdict := parse_verdict(t.text), None if judged is None else
                        ("approved_" if verdict == "Correct" else "rejected_") + ("right" if judged else "wrong")))
    return out


RIGHT_VERDICTS = ("approved_right", "rejected_wrong")


# ----------------------------------------------------------------------------- workflows
# Each workflow: its function, which fills episode.turns, .final and .facts (`tasks[i]` picks episode i's
# prompts, `_prompt` fills one in); its stats(episodes, task) -> (train.py's metrics["workflow"], eval.py's
# diagnostic sections); its headline(sections) for eval.py's tables (sections may come from older eval.jsonl
# records); its entry in WORKFLOWS.

def _prompt(tasks, probs, i, key, **fields):
    """Episode i's prompt: PROMPTS[its task][key] for its problem, with the other fields filled in."""
    return PROMPTS[tasks[i]][key].format(problem=probs[i]["prompt"], **fields)


def _single(eps, probs, tasks, policy, **_):
    jobs = [(i, "generator", _prompt(tasks, probs, i, "generator")) for i in range(len(eps))]
    for i, t in _stage(policy, "generator", eps, jobs):
        eps[i].final = t.text


def _evalopt(eps, probs, tasks, policy, rounds=None, **_):
    limit, active = [rounds or DEFAULT_ROUNDS[task] for task in tasks], list(range(len(eps)))
    for ep in eps:
        ep.facts.update(verdicts=[], stopped="prompt_too_long", rounds=0, retried=False)
    for r in range(max(limit, default=0)):
        jobs = [(i, "generator", _prompt(tasks, probs, i, "retry" if r else "generator", history=_history(eps[i])))
                for i in active]
        active = []  # a too-long retry ends the episode with its previous attempt as final
        for i, t in _stage(policy, "generator", eps, jobs):
            eps[i].final = t.text
            eps[i].facts.update(rounds=r + 1, retried=r > 0)  # active in round r: it made every earlier attempt
            active.append(i)
        jobs = [(i, "evaluator", _prompt(tasks, probs, i, "evaluator", history=_history(eps[i]))) for i in active]
        active = []
        for i, t in _stage(policy, "evaluator", eps, jobs):
            eps[i].facts["verdicts"].append(verdict := parse_verdict(t.text))
            if verdict == "Correct":
                eps[i].facts["stopped"] = "approved"
            elif r + 1 >= limit[i]:
                eps[i].facts["stopped"] = "round_limit"
            else:  # Incorrect or unparseable: retry
                active.append(i)


def _evalopt_stats(episodes, task):
    judged = [(verdict, kind) for ep in episodes for _, verdict, kind in _verdicts(ep) if kind]  # graded verdicts
    c = {k: sum(kind == k for _, kind in judged) for k in ("approved_right", "approved_wrong", "rejected_right",
         "rejected_wrong")} | {"unparseable": sum(verdict is None for verdict, _ in judged)}
    accuracy = mean([kind in RIGHT_VERDICTS for _, kind in judged])
    attempts = [_answers_right(ep) for ep in episodes]
    pairs = [(a, b) for att in attempts for a, b in zip(att, att[1:])]  # (an attempt, the retry after it)
    after_wrong, after_right = [b for a, b in pairs if not a], [b for a, b in pairs if a]
    rounds = mean([len(att) for att in attempts])
    return ({"retry_rate": mean([len(att) > 1 for att in attempts]), "mean_rounds": rounds,
             "verdict_accuracy": accuracy, "verdict_unparseable": mean([verdict is None for verdict, _ in judged])},
            {"evaluator": {**c, "verdict_accuracy": accuracy, "retried_wrong": len(after_wrong),
                           "retry_fixed": sum(after_wrong), "retry_fixed_rate": mean(after_wrong),
                           "retried_right": len(after_right), "retry_broke": len(after_right) - sum(after_right),
                           "mean_rounds": rounds, "first_attempt_accuracy": mean([att[0] for att in attempts if att])}})


def _evalopt_headline(d):
    e = d["evaluator"]
    return (f"verdict acc {fmt(e['verdict_accuracy'], '.2f')} ({e['unparseable']} unparseable), approved wrong "
            f"{e['approved_wrong']}, rejected right {e['rejected_right']}, "
            f"retry fixed {e['retry_fixed']}/{e['retried_wrong']}")


def _answers(policy, role, eps, jobs, count_key):
    """One stage of parallel solvers: the texts each episode got, in order (too-long prompts skipped);
    how many each got goes to its facts[count_key]."""
    texts = [[] for _ in eps]
    for i, t in _stage(policy, role, eps, jobs):
        texts[i].append(t.text)
    for ep, got in zip(eps, texts):
        ep.facts[count_key] = len(got)
    return texts


def _compare_jobs(role, probs, tasks, texts):
    """The aggregator's / synthesizer's jobs: the problem and an episode's numbered solutions."""
    numbered = lambda ts: "\n\n".join(SOLUTION.format(k=k, text=t) for k, t in enumerate(ts, 1))
    return [(i, role, _prompt(tasks, probs, i, role, solutions=numbered(ts), n=len(ts))) for i, ts in enumerate(texts) if ts]


def _voting(eps, probs, tasks, policy, n_voters=3, **_):
    jobs = [(i, f"generator{k}", _prompt(tasks, probs, i, "generator")) for i in range(len(eps)) for k in range(n_voters)]
    candidates = _answers(policy, "generator", eps, jobs, "n_candidates")
    for i, t in _stage(policy, "aggregator", eps, _compare_jobs("aggregator", probs, tasks, candidates)):
        choice, how = parse_choice(t.text, len(candidates[i]))
        eps[i].final = candidates[i][choice - 1]
        eps[i].facts.update(chosen=choice, choice_parse=how)


def _voting_stats(episodes, task):
    some = [ep.correct for ep in episodes if any(_answers_right(ep))]  # a right candidate: was it picked?
    picks = [ep.facts["choice_parse"] for ep in episodes if "choice_parse" in ep.facts]
    unboxed, default = [how != "boxed" for how in picks], [how == "default" for how in picks]  # default: solution 1
    return ({"pick_accuracy": mean(some), "pick_unboxed": mean(unboxed), "pick_default": mean(default),
             "any_candidate_correct": mean([any(_answers_right(ep)) for ep in episodes])},
            {"aggregator": {"had_right_candidate": len(some), "picked_right": sum(some), "pick_accuracy": mean(some),
                            "candidate_accuracy": mean([a for ep in episodes for a in _answers_right(ep)]),
                            "picks": len(picks), "unboxed_picks": sum(unboxed), "default_picks": sum(default)}})


def _voting_headline(d):
    a = d["aggregator"]
    return f"picked right {a['picked_right']}/{a['had_right_candidate']}" + (  # older records lack picks
        f", {a['unboxed_picks']}/{a['picks']} picks without \\boxed{{N}} ({a['default_picks']} with no number: "
        f"solution 1)" if "picks" in a else "")


def _orchworkers(eps, probs, tasks, policy, max_strategies=3, **_):
    jobs = [(i, "orchestrator", _prompt(tasks, probs, i, "orchestrator", k=max_strategies)) for i in range(len(eps))]
    strategies = [[] for _ in eps]
    for i, t in _stage(policy, "orchestrator", eps, jobs):
        strategies[i], eps[i].facts["strategy_parse"] = parse_strategies(t.text, max_strategies)
    for ep, s in zip(eps, strategies):  # 0 where the orchestrator's prompt was too long
        ep.facts["n_strategies"] = len(s)
    jobs = [(i, "worker", _prompt(tasks, probs, i, "worker", strategy=s)) for i in range(len(eps)) for s in strategies[i]]
    solutions = _answers(policy, "worker", eps, jobs, "n_workers")
    for i, t in _stage(policy, "synthesizer", eps, _compare_jobs("synthesizer", probs, tasks, solutions)):
        eps[i].final = t.text


def _orchworkers_stats(episodes, task):
    """Workers agree when their answers are equal (math: the monitor's keys) or all pass or all fail (code:
    programs rarely match as text); with fewer than two workers there is nothing to agree on."""
    key = (lambda t: rewards.final_answer(t.text, task)) if task == "math" else (lambda t: bool(t.correct))
    teams = [[key(t) for t in ep.turns if t.role == "worker"] for ep in episodes]
    agree = [None not in keys and len(set(keys)) == 1 for keys in teams if len(keys) >= 2]
    workers = [_answers_right(ep) for ep in episodes]
    some = [ep.correct for ep, w in zip(episodes, workers) if any(w)]  # a right worker: did the synthesis keep it?
    none = [ep.correct for ep, w in zip(episodes, workers) if w and not any(w)]  # none: did it fix them?
    any_right = mean([any(w) for w in workers])
    synthesized = [ep.correct for ep in episodes if any(t.role == "synthesizer" for t in ep.turns)]  # had a synthesis
    return ({"mean_strategies": mean([ep.facts.get("n_strategies", 0) for ep in episodes]),
             "any_worker_correct": any_right},
            {"workers": {"multi_worker_episodes": len(agree), "agree": sum(agree), "agreement": mean(agree),
                         "mean_workers": mean([len(w) for w in workers]), "any_right": any_right},
             "synthesizer": {"accuracy": mean(synthesized), "had_right_worker": len(some), "kept_right": sum(some),
                             "no_right_worker": len(none), "fixed": sum(none)}})


def _orchworkers_headline(d):
    w, s = d["workers"], d["synthesizer"]
    return (f"workers agree {w['agree']}/{w['multi_worker_episodes']}, synth kept right {s['kept_right']}/"
            f"{s['had_right_worker']}, fixed {s['fixed']}/{s['no_right_worker']}")


WORKFLOWS = {  # the registry: a new workflow is one more entry (train.py --workflow and eval.py take it)
    "single": Workflow(_single, ["generator"]),
    "evalopt": Workflow(_evalopt, ["generator", "evaluator"], (), _evalopt_stats, _evalopt_headline),
    "voting": Workflow(_voting, ["generator", "aggregator"], ("generator",), _voting_stats, _voting_headline),
    "orchworkers": Workflow(_orchworkers, ["orchestrator", "worker", "synthesizer"], ("worker",),
                            _orchworkers_stats, _orchworkers_headline),
}


# ----------------------------------------------------------------------------- run + grade

def run_workflow(workflow, problems, group_size, policy, task=None, rounds=None, n_voters=3,
                 max_strategies=3, diagnose=True, grade=True):
    """Run len(problems) x group_size episodes of `workflow` in lock-step and grade them (unless
    grade=False: then call grade_episodes). Returns Episodes problem-major, rollout-minor. `task`
    overrides each problem's "task" for the prompts (grading always follows the problem); `rounds`:
    Eval-Opt attempts (default 3 math, 2 code); `n_voters`: Voting's generators; `max_strategies`:
    Orch-Workers' cap on workers."""
    if workflow not in WORKFLOWS:
        raise ValueError(f"unknown workflow {workflow!r}; choose from {list(WORKFLOWS)}")
    probs = [p for p in problems for _ in range(group_size)]
    eps = [Episode(p["id"], g) for p in problems for g in range(group_size)]
    tasks = [task or p["task"] for p in probs]
    for t in set(tasks) - set(PROMPTS):
        raise ValueError(f"unknown task {t!r}; choose from {list(PROMPTS)}")
    WORKFLOWS[workflow].run(eps, probs, tasks, policy, rounds=rounds, n_voters=n_voters, max_strategies=max_strategies)
    if grade:
        grade_episodes(eps, problems, group_size, diagnose)
    return eps


def reward_shaping(episode, problem):
    """The one place for reward shaping, e.g. a format reward (0.1 when every turn stopped by itself, a
    penalty for a missing \\boxed{}): a term added to the training reward of every turn of the graded
    `episode` (its .reward is the 0/1 outcome) of `problem`. It moves the advantages, never the outcome:
    accuracy, pass@1 and the diagnostics read Episode.correct. None here: the reference trains on the
    outcome alone."""
    return 0.0


def grade_episodes(eps, problems, group_size, diagnose=True):
    """Grade every final answer, plus (diagnose) every intermediate answer, in ONE rewards.grade call;
    identical (episode, text) pairs are graded once (code grading runs subprocesses). Each turn's
    training reward is the episode's outcome plus reward_shaping's term."""
    wanted = sorted({(i, ep.final) for i, ep in enumerate(eps) if ep.final is not None} |
                    {(i, t.text) for i, ep in enumerate(eps) for t in ep.turns if diagnose and t.role in ANSWER_ROLES})
    graded = dict(zip(wanted, rewards.grade([text for _, text in wanted],
                                            [problems[i // group_size] for i, _ in wanted]) if wanted else []))
    for i, ep in enumerate(eps):
        ep.reward, ep.status = (0.0, "prompt_too_long") if ep.final is None else graded[(i, ep.final)]  # (a float)
        ep.shaping = reward_shaping(ep, problems[i // group_size])
        for t in ep.turns:
            t.reward = ep.reward + ep.shaping
        if diagnose:
            _diagnose(ep, lambda text: graded[(i, text)][0] > 0)


def _diagnose(ep, right):
    """Turn.correct from `right(text)` (was this answer graded right?): an answer turn is right when its
    answer is; a verdict when it approves exactly the right attempts (_verdicts); a pick or synthesis
    when the final answer is."""
    for t in ep.turns:
        if t.role in ANSWER_ROLES:
            t.correct = right(t.text)
        elif t.role in ("aggregator", "synthesizer"):
            t.correct = ep.correct
    for t, _, kind in _verdicts(ep):
        t.correct = None if kind is None else kind in RIGHT_VERDICTS


def answer_monitor(episodes, task):
    """The reward-hacking monitor: a policy that games the reward tends to give one answer everywhere, or
    a degenerate one (rewards.degenerate: infinity, NaN, a program overriding __eq__, ...). Returns
    ({"answer_top_share": share of the final answers (episodes whose final text has one, rewards.final_answer)
    equal to the most common one, "answer_top": that answer, its first 80 characters}, {role: share of its
    rewarded answer turns that are degenerate, None without any}); answer turns are those of MONITORED_ROLES (an
    evaluator, aggregator or orchestrator turn answers nothing); rewarded: in an episode of outcome 1 and not
    graded wrong itself (Turn.correct: a wrong voter beside the right one picked is no hole in the reward). So it shows
    degenerate answers the grader accepted; one trained through the shared outcome (Turn.reward 1) while graded wrong
    is not counted. hint_answers: the share of evaluator and orchestrator turns (roles told not to solve, whose text
    a solver reads next) that hold an answer of their own (rewards.final_answer: a \\boxed{} other than a verdict, a
    code block): a judge or planner handing the solver its answer, which the outcome reward pays for too, and which
    makes a retry's or a worker's success the reviewer's (None in workflows without those roles). An upper bound: a
    review restating the attempt's answer, quoting its code, or a verdict the parser misses counts too."""
    # a final text without an answer (no \boxed{}, no code block) is not counted
    keys = Counter(k for ep in episodes if ep.final is not None and (k := rewards.final_answer(ep.final, task)) is not None)
    top, n = keys.most_common(1)[0] if keys else (None, 0)
    rewarded = {t.role: [] for ep in episodes for t in ep.turns if t.role in MONITORED_ROLES}
    for t in (t for ep in episodes if ep.correct for t in ep.turns if t.role in rewarded and t.correct is not False):
        rewarded[t.role].append(rewards.degenerate(t.text, task))
    hints = [rewards.final_answer(_VERDICT.sub("", t.text), task) is not None  # a verdict is no answer
             for ep in episodes for t in ep.turns if t.role in ("evaluator", "orchestrator")]
    return ({"answer_top_share": n / keys.total() if keys else None, "answer_top": top and top[:80],
             "hint_answers": mean(hints)}, {role: sum(d) / len(d) if d else None for role, d in rewarded.items()})
