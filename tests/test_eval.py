"""eval.py: a whole tiny run evaluated (eval.jsonl, table, resume, comparison), diagnostics on scripted
episodes, the pass@k estimator, same-seed reproducibility, transfer maps, plots with and without
matplotlib, and one-line errors for bad input."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import eval as ev

spec = importlib.util.spec_from_file_location("plots", os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "bench", "plots.py"))
plots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plots)
import lora
import train
import workflows
from workflows import Episode, Turn


def fake_grade(completions, problems, **kw):
    """Reward 1 for texts of even length, so the random tiny model gets non-zero accuracies."""
    return [(float(len(c) % 2 == 0), "correct" if len(c) % 2 == 0 else "wrong") for c in completions]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("eval") / "run")
    train.main(["--workflow", "single", "--policy", "sp", "--model", "tiny", "--steps", "2", "--problems", "2",
                "--group", "2", "--max-new-tokens", "6", "--save-every", "1", "--device", "cpu", "--out", out])
    return out


def test_run_directory_eval_table_resume_compare(run_dir, capsys, monkeypatch):
    args = ["--run", run_dir, "--problems", "2", "--n", "2", "--pass-k", "2", "--greedy"]
    ev.main(args)
    printed = capsys.readouterr().out
    records = ev.read_jsonl(os.path.join(run_dir, "eval.jsonl"))
    assert [r["step"] for r in records] == [0, 1, 2]
    assert [r["checkpoint"] for r in records] == ["base", "step_000001", "step_000002"]
    r = records[-1]
    assert r["problems"] == 2 and r["n"] == 2 and r["greedy"] is not None and set(r["pass@k"]) == {"2"}
    assert r["diagnostics"]["roles"]["generator"]["calls"] == 4
    assert r["settings"]["max_new_tokens"] == 6  # the run's own settings
    assert "base 0.000 | peak" in printed and "at step 0" in printed and "final 0.000 at step 2" in printed
    table = printed[printed.index(f"{run_dir}: single"):].splitlines()  # the run table shows pass@k when computed
    assert table[1].split()[:6] == ["step", "pass@1", "±", "se", "greedy", "pass@2"]
    assert [row.split()[5] for row in table[2:5]] == [f"{r['pass@k']['2']:.3f}" for r in records]
    monkeypatch.setattr(ev, "load_default_model", lambda *a: pytest.fail("resume loaded a model"))
    ev.main(args)  # resume: nothing new to do, so no model is loaded
    assert capsys.readouterr().out.count("already in") == 3
    assert len(ev.read_jsonl(os.path.join(run_dir, "eval.jsonl"))) == 3
    ev.main(["--compare", run_dir, run_dir])
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 3 and "single" in rows[1] and "SP" in rows[1] and rows[1] == rows[2]


def test_run_evaluated_in_another_workflow_by_transfer(run_dir, tmp_path, capsys):
    """A single-agent run's checkpoints as the voters of Voting (the aggregator stays the base model);
    --every 2 keeps step 0 and step 2."""
    run = str(tmp_path / "run")
    shutil.copytree(run_dir, run)
    ev.main(["--run", run, "--workflow", "voting", "--transfer", "solvers", "--problems", "1", "--n", "1",
             "--every", "2"])
    records = ev.read_jsonl(os.path.join(run, "eval.jsonl"))
    mine = [r for r in records if r["workflow"] == "voting"]
    assert [r["step"] for r in mine] == [0, 2] and mine[0]["policy"] == "SP->solvers"
    assert mine[-1]["diagnostics"]["roles"]["generator"]["calls"] == 3
    assert "step 2 (solvers)" in capsys.readouterr().out


def test_evaluate_reproducible_and_consistent(tiny, monkeypatch):
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    model, tok = tiny
    problems = ev.builtin_problems("math", "test", n=3)
    kw = dict(n=4, ks=[2, 4], greedy=True, max_new_tokens=5, seed=3)
    a = ev.evaluate(model, tok, problems, "voting", ev.adapter_map("voting", "base"), "math", **kw)
    b = ev.evaluate(model, tok, problems, "voting", ev.adapter_map("voting", "base"), "math", **kw)
    assert a == b  # the same seed gives the same samples: checkpoints differ by weights, not by noise
    assert a["pass@1"] == pytest.approx(a["diagnostics"]["accuracy"])
    assert 0 < a["pass@1"] < 1 and a["pass@1"] <= a["pass@k"]["2"] <= a["pass@k"]["4"]
    assert a["diagnostics"]["roles"]["generator"]["calls"] == 3 * 4 * 3


def test_pass_at_k_hand_values():
    assert ev.pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)   # 1 - C(3,2)/C(4,2)
    assert ev.pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert ev.pass_at_k(4, 0, 2) == 0.0 and ev.pass_at_k(4, 4, 2) == 1.0 and ev.pass_at_k(4, 3, 2) == 1.0
    assert ev.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_pass_at_1_standard_error_and_pass_at_k_by_hand(tiny, monkeypatch):
    """A scripted 3 problems x 4 samples reward matrix, run in chunks of 2 problems. Kills: samples
    grouped on the wrong axis (pass@1 is the same either way; its standard error and pass@k are not),
    the standard error without Bessel's correction, a biased pass@k.
        p0: 1 0 0 0  (1/4)    p1: 1 1 0 1  (3/4)    p2: 0 0 0 0  (0)
    pass@1 = 1/3; se = std(1/4, 3/4, 0; ddof 1) / sqrt(3) = sqrt(21/144) / sqrt(3); pass@2 per problem
    1 - C(3,2)/C(4,2) = 1/2, 1 (one wrong sample cannot fill 2 draws), 0 -> 1/2; pass@3: 3/4, 1, 0."""
    matrix = {"p0": [1, 0, 0, 0], "p1": [1, 1, 0, 1], "p2": [0, 0, 0, 0]}
    calls = []

    def scripted_run(workflow, problems, group, *a, **kw):
        calls.append([p["id"] for p in problems])
        return [Episode(p["id"], g, final="x", reward=float(matrix[p["id"]][g]),
                        status="correct" if matrix[p["id"]][g] else "wrong") for p in problems for g in range(group)]
    monkeypatch.setattr(ev, "run_workflow", scripted_run)
    model, tok = tiny
    problems = [{"id": pid, "task": "math", "prompt": "q", "answer": "1"} for pid in matrix]
    r = ev.evaluate(model, tok, problems, "single", ev.adapter_map("single", "base"), "math", n=4, ks=[2, 3], chunk=2)
    assert calls == [["p0", "p1"], ["p2"]]
    assert r["pass@1"] == pytest.approx(1 / 3) and r["right"] == [1, 3, 0]  # per problem, in order
    assert r["pass@1_se"] == pytest.approx((21 / 144) ** 0.5 / 3 ** 0.5)
    assert r["pass@k"] == pytest.approx({"2": 0.5, "3": (0.75 + 1) / 3})
    assert r["status"] == {"correct": 4, "wrong": 8}


def T(role, correct=None, text="x", length=3, finish="stop", instance=None):
    return Turn(role, instance or role, [1], [5] * length, [0.0] * length, finish, text, correct=correct)


def E(turns, reward):
    return Episode("p", 0, turns=turns, final="", reward=float(reward), status="")


YES, NO = "ok \\boxed{Correct}", "bad \\boxed{Incorrect}"


def test_evalopt_diagnostics():
    eps = [E([T("generator", False), T("evaluator", text=NO), T("generator", True), T("evaluator", text=YES)], 1),
           E([T("generator", True), T("evaluator", text=NO), T("generator", False),
              T("evaluator", text="no verdict", finish="length", length=9), T("generator", False),
              T("evaluator", text=YES)], 0),
           E([T("generator", False, length=7), T("evaluator", text=YES)], 0)]
    d = ev.diagnostics("evalopt", eps)
    e = d["evaluator"]
    assert (e["approved_right"], e["approved_wrong"], e["rejected_right"], e["rejected_wrong"], e["unparseable"]) \
        == (1, 2, 1, 2, 1)
    assert e["verdict_accuracy"] == pytest.approx(3 / 6)
    assert (e["retried_wrong"], e["retry_fixed"], e["retry_fixed_rate"]) == (2, 1, 0.5)
    assert (e["retried_right"], e["retry_broke"]) == (1, 1)
    assert e["first_attempt_accuracy"] == pytest.approx(1 / 3) and e["mean_rounds"] == 2
    g, v = d["roles"]["generator"], d["roles"]["evaluator"]
    assert g["calls"] == 6 and g["mean_length"] == pytest.approx(22 / 6) and g["correct"] == pytest.approx(2 / 6)
    assert v["calls"] == 6 and v["truncation_rate"] == pytest.approx(1 / 6) and v["mean_length"] == pytest.approx(24 / 6)
    assert d["accuracy"] == pytest.approx(1 / 3)
    assert v["answered"] == pytest.approx(5 / 6) and g["answered"] == 0  # 5 boxed verdicts; the generators wrote "x"
    code = [E([T("generator", text="```python\nprint(1)\n```"), T("evaluator", text=YES),
               T("generator", text="\\boxed{5}"), T("evaluator", text="looks fine")], 0)]
    roles = ev.diagnostics("evalopt", code, "code")["roles"]  # code: a solver answers with a program, a judge boxes
    assert roles["generator"]["answered"] == 0.5 and roles["evaluator"]["answered"] == 0.5


def test_voting_diagnostics():
    votes = lambda *c: [T("generator", x, instance=f"generator{k}") for k, x in enumerate(c)] + [T("aggregator", None)]
    eps = [E(votes(False, True, False), 1), E(votes(True, False, False), 0), E(votes(False, False, False), 0)]
    for ep, how in zip(eps, ["boxed", "default", "digit"]):
        ep.facts.update(choice_parse=how)
    d = ev.diagnostics("voting", eps)
    a = d["aggregator"]
    assert (a["had_right_candidate"], a["picked_right"], a["pick_accuracy"]) == (2, 1, 0.5)
    assert a["candidate_accuracy"] == pytest.approx(2 / 9)
    assert (a["picks"], a["unboxed_picks"], a["default_picks"]) == (3, 2, 1)
    headline = workflows.WORKFLOWS["voting"].headline
    assert headline(d) == "picked right 1/2, 2/3 picks without \\boxed{N} (1 with no number: solution 1)"
    for key in ("picks", "unboxed_picks", "default_picks"):  # an eval.jsonl record written before these existed
        del a[key]
    assert headline(d) == "picked right 1/2"


def test_orchworkers_diagnostics():
    team = lambda *w: [T("orchestrator")] + [T("worker", c, text=t) for t, c in w] + [T("synthesizer")]
    eps = [E(team(("\\boxed{5}", True), ("so \\boxed{ 5 }", True)), 1),   # agree, kept right
           E(team(("\\boxed{5}", True), ("\\boxed{6}", False)), 0),        # disagree, lost the right one
           E(team(("\\boxed{3}", False)), 1),                              # one worker, synthesizer fixed it
           E(team(("no box", False), ("no box", False)), 0)]               # no answers: not an agreement
    d = ev.diagnostics("orchworkers", eps, "math")
    w, s = d["workers"], d["synthesizer"]
    assert (w["multi_worker_episodes"], w["agree"]) == (3, 1) and w["agreement"] == pytest.approx(1 / 3)
    assert w["mean_workers"] == pytest.approx(7 / 4) and w["any_right"] == 0.5
    assert (s["had_right_worker"], s["kept_right"], s["no_right_worker"], s["fixed"]) == (2, 1, 2, 1)
    assert s["accuracy"] == 0.5
    roles = d["roles"]  # answered: a boxed answer, right or not (5 of the 7 workers; "x" has none)
    assert roles["worker"]["answered"] == pytest.approx(5 / 7) and roles["orchestrator"]["answered"] == 0
    code = ev.diagnostics("orchworkers", eps[:2], "code")["workers"]  # code: agreement = same pass/fail
    assert (code["multi_worker_episodes"], code["agree"]) == (2, 1)


def test_adapter_maps_and_transfer(run_dir, tiny, tmp_path):
    assert ev.adapter_map("orchworkers", "base") == {"orchestrator": None, "worker": None, "synthesizer": None}
    assert ev.adapter_map("evalopt", "ip") == {"generator": "generator", "evaluator": "evaluator"}
    assert ev.adapter_map("voting", "sp") == {"generator": "shared", "aggregator": "shared"}
    assert ev.adapter_map("voting", "all") == {"generator": "transfer", "aggregator": "transfer"}
    assert ev.adapter_map("orchworkers", "solvers") == {"orchestrator": None, "worker": "transfer", "synthesizer": None}
    model, _ = tiny
    ip = tmp_path / "ip"  # an IP single-agent checkpoint: generator.safetensors only
    ip.mkdir()
    shutil.copy(os.path.join(run_dir, "step_000002", "shared.safetensors"), ip / "generator.safetensors")
    try:  # a run directory means its last checkpoint; the single-agent SP adapter goes to the solvers
        assert ev.load_adapters(model, run_dir, "voting", "solvers") == \
            ({"generator": "transfer", "aggregator": None}, "solvers")
        assert ev.load_adapters(model, str(ip), "evalopt", "all")[1] == "all"
        with pytest.raises(ValueError, match=r"no adapter for role\(s\) \['evaluator'\] of evalopt"):
            ev.load_adapters(model, str(ip), "evalopt")
    finally:
        lora.delete_adapter(model, "transfer")


def test_plots_written_when_matplotlib_present(run_dir):
    pytest.importorskip("matplotlib")
    records = ev.read_jsonl(os.path.join(run_dir, "eval.jsonl")) or [
        {"step": 0, "pass@1": 0.0, "pass@1_se": 0.0, "greedy": None, "workflow": "single", "policy": "SP"}]
    paths = plots.plot_run(run_dir, records)
    assert sorted(os.path.basename(p) for p in paths) == ["eval.png", "training.png"]
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plots_skipped_with_a_message_without_matplotlib(run_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # what plot_run imports, maybe loaded already
    assert plots.plot_run(run_dir, []) == []
    assert "plots skipped: matplotlib is not available" in capsys.readouterr().out
    plots.main([run_dir])  # the command: eval.jsonl's lines with the latest settings (none here: nothing to plot)
    assert "plots skipped" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="usage: python bench/plots.py"):
        plots.main([run_dir + "-missing"])


def test_clear_errors(run_dir, tmp_path, capsys):
    def fails(argv, message):  # as a bad flag: exit code 2 and one line on stderr
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            ev.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, (e.value, err)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"workflow": "single", "task": "math", "policy": "sp", "model_used": "tiny"}))
    fails(["--run", str(empty)], "has no checkpoints")
    fails(["--run", str(tmp_path / "missing")], "no such run directory")
    fails(["--compare", str(tmp_path / "missing"), run_dir], "no such run directory")  # the first bad one is named
    fails(["--model", "tiny", "--adapters", str(tmp_path / "missing")], "no such adapter folder")
    fails(["--model", "tiny", "--data", str(tmp_path / "missing.jsonl")], "no such data file")
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    fails(["--model", "tiny", "--task", "code", "--data", str(gsm)], "is a math problem, but task='code'")
    # an adapter from another model: one tensor of the wrong shape
    src = os.path.join(run_dir, "step_000002", "shared.safetensors")
    with safe_open(src, framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    key = sorted(tensors)[0]
    tensors[key] = torch.zeros(tensors[key].shape[0], tensors[key].shape[1] + 1)
    bad = tmp_path / "bad"
    bad.mkdir()
    save_file(tensors, str(bad / "shared.safetensors"), metadata=meta)
    fails(["--model", "tiny", "--problems", "1", "--n", "1", "--adapters", str(bad)], "does not fit this model")
    fails(["--run", run_dir, "--workflow", "voting"], "needs --transfer")
    cut = tmp_path / "cut"  # an adapter file cut off (a copy interrupted): one line, not safetensors' traceback
    cut.mkdir()
    (cut / "shared.safetensors").write_bytes(open(src, "rb").read()[:500])
    fails(["--model", "tiny", "--problems", "1", "--n", "1", "--adapters", str(cut)], "not a readable safetensors file")


def test_ctrl_c_is_one_line_and_exit_130(run_dir, tmp_path, monkeypatch, capsys):
    """Ctrl-C: one line on stderr and the shell's code for it, 130; eval.jsonl keeps the finished steps."""
    run = str(tmp_path / "run")
    shutil.copytree(run_dir, run)
    real, calls = ev.evaluate, []

    def interrupted_in_the_third(*a, **k):  # step 0 (base) and step 1 finish, Ctrl-C while evaluating step 2
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(ev, "evaluate", interrupted_in_the_third)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        ev.main(["--run", run, "--problems", "1", "--n", "1"])
    assert e.value.code == 130
    assert capsys.readouterr().err == "interrupted (with --run, eval.jsonl keeps the steps finished: a rerun goes on)\n"
    assert [r["step"] for r in ev.read_jsonl(os.path.join(run, "eval.jsonl")) if r["n"] == 1] == [0, 1]


@pytest.mark.parametrize("cut", ["mid-record", "before its newline"])
def test_rerun_after_a_cut_off_line_loses_no_record(run_dir, tmp_path, capsys, cut):
    """Regression: an eval.jsonl line cut off by a kill (a GPU lease ending) broke the next `--run`: a cut
    mid-record made every read fail; a record whose newline was lost was counted as done and the next
    record was appended onto it, one broken line. Now --compare skips the cut line with a warning, and the
    rerun drops it (one warning naming the file), evaluates that step again and appends whole lines."""
    run = str(tmp_path / "run")
    shutil.copytree(run_dir, run)
    path, args = os.path.join(run, "eval.jsonl"), ["--run", run, "--problems", "1", "--n", "1"]
    if os.path.exists(path):  # the module's run_dir may hold another test's records (other settings)
        os.remove(path)
    ev.main([*args, "--every", "2"])  # steps 0 and 2
    with open(path, "rb") as f:
        text = f.read()
    last = text.rstrip(b"\n").rsplit(b"\n", 1)[1]
    kept = text[:-1] if cut == "before its newline" else text[:len(text) - len(last) // 2 - 1]
    with open(path, "wb") as f:
        f.write(kept)
    capsys.readouterr()
    ev.main(["--compare", run])  # a reader skips the cut line
    assert capsys.readouterr().err == f"warning: {path}: its last line has no newline (an append cut off?): skipped\n"
    ev.main(args)
    dropped = len(kept) - kept.rfind(b"\n") - 1
    assert capsys.readouterr().err == f"warning: {path}: dropped a cut-off last line ({dropped} bytes)\n"
    with open(path) as f:
        records = [json.loads(line) for line in f]  # every line parses
    assert [r["step"] for r in records] == [0, 1, 2]
    assert records[2] == json.loads(last)  # step 2 evaluated again: the same record, nothing lost


@pytest.mark.parametrize("argv,message", [(["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
                                          (["--run", "a", "--compare", "b"], "not allowed with argument --run"),
                                          (["--temperature", "-1"], "--temperature must be >= 0 and finite, got -1.0"),
                                          (["--temperature", "inf"], "--temperature must be >= 0 and finite"),
                                          (["--n", "0"], "--n must be at least 1")])
def test_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        ev.parse_args(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and err.count("\n") == 1, err  # one line, no usage block


def test_error_is_one_line_without_traceback(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, os.path.join(root, "eval.py"), "--run", str(tmp_path / "nope")],
                       capture_output=True, text=True, cwd=root)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr == f"error: no such run directory: {tmp_path / 'nope'}\n"


@pytest.mark.parametrize("flag,message", [("--model", "no such model folder or file: {path}"),
                                          ("--data", "{path}: no such data file"),
                                          ("--adapters", "no such adapter folder: {path}"),
                                          ("--run", "no such run directory: {path}")])
def test_a_missing_path_is_exit_2_naming_it(tmp_path, capsys, flag, message):
    """Regression (README's leftovers): a missing --model, --data, --adapters or --run exited 1 while a bad flag
    exits 2, argparse's code for a usage error. Now both: one line naming the path, exit code 2."""
    path = str(tmp_path / "missing")
    with pytest.raises(SystemExit) as e:
        ev.main([*(["--model", "tiny"] if flag != "--model" else []), flag, path])
    err = capsys.readouterr().err
    assert (e.value.code, err) == (2, f"error: {message.format(path=path)}\n")


def test_a_foreign_run_or_model_folder_is_one_line(tmp_path, capsys):
    """Regression (README's leftovers): eval.py --run read a folder whose config.json is not train.py's (an HF model
    folder's) as a run (a KeyError once it held step_* folders), one not JSON gave a JSON error naming no file; a
    model folder without tokenizer files
    loaded a stock tokenizer and failed at the first call with a traceback; a cut-off weights file was a traceback.
    Each is one line naming the folder, exit code 2."""
    import models
    (hf := tmp_path / "hf").mkdir()
    (hf / "config.json").write_text('{"model_type": "qwen2"}')
    (bad := tmp_path / "bad").mkdir()
    (bad / "config.json").write_text("{not json")
    models.build_tiny(no_tok := tmp_path / "no_tokenizer")
    for f in no_tok.iterdir():
        if f.name.startswith(("tokenizer", "special", "chat")):
            f.unlink()
    models.build_tiny(cut := tmp_path / "cut")
    (cut / "model.safetensors").write_bytes((cut / "model.safetensors").read_bytes()[:-100])
    for argv, message in ((["--run", str(hf)], f"{hf}: not a run directory (no config.json, or not train.py's)"),
                          (["--run", str(bad)], f"{bad}: not a run directory (no config.json, or not train.py's)"),
                          (["--model", str(no_tok)], f"model {no_tok}: its tokenizer has no chat template"),
                          (["--model", str(cut)], f"model {cut}: a weights file is unreadable")):
        with pytest.raises(SystemExit) as e:
            ev.main([*argv, "--device", "cpu"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_ctrl_c_while_importing_is_one_line_and_exit_130(tmp_path):
    """Regression: Ctrl-C while torch and transformers import (seconds, before main can catch it) printed
    Python's traceback. Now the one line of a Ctrl-C later on, and 130. The child presses Ctrl-C itself as
    numpy starts to import."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = "\n".join([
        "import os, runpy, signal, sys",
        "class CtrlCOnNumpy:",
        "    def find_spec(self, name, path=None, target=None):",
        "        if name == 'numpy': os.kill(os.getpid(), signal.SIGINT)",
        "sys.meta_path.insert(0, CtrlCOnNumpy())",
        f"sys.argv = ['eval.py', '--model', 'tiny', '--problems', '1', '--n', '1', '--data', {str(tmp_path / 'x')!r}]",
        "runpy.run_path('eval.py', run_name='__main__')"])
    p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=root)
    assert (p.returncode, p.stdout) == (130, "")
    assert p.stderr == "interrupted (with --run, eval.jsonl keeps the steps finished: a rerun goes on)\n"


# --------------------------------------------------------------------------- issue 14: reward-hacking monitor

def test_reward_hacking_monitor_in_diagnostics_and_tables():
    """The monitor of train.py's metrics in eval records: the most common final answer's share, and per role
    the share of rewarded answers that are degenerate; shown in the per-role table and the run table."""
    inf, five = r"\boxed{\infty}", r"\boxed{5}"

    def ep(votes, pick, reward):
        turns = [Turn("generator", f"generator{k}", [1], [5], [0.0], "stop", v, reward=reward)
                 for k, v in enumerate(votes)]
        turns.append(Turn("aggregator", "aggregator", [1], [5], [0.0], "stop", f"\\boxed{{{pick}}}", reward=reward))
        return Episode("p", 0, turns=turns, final=votes[pick - 1], reward=reward, status="",
                       facts={"choice_parse": "boxed"})
    eps = [ep([inf, five, inf], 1, 1.0), ep([five, five, inf], 1, 1.0), ep([inf, inf, inf], 2, 0.0)]
    d = ev.diagnostics("voting", eps, "math")
    assert d["answer_top_share"] == pytest.approx(2 / 3)
    assert d["answer_top"] == workflows.rewards.final_answer(inf, "math")
    assert d["roles"]["generator"]["degenerate_rewarded"] == 0.5  # 3 of the 6 rewarded voter answers
    assert d["roles"]["aggregator"]["degenerate_rewarded"] is None  # a pick is no answer
    eps[1].turns[2].correct = False  # graded wrong, beside the right voter picked: no hole in the reward, not counted
    assert ev.diagnostics("voting", eps, "math")["roles"]["generator"]["degenerate_rewarded"] == pytest.approx(2 / 5)
    r = {"step": 0, "pass@1": 2 / 3, "pass@1_se": 0.3, "problems": 3, "n": 1, "greedy": None, "pass@k": {},
         "workflow": "voting", "policy": "IP", "task": "math", "model": "tiny",
         "settings": {"temperature": 0.7, "seed": 0}, "diagnostics": d}
    lines = ev.format_result(r)
    assert lines[1] == f"most common final answer (0.67 of those with one): {d['answer_top']}"
    assert lines[2].split()[-1] == "degenerate" and lines[3].split()[-1] == "0.50" and lines[4].split()[-1] == "-"
    old = json.loads(json.dumps({**r, "step": 1}))  # a record written before the monitor existed
    del old["diagnostics"]["answer_top_share"], old["diagnostics"]["answer_top"]
    table = ev.run_table("runs/x", [r, old]).splitlines()
    assert "top ans" in table[1] and table[2].split()[5] == "0.67" and table[3].split()[5] == "-"
