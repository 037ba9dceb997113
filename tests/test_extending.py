"""What a fork adds, in the places the README's forker's guide names. A workflow defined in this file alone
("debate": two solvers, a critique of each, a judge), registered in workflows.WORKFLOWS at run time, trains
with train.py (its parallel roles taking one optimizer step per instance) and is evaluated by eval.py. A
reward shaping term (workflows.reward_shaping) moves the advantages but never the logged accuracy."""
import json
import os

import pytest
import torch

import eval as ev
import train
import workflows
from workflows import PROMPTS, Workflow, _stage, mean, parse_choice

SMALL = ["--model", "tiny", "--problems", "2", "--group", "2", "--max-new-tokens", "6", "--device", "cpu"]
CRITIQUE = "Point out the main flaw of this solution, if it has one.\n\nProblem: {problem}\n\nSolution: {solution}"
JUDGE = "Problem: {problem}\n\n{debate}\n\nWhich solution is right? End with \\boxed{{N}}, N its number."


def fake_grade(completions, problems, **kw):
    """Reward 1 for texts of even length, so the random tiny model gets some right answers."""
    return [(float(len(c) % 2 == 0), "correct" if len(c) % 2 == 0 else "wrong") for c in completions]


def read_metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


# ----------------------------------------------------------------------------- a workflow defined here

def debate(eps, probs, tasks, policy, **_):
    """Two solvers (generator0, generator1: one adapter, two GRPO groups), a critique of each (critic0,
    critic1), and a judge that picks one of the solutions: the final answer."""
    jobs = [(i, f"generator{k}", PROMPTS[tasks[i]]["generator"].format(problem=p["prompt"]))
            for i, p in enumerate(probs) for k in range(2)]
    solutions, critiques = [[] for _ in eps], [[] for _ in eps]
    for i, t in _stage(policy, "generator", eps, jobs):
        solutions[i].append(t.text)
    jobs = [(i, f"critic{k}", CRITIQUE.format(problem=probs[i]["prompt"], solution=s))
            for i in range(len(eps)) for k, s in enumerate(solutions[i])]
    for i, t in _stage(policy, "critic", eps, jobs):
        critiques[i].append(t.text)
    jobs = [(i, "judge", JUDGE.format(problem=probs[i]["prompt"], debate="\n\n".join(
        f"Solution {k}:\n{s}\n\nCritique of solution {k}:\n{c}"
        for k, (s, c) in enumerate(zip(ss, critiques[i]), 1)))) for i, ss in enumerate(solutions) if ss]
    for i, t in _stage(policy, "judge", eps, jobs):
        eps[i].final = solutions[i][parse_choice(t.text, len(solutions[i]))[0] - 1]


def debate_stats(episodes, task):
    """Did the judge pick a right solution when there was one (generator turns: answers, graded)."""
    picked = [ep.correct for ep in episodes if any(t.correct for t in ep.turns if t.role == "generator")]
    return {"judge_accuracy": mean(picked)}, {"judge": {"had_right_solver": len(picked), "picked_right": sum(picked)}}


DEBATE = Workflow(debate, ["generator", "critic", "judge"], parallel=("generator", "critic"), stats=debate_stats,
                  headline=lambda d: "judge picked right {picked_right}/{had_right_solver}".format(**d["judge"]))


@pytest.fixture
def registered(monkeypatch):
    """DEBATE in the registry for one test: all that train.py and eval.py need of it."""
    monkeypatch.setitem(workflows.WORKFLOWS, "debate", DEBATE)


@pytest.mark.parametrize("mode,steps", [("per-instance", {"generator": 2, "critic": 2, "judge": 1}),
                                        ("merged", {"generator": 1, "critic": 1, "judge": 1})])
def test_a_workflow_defined_in_a_test_file_trains_and_evaluates(tmp_path, registered, monkeypatch, capsys, mode,
                                                                steps):
    """Regression (issue 18): a new workflow touched four files, and forgetting train.PARALLEL_ROLES
    silently merged its parallel instances into one step. Now its Workflow entry is all: per-instance
    steps follow its `parallel`, its stats are logged, and eval.py reports its sections and headline."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    out = str(tmp_path / "run")
    train.main(["--workflow", "debate", "--policy", "ip", "--parallel-steps", mode, "--steps", "2", "--out", out,
                *SMALL])
    m = read_metrics(out)
    assert [x["step"] for x in m] == [1, 2]
    for x in m:
        assert {role: r["optimizer_steps"] for role, r in x["roles"].items()} == steps
        assert x["optimizer_steps"] == sum(steps.values()) and set(x["workflow"]) == {"judge_accuracy"}
    assert sorted(f for f in os.listdir(os.path.join(out, "step_000002"))) == \
        ["critic.safetensors", "generator.safetensors", "judge.safetensors", "state.pt"]
    if mode == "merged":
        return
    capsys.readouterr()
    records = ev.main(["--run", out, "--problems", "2", "--n", "2"])  # base and step 2
    printed = capsys.readouterr().out
    assert [r["step"] for r in records] == [0, 2]
    for r in records:
        d = r["diagnostics"]
        assert set(d["roles"]) == {"generator", "critic", "judge"} and d["roles"]["judge"]["calls"] == 4
        assert d["judge"]["had_right_solver"] >= d["judge"]["picked_right"]
    assert "judge picked right" in printed and "judge: had_right_solver" in printed


# ----------------------------------------------------------------------------- reward shaping

def test_reward_shaping_moves_the_advantages_not_the_accuracy(tmp_path, monkeypatch):
    """A shaping term (here 0.1 x the rollout's index, so it differs inside every group) goes into
    every turn's training reward, hence the advantages and reward_mean, while accuracy, the grading
    status counts and the workflow stats stay on the 0/1 outcome."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    real, seen = train.grpo.group_advantages, []

    def recording(keys, rewards, **kw):
        seen.append((rewards, real(keys, rewards, **kw)[0]))
        return real(keys, rewards, **kw)
    monkeypatch.setattr(train.grpo, "group_advantages", recording)
    args = ["--workflow", "evalopt", "--policy", "ip", "--steps", "1", *SMALL, "--group", "4"]
    train.main([*args, "--out", str(tmp_path / "plain")])
    monkeypatch.setattr(workflows, "reward_shaping", lambda episode, problem: 0.1 * episode.rollout)
    train.main([*args, "--out", str(tmp_path / "shaped")])
    (plain_rewards, plain_adv), (shaped_rewards, shaped_adv) = seen
    assert set(plain_rewards) <= {0.0, 1.0} and shaped_rewards != plain_rewards
    assert shaped_adv != pytest.approx(plain_adv)
    (plain,), (shaped,) = read_metrics(str(tmp_path / "plain")), read_metrics(str(tmp_path / "shaped"))
    assert shaped["reward_mean"] == pytest.approx(plain["reward_mean"] + 0.15)  # rollouts 0..3: 0.1 x 1.5
    for key in ("accuracy", "grade_status", "workflow", "answer_top_share"):
        assert shaped[key] == plain[key], key
    assert {r: s["diag_correct"] for r, s in shaped["roles"].items()} == \
        {r: s["diag_correct"] for r, s in plain["roles"].items()}


def test_reward_shaping_leaves_evaluation_unchanged(tiny, monkeypatch):
    """pass@1, greedy accuracy and every diagnostic (the monitor's rewarded answers included) read the
    outcome, so a shaping term changes none of them, though the turns' training rewards carry it."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    model, tok = tiny
    problems = [{"id": f"p{j}", "task": "math", "prompt": f"What is {j} + 2?", "answer": str(j + 2)} for j in range(3)]
    evaluate = lambda: ev.evaluate(model, tok, problems, "voting", ev.adapter_map("voting", "base"), "math", n=3,
                                   greedy=True, max_new_tokens=6)
    plain = evaluate()
    assert 0 < plain["pass@1"] < 1 and plain["diagnostics"]["roles"]["generator"]["degenerate_rewarded"] is not None
    shaped_rewards = []
    monkeypatch.setattr(workflows, "reward_shaping", lambda episode, problem: shaped_rewards.append(1) or 0.5)
    assert evaluate() == plain and shaped_rewards
    eps = workflows.run_workflow("single", problems, 2, workflows.make_policy(
        model, tok, {"generator": None}, max_new_tokens=6, generator=torch.Generator().manual_seed(0)))
    assert all(t.reward == ep.reward + 0.5 for ep in eps for t in ep.turns)
