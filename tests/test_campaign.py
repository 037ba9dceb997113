"""bench/campaign.py without a GPU or a model: the record built from a fake run folder, run names, skipping
runs already recorded, and the per-claim plots."""
import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("campaign", os.path.join(ROOT, "bench", "campaign.py"))
campaign = importlib.util.module_from_spec(spec)
spec.loader.exec_module(campaign)

SETTINGS = {"model": "/root/mdl/hf", "workflow": "single", "data": "gsm8k/test.jsonl", "problems": 500, "n": 2,
            "seed": 0, "temperature": 0.7}


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def eval_line(step, acc, se=0.02, **settings):
    diag = {"episodes": 1000, "accuracy": acc, "roles": {"generator": {"calls": 1000, "correct": acc}}}
    return {"step": step, "settings": {**SETTINGS, **settings}, "pass@1": acc, "pass@1_se": se, "diagnostics": diag}


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "single-s1"
    d.mkdir()
    config = {"workflow": "single", "policy": "ip", "task": "math", "model": "/root/mdl/hf", "model_used":
              "/root/mdl/hf", "data": "/root/proj/gsm8k/train.jsonl", "eval_data": None, "out": str(d), "seed": 1,
              "steps": 40, "problems": 16, "group": 8, "lr": 1e-4, "no_cosine": True, "parallel_steps": "per-instance",
              "resume": False, "device": None, "eval_every": 0}
    (d / "config.json").write_text(json.dumps(config))
    metric = lambda step, t, ent: {"step": step, "reward_mean": 0.25, "skipped_steps": 0, "time": {"total": t},
                                   "roles": {"generator": {"entropy": ent}}}
    # step 2 written twice (a resumed run): the later line wins
    write_jsonl(d / "metrics.jsonl", [metric(1, 9.0, 0.2), metric(2, 99.0, 0.2), metric(2, 3.0, 0.1),
                                      metric(3, 3.0, 0.1)])
    write_jsonl(d / "eval.jsonl", [eval_line(0, 0.2), eval_line(20, 0.31), eval_line(40, 0.29),
                                   eval_line(20, 0.9, problems=300),       # other settings: ignored
                                   eval_line(40, 0.30, se=0.021)])         # a later line for step 40 wins
    return str(d)


def test_record_from_a_run_folder(run_dir):
    r = campaign.build_record(run_dir, "single-s1", "Qwen2.5-Coder-0.5B-Instruct", "/root/proj/gsm8k/test.jsonl",
                              500, 2, {"gpu": "NVIDIA H200"})
    assert (r["name"], r["config"], r["seed"], r["model"]) == ("single-s1", "single", 1, "Qwen2.5-Coder-0.5B-Instruct")
    assert (r["workflow"], r["policy"], r["parallel_steps"], r["steps"], r["lr"], r["no_cosine"]) == \
        ("single", "ip", "per-instance", 40, 1e-4, True)
    assert not {"out", "model_used", "resume", "device", "data"} & set(r)  # paths and machine details stay out
    assert (r["train_data"], r["eval_data"]) == ("gsm8k/train.jsonl", "gsm8k/test.jsonl")
    assert [(p["step"], p["pass@1"]) for p in r["curve"]] == [(0, 0.2), (20, 0.31), (40, 0.30)]
    assert (r["base"]["pass@1"], r["peak"]["step"], r["final"]["se"]) == (0.2, 20, 0.021)
    assert r["final_minus_base"] == pytest.approx(0.1)
    assert r["diagnostics"]["peak"]["accuracy"] == 0.31 and set(r["diagnostics"]) == {"base", "peak", "final"}
    assert r["steps_done"] == 3 and r["step_time_s"] == pytest.approx(5.0)
    assert r["train_curve"]["entropy"] == {"generator": [0.2, 0.1, 0.1]}
    assert r["gpu"] == "NVIDIA H200" and r["git_commit"] and r["date"].startswith("20")
    with pytest.raises(ValueError, match="lacks the base"):
        campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 200, 2)


def test_names_and_skipping(tmp_path, capsys):
    assert campaign.parse_name("voting-ip-merged-s12") == ("voting-ip-merged", 12)
    for bad in ("voting-s0", "single", "single-sx"):
        with pytest.raises(SystemExit):
            campaign.parse_name(bad)
    results = tmp_path / "c.jsonl"
    write_jsonl(results, [{"config": "single", "seed": 0, "model": "tiny"}])
    with pytest.raises(SystemExit) as e:  # already recorded: nothing is started
        campaign.main(["single-s0", "--model", "tiny", "--gpus", "cpu", "--results", str(results),
                       "--runs", str(tmp_path / "runs")])
    assert e.value.code == 0 and "already in" in capsys.readouterr().out


def test_plots(run_dir, tmp_path):
    pytest.importorskip("matplotlib")
    r = campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 500, 2)
    out = tmp_path / "results"
    out.mkdir()
    write_jsonl(out / "c.jsonl", [r, {**r, "name": "evalopt-ip-s0", "config": "evalopt-ip"}])
    campaign.plot(str(out / "c.jsonl"), str(out))  # C5 has no run yet: no figure
    assert sorted(os.listdir(out)) == ["c.jsonl", "claim-C1.png", "claim-C2.png", "claim-C3.png", "claim-C4.png"]


def test_step_breakdown_of_a_tiny_run(tmp_path):
    """bench/steps.py on a real (tiny) run: the rollout by role adds up to the step's rows and tokens, the
    update by adapter names the run's adapters, and leading steps are skipped."""
    import train
    spec = importlib.util.spec_from_file_location("steps", os.path.join(ROOT, "bench", "steps.py"))
    steps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(steps)
    out = str(tmp_path / "run")
    train.main(["--model", "tiny", "--workflow", "evalopt", "--policy", "ip", "--steps", "2", "--problems", "2",
                "--group", "2", "--max-new-tokens", "6", "--device", "cpu", "--out", out])
    last = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][-1]
    b = steps.breakdown(out, skip=1)
    assert b["steps"] == 1 and b["total"] == last["time"]["total"]
    assert set(b["roles"]) == {"generator", "evaluator"}
    assert sum(r["rows"] for r in b["roles"].values()) == last["rows"]
    assert sum(r["tokens"] for r in b["roles"].values()) == sum(r["tokens"] for r in last["roles"].values())
    assert set(b["adapters"]) <= {"generator", "evaluator"}
