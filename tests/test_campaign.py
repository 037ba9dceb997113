"""bench/campaign.py without a GPU or a model: the record built from a fake run folder, run names, skipping
runs already recorded, the per-claim plots; run_job with fake train.py / eval.py processes (evaluation while
training, --until, resuming with --steps); the base-only evaluation against eval.py's on the tiny model."""
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import time
import types

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("campaign", os.path.join(ROOT, "bench", "campaign.py"))
campaign = importlib.util.module_from_spec(spec)
spec.loader.exec_module(campaign)

SETTINGS = {"model": "/root/mdl/hf", "workflow": "single", "data": "gsm8k/test.jsonl", "problems": 500, "n": 2,
            "seed": 0, "temperature": 0.7, "chunk": 128}


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
                                      metric(3, 3.0, None)])  # step 3: no row ran (every advantage 0)
    write_jsonl(d / "eval.jsonl", [eval_line(0, 0.2), eval_line(20, 0.31), eval_line(40, 0.29),
                                   eval_line(20, 0.9, problems=300),       # other settings: ignored
                                   eval_line(40, 0.30, se=0.021),          # a later line for step 40 wins
                                   eval_line(40, 0.77, chunk=32)])         # another chunk (before 12-01): ignored
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
    assert r["train_curve"]["entropy"] == {"generator": [0.2, 0.1, None]}  # unknown, not 0
    assert r["gpu"] == "NVIDIA H200" and r["git_commit"] and r["date"].startswith("20")
    with pytest.raises(ValueError, match="lacks the base"):
        campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 200, 2)


def test_record_stops_at_the_step_the_run_was_trained_to(run_dir):
    """A run resumed with a smaller --steps keeps config.json's steps, and a training process left running past the stop
    writes more metrics and checkpoints: the record is the run's up to `steps` only."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    rows = [json.loads(line) for line in open(metrics)]
    write_jsonl(metrics, rows + [{**rows[-1], "step": s, "time": {"total": 50.0}} for s in range(4, 23)])
    r = campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 500, 2, steps=20)
    assert r["steps"] == 20 and [p["step"] for p in r["curve"]] == [0, 20] and r["final"]["pass@1"] == 0.31
    assert r["missing_steps"] == [] and r["steps_done"] == 20 and len(r["train_curve"]["reward_mean"]) == 20
    assert campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 500, 2)["steps_done"] == 22
    with pytest.raises(ValueError, match="lacks the base"):  # nothing evaluated after step 0 by step 19
        campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 500, 2, steps=19)


def test_record_keeps_the_coherence_scale_per_step(run_dir):
    """An I6 run (--coherence) logs coherence_scale per role: the record keeps it per step (None where the role had no
    optimizer step), for I6's figure; a run without I6 has no such curve."""
    assert "coherence_scale" not in campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 500, 2)["train_curve"]
    metrics = os.path.join(run_dir, "metrics.jsonl")
    rows = [json.loads(line) for line in open(metrics)]
    rows[0]["roles"]["generator"]["coherence_scale"] = 0.98765
    rows[2]["roles"]["generator"]["coherence_scale"] = 0.5
    write_jsonl(metrics, rows)
    r = campaign.build_record(run_dir, "single-s1", "m", "gsm8k/test.jsonl", 500, 2)
    assert r["train_curve"]["coherence_scale"] == {"generator": [0.9877, 0.5, None]}  # step 2's later line wins


def test_results_file_errors_are_one_line(tmp_path):
    """--table / --plot / --compare on a results file that is missing, holds a line that is not JSON, or whose figure
    cannot be written: one line naming the file (a new user's review found empty output, exit 0, and tracebacks)."""
    missing = str(tmp_path / "nope.jsonl")
    for flags in (["--table"], ["--plot"], ["--compare", "single-s0", "voting-ip-s0"]):
        with pytest.raises(SystemExit, match=f"error: --results {missing}: no such file"):
            campaign.main([*flags, "--results", missing])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "single-s0"}\nnot json\n{}\n')
    with pytest.raises(SystemExit, match=f"error: {bad}: Expecting value"):
        campaign.main(["--table", "--results", str(bad)])


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
    r = campaign.build_record(run_dir, "single-s1", campaign.DEFAULT_MODEL, "gsm8k/test.jsonl", 500, 2)
    out = tmp_path / "results"
    out.mkdir()
    write_jsonl(out / "c.jsonl", [r, {**r, "name": "evalopt-ip-s0", "config": "evalopt-ip"},
                                  {**r, "model": "M15", "task": "code"}])  # another model and task: its own figures
    campaign.plot(str(out / "c.jsonl"), str(out))  # C5 has no run yet: no figure
    assert sorted(os.listdir(out)) == ["c.jsonl", "claim-C1-M15-code.png", "claim-C1.png", "claim-C2-M15-code.png",
                                       "claim-C2.png", "claim-C3.png", "claim-C4.png", "claim-judges.png"]


def test_c5_figure_has_a_row_per_workflow(run_dir, tmp_path):
    """C5 and I6 compare variants within a workflow, and C1 holds every run: one row of panels per workflow among its
    runs, so a figure with Voting and Orch-Workers runs is twice as tall as C2's one row of the same workflows."""
    pytest.importorskip("matplotlib")
    import matplotlib.image
    r = campaign.build_record(run_dir, "single-s1", campaign.DEFAULT_MODEL, "gsm8k/test.jsonl", 500, 2)
    out = tmp_path / "results"
    out.mkdir()
    write_jsonl(out / "c.jsonl", [{**r, "name": f"{c}-s0", "config": c, "workflow": c.split("-")[0]}
                                  for c in ("voting-ip", "voting-ip-merged", "orchworkers-ip")])
    campaign.plot(str(out / "c.jsonl"), str(out))
    shapes = {c: matplotlib.image.imread(out / f"claim-{c}.png").shape[:2] for c in ("C1", "C2", "C5", "I6")}
    assert shapes["C1"] == shapes["C5"] == shapes["I6"] == (shapes["C2"][0] * 2, shapes["C2"][1])
    i6 = {**r, "name": "orchworkers-ip-i6-s0", "config": "orchworkers-ip-i6", "workflow": "orchworkers",
          "train_curve": {**r["train_curve"], "coherence_scale": {"worker": [1.0, 0.99, None]}}}
    write_jsonl(out / "c.jsonl", [i6, {**i6, "name": "orchworkers-ip-s0", "config": "orchworkers-ip"}])
    campaign.plot(str(out / "c.jsonl"), str(out))  # a run with I6's scale: a third column of panels
    assert matplotlib.image.imread(out / "claim-I6.png").shape[:2] == (shapes["C2"][0], shapes["C2"][1] * 3 // 2)


def test_record_leaves_out_transfer_and_other_sampling_lines(run_dir):
    """eval.py --run also takes --transfer, --workflow and --temperature: such lines in the run's eval.jsonl are not
    the run's curve (nor its judge's), even when written last for a step."""
    config = json.load(open(os.path.join(run_dir, "config.json"))) | {"temperature": 0.7}
    json.dump(config, open(os.path.join(run_dir, "config.json"), "w"))
    transfer = eval_line(20, 0.9, transfer="all") | {"workflow": "voting"}
    transfer["diagnostics"]["aggregator"] = {"picks": 10, "default_picks": 9}
    write_jsonl(os.path.join(run_dir, "eval.jsonl"), [eval_line(0, 0.2), eval_line(20, 0.25) | {"workflow": "single"},
                                                      transfer, eval_line(20, 0.8, temperature=1.0),
                                                      eval_line(20, 0.7) | {"workflow": "voting"},
                                                      eval_line(20, 0.6, transfer="all") | {"workflow": "single"}])
    r = campaign.build_record(run_dir, "single-s1", campaign.DEFAULT_MODEL, "gsm8k/test.jsonl", 500, 2)
    assert [(p["step"], p["pass@1"]) for p in r["curve"]] == [(0, 0.2), (20, 0.25)] and r["judge_curve"] == []


def test_judge_curve_and_its_panel(run_dir, tmp_path):
    """judge_point by hand (Voting: default picks / picks; Eval-Opt: approving and unparseable verdicts / verdicts;
    no judge: None); build_record keeps one per evaluated step with a judge; the judges figure gets a third panel."""
    assert campaign.judge_point(20, {"aggregator": {"picks": 8, "default_picks": 2}}) == {"step": 20, "default_picks": 0.25}
    assert campaign.judge_point(20, {"aggregator": {"picks": 8, "default_picks": 2, "pick_accuracy": 0.7,
                                                    "candidate_accuracy": 0.5, "picked_right": 7}}) == \
        {"step": 20, "default_picks": 0.25, "pick_accuracy": 0.7, "candidate_accuracy": 0.5}
    verdicts = {"approved_right": 1, "approved_wrong": 2, "rejected_right": 3, "rejected_wrong": 4, "unparseable": 5}
    assert campaign.judge_point(0, {"evaluator": verdicts}) == {"step": 0, "approved": 0.3, "unparseable": 0.5}
    assert campaign.judge_point(0, {"roles": {}}) is campaign.judge_point(0, {"aggregator": {"picks": 0}}) is None
    lines = [eval_line(s, 0.2) for s in (0, 20)]
    lines[1]["diagnostics"]["aggregator"] = {"picks": 10, "default_picks": 9}
    write_jsonl(os.path.join(run_dir, "eval.jsonl"), lines)
    r = campaign.build_record(run_dir, "single-s1", campaign.DEFAULT_MODEL, "gsm8k/test.jsonl", 500, 2)
    assert r["judge_curve"] == campaign.judge_curve(r) == [{"step": 20, "default_picks": 0.9}]
    old = {**r, "judge_curve": None, "peak": r["final"]}  # from before judge_curve: base, peak, final (20 twice)
    old["diagnostics"] = {**r["diagnostics"], "peak": r["diagnostics"]["final"]}
    assert campaign.judge_curve(old) == [{"step": 20, "default_picks": 0.9}]
    pytest.importorskip("matplotlib")
    import matplotlib.image
    out = tmp_path / "results"
    out.mkdir()
    write_jsonl(out / "c.jsonl", [{**r, "name": "voting-ip-i1-s0", "config": "voting-ip-i1"}])
    campaign.plot(str(out / "c.jsonl"), str(out))
    widths = {f: matplotlib.image.imread(out / f).shape[1] for f in ("claim-C1.png", "claim-judges.png")}
    assert widths["claim-judges.png"] == widths["claim-C1.png"] * 3 // 2  # 18 inches instead of 12


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


# --- run_job with fake train.py / eval.py processes: evaluation while training, --until, resume -------------

def ckpts(d):
    """The steps of d's step_N folders (not bench/campaign.py's checkpoint_steps: the fakes check it)."""
    return sorted(int(n[5:]) for n in os.listdir(d) if re.fullmatch(r"step_\d+", n)) if os.path.isdir(d) else []


class FakeProcesses:
    """Stands in for subprocess.Popen in bench/campaign.py. A train.py process does one step per poll (its first
    poll writes config.json), writes a checkpoint every --save-every steps as step_N.tmp, renamed TMP_POLLS
    polls later; an eval (eval.py --run, or the base-only `python -c`) takes 3 polls, then appends the steps
    it found at its start (step 0 and the finished checkpoints) to eval.jsonl, or fails with the next of
    eval_rc (final_rc for one started after training). Checks as it goes: never two evaluations at once, none started while training without a step
    to evaluate (a .tmp folder is not one), the base-only one only before the first checkpoint."""
    TMP_POLLS = 4

    def __init__(self, problems=4, n=1, eval_rc=(), train_rc=0, final_rc=0, fail_at=None):
        self.cmds, self.evals, self.training, self.eval_rc, self.train_rc = [], 0, None, list(eval_rc), train_rc
        self.transfer_fails = ()
        self.fail_at = fail_at  # the first train.py to reach this step (its checkpoint written) exits with 1
        self.final_rc, self.history = final_rc, []  # (final: started after training, steps found, exit status)
        self.settings, self.idle_with_tmp, self.started_while_training = {"problems": problems, "n": n, "chunk": 256 // n,
                                                                          "data": "builtin-test-seed0"}, 0, []

    def __call__(self, cmd, **kw):
        assert kw["cwd"] == campaign.ROOT and kw["stderr"] == subprocess.STDOUT
        self.cmds.append(cmd)
        if cmd[1:3] == ["-c", campaign.TRANSFER_EVAL]:
            return self.Transfer(self, cmd)
        return (self.Train if cmd[1] == "train.py" else self.Eval)(self, cmd)

    class Transfer:
        """TRANSFER_EVAL: one poll, then eval.py's result as JSON (pass@1 0.3 in voting, 0.2 elsewhere) or exit 1
        for a workflow in transfer_fails."""
        def __init__(self, world, cmd):
            assert not world.training and world.evals == 0, "a transfer beside training or an evaluation"
            self.w, self.cmd, self.returncode = world, cmd, None

        def wait(self):
            w = self.cmd[self.cmd.index("--workflow") + 1]
            self.returncode = int(w in self.w.transfer_fails)
            if not self.returncode:
                with open(self.cmd[3], "w") as f:
                    json.dump({"pass@1": 0.3 if w == "voting" else 0.2, "pass@1_se": 0.01, "diagnostics": {"w": w}}, f)
            return self.returncode

    def done(self, d):
        return {r["step"] for r in campaign.read_jsonl(os.path.join(d, "eval.jsonl"))}

    class Train:
        def __init__(self, world, cmd):
            self.w, self.cmd, self.polls, self.returncode, self.tmp = world, cmd, 0, None, None
            self.out = cmd[cmd.index("--out") + 1]
            self.target = int(cmd[len(cmd) - cmd[::-1].index("--steps")])  # the last --steps wins
            self.every = int(cmd[cmd.index("--save-every") + 1]) if "--save-every" in cmd else \
                json.load(open(os.path.join(self.out, "config.json")))["save_every"]
            self.step = max(ckpts(self.out), default=0)
            world.training = self

        def poll(self):
            self.polls += 1
            if self.polls == 1:
                os.makedirs(self.out, exist_ok=True)
                (pathlib.Path(self.out) / "config.json").write_text(json.dumps(
                    {"workflow": "single", "policy": "ip", "seed": 0, "data": None,
                     "task": self.cmd[len(self.cmd) - self.cmd[::-1].index("--task")] if "--task" in self.cmd else "math",
                     "steps": self.target, "save_every": self.every, "model_used": "tiny", "max_new_tokens": 384}))
            elif self.tmp:
                if self.w.evals == 0:
                    self.w.idle_with_tmp += 1
                if self.polls - self.tmp[1] >= self.w.TMP_POLLS:
                    os.rename(self.tmp[0], self.tmp[0][:-4])
                    self.tmp = None
            elif self.step == self.w.fail_at:
                self.returncode, self.w.training, self.w.fail_at = 1, None, None
            elif self.step < self.target:
                self.step += 1
                with open(os.path.join(self.out, "metrics.jsonl"), "a") as f:
                    f.write(json.dumps({"step": self.step, "reward_mean": 0.5, "skipped_steps": 0, "time":
                                        {"total": 2.0}, "roles": {"generator": {"entropy": 0.3}}}) + "\n")
                if self.step % self.every == 0 or self.step == self.target:
                    os.makedirs(tmp := os.path.join(self.out, f"step_{self.step:06d}.tmp"))
                    (pathlib.Path(tmp) / "generator.safetensors").write_text("weights")
                    self.tmp = tmp, self.polls
            else:
                self.returncode, self.w.training = self.w.train_rc, None
            return self.returncode

    class Eval:
        def __init__(self, world, cmd):
            assert world.evals == 0, "two evaluations of a run at once"
            if cmd[1:3] == ["-c", campaign.CAPPED]:  # beside training, under the memory cap: what it runs
                assert world.training and cmd[3] == str(campaign.BESIDE_MEMORY)
                cmd = [cmd[0], *cmd[4:]]
            else:
                assert not world.training, "an evaluation beside training without the memory cap"
            self.w, self.cmd, self.polls, self.returncode, self.run = world, cmd, 0, None, cmd[3]
            found = ckpts(self.run)
            if cmd[1] == "-c":  # the base alone: only before the first checkpoint
                assert cmd[2] == campaign.BASE_EVAL and not found
            self.steps, self.final = {0, *found}, world.training is None
            if world.training:
                assert self.steps - world.done(self.run), f"nothing to evaluate: {cmd}"
                world.started_while_training.append(cmd)
            world.evals += 1

        def poll(self):
            self.polls += 1
            if self.polls == 3:
                self.w.evals -= 1
                self.returncode = self.w.final_rc if self.final else self.w.eval_rc.pop(0) if self.w.eval_rc else 0
                self.w.history.append((self.final, sorted(self.steps), self.returncode))
                if not self.returncode:
                    with open(os.path.join(self.run, "eval.jsonl"), "a") as f:
                        f.writelines(json.dumps(eval_line(s, 0.2 + s / 100, **self.w.settings)) + "\n"
                                     for s in sorted(self.steps - self.w.done(self.run)))
            return self.returncode

        def wait(self):
            while self.poll() is None:
                pass
            return self.returncode


@pytest.fixture
def fake(monkeypatch):
    """-> make(**FakeProcesses options) installs them in bench/campaign.py (with no wait between polls)."""
    def make(**kw):
        world = FakeProcesses(**kw)
        monkeypatch.setattr(campaign, "subprocess", types.SimpleNamespace(
            Popen=world, STDOUT=subprocess.STDOUT, run=subprocess.run, CalledProcessError=subprocess.CalledProcessError))
        monkeypatch.setattr(campaign, "POLL_S", 0)
        return world
    return make


def campaign_main(tmp_path, *flags, steps=6, name="single-s0"):
    """bench/campaign.py NAME on the tiny settings -> its exit status."""
    with pytest.raises(SystemExit) as e:
        campaign.main([name, "--gpus", "cpu", "--model", "tiny", "--model-name", campaign.DEFAULT_MODEL,
                       "--train-data", "", "--eval-data", "",
                       "--eval-problems", "4", "--eval-n", "1", "--eval-every", "2", "--status-every", "0.05",
                       "--extra", f"--steps {steps} --problems 2", "--runs", str(tmp_path / "runs"),
                       "--results", str(tmp_path / "c.jsonl"), *flags])
    return e.value.code


def test_evaluates_while_training(tmp_path, fake):
    world = fake()
    assert campaign_main(tmp_path) == 0
    d = str(tmp_path / "runs" / "single-s0")
    train, *evals = world.cmds
    assert train[1] == "train.py" and train[-2:] == ["--out", d] and "--resume" not in train
    # while training: the base alone (no checkpoint yet), then eval.py --run for the new checkpoints
    assert world.started_while_training[0][1] == "-c" and len(world.started_while_training) >= 2
    assert all(c[1:4] == ["eval.py", "--run", d] for c in world.started_while_training[1:])
    assert world.idle_with_tmp > 0  # there were polls with only a .tmp folder new and no evaluation started
    final = evals[-1]  # after training: the evaluate command once more, as before
    assert final == [sys.executable, "eval.py", "--run", d, "--problems", "4", "--n", "1"]
    assert len(evals) == len(world.started_while_training) + 1
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert r["eval_while_training"] is True and [p["step"] for p in r["curve"]] == [0, 2, 4, 6]
    assert r["steps_done"] == 6 and r["eval_command"] == " ".join(final[1:])
    log = open(tmp_path / "runs" / "logs" / "single-s0.log").read()  # every command, in order
    names = {campaign.BASE_EVAL: "<BASE_EVAL of bench/campaign.py>", campaign.CAPPED: "<CAPPED of bench/campaign.py>"}
    assert [line[2:] for line in log.splitlines() if line.startswith("$ ")] == [" ".join(names.get(a, a) for a in c)
                                                                               for c in world.cmds]


def test_training_resumes_after_a_failure(tmp_path, fake, capsys):
    """Training that fails after a new checkpoint (e.g. CUDA out of memory) is resumed from it and recorded
    with the step; one that fails with no new checkpoint since it started fails the run."""
    d = str(tmp_path / "runs" / "single-s0")
    world = fake(fail_at=4)
    assert campaign_main(tmp_path) == 0
    trains = [c for c in world.cmds if c[1] == "train.py"]
    assert len(trains) == 2 and trains[1] == [sys.executable, "train.py", "--out", d, "--resume", "--steps", "6"]
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert r["resumed_after_failure_at"] == [4] and [p["step"] for p in r["curve"]] == [0, 2, 4, 6]
    assert "training failed after its checkpoint at step 4: resumed from there" in open(
        tmp_path / "runs" / "logs" / "single-s0.log").read()
    world = fake(fail_at=0)  # fails before its first checkpoint: not retried
    assert campaign_main(tmp_path, "--force") == 1
    assert [c[1] for c in world.cmds].count("train.py") == 1 and "FAILED in train" in capsys.readouterr().out


def test_no_eval_while_training(tmp_path, fake):
    world = fake()
    assert campaign_main(tmp_path, "--no-eval-while-training") == 0
    assert [c[1] for c in world.cmds] == ["train.py", "eval.py"] and not world.started_while_training
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert r["eval_while_training"] is False and [p["step"] for p in r["curve"]] == [0, 2, 4, 6]


def test_a_failed_evaluation_while_training(tmp_path, fake, capsys):
    world = fake(eval_rc=[1, 1])  # the base alone, then the first eval.py --run fail: training goes on
    assert campaign_main(tmp_path) == 0
    assert len(campaign.read_jsonl(tmp_path / "c.jsonl")) == 1
    log = open(tmp_path / "runs" / "logs" / "single-s0.log").read()
    assert log.count("evaluation while training exited with 1; training goes on") == 2
    concurrent = [(steps, rc) for final, steps, rc in world.history if not final]
    assert [rc for _, rc in concurrent[:3]] == [1, 1, 0]
    for (steps, rc), (later, _) in zip(concurrent, concurrent[1:]):  # a failed one is retried on a new checkpoint
        assert not rc or later != steps
    # the final evaluation failing fails the run, as before; so does training (the final one is then not run)
    for kw, phase in (({"final_rc": 1}, "FAILED in eval"), ({"train_rc": 1}, "FAILED in train")):
        world = fake(**kw)
        assert campaign_main(tmp_path, "--force") == 1
        out = capsys.readouterr().out
        assert f"single-s0: {phase} (see " in out and "failed: single-s0" in out
        assert len(campaign.read_jsonl(tmp_path / "c.jsonl")) == 1  # --force replaces a record once it finishes
        assert world.evals == 0 and [final for final, _, _ in world.history].count(True) == (phase.endswith("eval"))


def test_until_then_finish(tmp_path, fake, capsys):
    d = str(tmp_path / "runs" / "single-s0")
    world = fake()
    assert campaign_main(tmp_path, "--until", "2", steps=4) == 0
    assert world.cmds[0][-4:] == ["--out", d, "--steps", "2"] and "--resume" not in world.cmds[0]
    assert ckpts(d) == [2] and world.done(d) == {0, 2}  # evaluated, not recorded
    assert not os.path.exists(tmp_path / "c.jsonl")
    out = capsys.readouterr().out
    assert "single-s0: stopped at step 2 (--until 2): no record" in out and "0 of 1 run(s) finished" in out
    world = fake()  # the same call without --until: resumed to the run's steps, recorded
    assert campaign_main(tmp_path, steps=4) == 0
    assert world.cmds[0] == [sys.executable, "train.py", "--out", d, "--resume", "--steps", "4"]
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert [p["step"] for p in r["curve"]] == [0, 2, 4] and r["steps"] == 4 and r["steps_done"] == 4
    assert "--resume" not in r["command"] and r["command"].endswith(f"--steps 4 --problems 2 --out {d}")
    world = fake()  # recorded: skipped
    assert campaign_main(tmp_path, steps=4) == 0 and not world.cmds


def test_more_steps_extend_a_recorded_run(tmp_path, fake, capsys):
    """A recorded run still rising at its last step: asking for more --steps resumes its folder from the recorded
    checkpoint and replaces the record; without that checkpoint (a lease gone) it is skipped, saying why."""
    d = str(tmp_path / "runs" / "single-s0")
    fake()
    assert campaign_main(tmp_path, steps=4) == 0
    world = fake()
    assert campaign_main(tmp_path, steps=6) == 0
    assert world.cmds[0] == [sys.executable, "train.py", "--out", d, "--resume", "--steps", "6"]
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")  # replaced, not appended
    assert r["steps"] == r["steps_done"] == 6 and r["extended_from"] == 4
    assert [p["step"] for p in r["curve"]] == [0, 2, 4, 6] and r["command"].endswith(f"--steps 6 --problems 2 --out {d}")
    assert "single-s0: recorded at 4 steps: extended to 6 from its checkpoint" in capsys.readouterr().out
    for steps in (6, 4):  # as many steps as recorded, or fewer: skipped
        world = fake()
        assert campaign_main(tmp_path, steps=steps) == 0 and not world.cmds
        assert "already in" in capsys.readouterr().out
    world = fake()
    assert campaign_main(tmp_path, "--until", "4", steps=8) == 2 and not world.cmds  # refused: nothing to train
    assert capsys.readouterr().err == "error: --until 4: single-s0 is recorded at 6 steps already\n"
    shutil.rmtree(os.path.join(d, "step_000006"))
    world = fake()
    assert campaign_main(tmp_path, steps=8) == 0 and not world.cmds
    assert "single-s0: recorded at 6 steps, but " + d + " has no step-6 checkpoint" in capsys.readouterr().out
    assert campaign.read_jsonl(tmp_path / "c.jsonl") == [r]


def test_grow_extends_the_recorded_runs_until_grow_to(tmp_path, fake, capsys):
    """--grow 2 --grow-to 9: a run recorded at 4 steps is extended to 6, then 8 (each time resumed from its last
    checkpoint and its record replaced), and not to 10; later --grow on the recorded run starts from its record;
    a stopped run is not grown."""
    d = str(tmp_path / "runs" / "single-s0")
    world = fake()
    assert campaign_main(tmp_path, "--grow", "2", "--grow-to", "9", steps=4) == 0
    trains = [c for c in world.cmds if "train.py" in c]
    assert [c[len(c) - c[::-1].index("--steps")] for c in trains] == ["4", "6", "8"]  # the last --steps
    assert ["--resume" in c for c in trains] == [False, True, True]
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert r["steps"] == 8 and r["extended_from"] == 6 and [p["step"] for p in r["curve"]] == [0, 2, 4, 6, 8]
    assert "extending to 8 steps" in capsys.readouterr().out
    world = fake()
    assert campaign_main(tmp_path, "--grow", "2", "--grow-to", "10", steps=4) == 0  # recorded at 8: from there, to 10
    assert [c[-4:] for c in world.cmds if "train.py" in c] == [[d, "--resume", "--steps", "10"]] and \
        campaign.read_jsonl(tmp_path / "c.jsonl")[0]["steps"] == 10
    assert campaign_main(tmp_path, "--grow", "2", "--grow-to", "10", steps=4) == 0  # at --grow-to: nothing to do
    with pytest.raises(SystemExit):  # no abbreviations: --grow drops --force by its full name
        campaign.main(["single-s0", "--forc", "--grow", "2"])
    world = fake()
    assert campaign_main(tmp_path, "--force", "--grow", "2", "--grow-to", "7", steps=4) == 0  # --force: the first time only
    assert ["--resume" in c for c in world.cmds if "train.py" in c] == [False, True]
    world = fake()
    assert campaign_main(tmp_path, "--grow", "2", "--until", "8", "--force", steps=10) == 0  # stopped: no growth
    assert len([c for c in world.cmds if "train.py" in c]) == 1 and ckpts(d)[-1] == 8


def test_transfers_of_a_single_cell(tmp_path, fake, capsys):
    """--transfer voting,evalopt: once a single cell is evaluated, its last adapter is evaluated in every role of each
    workflow (eval.py --adapters step_N --transfer all, the held-out flags, the run's tokens per call) and the results
    go into its record (transfers); one that fails is logged and left out; an extension evaluates its new last step."""
    d = str(tmp_path / "runs" / "single-s0")
    world = fake()
    world.transfer_fails = ("evalopt",)
    assert campaign_main(tmp_path, "--transfer", "voting,evalopt", steps=4) == 0
    t = [c for c in world.cmds if c[1:3] == ["-c", campaign.TRANSFER_EVAL]]
    assert [c[3:] for c in t] == [[os.path.join(d, f"transfer-{w}-step4.json"), "--model", "tiny", "--workflow", w,
                                   "--transfer", "all", "--adapters", os.path.join(d, "step_000004"), "--task", "math",
                                   "--max-new-tokens", "384", "--problems", "4", "--n", "1"] for w in ("voting", "evalopt")]
    assert world.cmds.index(t[0]) > max(i for i, c in enumerate(world.cmds) if c[1] == "eval.py")  # after the evaluations
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert r["transfers"] == {"voting": {"step": 4, "pass@1": 0.3, "se": 0.01, "diagnostics": {"w": "voting"}}}
    assert "the transfer into evalopt failed: the record goes without it" in open(tmp_path / "runs" / "logs" / "single-s0.log").read()
    world = fake()
    assert campaign_main(tmp_path, "--transfer", "voting", steps=6) == 0  # extended: its new last step
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert r["transfers"]["voting"]["step"] == 6 and len([c for c in world.cmds if c[2] == campaign.TRANSFER_EVAL]) == 1
    assert campaign_main(tmp_path, "--transfer", "single") == "error: --transfer single: choose from voting,evalopt,orchworkers"
    world = fake()  # seed 1 on the built-in held-out problems: eval.py --adapters would take seed 0's
    assert campaign_main(tmp_path, "--transfer", "voting", steps=2, name="single-s1") == 0
    assert not [c for c in world.cmds if c[2] == campaign.TRANSFER_EVAL]
    assert "no transfer into voting: the built-in held-out problems of seed 1" in open(
        tmp_path / "runs" / "logs" / "single-s1.log").read()


def test_a_left_over_later_checkpoint_is_not_the_runs(tmp_path, fake):
    """A cell finished at fewer steps than a checkpoint left in its folder (a process that trained on past the stop):
    the record ends at the cell's own last step, and its transfer takes that step's adapter, not the later one."""
    d = tmp_path / "runs" / "single-s0"
    fake()
    campaign_main(tmp_path, "--until", "2", steps=6)
    (d / "step_000004").mkdir()
    world = fake()
    assert campaign_main(tmp_path, "--transfer", "voting", steps=2) == 0
    [t] = [c for c in world.cmds if c[1:3] == ["-c", campaign.TRANSFER_EVAL]]
    assert t[t.index("--adapters") + 1] == str(d / "step_000002")
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert r["steps"] == 2 and r["final"]["step"] == 2 and r["transfers"]["voting"]["step"] == 2


def test_until_resumes_a_run_with_a_checkpoint(tmp_path, fake):
    d = str(tmp_path / "runs" / "single-s0")
    fake()
    campaign_main(tmp_path, "--until", "2", steps=6)
    world = fake()
    assert campaign_main(tmp_path, "--until", "4", steps=6) == 0
    assert world.cmds[0] == [sys.executable, "train.py", "--out", d, "--resume", "--steps", "4"]
    assert ckpts(d) == [2, 4] and world.done(d) == {0, 2, 4}


@pytest.mark.parametrize("until", ["3", "6", "8", "0"])
def test_until_refused(tmp_path, fake, capsys, until):
    world = fake()
    (tmp_path / "runs" / "single-s0").mkdir(parents=True)
    assert campaign_main(tmp_path, "--until", until, "--force") == 2 and not world.cmds
    assert (tmp_path / "runs" / "single-s0").is_dir()  # refused before --force removes anything
    err = capsys.readouterr().err
    assert err == f"error: --until {until} must be a multiple of --eval-every 2 below the run's 6 steps\n"


def test_base_evaluation_is_eval_pys(tmp_path):
    """BASE_EVAL (step 0 before the first checkpoint) writes the line `eval.py --run` writes for step 0, which
    then skips it; both as started beside training, through CAPPED (its memory cap itself needs a GPU)."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    flags = ["--problems", "3", "--n", "2", "--device", "cpu"]
    train = ["--model", "tiny", "--steps", "1", "--problems", "2", "--group", "2", "--max-new-tokens", "6", "--device", "cpu"]
    run = lambda *cmd: subprocess.run([sys.executable, *cmd], cwd=ROOT, capture_output=True, text=True)
    p = run("train.py", *train, "--out", a)
    assert p.returncode == 0, p.stderr[-2000:]
    shutil.copytree(a, b)
    capped = ["-c", campaign.CAPPED, "0.35"]
    for p in run(*capped, "-c", campaign.BASE_EVAL, a, *flags), run(*capped, "eval.py", "--run", b, *flags), \
            (last := run(*capped, "eval.py", "--run", a, *flags)):
        assert p.returncode == 0, p.stderr[-2000:]
    base, one = campaign.read_jsonl(os.path.join(a, "eval.jsonl"))
    assert base == campaign.read_jsonl(os.path.join(b, "eval.jsonl"))[0] and (base["step"], one["step"]) == (0, 1)
    assert "step 0: already in" in last.stdout


# --- bench/carry.sh: a run folder's last checkpoint from one GPU session to the next ------------------------

def carry(*args, env, ok=True):
    """bash bench/carry.sh ARGS -> stdout; ok=False: it must fail with one line on stderr -> that line."""
    p = subprocess.run(["bash", os.path.join(ROOT, "bench", "carry.sh"), *map(str, args)], env={**os.environ, **env},
                       capture_output=True, text=True)
    if ok:
        assert p.returncode == 0 and not p.stderr, p.stderr
        return p.stdout
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and p.stderr.startswith("carry.sh: error: "), p.stderr
    return p.stderr


def fake_run(run, evaluated=(0, 20, 40)):
    """A run folder of random bytes, with step_000020 and step_000040 and eval.jsonl lines for `evaluated`."""
    rng = np.random.default_rng(0)
    for path, size in (("config.json", 900), ("metrics.jsonl", 3000), ("samples.txt", 2500),
                       ("step_000020/generator.safetensors", 4000), ("step_000020/state.pt", 6000),
                       ("step_000040/generator.safetensors", 4000), ("step_000040/voter.safetensors", 4000),
                       ("step_000040/state.pt", 8000)):
        (run / path).parent.mkdir(parents=True, exist_ok=True)
        (run / path).write_bytes(rng.bytes(size))
    write_jsonl(run / "eval.jsonl", [{"step": s, "checkpoint": f"step_{s:06d}", "pad": "x" * 350} for s in evaluated])
    return run


@pytest.fixture
def carried(tmp_path):
    """A fake run folder (a few KiB: two checkpoints, both evaluated) packed in parts of 1000 bytes, brought out
    batch by batch, and kept in a checkout's .carry/ (a git repository) -> (run folder, env, the batches)."""
    run = fake_run(tmp_path / "runs" / "voting-ip-s0")
    subprocess.run(["git", "init", "-q", str(tmp_path / "checkout")], check=True)
    (tmp_path / "checkout" / ".git" / "info" / "exclude").write_text("# git ls-files --others --exclude-from\n/.whl/")
    env = {"CARRY_PART_BYTES": "1000", "CARRY_ROOT": str(tmp_path / "checkout"), "CARRY_LOGS": str(tmp_path / "logs")}
    out = carry("pack", run, tmp_path / "gpu" / "carry", env=env)
    parts = sorted(f for f in os.listdir(tmp_path / "gpu" / "carry") if ".tar." in f)
    assert parts[0] == "voting-ip-s0.tar.000" and out.startswith(f"voting-ip-s0: {len(parts)} parts, sha256 ")
    batches = []
    while True:
        d = tmp_path / "device" / str(len(batches))  # where the device tool puts a call's $OUT
        d.mkdir(parents=True)
        if len(batches) == -(-(len(parts) - 7) // 8) + 1:
            assert "has 4 batch(es), 0-3: no batch 4" in carry("out", "voting-ip-s0", len(batches), tmp_path / "gpu" /
                                                               "carry", env={**env, "OUT": str(d)}, ok=False)
            break
        out = carry("out", "voting-ip-s0", len(batches), tmp_path / "gpu" / "carry", env={**env, "OUT": str(d)})
        assert out.startswith(f"voting-ip-s0: batch {len(batches)} of 4 (0-3): copied ")
        batches.append(sorted(os.listdir(d)))
    out = carry("keep", "voting-ip-s0", *sorted((tmp_path / "device").iterdir()), env=env)
    assert out.startswith(f"voting-ip-s0: kept {len(parts) + 1} file(s)")
    carry("keep", "voting-ip-s0", tmp_path / "device" / "0", env=env)  # again: the same files, nothing changes
    return run, env, batches


def test_carry_round_trip(tmp_path, carried):
    run, env, batches = carried
    checkout, kept = tmp_path / "checkout", tmp_path / "checkout" / ".carry" / "voting-ip-s0"
    parts = sorted(f for f in os.listdir(kept) if ".tar." in f)
    n = len(parts)  # the tar of 4 files and the last checkpoint (3 files), ~30 KB, in parts of 1000 bytes
    assert 24 <= n <= 31 and batches == [["voting-ip-s0.sha256"] + parts[:7], parts[7:15], parts[15:23], parts[23:]]
    assert (checkout / ".git" / "info" / "exclude").read_text().splitlines()[-2:] == ["/.whl/", "/.carry/"]
    assert subprocess.run(["git", "-C", checkout, "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    assert carry("check", "voting-ip-s0", env=env).startswith(f"voting-ip-s0: ok, {n} parts (000-{n - 1:03d}), sha256 ")
    plan = carry("plan", "voting-ip-s0", env=env)
    calls = [json.loads(line[len("  carry: "):]) for line in plan.splitlines() if line.startswith("  carry: ")]
    assert len(calls) == -(-n // 3) and plan.count("bash bench/carry.sh in voting-ip-s0") == len(calls) + 1
    assert calls[0] == [".carry/voting-ip-s0/voting-ip-s0.sha256"] + [f".carry/voting-ip-s0/{p}" for p in parts[:3]]
    assert [p for c in calls for p in c if ".tar." in p] == [f".carry/voting-ip-s0/{p}" for p in parts]
    # the next session: each call carries one list into the device's checkout, `in` moves it to CARRY_DIR
    device = {**env, "CARRY_ROOT": str(tmp_path / "device-checkout")}
    for i, paths in enumerate(calls):
        (tmp_path / "device-checkout" / ".carry" / "voting-ip-s0").mkdir(parents=True, exist_ok=True)
        for p in paths:
            shutil.copy(checkout / p, tmp_path / "device-checkout" / p)
        out = carry("in", "voting-ip-s0", tmp_path / "gpu2", env=device)
        assert f"holds {min(n, 3 * i + 3)} part(s)" in out
        assert not os.listdir(tmp_path / "device-checkout" / ".carry" / "voting-ip-s0")  # moved, not copied
    assert "nothing carried" in carry("in", "voting-ip-s0", tmp_path / "gpu2", env=device, ok=False)
    (tmp_path / "runs2" / ".voting-ip-s0.unpack.tmp" / "step_000099").mkdir(parents=True)  # of an unpack cut off
    (tmp_path / "runs2" / "voting-ip-s0").mkdir()  # a start that made no checkpoint: replaced
    (tmp_path / "runs2" / "voting-ip-s0" / "metrics.jsonl").write_text("{}\n")
    out = carry("unpack", "voting-ip-s0", tmp_path / "runs2", tmp_path / "gpu2", env=device)
    assert out.startswith(f"voting-ip-s0: restored {tmp_path / 'runs2' / 'voting-ip-s0'} at step 40 (step_000040) "
                          "(replacing a folder without a checkpoint)")
    assert os.listdir(tmp_path / "runs2") == ["voting-ip-s0"]  # the stale .unpack.tmp gone, the new one renamed

    def files(d):
        return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}
    original = files(run)
    assert files(tmp_path / "runs2" / "voting-ip-s0") == \
        {k: v for k, v in original.items() if not k.startswith(("step_000020", "step_000060"))}  # the last one only
    assert "already holds checkpoint step_000040: not overwritten" in carry(
        "unpack", "voting-ip-s0", tmp_path / "runs2", tmp_path / "gpu2", env=device, ok=False)


def test_carry_refuses_missing_or_corrupt_parts(tmp_path, carried):
    run, env, _ = carried
    kept = tmp_path / "checkout" / ".carry" / "voting-ip-s0"
    device = {**env, "CARRY_ROOT": str(tmp_path / "checkout")}
    parts = sorted(f for f in os.listdir(kept) if ".tar." in f)
    assert os.path.getsize(kept / parts[-1]) < 1000  # the tar's length is no multiple of 1000
    (kept / parts[-1]).unlink()  # the last one: the rest are contiguous, but the sha256 differs
    assert carry("check", "voting-ip-s0", env=env, ok=False).endswith(
        f"(the last, {len(parts) - 2:03d}, is full size: parts after it may be missing)\n")
    carry("keep", "voting-ip-s0", *(tmp_path / "device").iterdir(), env=env)
    (kept / "voting-ip-s0.tar.004").unlink()
    (kept / "voting-ip-s0.tar.011").unlink()
    assert carry("check", "voting-ip-s0", env=env, ok=False).endswith(f"missing part(s) 004 011 of 000-{len(parts) - 1:03d}"
                                                                      f" in {kept}\n")
    assert "missing part(s) 004 011" in carry("plan", "voting-ip-s0", env=env, ok=False)
    carry("keep", "voting-ip-s0", *(tmp_path / "device").iterdir(), env=env)
    data = bytearray((kept / "voting-ip-s0.tar.017").read_bytes())
    data[10] ^= 1
    (kept / "voting-ip-s0.tar.017").write_bytes(bytes(data))
    err = carry("check", "voting-ip-s0", env=env, ok=False)
    assert "have sha256 " in err and "may be missing" not in err  # all there, the last one short
    err = carry("keep", "voting-ip-s0", tmp_path / "device" / "2", env=env, ok=False)
    assert "differs from" in err and f"(if .carry/voting-ip-s0 holds an old pack: rm -rf {kept}, then keep again)" in err
    # unpack on the GPU machine checks too (everything carried in at once here); nothing is unpacked
    carry("in", "voting-ip-s0", tmp_path / "gpu2", env=device)
    assert "have sha256 " in carry("unpack", "voting-ip-s0", tmp_path / "runs2", tmp_path / "gpu2", env=device,
                                   ok=False)
    os.remove(tmp_path / "gpu2" / "voting-ip-s0" / "voting-ip-s0.tar.017")
    assert "missing part(s) 017" in carry("unpack", "voting-ip-s0", tmp_path / "runs2", tmp_path / "gpu2", env=device,
                                          ok=False)
    assert not (tmp_path / "runs2").exists()
    # a different file under a name already carried in is not overwritten
    kept.mkdir(exist_ok=True)
    shutil.copy(tmp_path / "device" / "0" / "voting-ip-s0.tar.000", kept)
    (tmp_path / "gpu2" / "voting-ip-s0" / "voting-ip-s0.tar.000").write_bytes(b"other")
    assert "exists and differs" in carry("in", "voting-ip-s0", tmp_path / "gpu2", env=device, ok=False)
    # pack: a folder without a checkpoint, a part size over $OUT's 16 MiB; out without $OUT
    assert "parts must be 1 byte to 16 MiB" in carry("pack", run, tmp_path / "c", env={**env, "CARRY_PART_BYTES":
                                                                                      "16777217"}, ok=False)
    for step in ("step_000020", "step_000040"):
        shutil.rmtree(run / step)
    (run / "step_000060.tmp").mkdir()
    assert "holds no checkpoint" in carry("pack", run, tmp_path / "c", env=env, ok=False)  # a .tmp is none
    assert "$OUT is not a folder" in carry("out", "voting-ip-s0", 0, tmp_path / "gpu" / "carry",
                                           env={**env, "OUT": ""}, ok=False)


# --- after a review: the run lock, missing steps, a cut-off line, --extra's = form, sessions -----------------

def test_a_second_campaign_on_a_running_run_fails(tmp_path, fake, capsys):
    import fcntl
    logs = tmp_path / "runs" / "logs"
    logs.mkdir(parents=True)
    (tmp_path / "runs" / "single-s0").mkdir()
    (tmp_path / "runs" / "single-s0" / "metrics.jsonl").write_text("")
    with open(logs / "single-s0.lock", "a") as held:  # another campaign holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        world = fake()
        assert campaign_main(tmp_path, "--force") == 1 and not world.cmds
        out = capsys.readouterr().out
        assert f"single-s0: FAILED: already running ({logs / 'single-s0.lock'} held)" in out
        assert (tmp_path / "runs" / "single-s0" / "metrics.jsonl").exists()  # --force removed nothing
    world = fake()  # released: it runs, and leaves the lock free
    assert campaign_main(tmp_path) == 0 and world.cmds
    with open(logs / "single-s0.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_missing_steps_and_sessions(tmp_path, capsys):
    d = tmp_path / "single-s0"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"seed": 0, "data": None, "save_every": 20, "steps": 50,
                                               "starts": [{"step": 0}, {"step": 40}]}))
    write_jsonl(d / "metrics.jsonl", [{"step": s, "reward_mean": 0.5, "skipped_steps": 0, "time": {"total": 1.0},
                                       "roles": {}} for s in range(1, 51)])
    write_jsonl(d / "eval.jsonl", [eval_line(0, 0.2), eval_line(20, 0.3), eval_line(50, 0.3),
                                   eval_line(40, 0.3, problems=300)])  # step 40 only with other settings
    r = campaign.build_record(str(d), "single-s0", "m", "gsm8k/test.jsonl", 500, 2)
    assert r["missing_steps"] == [40] and r["sessions"] == 2
    assert "warning: single-s0: no evaluation for checkpoint step(s) 40 with these settings" in capsys.readouterr().out
    with open(d / "eval.jsonl", "a") as f:
        f.write(json.dumps(eval_line(40, 0.3)) + "\n")
    r = campaign.build_record(str(d), "single-s0", "m", "gsm8k/test.jsonl", 500, 2)
    assert r["missing_steps"] == [] and "warning" not in capsys.readouterr().out


def test_a_cut_off_last_line_is_skipped(tmp_path, capsys):
    path = tmp_path / "eval.jsonl"
    path.write_text('{"step": 0}\n{"step": 20}\n{"step": 40, "pass')
    assert campaign.read_jsonl(path) == [{"step": 0}, {"step": 20}]
    assert capsys.readouterr().err == f"warning: {path}: its last line has no newline (an append cut off?): skipped\n"
    path.write_text('{"step": 0}\n{"step": 20}')  # whole but unfinished: skipped as well
    assert campaign.read_jsonl(path, quiet=True) == [{"step": 0}] and not capsys.readouterr().err
    path.write_text('{"step": 0}\n\n')
    assert campaign.read_jsonl(path) == [{"step": 0}] and not capsys.readouterr().err


def test_extra_with_equals(tmp_path, fake, capsys):
    world = fake()
    with pytest.raises(SystemExit) as e:
        campaign.main(["single-s0", "--gpus", "cpu", "--model", "tiny", "--model-name", campaign.DEFAULT_MODEL,
                       "--train-data", "", "--eval-data", "",
                       "--eval-problems", "4", "--eval-n", "1", "--eval-every", "2", "--status-every", "0.05",
                       "--extra=--steps=4 --problems 2 --warmup=1", "--runs", str(tmp_path / "runs"),
                       "--results", str(tmp_path / "c.jsonl")])
    assert e.value.code == 0
    assert world.cmds[0][-8:-2] == ["--steps", "4", "--problems", "2", "--warmup", "1"]
    [r] = campaign.read_jsonl(tmp_path / "c.jsonl")
    assert [p["step"] for p in r["curve"]] == [0, 2, 4]
    capsys.readouterr()
    for extra, says in (("--steps", "--steps needs a whole number"), ("--steps=", "--steps needs a whole number"),
                        ("--warmup x", "--warmup needs a whole number"), ("--step 8", "write --step in full")):
        world = fake()
        with pytest.raises(SystemExit) as e:
            campaign.main(["single-s0", "--gpus", "cpu", f"--extra={extra}", "--runs", str(tmp_path / "r2"),
                           "--results", str(tmp_path / "c2.jsonl")])
        err = capsys.readouterr().err
        assert e.value.code == 2 and not world.cmds and err.count("\n") == 1 and says in err, err


def test_carry_pack_refuses_a_running_run_and_warns_of_lost_points(tmp_path):
    import fcntl
    run = fake_run(tmp_path / "runs" / "voting-ip-s0", evaluated=(0, 40))
    env = {"CARRY_PART_BYTES": "1000", "CARRY_ROOT": str(tmp_path / "checkout"), "CARRY_LOGS": str(tmp_path / "logs")}
    (run / "step_000060.tmp").mkdir()  # a checkpoint being written
    assert "holds step_000060.tmp, a checkpoint being written" in carry("pack", run, tmp_path / "c", env=env, ok=False)
    (run / "step_000060.tmp").rmdir()
    for logs in (tmp_path / "logs", tmp_path / "runs" / "logs"):  # CARRY_LOGS, and campaign's default --logs
        logs.mkdir()
        with open(logs / "voting-ip-s0.lock", "a") as held:  # as bench/campaign.py's run_job holds it
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            err = carry("pack", run, tmp_path / "c", env=env, ok=False)
            assert f"{logs / 'voting-ip-s0.lock'} is held: a campaign is still running voting-ip-s0" in err
    assert not (tmp_path / "c").exists() or not os.listdir(tmp_path / "c")
    # released: packed, with a warning for step_000020, evaluated nowhere and left behind
    p = subprocess.run(["bash", os.path.join(ROOT, "bench", "carry.sh"), "pack", run, tmp_path / "c"],
                       env={**os.environ, **env}, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("voting-ip-s0: ")
    assert p.stderr == (f"carry.sh: warning: {run}/eval.jsonl has no line for step_000020, which will not travel "
                        "(only step_000040 does): their points are lost from the run's curve\n")
    with open(run / "eval.jsonl", "a") as f:  # step 20's line cut off by a kill (no newline): still no evaluation
        f.write('{"step": 20, "checkpoint": "step_000020", "pass@1": 0.3')
    p2 = subprocess.run(["bash", os.path.join(ROOT, "bench", "carry.sh"), "pack", run, tmp_path / "c9"],
                        env={**os.environ, **env}, capture_output=True, text=True)
    assert p2.returncode == 0 and p2.stderr == p.stderr
    # unpack (the parts as `in` leaves them) under a held lock is refused too, and unpacks nothing
    shutil.copytree(tmp_path / "c", tmp_path / "c2" / "voting-ip-s0")
    with open(tmp_path / "logs" / "voting-ip-s0.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert "is held" in carry("unpack", "voting-ip-s0", tmp_path / "runs3", tmp_path / "c2", env=env, ok=False)
    assert not (tmp_path / "runs3").exists()
    assert "restored" in carry("unpack", "voting-ip-s0", tmp_path / "runs3", tmp_path / "c2", env=env)


def test_carry_keep_in_a_worktree(tmp_path):
    main, wt = tmp_path / "main", tmp_path / "wt"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", main], check=True)
    (main / "a.txt").write_text("a\n")
    subprocess.run([*git, "-C", main, "add", "a.txt"], check=True)
    subprocess.run([*git, "-C", main, "commit", "-qm", "a"], check=True)
    subprocess.run([*git, "-C", main, "worktree", "add", "-q", wt], check=True, capture_output=True)
    (tmp_path / "from").mkdir()
    (tmp_path / "from" / "voting-ip-s0.tar.000").write_bytes(b"part")
    out = carry("keep", "voting-ip-s0", tmp_path / "from", env={"CARRY_ROOT": str(wt)})
    assert out.startswith(f"voting-ip-s0: kept 1 file(s) in {wt}/.carry/voting-ip-s0/, which holds 1 part(s)")
    assert (main / ".git" / "info" / "exclude").read_text().splitlines()[-1] == "/.carry/"
    assert subprocess.run(["git", "-C", wt, "status", "--porcelain"], capture_output=True, text=True).stdout == ""


def test_carry_plan_warns_when_a_call_would_not_fit(tmp_path, carried):
    run, env, _ = carried
    checkout = tmp_path / "checkout"
    (checkout / ".gitignore").write_text("ignored.bin\n")
    (checkout / "ignored.bin").write_bytes(b"x" * 100000)  # ignored: not sent, not counted
    (checkout / "big.bin").write_bytes(b"x" * 2000)  # untracked, not ignored: sent
    env = {**env, "CARRY_CALL_BYTES": "6000"}  # the largest call: 3 parts of 1000 bytes and NAME.sha256
    carry("plan", "voting-ip-s0", env=env)  # 2000 + 12 + ~3080 bytes: fits
    (checkout / "big.bin").write_bytes(b"x" * 4000)
    p = subprocess.run(["bash", os.path.join(ROOT, "bench", "carry.sh"), "plan", "voting-ip-s0"],
                       env={**os.environ, **env}, capture_output=True, text=True)
    assert p.returncode == 0 and "call 1 of" in p.stdout
    assert re.fullmatch(r"carry\.sh: warning: the checkout \(4012 bytes: tracked files and untracked ones git does not "
                        rf"ignore, in {re.escape(str(checkout))}\) and a call's 30\d\d bytes of parts exceed a call's "
                        r"6000: .*\n", p.stderr), p.stderr


def _save_many(results, worker, count):
    for i in range(count):
        campaign.save_record(results, {"config": f"w{worker}", "seed": i, "model": "m", "pass": i})


def test_save_record_two_processes_and_a_kill(tmp_path, monkeypatch):
    """Two processes saving records into one file at once keep all of them (each save reads, filters and
    rewrites the file: without the lock one overwrites the other's); a save killed mid-write leaves the
    old file whole; a record of the same run replaces the older one."""
    import multiprocessing
    results = str(tmp_path / "results" / "campaign.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_save_many, args=(results, w, 25)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    rows = campaign.read_jsonl(results)
    assert sorted((r["config"], r["seed"]) for r in rows) == [(f"w{w}", i) for w in range(2) for i in range(25)]
    campaign.save_record(results, {"config": "w0", "seed": 3, "model": "m", "pass": "new"})  # --force: replaced
    rows = campaign.read_jsonl(results)
    assert len(rows) == 50 and [r["pass"] for r in rows if r["config"] == "w0" and r["seed"] == 3] == ["new"]
    before = pathlib.Path(results).read_text()
    calls = iter(range(10**6))
    real_dumps = json.dumps

    def dies_midway(obj, *a, **k):  # the 10th record written: the process "dies"
        if next(calls) == 10:
            raise KeyboardInterrupt
        return real_dumps(obj, *a, **k)
    monkeypatch.setattr(campaign.json, "dumps", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        campaign.save_record(results, {"config": "w9", "seed": 0, "model": "m"})
    assert pathlib.Path(results).read_text() == before


def test_code_cells_and_another_model(tmp_path, fake):
    """--task code: the grid's flags plus --task code --max-new-tokens 512, trained on MBPP without its test
    split (task ids 11-510), evaluated on every problem of a file shorter than --eval-problems; its run folder,
    log and record are its own, so a math record of the same cell does not skip it; another model's cell too."""
    mbpp, he = tmp_path / "mbpp" / "mbpp.jsonl", tmp_path / "he.jsonl"
    mbpp.parent.mkdir()
    write_jsonl(mbpp, [{"task_id": i, "text": "t", "code": "c", "test_list": ["assert f() == 1"]}
                       for i in [*range(1, 13), *range(509, 513)]])
    mbpp.write_text(mbpp.read_text().rstrip("\n"))  # as the shared copy of MBPP: no newline after the last row
    write_jsonl(he, [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n", "entry_point": f"f{i}",
                      "test": f"def check(c):\n    assert c() == {i}\n"} for i in range(3)])
    results = tmp_path / "c.jsonl"
    write_jsonl(results, [{"config": "single", "seed": 0, "model": campaign.DEFAULT_MODEL, "task": "math"}])

    def cell(*flags):
        with pytest.raises(SystemExit) as e:
            campaign.main(["single-s0", "--gpus", "cpu", "--model", "tiny", "--eval-n", "1", "--eval-every", "2",
                           "--status-every", "0.05", "--extra", "--steps 4 --problems 2", "--runs",
                           str(tmp_path / "runs"), "--results", str(results), *flags])
        return e.value.code
    world = fake(problems=3)
    world.settings["data"] = str(he)
    assert cell("--task", "code", "--model-name", campaign.DEFAULT_MODEL, "--train-data", str(mbpp),
                "--eval-data", str(he)) == 0
    train = world.cmds[0]
    d = str(tmp_path / "runs" / "single-s0-code")
    assert train[-2:] == ["--out", d] and train[train.index("--task", train.index("--task") + 1) + 1] == "code"
    assert train[train.index("--max-new-tokens", train.index("--max-new-tokens") + 1) + 1] == "512"
    data = train[train.index("--data") + 1]
    assert data == str(tmp_path / "runs" / "mbpp" / "train-outside-11-510.jsonl")
    assert [r["task_id"] for r in campaign.read_jsonl(data)] == [*range(1, 11), 511, 512]
    assert pathlib.Path(data).read_text().endswith("}\n")  # whole lines, even when the source's last has no newline
    assert world.cmds[-1][world.cmds[-1].index("--problems") + 1] == "3"  # all 3, not 500
    assert os.path.exists(tmp_path / "runs" / "logs" / "single-s0-code.log")
    rows = campaign.read_jsonl(results)
    assert [(r["config"], r.get("task")) for r in rows] == [("single", "math"), ("single", "code")]
    assert rows[1]["name"] == "single-s0" and rows[1]["eval_problems"] == 3
    world = fake(problems=3)  # recorded now: skipped
    assert cell("--task", "code", "--model-name", campaign.DEFAULT_MODEL, "--train-data", str(mbpp),
                "--eval-data", str(he)) == 0 and not world.cmds
    world = fake(problems=3)  # the same cell of another model: a folder of its own
    world.settings["data"] = str(he)
    assert cell("--task", "code", "--train-data", str(mbpp), "--eval-data", str(he)) == 0
    assert world.cmds[0][-1] == str(tmp_path / "runs" / "single-s0-code-tiny")
    assert cell("--task", "code", "--train-data", str(tmp_path / "nope.jsonl"), "--eval-data", str(he),
                "--force").startswith("error: no such data file")
    assert rows[1]["eval_chunk"] == 256
    other = tmp_path / "mine.jsonl"  # MBPP's rows under another name: its test split is left out too
    shutil.copy(mbpp, other)
    assert campaign.mbpp_train(str(other), str(tmp_path / "r3")).endswith("train-outside-11-510.jsonl")
    assert campaign.mbpp_train(str(he), str(tmp_path / "r3")) == str(he)  # not MBPP's format: as it is
    with pytest.raises(SystemExit) as e:
        campaign.main(["single-s1", "--model", "/root/mdl15/hf", "--runs", str(tmp_path / "r4")])
    assert "give its name too" in str(e.value.code)
    with pytest.raises(SystemExit) as e:
        campaign.main(["single-s1", "--model", "tiny", "--extra", "--task code", "--runs", str(tmp_path / "r4")])
    assert e.value.code == 2


def test_carry_big_eval_log_and_the_cell_of_a_code_run(tmp_path):
    """pack with an eval.jsonl past a pipe's 64 KiB, step 20 on its first line: evaluated, no warning (head died of
    SIGPIPE under pipefail once grep -q had its match); unpack names the campaign cell of a code / 1.5B folder."""
    run = fake_run(tmp_path / "runs" / "single-s0-code-Qwen2.5-Coder-1.5B-Instruct", evaluated=(20,))
    with open(run / "eval.jsonl", "a") as f:
        f.writelines(json.dumps({"step": 40, "pad": "y" * 1400}) + "\n" for _ in range(100))
    assert os.path.getsize(run / "eval.jsonl") > 2**17
    env = {"CARRY_PART_BYTES": "100000", "CARRY_ROOT": str(tmp_path / "co"), "CARRY_LOGS": str(tmp_path / "logs")}
    carry("pack", run, tmp_path / "c", env=env)  # ok=True: nothing on stderr
    name = run.name
    shutil.copytree(tmp_path / "c", tmp_path / "c2" / name)
    out = carry("unpack", name, tmp_path / "runs2", tmp_path / "c2", env=env)
    assert ("bench/campaign.py single-s0 --task code --model MODEL --model-name Qwen2.5-Coder-1.5B-Instruct --runs"
            in out), out


def test_table(run_dir, tmp_path):
    """--table: one Markdown table per (model, task), rows in CONFIGS' order then by seed, final - base in se."""
    r = campaign.build_record(run_dir, "single-s1", campaign.DEFAULT_MODEL, "gsm8k/test.jsonl", 500, 2)
    v = {**r, "name": "voting-ip-s0", "config": "voting-ip", "seed": 0}
    write_jsonl(tmp_path / "c.jsonl", [v, r, {**r, "task": "code"}])
    lines = campaign.table(str(tmp_path / "c.jsonl")).splitlines()
    assert lines[0] == f"{campaign.DEFAULT_MODEL}, code:" and lines[6] == f"{campaign.DEFAULT_MODEL}, math:"
    assert [ln.split(" | ")[0] for ln in lines[10:12]] == ["| single-s1", "| voting-ip-s0"]
    b, f = r["base"], r["final"]
    se = (b["se"] ** 2 + f["se"] ** 2) ** 0.5
    assert f"| {f['pass@1'] - b['pass@1']:+.3f} ({(f['pass@1'] - b['pass@1']) / se:.1f} se) |" in lines[10]


def test_paired_differences_table_and_compare(run_dir, tmp_path):
    """Points with per-problem counts (eval.py's right) compare paired: the se of the mean per-problem difference,
    by hand here; without them, or on other problems, unpaired. --table marks a paired final - base; --compare
    lists every common step and common transfer, and refuses unknown names or other evaluation settings."""
    a = {"step": 20, "pass@1": 0.5, "se": 0.2, "right": [2, 0, 1, 1]}
    b = {"step": 20, "pass@1": 0.25, "se": 0.1, "right": [1, 0, 1, 0]}
    # per problem (a - b) / 2 = 0.5, 0, 0, 0.5: mean 0.25, stdev sqrt(0.25 / 3), / sqrt(4)
    assert campaign.difference(a, b, 2) == (0.25, pytest.approx((0.25 / 3) ** 0.5 / 2), True)
    unpaired = (0.25, pytest.approx(0.05 ** 0.5), False)
    assert campaign.difference(a, {**b, "right": [1, 0, 1]}, 2) == campaign.difference(a, {**b, "right": None}, 2) \
        == unpaired
    lines = [eval_line(0, 0.25) | {"right": [1, 0, 1, 0]}, eval_line(20, 0.5) | {"right": [2, 0, 1, 1]}]
    write_jsonl(os.path.join(run_dir, "eval.jsonl"), lines)
    r = campaign.build_record(run_dir, "single-s1", campaign.DEFAULT_MODEL, "gsm8k/test.jsonl", 500, 2)
    assert r["curve"][1]["right"] == [2, 0, 1, 1]
    write_jsonl(tmp_path / "c.jsonl", [r | {"transfers": {"voting": a, "evalopt": a}},
                                       {**r, "name": "single-s2", "curve": [a | {"step": 0}, b], "transfers": {"voting": b}},
                                       {**r, "name": "code-s0", "eval_n": 4}])
    assert f"| +0.250 ({0.25 / ((0.25 / 3) ** 0.5 / 2):.1f} se, paired) |" in campaign.table(str(tmp_path / "c.jsonl"))
    out = campaign.compare(str(tmp_path / "c.jsonl"), "single-s1", "single-s2").splitlines()
    assert [ln.split(" | ")[0] for ln in out[2:]] == ["| step 0", "| step 20", "| voting (transfer)"]
    assert out[3] == f"| step 20 | 0.500 | 0.250 | +0.250 ({0.25 / ((0.25 / 3) ** 0.5 / 2):.1f} se) | 0.144 paired |"
    for names, says in ((("single-s1", "nope"), "no record named nope"), (("single-s1", "code-s0"), "different")):
        with pytest.raises(SystemExit, match=says):
            campaign.compare(str(tmp_path / "c.jsonl"), *names)
    # built-in held-out problems follow the seed: counts of other problems never pair; another model's cell of the
    # same name is another record
    builtin = lambda name, seed, curve: {**r, "name": name, "seed": seed, "eval_data": "builtin", "curve": curve}
    write_jsonl(tmp_path / "b.jsonl", [builtin("single-s0", 0, [a]), builtin("single-s1", 1, [b]),
                                       builtin("voting-s1", 1, [b]), {**r, "name": "single-s0", "model": "M"}])
    assert campaign.compare(str(tmp_path / "b.jsonl"), "single-s0", "single-s1").endswith("| 0.224 |")
    assert campaign.compare(str(tmp_path / "b.jsonl"), "single-s1", "voting-s1").endswith("| - |")  # paired, se 0
    assert "| step 0 | 0.250 | 0.250 |" in campaign.compare(str(tmp_path / "b.jsonl"), "single-s0", "single-s0", "M")
    # a cell with no record in the results: its last attempt in lost.jsonl beside them, named with where it was lost;
    # a name in both files is the results' record (single-s1: 0.500 at step 20 there, 0.250 in lost.jsonl)
    lost = lambda started, curve: {**r, "name": "single-s3", "curve": curve,
                                   "lost": {"trained_to": 25, "planned_steps": 100, "started": started}}
    write_jsonl(tmp_path / "lost.jsonl", [lost("2026-12-01T10:00:00", [b]), lost("2026-12-02T10:00:00", [a]),
                                          {**r, "name": "single-s1", "curve": [b]}])
    out = campaign.compare(str(tmp_path / "c.jsonl"), "single-s3", "single-s1").splitlines()
    assert out[0] == "| point | single-s3 (started 2026-12-02T10:00, lost at 25) | single-s1 | A - B | se |"
    assert out[2:] == ["| step 20 | 0.500 | 0.500 | +0.000 | - |"]
    with pytest.raises(SystemExit, match="no record named single-s4"):
        campaign.compare(str(tmp_path / "c.jsonl"), "single-s4", "single-s1")


def test_eval_chunk_is_eval_pys():
    """The campaign's copy of eval.py's chunk rule (it must not import eval.py) gives eval.py's settings."""
    import eval as E
    for n in (1, 2, 3, 8, 300):
        args = E.parse_args(["--model", "tiny", "--n", str(n)])
        assert E.settings_and_problems(args, {}, "tiny", "math")[0]["chunk"] == campaign.eval_chunk(n), n


def detached_checkout(tmp_path, python):
    """A checkout holding bench/detached.sh and one record ({"name": "a"}), DETACHED_ROOT (tmp_path/root) and $OUT in
    tmp_path, and `python` (a shell script) first on PATH -> (checkout, root, out, env, sh: bash bench/detached.sh)."""
    checkout, root, out, stub = (tmp_path / n for n in ("checkout", "root", "out", "stub"))
    for d in (checkout / "bench", checkout / "docs" / "results", out, stub):
        d.mkdir(parents=True)
    shutil.copy(os.path.join(campaign.ROOT, "bench", "detached.sh"), checkout / "bench")
    (checkout / "docs" / "results" / "campaign.jsonl").write_text('{"name": "a"}\n')
    (stub / "python").write_text(python)
    (stub / "python").chmod(0o755)
    env = {**os.environ, "DETACHED_ROOT": str(root), "OUT": str(out), "PATH": f"{stub}:{os.environ['PATH']}"}
    sh = lambda *a: subprocess.run(["bash", "bench/detached.sh", *a], cwd=checkout, env=env, capture_output=True, text=True)
    return checkout, root, out, env, sh


def test_detached_start_twice_in_one_lease(tmp_path):
    """bench/detached.sh (the GPU machine's way to run a cell past a 10-minute call): a second start in the same
    lease keeps the first one's record (when the checkout's results file is where it began), waits in poll for its
    own end, runs the reward tests once, and is refused while a campaign still runs. python is a stub here."""
    checkout, root, out, env, sh = detached_checkout(tmp_path, '#!/bin/sh\n[ "$1" = -m ] && { echo "1 passed"; exit 0; }\n'
        'shift\nfor a; do case $a in *-s[0-9]) echo "{\\"name\\": \\"$a\\"}" >> docs/results/campaign.jsonl;; '
        'esac; done\necho "campaign: finished"\n')
    results = checkout / "docs" / "results" / "campaign.jsonl"
    names = lambda: [json.loads(line)["name"] for line in (out / "campaign.jsonl").read_text().splitlines()]
    assert sh("start", "single-s0").returncode == 0 and sh("poll", "5").returncode == 0
    assert names() == ["a", "single-s0"] and "reward tests rc=0" in (root / "logs" / "progress").read_text()
    assert sh("start", "voting-sp-s0", "--extra", "--steps 140").returncode == 0
    assert "copied campaign.jsonl" in sh("poll", "5").stdout and names() == ["a", "single-s0", "voting-sp-s0"]
    progress = (root / "logs" / "progress").read_text()
    assert progress.startswith("start voting-sp-s0 --extra --steps 140") and "reward tests" not in progress
    assert "start single-s0" in (root / "logs" / "progress.before").read_text()
    results.write_text('{"name": "b"}\n')  # another checkout's file: the earlier records are not its
    assert sh("start", "x-s0").returncode == 0 and sh("poll", "5").returncode == 0 and names() == ["b", "x-s0"]
    (root / "logs" / "progress").write_text("start y-s0 00:00:00\n")  # a campaign still running
    refused = sh("start", "z-s0")
    assert refused.returncode == 1 and refused.stderr.startswith("error: a campaign started here is still running")
    assert (root / "proj" / "docs" / "results" / "campaign.jsonl").read_text() == '{"name": "b"}\n{"name": "x-s0"}\n'


def test_detached_poll_brings_a_new_evaluation_back(tmp_path):
    """A run the lease cuts off writes no record, but its evaluations so far are its curve: poll copies the small
    files again whenever a run's eval.jsonl changes. python is a stub that evaluates twice, waiting between."""
    ev = tmp_path / "root" / "runs" / "x-s0" / "eval.jsonl"
    checkout, root, out, env, _ = detached_checkout(
        tmp_path, f'#!/bin/sh\n[ "$1" = -m ] && exit 0\nmkdir -p {ev.parent}\necho 0 > {ev}\n'
        f'until [ -e {tmp_path}/go ]; do sleep 0.1; done\nsleep 1; echo 20 >> {ev}\n'
        f'until [ -e {tmp_path}/release ]; do sleep 0.1; done\n')
    start = subprocess.Popen(["bash", "bench/detached.sh", "start", "x-s0"], cwd=checkout, env=env)
    try:
        for _ in range(200):
            if ev.exists():
                break
            time.sleep(0.1)
        poll = subprocess.Popen(["bash", "bench/detached.sh", "poll", "5"], cwd=checkout, env=env,
                                stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        (tmp_path / "go").touch()
        poll.wait(timeout=30)
        with tarfile.open(out / "runs.tgz") as tar:
            assert tar.extractfile("runs/x-s0/eval.jsonl").read() == b"0\n20\n"
    finally:
        (tmp_path / "go").touch()
        (tmp_path / "release").touch()
        start.wait(timeout=30)


def test_detached_poll_brings_records_back_before_the_end(tmp_path):
    """bench/detached.sh poll copies the records to $OUT as soon as they change, not only at the campaign's end (a
    call cut off by the lease's end, e.g. while --grow extends a recorded cell, keeps them). python is a stub that
    records its cell, then waits for a file to exist."""
    checkout, root, out, env, sh = detached_checkout(
        tmp_path, '#!/bin/sh\n[ "$1" = -m ] && exit 0\necho "{\\"name\\": \\"x-s0\\"}" >> docs/results/campaign.jsonl\n'
        f'until [ -e {tmp_path}/release ]; do sleep 0.1; done\n')
    names = lambda: [json.loads(line)["name"] for line in (out / "campaign.jsonl").read_text().splitlines()]
    start = subprocess.Popen(["bash", "bench/detached.sh", "start", "x-s0"], cwd=checkout, env=env)
    try:
        proj = root / "proj" / "docs" / "results" / "campaign.jsonl"
        for _ in range(200):
            if proj.exists() and "x-s0" in proj.read_text():
                break
            time.sleep(0.1)
        early = sh("poll", "1")
        assert "copied" not in early.stdout and names() == ["a", "x-s0"] and (out / "runs.tgz").exists()
    finally:
        (tmp_path / "release").touch()
        start.wait(timeout=30)
    assert "copied campaign.jsonl" in sh("poll", "5").stdout and names() == ["a", "x-s0"]


def test_record_lost_keeps_every_attempt(run_dir, tmp_path, capsys):
    """--record-lost: a run cut off with the machine is recorded to its last evaluated step, with the step it was lost
    at, its own commit and GPU (config.json's last start), into lost.jsonl beside (never into) campaign.jsonl; two
    attempts of one cell are two records; table and figures name each attempt."""
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    config["starts"] = [{"step": 0, "commit": "abc123", "gpu": "NVIDIA H200"}]
    (pathlib.Path(run_dir) / "config.json").write_text(json.dumps(config))
    os.utime(os.path.join(run_dir, "config.json"), (1764781452, 1764781452))  # 2025-12-03T17:04:12Z
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:  # trained past the last evaluated step
        f.write(json.dumps({"step": 47, "reward_mean": 0.2, "skipped_steps": 0, "time": {"total": 3.0},
                            "roles": {"generator": {"entropy": 0.3}}}) + "\n")
    lost = tmp_path / "lost.jsonl"
    campaign.main(["--record-lost", run_dir, "--results", str(lost)])
    assert "single-s1: lost at step 47 of 40, recorded to step 40" in capsys.readouterr().out
    (r,) = campaign.read_jsonl(str(lost))
    assert r["lost"] == {"trained_to": 47, "planned_steps": 40, "started": "2025-12-03T17:04:12+00:00"}
    assert (r["steps"], r["final"]["step"], r["git_commit"], r["gpu"]) == (40, 40, "abc123", "NVIDIA H200")
    os.utime(os.path.join(run_dir, "config.json"), (1764802000, 1764802000))  # a second attempt, later
    campaign.main(["--record-lost", run_dir, "--results", str(lost)])
    campaign.main(["--record-lost", run_dir, "--results", str(lost)])  # the same attempt again: replaced
    assert [r["lost"]["started"][11:16] for r in campaign.read_jsonl(str(lost))] == ["17:04", "22:46"]
    assert "| single-s1 (started 2025-12-03T22:46, lost at 47) |" in campaign.table(str(lost))
    if importlib.util.find_spec("matplotlib"):  # the figures need it (CI installs it; the project does not)
        campaign.plot(str(lost), str(tmp_path))
        assert sorted(p.name for p in tmp_path.glob("*.png")) == ["lost-claim-C1.png", "lost-claim-C2.png"]
    code = tmp_path / "single-s1-code"  # a code cell's folder: the record names the cell
    shutil.copytree(run_dir, code)
    config["task"] = "code"
    (code / "config.json").write_text(json.dumps(config))
    campaign.main(["--record-lost", str(code), "--results", str(tmp_path / "code.jsonl"), "--eval-data", "gsm8k/test.jsonl"])
    (r,) = campaign.read_jsonl(str(tmp_path / "code.jsonl"))
    assert (r["name"], r["config"], r["task"], r["steps"]) == ("single-s1", "single", "code", 40)
    for bad, why in ((tmp_path / "nothing", "not a run folder"), (run_dir, "lacks the base")):
        with pytest.raises(SystemExit, match=why):
            campaign.main(["--record-lost", str(bad), "--results", str(lost), "--eval-problems", "7"])


def test_detached_stop_ends_the_campaign_and_what_it_started(tmp_path):
    """bench/detached.sh stop (to carry a run the lease will not finish): the campaign started under setsid ends with
    every process it started (python is a stub that starts a child standing in for train.py and waits), the progress
    log says so, so poll returns at once, and a second stop is refused in one line."""
    checkout, root, out, env, sh = detached_checkout(
        tmp_path, f'#!/bin/sh\n[ "$1" = -m ] && exit 0\nmkdir -p {tmp_path}/root/runs/x-s0/step_000020\n'
        f'sleep 300 &\necho $! > {tmp_path}/child\nwait\n')
    start = subprocess.Popen(["bash", "bench/detached.sh", "start", "x-s0"], cwd=checkout, env=env, start_new_session=True)
    try:
        for _ in range(200):
            if (tmp_path / "child").exists() and (tmp_path / "child").read_text().strip():
                break
            time.sleep(0.1)
        child = int((tmp_path / "child").read_text())
        stopped = sh("stop")
        assert stopped.returncode == 0 and "runs/x-s0/step_000020" in stopped.stdout, stopped.stderr
        start.wait(timeout=10)
        time.sleep(0.2)
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
        assert "campaign rc=stopped" in (root / "logs" / "progress").read_text()
        t = time.time()
        assert sh("poll", "30").returncode == 0 and time.time() - t < 10
        again = sh("stop")
        assert again.returncode == 1 and again.stderr == "error: no campaign started here is running\n"
    finally:
        if start.poll() is None:
            os.killpg(start.pid, 9)
