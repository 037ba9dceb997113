"""Mutation check: plant one plausible bug at a time in a temporary copy of the repo and see whether
the tests notice. A test suite that passes with the algorithm broken is not testing the algorithm.

    python tests/mutants.py                       # every mutant (about 8 minutes on 2 shared cores)
    python tests/mutants.py --list                # the table (and any pattern that no longer fits)
    python tests/mutants.py --only kl-sign,lora-scale-sqrt-rank

Run by hand, not in CI (it is not a test module: pytest does not collect it). Each mutant is one
row of MUTANTS: (name, file, function, pattern, replacement, tests). `function` is a function or
method name ("LoRALinear.scaling") or a module-level variable holding code as a string; `pattern` must occur exactly once in that function's source
(found through ast, so unrelated code may move freely) and is replaced by `replacement`. When a
refactor changes the line, the mutant reports an ERROR naming itself; update its pattern here.
Every mutant gets a fresh copy of the *.py files, tests/ and bench/ (never the working tree), then
`pytest -x` on its `tests` (files or node ids), and is reported as `killed by <the first failing
test>` or SURVIVED. Before the mutants, the same tests must pass on the unmodified copy.
The last line is `killed K of N mutants`; the exit status is 0 only when every mutant was killed.

Not here because they cannot be killed: equivalent mutants. E.g. the sampler's position ids counted from the
padding instead of each row's first token: Qwen3's rotary attention only sees position differences, so
the outputs differ by float rounding only (it survived every test, rightly).
Left out: generating mutants automatically (most would be noise: renamed locals, log messages),
running mutants in parallel (the tests already use both cores), the distributed tests.
"""
import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ids(file, *names):
    """Node ids of some tests of one file (a whole file when no names)."""
    return [f"tests/{file}::{n}" for n in names] or [f"tests/{file}"]


GRPO, LORA, WORKFLOWS, EVAL = ids("test_grpo.py"), ids("test_lora.py"), ids("test_workflows.py"), ids("test_eval.py")
EXTENDING = ids("test_extending.py")  # a workflow registered by a test; reward shaping
# train.py's tests that do not run train.main (seconds, not tens of seconds); the two runs some mutants need
TRAIN = ids("test_train.py", "test_lr_schedule_by_hand",
            "test_one_update_moves_the_completion_in_the_direction_of_its_advantage",
            "test_grpo_groups_and_advantages_of_one_step", "test_ip_per_instance_steps_hold_only_their_role_and_instance",
            "test_ip_step_changes_only_its_own_adapter", "test_optimizer_step_gradient_does_not_depend_on_the_token_budget",
            "test_first_step_without_old_logprobs_equals_recomputed_ones")
TRAIN_COHERENCE = ids("test_train.py", "test_coherence_scale_by_hand", "test_coherence_scales_the_applied_gradient",
                      "test_coherence_lambda_0_is_bit_for_bit_and_the_ema_survives_resume",
                      "test_coherence_under_sp_scales_only_its_roles_part", "test_coherence_skips_a_non_finite_gradient")
TRAIN_RESUME = ids("test_train.py", "test_resume_equals_uninterrupted_run")
TRAIN_OLD_LOGPROBS = ids("test_train.py", "test_old_logprobs_are_recomputed_only_for_several_steps")
MINIBATCH = ids("test_train.py", "test_minibatch_steps_cut_a_parallel_roles_rows_in_order")
MINIBATCH_RANKS = ids("test_distributed.py", "test_two_ranks_take_the_single_process_step")
DECODE_ATTENTION = ids("test_sampler.py", "test_decode_attention_equals_attention_written_out")
SAMPLER = ids("test_sampler.py",  # not the torch.compile test: 10-20 s and no mutant needs it
              "test_top_p_and_top_k_truncate_at_non_degenerate_values", "test_logprobs_equal_full_forward",
              "test_greedy_matches_generate_on_mixed_lengths", "test_min_new_tokens_forces_length_and_top_k_1_is_greedy")
SAMPLER_FAST = ids("test_sampler.py", "test_fast_path_matches_simple_path_greedy_with_compaction")
REWARDS = ids("test_rewards.py",  # not the real-data and adversarial-sandbox tests
              "test_math_equivalence_table", "test_extract_code", "test_code_pass_fail_and_statuses", "test_io_tests",
              "test_grade_batch_mixed_and_order")
REWARDS_GAMED = ids("test_rewards.py", "test_math_issue_false_positives", "test_math_issue_false_negatives",
                    "test_math_pathological_inputs_are_fast")
JSONL = [*ids("test_data.py", "test_append_jsonl_drops_a_cut_off_last_line_and_read_jsonl_skips_it"),  # a run's logs
         *ids("test_eval.py", "test_rerun_after_a_cut_off_line_loses_no_record"),
         *ids("test_train.py", "test_resume_drops_a_metrics_line_cut_off_by_a_kill")]
SIBLINGS = ids("test_rewards.py", "test_runs_graded_at_once_cannot_signal_to_each_other")  # runs graded at once
SANDBOX_ESCAPES = ids("test_rewards.py", "test_adversary_patches_the_path_checks", "test_adversary_escapes_the_harness_thread",
                      "test_adversary_third_review", "test_adversary_reads_and_writes_files_through_tcl",
                      "test_adversary_fourth_review", "test_adversary_loads_native_code",
                      "test_adversary_opens_relative_to_a_directory_fd", "test_adversary_starts_a_process")
REWARDS_SANDBOX = ids("test_rewards.py", "test_adversary_always_equal_objects", "test_adversary_shadows_builtins_the_tests_call",
                      "test_malformed_problems_fail_closed", "test_plain_values_keep_legitimate_answers")

# (name, file, function, pattern -> replacement, tests). The first eight are the bugs of issue 19
# that the suite used to pass.
MUTANTS = [
    ("cudnn-attention-left-on", "models.py", "load_model", "enable_cudnn_sdp(False)", "enable_cudnn_sdp(True)",
     ids("test_models.py", "test_load_model_turns_cudnn_attention_off")),
    ("update-uses-minus-advantage", "train.py", "role_backward",
     "per_token([adv[i] for i in mb])", "per_token([-adv[i] for i in mb])", TRAIN),
    ("logprobs-ignore-temperature", "grpo.py", "_chunk_logprobs",
     "torch.log_softmax(head(hidden) / temperature, -1)", "torch.log_softmax(head(hidden), -1)", GRPO),
    ("lora-scale-sqrt-rank", "lora.py", "LoRALinear.scaling",
     'self.adapters[name]["alpha"] / self.adapters[name]["rank"]',
     'self.adapters[name]["alpha"] / math.sqrt(self.adapters[name]["rank"])', LORA),
    ("eval-samples-on-wrong-axis", "eval.py", "evaluate", ".reshape(P, n).sum(1)", ".reshape(n, P).sum(0)", EVAL),
    ("groups-keyed-by-role", "train.py", "train_step",
     "(ep.problem_id, t.instance) for ep", "(ep.problem_id, t.role) for ep", TRAIN),
    ("role-balanced-token-mean-in-role", "grpo.py", "token_weights",
     "lambda i: len(per_role) * per_role[roles[i]] * lengths[i]",
     "lambda i: len(per_role) * sum(lengths[j] for j in live if roles[j] == roles[i])", GRPO),
    ("cosine-decay-as-linear", "train.py", "lr_factor",
     "0.5 * (1 + math.cos(math.pi * min(1.0, progress)))", "1.0 - min(1.0, progress)", TRAIN),
    ("top-p-drops-crossing-token", "sampler.py", "pick",
     "drop = probs.cumsum(-1) - probs >= top_p", "drop = probs.cumsum(-1) >= top_p", SAMPLER),
    # grpo.py: advantages, weights, log-probs, the loss
    ("advantage-not-divided-by-std", "grpo.py", "group_advantages", "a = a / (r.std() + eps)", "a = a", GRPO),
    ("advantage-biased-std", "grpo.py", "group_advantages", "r.std()", "r.std(correction=0)", GRPO),
    ("seq-mean-as-token-mean", "grpo.py", "token_weights",
     '"seq-mean-token-mean": lambda i: len(live) * lengths[i]', '"seq-mean-token-mean": lambda i: total_tokens', GRPO),
    ("role-weights-not-renormalised", "grpo.py", "token_weights",
     "weights = [w / total for w in weights]", "weights = list(weights)", GRPO),
    ("logprobs-shifted-by-one", "grpo.py", "completion_logprobs",
     "range(len(p) - 1, len(p) + len(c) - 1)", "range(len(p), len(p) + len(c))", GRPO),
    ("ratio-inverted", "grpo.py", "token_loss", "(logprobs - old_logprobs)", "(old_logprobs - logprobs)", GRPO),
    ("clip-bounds-swapped", "grpo.py", "token_loss",
     "ratio.clamp(1 - clip_low, 1 + clip_high)", "ratio.clamp(1 - clip_high, 1 + clip_low)", GRPO),
    ("clip-takes-min", "grpo.py", "token_loss",
     "torch.maximum(unclipped, clipped_obj)", "torch.minimum(unclipped, clipped_obj)", GRPO),
    ("clip-flag-wherever-objectives-differ", "grpo.py", "token_loss",
     "clipped_obj > unclipped", "clipped_obj != unclipped", GRPO),
    ("dual-clip-never-off", "grpo.py", "token_loss", "if dual_clip:", "if True:", GRPO),
    ("dual-clip-on-positive-advantages", "grpo.py", "token_loss",
     "capped = (advantages < 0) & (loss > cap)", "capped = loss > cap", GRPO),
    ("kl-sign", "grpo.py", "token_loss", "loss = loss + kl_coef * kl", "loss = loss - kl_coef * kl", GRPO),
    ("kl-reversed-direction", "grpo.py", "token_loss",
     "d = (ref_logprobs - logprobs)", "d = (logprobs - ref_logprobs)", GRPO),
    # train.py: what goes into each optimizer step
    ("reward-inverted-in-advantages", "train.py", "train_step",
     "[r.reward for r in rows]", "[1.0 - r.reward for r in rows]", TRAIN),
    ("adv-mean-only-flag-inverted", "train.py", "train_step",
     "scale=not args.adv_mean_only", "scale=args.adv_mean_only", TRAIN),
    ("groups-pooled-across-problems", "train.py", "train_step",
     "(ep.problem_id, t.instance) for ep", "t.instance for ep", TRAIN),
    ("ip-steps-on-other-roles-rows", "train.py", "update_groups",
     "rows[i].role == role and k in (-1, instance_index[i])", "k in (-1, instance_index[i])", TRAIN),
    ("minibatch-as-per-instance", "train.py", "train_step", 'if args.parallel_steps == "minibatch":', "if False:",
     MINIBATCH),
    ("minibatch-cut-per-rank", "train.py", "train_step", "// sum(e for e, _ in counts)", "// len(episodes)",
     MINIBATCH_RANKS),
    ("decode-attention-default-scale-1", "sampler.py", "gqa_attention", "D ** -0.5 if scaling is None else scaling",
     "1.0 if scaling is None else scaling", DECODE_ATTENTION),
    ("decode-attention-kv-head-order", "sampler.py", "gqa_attention", "out.view(B, H, q, D)",
     "out.view(B, g, Hkv, q, D).transpose(1, 2).reshape(B, H, q, D)", DECODE_ATTENTION),
    ("per-instance-steps-merged", "train.py", "update_groups",
     "instance_index[i] if per_instance(rows[i].role) else -1", "-1", TRAIN),
    ("old-logprobs-never-recomputed", "train.py", "old_and_ref_logprobs",
     "[i for i in mine if i in later]", "[]", TRAIN + TRAIN_OLD_LOGPROBS),
    ("old-logprobs-to-positions-not-rows", "train.py", "old_and_ref_logprobs", "ix = [sel[j] for j in mb]", "ix = mb",
     TRAIN + TRAIN_OLD_LOGPROBS),
    ("old-logprobs-from-sampler", "train.py", "role_backward",
     "old = lp.detach()",
     "old = torch.tensor([x for i in mb for x in rows[i].logprobs], dtype=lp.dtype, device=lp.device)", TRAIN),
    ("weights-normalised-per-micro-batch", "train.py", "role_backward",
     "loss = (per_token([weights[i] for i in mb]) * loss_t).sum()",
     "loss = (per_token([weights[i] for i in mb]) * loss_t).sum() / sum(weights[i] * len(rows[i].completion_ids) for i in mb)",
     TRAIN),
    ("lr-schedule-not-applied", "train.py", "run",
     'g["lr"] = args.lr * lr_factor(step, args)', 'g["lr"] = args.lr', TRAIN + TRAIN_RESUME),
    ("no-warmup", "train.py", "lr_factor", "return (step + 1) / warmup", "return 1.0", TRAIN),
    # lora.py
    ("lora-forward-unscaled", "lora.py", "LoRALinear.forward", " * self.scaling(name)", "", LORA),
    ("merged-weights-not-restored", "lora.py", "merged",
     "m.base.weight.data, m.active = data, name", "m.active = name", LORA),
    ("set-adapter-leaves-others-trainable", "lora.py", "set_adapter",
     "model.requires_grad_(False)", "model", LORA),
    ("adapter-added-in-train-mode", "lora.py", "add_adapter",
     "layer.train(layer.base.training)", "layer.train(True)", LORA),
    ("peft-keys-without-prefix", "lora.py", "export_peft", 'PEFT_PREFIX + k + ".weight"', 'k + ".weight"', LORA),
    ("peft-rslora-accepted", "lora.py", "read_adapter", ' or c.get("use_rslora")', "", LORA),
    ("init-adapters-ignored", "train.py", "load", "if not args.resume and args.init_adapters:", "if False:",
     ids("test_lora.py", "test_init_adapters_start_a_run_from_peft_folders")),
    ("coherence-ignores-its-ema", "train.py", "coherence_scale", 'state[key].to(grad.device) if', "torch.zeros_like(grad) if",
     TRAIN_COHERENCE),
    ("coherence-scales-every-roles-part", "train.py", "optimizer_step", "p.grad.add_(g.view_as(p), alpha=scale - 1)",
     "p.grad.mul_(scale)", TRAIN_COHERENCE),
    ("coherence-on-a-non-finite-gradient", "train.py", "optimizer_step", "and grad.isfinite().all() and grad.any()", "",
     TRAIN_COHERENCE),
    ("coherence-negative-cos-not-clamped", "train.py", "coherence_scale", "min(max(cos, 0.0), 1.0)", "min(cos, 1.0)",
     TRAIN_COHERENCE),
    ("coherence-ema-of-the-raw-gradient", "train.py", "coherence_scale", "(1 / window) * scale * grad", "(1 / window) * grad",
     TRAIN_COHERENCE),
    ("coherence-scale-not-applied", "train.py", "optimizer_step", "alpha=scale - 1", "alpha=0.0", TRAIN_COHERENCE),
    # sampler.py
    ("top-k-drops-kth-token", "sampler.py", "pick", "scaled < kth", "scaled <= kth", SAMPLER),
    ("logprobs-of-truncated-distribution", "sampler.py", "pick",
     "return tokens, logprobs.gather(", "return tokens, torch.log_softmax(scaled, -1).gather(", SAMPLER),
    ("sampling-ignores-temperature", "sampler.py", "pick", "scaled = logits / (temperature or 1.0)", "scaled = logits",
     SAMPLER),
    ("samples-not-prompt-major", "sampler.py", "sample",
     "rows := [p for p in prompts for _ in range(n)]", "rows := [p for _ in range(n) for p in prompts]", SAMPLER),
    ("decode-writes-cache-slot-0", "sampler.py", "StaticKV.update", "self.pos.view(1)", "self.steps[:1]", SAMPLER_FAST),
    ("tail-window-one-slot-short", "sampler.py", "sample_fast", "cache.length = full if tail", "cache.length = Lp + t if tail",
     SAMPLER_FAST),
    # compaction moves the rows of the attention mask with the cache's (StaticKV.keep's others)
    ("compaction-leaves-the-mask", "sampler.py", "sample_fast", "cache.keep(running, mask, pos_in)",
     "cache.keep(running, pos_in)", SAMPLER_FAST),
    # workflows.py
    ("evalopt-final-is-first-attempt", "workflows.py", "_evalopt",
     "eps[i].final = t.text", "eps[i].final = eps[i].final or t.text", WORKFLOWS),
    ("unparseable-verdict-approves", "workflows.py", "_evalopt",
     'if verdict == "Correct":', 'if verdict != "Incorrect":', WORKFLOWS),
    ("reward-only-on-last-turn", "workflows.py", "grade_episodes",
     "for t in ep.turns:", "for t in ep.turns[-1:]:", WORKFLOWS),
    ("voting-final-is-first-candidate", "workflows.py", "_voting",
     "eps[i].final = candidates[i][choice - 1]", "eps[i].final = candidates[i][0]", WORKFLOWS),
    ("voters-share-one-instance", "workflows.py", "_voting", 'f"generator{k}"', '"generator"', WORKFLOWS),
    ("choice-reads-any-digit-run", "workflows.py", "parse_choice", "if len(m) < 4300 and 1 <= int(m) <= n), None)",
     "if 1 <= int(m) <= n), None)", ids("test_workflows.py", "test_parse_choice")),
    ("choice-reads-any-boxed-run", "workflows.py", "parse_choice", "if len(m) < 4300 and 1 <= int(m) <= n]",
     "if 1 <= int(m) <= n]", ids("test_workflows.py", "test_parse_choice")),
    ("unparseable-verdict-counted-as-approval", "workflows.py", "_verdicts",
     '("approved_" if verdict == "Correct" else "rejected_")', '("approved_" if verdict != "Incorrect" else "rejected_")',
     WORKFLOWS + EVAL),
    # issue 18: one place per workflow, reward shaping kept out of the outcome
    ("parallel-roles-hard-coded", "train.py", "update_groups", "role in workflow.parallel",
     'role in {"voting": ["generator"], "orchworkers": ["worker"]}.get(args.workflow, [])', EXTENDING),
    ("shaping-added-to-outcome", "workflows.py", "grade_episodes",
     "ep.shaping = reward_shaping(", "ep.reward += reward_shaping(", EXTENDING),
    ("shaping-not-in-training-reward", "workflows.py", "grade_episodes",
     "t.reward = ep.reward + ep.shaping", "t.reward = ep.reward", EXTENDING),
    ("monitor-counts-training-reward", "workflows.py", "answer_monitor",
     "for ep in episodes if ep.correct for t in ep.turns if t.role in rewarded",
     "for ep in episodes for t in ep.turns if t.role in rewarded and t.reward == 1", EXTENDING),
    # rewards.py (concepts that outlive the rewrite in progress; patterns may need updating)
    ("extract-code-first-block", "rewards.py", "extract_code", "or [None])[-1]", "or [None])[0]", REWARDS),
    ("extract-code-inline-fence", "rewards.py", "_FENCE", 'r"^([ \\t]*)```', 'r"()```', REWARDS),
    ("extract-code-usage-block-wins", "rewards.py", "extract_code", "and binds(c)", "and not binds(c)", REWARDS),
    ("extract-code-keeps-list-indent", "rewards.py", "extract_code", "if ind and not", "if False and not", REWARDS),
    ("extract-code-strips-partial-indent", "rewards.py", "extract_code", "if ind and not re.search(", "if ind or re.search(", REWARDS),
    ("code-check-ignores-entry-point", "rewards.py", "code_check", 'problem.get("entry_point") if', "None if", REWARDS),
    ("code-check-prefers-defs-for-stdin", "rewards.py", "code_check", 'if tests.strip() else None', "", REWARDS),
    ("io-test-output-not-compared", "rewards.py", "code_check",
     'lines(r.stdout) != lines(out)', "False", REWARDS),
    ("last-boxed-takes-first-box", "rewards.py", "last_boxed",
     'text.rfind("\\\\boxed")', 'text.find("\\\\boxed")', REWARDS),
    ("grade-sends-math-to-code-checker", "rewards.py", "grade",
     'if p["task"] == "math"}', 'if p["task"] == "code"}', REWARDS),
    # rewards.py, issue 14: the holes a policy used (or could use) to score 1 without solving
    ("infinity-equals-anything", "rewards.py", "_sympy_worker", "return x == y", "return True", REWARDS_GAMED),
    ("tolerance-with-absolute-floor", "rewards.py", "_sympy_worker",
     "max(abs(va), abs(vb))", "max(abs(va), abs(vb), 1)", REWARDS_GAMED),
    ("rational-difference-within-tolerance", "rewards.py", "_sympy_worker",
     "if d == 0 or d.is_Rational:", "if d == 0:", REWARDS_GAMED),
    ("juxtaposed-numbers-multiply", "rewards.py", "_to_sympy", " or _REFUSED.search(t)", "", REWARDS_GAMED),
    ("no-answer-length-cap", "rewards.py", "math_check",
     "if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS or ", "if ", REWARDS_GAMED),
    # the judge process: the tests see only plain values it decoded, handles, the real builtins, the setup's helpers
    ("handles-compare-equal", "rewards.py", "_judge_main", 'raise TypeError("a value of the program\'s own class")',
     "return True", REWARDS_SANDBOX),
    ("overriding-subclass-crosses-as-plain", "rewards.py", "_wire", "for m in uses)", "for m in ())",
     ids("test_rewards.py", "test_adversary_always_equal_objects", "test_values_of_plain_subclasses_cross_as_plain_values")),
    ("program-runs-in-the-judge", "rewards.py", "run_python", "judge_job = dict(setup=setup,",
     'judge_job = dict(setup=setup + "\\n" + code,', REWARDS_SANDBOX),
    ("judge-raises-any-exception-it-is-told", "rewards.py", "_judge_main", "issubclass(kind, Exception)",
     "issubclass(kind, BaseException)", ids("test_rewards.py", "test_adversary_raises_what_would_end_the_judge")),
    ("program-shadows-builtins-in-tests", "rewards.py", "_judge_main", " - set(ns) - set(vars(builtins))", " - set(ns)",
     REWARDS_SANDBOX),
    ("program-redefines-setup-helpers", "rewards.py", "_judge_main", " - set(ns) - set(vars(builtins))",
     " - set(vars(builtins))", REWARDS_SANDBOX),
    ("hook-frames-reachable", "rewards.py", "_sandbox_main",
     'if event == "sys._getframe" or event == "object.__getattr__" and args[1] in', "if False and args[1] in",
     ids("test_rewards.py", "test_adversary_rewrites_the_hook_through_a_traceback")),
    # 2026-12-01 red-team reviews: each fix undone
    ("sandbox-reads-any-file", "rewards.py", "_sandbox_main", '(readable(p) or p == "/dev/urandom")', "True",
     SANDBOX_ESCAPES),
    ("c-file-modules-importable", "rewards.py", "_sandbox_main", '"ctypes", "readline", ', '"ctypes", ', SANDBOX_ESCAPES),
    ("path-checks-trust-posixpath", "rewards.py", "_sandbox_main", "            p = resolve(args[0], args[1] is not None)\n",
     "            p = os.path.realpath(args[0])\n", SANDBOX_ESCAPES),
    ("marshal-load-allowed", "rewards.py", "_sandbox_main", '"marshal.loads marshal.load ', '"marshal.loads ',
     ids("test_rewards.py", "test_adversary_reads_its_memory_for_the_token")),
    ("refused-import-not-an-importerror", "rewards.py", "_sandbox_main",
     '(ModuleNotFoundError if event == "import" else PermissionError)', "PermissionError",
     ids("test_rewards.py", "test_a_refused_import_is_a_missing_module")),
    ("tcl-importable", "rewards.py", "_sandbox_main", '"_curses", "_tkinter",', '"_curses",', SANDBOX_ESCAPES),
    ("gc-set-debug-kept", "rewards.py", "_sandbox_main", '"dcgettext", "set_debug", "create_builtin")', '"dcgettext")', SANDBOX_ESCAPES),
    ("import-name-via-str", "rewards.py", "_sandbox_main",
     'type(args[0]) is not str or any(unsafe(part) for part in args[0].split("."))',
     'any(unsafe(part) for part in str(args[0]).split("."))', SANDBOX_ESCAPES),
    ("native-module-from-any-file", "rewards.py", "_sandbox_main",
     "or args[1] is not None and not readable(resolve(args[1]))", "or False", SANDBOX_ESCAPES),
    ("os-open-relative-to-a-dir-fd", "rewards.py", "_sandbox_main", "p = resolve(args[0], args[1] is not None)",
     "p = resolve(args[0])", SANDBOX_ESCAPES),
    ("posixsubprocess-importable", "rewards.py", "_sandbox_main", '"_interp", "_posix", "_cffi"))', '"_interp", "_posixshmem", "_cffi"))',
     SANDBOX_ESCAPES),
    # killed only where a Python with syslog built in exists (Debian's /usr/bin/python3.11); skipped, it survives
    ("refused-builtins-imported", "rewards.py", "_sandbox_main", "sys.builtin_module_names if not unsafe(name)]",
     "sys.builtin_module_names]", ids("test_rewards.py", "test_sandbox_runs_on_a_python_with_refused_modules_built_in")),
    ("check-without-entry-point-accepted", "rewards.py", "bad_problem",
     "_CHECK.search(tests) and not", "False and not", REWARDS_SANDBOX),
    ("empty-io-output-accepted", "rewards.py", "bad_problem",
     'any(not str(case.get("output", "")).strip() for case in io_tests)', "False", REWARDS_SANDBOX),
    # eval.py
    ("eval-se-without-bessel", "eval.py", "evaluate", "np.std(right / n, ddof=1)", "np.std(right / n)", EVAL),
    ("pass-at-k-biased", "eval.py", "pass_at_k",
     "1.0 - math.comb(n - c, k) / math.comb(n, k)", "1.0 - (1 - c / n) ** k", EVAL),
    # data.py: appending after a line cut off by a kill merges it and the new record into one broken line
    ("jsonl-append-keeps-a-cut-off-line", "data.py", "append_jsonl", "f.truncate(len(text) - cut)", "pass", JSONL),
    # bench/campaign.py: two campaign processes saving records at once, or a kill mid-write, lose records
    ("campaign-save-without-lock", "bench/campaign.py", "save_record", "fcntl.flock(held, fcntl.LOCK_EX)", "pass",
     ids("test_campaign.py", "test_save_record_two_processes_and_a_kill")),
    ("campaign-entropy-none-as-zero", "bench/campaign.py", "build_record", '[None if (v := m["roles"]', '[0 if (v := m["roles"]',
     ids("test_campaign.py", "test_record_from_a_run_folder")),
    # a record is the run's up to the step it was trained to, not what a process left running wrote after it
    ("campaign-record-metrics-past-its-steps", "bench/campaign.py", "build_record", 'or m["step"] <= steps]', "or True]",
     ids("test_campaign.py", "test_record_stops_at_the_step_the_run_was_trained_to")),
    ("campaign-record-evals-past-its-steps", "bench/campaign.py", "build_record", "or s <= steps}", "or True}",
     ids("test_campaign.py", "test_record_stops_at_the_step_the_run_was_trained_to")),
    ("campaign-record-steps-from-config", "bench/campaign.py", "build_record", '"steps": steps,', "",
     ids("test_campaign.py", "test_record_stops_at_the_step_the_run_was_trained_to")),
    ("campaign-transfer-of-a-later-checkpoint", "bench/campaign.py", "locked_job", "if s <= target), default=0)",
     "), default=0)", ids("test_campaign.py", "test_a_left_over_later_checkpoint_is_not_the_runs")),
    ("campaign-judge-drops-pick-accuracy", "bench/campaign.py", "judge_point", '("pick_accuracy", "candidate_accuracy")',
     '()', ids("test_campaign.py", "test_judge_curve_and_its_panel")),
    # paired differences (two checkpoints on the same problems): per-problem counts kept, used, in order
    ("campaign-never-paired", "bench/campaign.py", "difference", "> 1:", "> 10 ** 9:",
     ids("test_campaign.py", "test_paired_differences_table_and_compare")),
    ("campaign-point-drops-right", "bench/campaign.py", "point", 'if "right" in r else {}', "if False else {}",
     ids("test_campaign.py", "test_paired_differences_table_and_compare")),
    ("campaign-pairs-builtin-across-seeds", "bench/campaign.py", "compare", 'ra["seed"] == rb["seed"]', "True",
     ids("test_campaign.py", "test_paired_differences_table_and_compare")),
    ("campaign-compare-any-model", "bench/campaign.py", "compare", '(r["model"], r.get("task", "math")) == (model, task)',
     "True", ids("test_campaign.py", "test_paired_differences_table_and_compare")),
    ("campaign-curve-takes-transfer-lines", "bench/campaign.py", "evals_for", 'and not r["settings"].get("transfer")', "",
     ids("test_campaign.py", "test_record_leaves_out_transfer_and_other_sampling_lines")),
    ("campaign-judge-counts-unboxed", "bench/campaign.py", "judge_point", 'a["default_picks"] / a["picks"]',
     'a.get("unboxed_picks", 0) / a["picks"]', ids("test_campaign.py", "test_judge_curve_and_its_panel")),
    ("campaign-judge-approved-counts-rejections", "bench/campaign.py", "judge_point",
     '(e["approved_right"] + e["approved_wrong"]) / n', '(e["approved_right"] + e["rejected_wrong"]) / n',
     ids("test_campaign.py", "test_judge_curve_and_its_panel")),
    ("campaign-paired-se-without-n", "bench/campaign.py", "difference", "(x - y) / n", "(x - y)",
     ids("test_campaign.py", "test_paired_differences_table_and_compare")),
    ("eval-right-not-in-problem-order", "eval.py", "evaluate", '"right": right.tolist()', '"right": sorted(right.tolist())',
     ids("test_eval.py")),
    ("campaign-save-in-place", "bench/campaign.py", "save_record", 'open(results + ".tmp", "w")', 'open(results, "w")',
     ids("test_campaign.py", "test_save_record_two_processes_and_a_kill")),
    # an evaluation beside training without its memory cap (it killed a run's training on the H200), and training
    # that fails after a checkpoint not resumed, or resumed forever
    ("judge-stops-at-a-failed-assert", "rewards.py", "_judge_main", "return ast.copy_location(soft, node)", "return node",
     ids("test_rewards.py", "test_no_oracle_whether_an_answer_passed")),
    ("mkfifo-left-to-the-program", "rewards.py", "_sandbox_main", 'for name in ("mkfifo", "mknod", ', "for name in (",
     ids("test_rewards.py", "test_no_oracle_whether_an_answer_passed")),
    ("setsid-left-to-the-program", "rewards.py", "_sandbox_main", '"setsid", "setpgid", ', '"setpgid", ',
     ids("test_rewards.py", "test_no_oracle_in_assert_messages_and_no_escape_from_the_run")),
    ("page-cache-left-to-the-program", "rewards.py", "_sandbox_main", '"posix_fadvise", "preadv", ', "",
     ids("test_rewards.py", "test_no_oracle_in_assert_messages_and_no_escape_from_the_run")),
    ("mmap-importable", "rewards.py", "_sandbox_main", '"_ssl", "mmap", "nis",', '"_ssl", "nis",',
     ids("test_rewards.py", "test_no_oracle_in_assert_messages_and_no_escape_from_the_run")),
    ("memfd-left-to-the-program", "rewards.py", "_sandbox_main", '"memfd_create", "setpriority"', '"setpriority"', ids("test_rewards.py", "test_no_oracle_in_assert_messages_and_no_escape_from_the_run")),
    # the fourteenth review: the program's own dir removable (a file in its place stayed in /tmp), a recursive cleanup
    # (a chain of 3,000 dirs stayed), a dir that stays unreported
    ("workdir-removable-by-the-program", "rewards.py", "_sandbox_main", "or r.startswith(work)",
     'or (r + "/").startswith(work)', ids("test_rewards.py", "test_a_run_leaves_nothing_in_tmp")),
    ("cleanup-by-recursive-rmtree", "rewards.py", "_remove", """subprocess.run(["sh", "-c", 'chmod -R u+rwx -- "$1"; rm -rf -- "$1"', "sh", top], capture_output=True)""",
     "__import__('shutil').rmtree(top, ignore_errors=True)",
     ids("test_rewards.py", "test_a_run_leaves_nothing_in_tmp")),
    ("cleanup-failure-unreported", "rewards.py", "run_python", '"error" if kept else ', "",
     ids("test_rewards.py", "test_a_run_leaves_nothing_in_tmp")),
    # the fifteenth review: site-packages inside the standard library's dir (pyenv) readable and importable
    # (_cffi_backend read the gold solutions), and no cap on files or dirs made (the cleanup took 19 s)
    ("site-packages-readable", "rewards.py", "_sandbox_main", 'and "/site-packages/" not in r and "/dist-packages/" not in r',
     "", ids("test_rewards.py", "test_adversary_uses_site_packages_inside_the_standard_library")),
    ("no-cap-on-files-written", "rewards.py", "_sandbox_main", "if writes and (made.append(1) or len(made) > 10_000):",
     "if False:", ids("test_rewards.py", "test_a_run_leaves_nothing_in_tmp")),
    ("no-cap-on-dirs-made", "rewards.py", "_sandbox_main",
     'writes = event in ("os.mkdir", "os.link")', "writes = False",
     ids("test_rewards.py", "test_a_run_leaves_nothing_in_tmp")),
    # the sixteenth review: the environment changeable (OPENSSL_CONF made libcrypto load the program's .so), other
    # runs reniced or pinned to one CPU
    ("environment-changeable", "rewards.py", "_sandbox_main", "os.chmod os.putenv os.unsetenv", "os.chmod",
     ids("test_rewards.py", "test_adversary_changes_the_environment")),
    ("renice-left-to-the-program", "rewards.py", "_sandbox_main",
     '"setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam"', '"setsid"',
     ids("test_rewards.py", "test_no_oracle_in_assert_messages_and_no_escape_from_the_run")),
    # the seventeenth review: glibc's gettext read .mo files anywhere; nis sent network traffic
    ("gettext-left-to-the-program", "rewards.py", "_sandbox_main", '__import__("_locale"), gc', 'gc',
     ids("test_rewards.py", "test_adversary_reads_files_through_gettext_and_uses_nis")),
    ("nis-importable", "rewards.py", "_sandbox_main", '"mmap", "nis", "spwd",', '"mmap", "spwd",',
     ids("test_rewards.py", "test_adversary_reads_files_through_gettext_and_uses_nis")),
    # the eighteenth review: every run nobody, so one killed the others of its batch
    ("runs-share-one-uid", "rewards.py", "run_python", 'uid=(1 << 30) + threading.get_native_id()', 'uid=1 << 30',
     ids("test_rewards.py", "test_a_run_cannot_kill_the_others_of_its_batch", "test_runs_at_once_have_uids_of_their_own")),
    ("box-not-noexec", "rewards.py", "_ROOT", "tmpfs -o noexec,nosuid,", "tmpfs -o nosuid,",
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir")),
    ("box-size-uncapped", "rewards.py", "_ROOT", "size={4 * OUTPUT_MB}m,", "size={40 * OUTPUT_MB}m,",
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir")),
    ("no-own-root", "rewards.py", "_own_root", "if os.geteuid():", "if True:",
     ids("test_rewards.py", "test_the_run_has_its_own_root_where_the_machine_allows_it")),
    ("root-shares-the-network", "rewards.py", "_ROOT", '"-m", "-n", "-i"', '"-m", "-i"',
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir",
         "test_the_run_has_its_own_root_where_the_machine_allows_it")),
    ("root-shows-tmp", "rewards.py", "_root_files", "for p, f in files.items():",
     'for p, f in fstab.write(f"/tmp {top}/root/tmp none rbind,X-mount.mkdir 0 0\\n") and files.items():',
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir",
         "test_adversary_undoes_the_audit_hook_through_a_use_after_free")),
    ("root-keeps-set-uid", "rewards.py", "_ROOT", "exec setpriv --no-new-privs ", "exec ",
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir")),
    ("root-shares-ipc", "rewards.py", "_ROOT", '"-n", "-i", "-p"', '"-n", "-p"',
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir",
         "test_the_run_has_its_own_root_where_the_machine_allows_it")),
    ("root-shares-pids", "rewards.py", "_ROOT", '"-i", "-p", "--fork", "sh"', '"-i", "sh"',
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir")),
    ("box-inodes-uncapped", "rewards.py", "_ROOT", "nr_inodes=16k,", "",
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir")),
    # the twenty-third review's signals between runs graded at once: statvfs / sysconf, file locks, the host's /proc
    ("statvfs-left-to-the-program", "rewards.py", "_sandbox_main", '"statvfs", "fstatvfs", "sysconf"', '"sysconf"',
     SIBLINGS),
    ("file-locks-allowed", "rewards.py", "_sandbox_main", '"socket.", "fcntl."', '"socket."',
     SIBLINGS),
    ("pipes-left-to-the-program", "rewards.py", "_sandbox_main", '"getloadavg", "pipe", "pipe2"', '"getloadavg"',
     SIBLINGS),
    ("one-problem-programs-at-once", "rewards.py", "grade", "same.setdefault(json.dumps(", "same.setdefault(i or json.dumps(",
     ids("test_rewards.py", "test_programs_of_one_problem_never_run_at_once")),
    # the twenty-seventh review's wall-clock phase: one problem's programs back to back in a lane
    ("one-problem-programs-back-to-back", "rewards.py", "grade", "key=at.get)", "key=None)",
     ids("test_rewards.py", "test_no_program_starts_right_after_one_of_its_problem")),
    ("a-lane-per-problem", "rewards.py", "grade", "for g in [*same.values()][k::n] for i in g), key=at.get) for k in range(n)]",
     "for i in g)) for g in same.values()]", ids("test_rewards.py", "test_no_program_starts_right_after_one_of_its_problem")),
    # the twenty-fifth review's lookup-cache notes: a dir of the host (its cached failed lookups) in the run's root
    ("root-binds-a-host-dir", "rewards.py", "_root_files", "for p, f in files.items():",
     'for p, f in fstab.write(f"/usr {top}/root/usr none rbind,ro,X-mount.mkdir 0 0\\n") and files.items():', ids("test_rewards.py", "test_every_dir_a_run_can_look_names_up_in_is_its_own")),
    ("root-failure-raises-from-every-run", "rewards.py", "_own_root", "except (OSError, subprocess.CalledProcessError) as e:",
     "except ZeroDivisionError as e:", ids("test_rewards.py", "test_a_root_that_cannot_be_made_leaves_the_runs_in_a_plain_dir_with_one_warning")),
    ("binds-keep-atime", "rewards.py", "_root_files", "none bind,ro,noatime,", "none bind,",
     ids("test_rewards.py", "test_reading_a_file_leaves_no_atime")),
    ("lockf-allowed", "rewards.py", "_sandbox_main", "os.unsetenv os.lockf", "os.unsetenv",
     SIBLINGS),
    ("root-shows-the-host-proc", "rewards.py", "_ROOT", 'X-mount.mkdir box "$R$B" && ',
     'X-mount.mkdir box "$R$B" && mount --rbind -o X-mount.mkdir /proc "$R/proc" && ',
     ids("test_rewards.py", "test_a_run_sees_only_the_system_python_and_its_own_dir")),
    # the twenty-sixth review's notes in the kernel's machine-wide inode counter: /proc, sockets (socketpair, no audit
    # event), C code's sockets (_uuid's to uuidd, glibc's user / group lookups' to nscd), pidfds (numbered by a
    # machine-wide count of processes)
    ("root-mounts-its-own-proc", "rewards.py", "_ROOT", 'X-mount.mkdir box "$R$B" && ',
     'X-mount.mkdir box "$R$B" && mount -t proc -o nosuid,nodev,noexec,X-mount.mkdir proc "$R/proc" && ',
     ids("test_rewards.py", "test_a_listener_cannot_read_a_solvers_answers_in_the_machine_wide_inode_counter",
         "test_no_inode_a_run_can_make_is_numbered_by_a_machine_wide_counter")),
    ("socket-importable", "rewards.py", "_sandbox_main", '"spwd", "_socket", ', '"spwd", ',
     ids("test_rewards.py", "test_a_listener_cannot_read_a_solvers_answers_in_the_machine_wide_inode_counter",
         "test_sockets_are_refused_even_those_with_no_audit_event")),
    ("socket-importable-by-the-hook", "rewards.py", "_sandbox_main", "any(unsafe(part) for part in args[0]",
     'any(unsafe(part) and part != "_socket" for part in args[0]',  # its .so still left out of the root
     ids("test_rewards.py", "test_sockets_are_refused_even_those_with_no_audit_event")),
    ("uuid-importable", "rewards.py", "_sandbox_main", '"_socket", "_uuid", ', '"_socket", ',
     ids("test_rewards.py", "test_sockets_are_refused_even_those_with_no_audit_event")),
    ("user-lookups-importable", "rewards.py", "_sandbox_main", '"_uuid", "pwd", "grp")', '"_uuid")',
     ids("test_rewards.py", "test_sockets_are_refused_even_those_with_no_audit_event")),
    ("grouplist-kept", "rewards.py", "_sandbox_main", '"getgrouplist", "initgroups", ', '',
     ids("test_rewards.py", "test_sockets_are_refused_even_those_with_no_audit_event")),
    ("pidfd-open-kept", "rewards.py", "_sandbox_main", '"pidfd_open",', '',
     ids("test_rewards.py", "test_no_inode_a_run_can_make_is_numbered_by_a_machine_wide_counter")),
    ("work-dir-off-the-command-line", "rewards.py", "run_python", "argv=[work])", "argv=[])",
     ids("test_rewards.py", "test_strays_are_found_by_the_work_dir_on_the_command_line")),
    ("tempfile-refused", "rewards.py", "_sandbox_main", 'inside(p) or p + "/" == work or', "inside(p) or",
     ids("test_rewards.py", "test_a_correct_program_may_use_tempfile")),
    ("judge-runs-assert-messages", "rewards.py", "_judge_main", "soft.body[0].value.args[0].operand = node.test", "soft.body[0] = node",
     ids("test_rewards.py", "test_no_oracle_in_assert_messages_and_no_escape_from_the_run")),
    ("io-cases-stop-at-a-failure", "rewards.py", "code_check", "for case in io_tests]", "for case in io_tests[:1]]",
     ids("test_rewards.py", "test_every_io_case_runs")),
    ("judge-reraises-stopiteration", "rewards.py", "_judge_main", "kind not in (StopIteration,", "kind in (StopIteration,",
     ids("test_rewards.py", "test_a_program_raising_stopiteration_does_not_end_the_tests")),
    ("judge-imports-from-the-cwd", "rewards.py", "run_python", '"-S", "-P", "-c"', '"-S", "-c"',
     ids("test_rewards.py", "test_the_callers_directory_is_not_on_the_judges_path")),
    ("judge-fetches-modules-from-the-program", "rewards.py", "_judge_main", "if name in sys.stdlib_module_names and",
     "if False and", ids("test_rewards.py", "test_a_module_the_tests_use_unimported_is_the_judges")),
    ("campaign-eval-beside-uncapped", "bench/campaign.py", "train_watching", '[cmd[0], "-c", CAPPED, str(BESIDE_MEMORY), *cmd[1:]]',
     "cmd", ids("test_campaign.py", "test_evaluates_while_training")),
    ("campaign-no-resume-after-failure", "bench/campaign.py", "locked_job", "<= begun:", "<= 10**9:",
     ids("test_campaign.py", "test_training_resumes_after_a_failure")),
    ("campaign-resume-without-progress", "bench/campaign.py", "locked_job", "<= begun:", "< 0:",
     ids("test_campaign.py", "test_training_resumes_after_a_failure")),
    ("sandbox-keeps-getloadavg", "rewards.py", "_sandbox_main", '"sysconf", "getloadavg", "pipe"', '"sysconf", "pipe"',
     ids("test_rewards.py", "test_runs_graded_at_once_cannot_signal_to_each_other")),
    ("monitor-infinity-inside-words", "rewards.py", "degenerate", 'r"(?<![a-z])(infinity|infty|oo|nan|inf)(?![a-z])|', 'r"(infinity|infty|oo|nan|inf)|',
     ids("test_rewards.py", "test_the_monitor_flags_infinities_not_unit_words")),
    ("monitor-misses-big-exponents", "rewards.py", "degenerate", r'|(?<=[\d.])e\+?\d{3}|', "|",
     ids("test_rewards.py", "test_the_monitor_flags_infinities_not_unit_words")),
    ("hint-counts-verdicts", "workflows.py", "answer_monitor", '_VERDICT.sub("", t.text)', "t.text",
     ids("test_workflows.py", "test_answer_monitor_hint_answers")),
    ("hint-reads-solvers", "workflows.py", "answer_monitor", 'in ("evaluator", "orchestrator")]',
     'in ("evaluator", "orchestrator", "generator")]', ids("test_workflows.py", "test_answer_monitor_hint_answers")),
    ("monitor-counts-wrong-voters", "workflows.py", "answer_monitor", " and t.correct is not False):", "):",
     ids("test_eval.py", "test_reward_hacking_monitor_in_diagnostics_and_tables")),
    ("campaign-grows-stopped-runs", "bench/campaign.py", "main", "and not failed and not stopped and \\",
     "and not failed and \\", ids("test_campaign.py", "test_grow_extends_the_recorded_runs_until_grow_to")),
    ("campaign-grows-with-force", "bench/campaign.py", "main", 'if a != "--force"]', "if True]",
     ids("test_campaign.py", "test_grow_extends_the_recorded_runs_until_grow_to")),
    ("campaign-transfers-not-recorded", "bench/campaign.py", "build_record",
     '**({"transfers": t} if (t := transfers(run_dir, curve[-1]["step"])) else {}),', "",
     ids("test_campaign.py", "test_transfers_of_a_single_cell")),
    ("campaign-transfer-at-512-tokens", "bench/campaign.py", "locked_job", '"--max-new-tokens", tokens, *flags], env', "*flags], env",
     ids("test_campaign.py", "test_transfers_of_a_single_cell")),
    ("percent-read-both-ways-for-integers", "rewards.py", "math_check", 'getattr(n, "denominator", 1) != 1', "n is not None",
     ids("test_rewards.py", "test_math_issue_false_positives")),
    ("infinity-arithmetic-equals-finite", "rewards.py", "_equal", ' or ("oo" in tp) != ("oo" in tg)', "",
     ids("test_rewards.py", "test_math_issue_false_positives")),
    # units after a slash (the units branch): a word only, never digits or one letter (a variable); no constants
    ("slash-unit-one-letter", "rewards.py", "_drop_words", "(?=[a-zA-Z]{2})", "",
     ids("test_rewards.py", "test_math_issue_false_positives")),
    ("unit-may-hold-digits", "rewards.py", "_drop_words", "r\"(?:[a-zA-Z][a-zA-Z .'/-]*", "r\"(?:\\w[\\w .'/-]*",
     ids("test_rewards.py", "test_math_issue_false_positives")),
    ("leading-zero-splits-a-number", "rewards.py", "_to_sympy", 're.sub(r"(?<![\\d.])0+(?=\\d)", "", _latex_to_sympy(s))',
     '_latex_to_sympy(s)', ids("test_rewards.py", "test_math_issue_false_positives")),
    ("spaced-floor-division-read", "rewards.py", "_REFUSED", r'|/\s*/|\*\s+\*|', "|//|",
     ids("test_rewards.py", "test_math_issue_false_positives")),
    ("hedge-words-case-sensitive", "rewards.py", "_drop_words", "s, re.I)", "s)",
     ids("test_rewards.py", "test_math_issue_false_positives")),
    ("constants-dropped-like-units", "rewards.py", "_drop_words",
     r'|pi|oo|inf|infty|infinity|nan|sqrt|sin|cos|tan|cot|csc|arc\w+|log|ln|exp|erf|tau|phi|gamma"', '"',
     ids("test_rewards.py", "test_math_issue_false_positives")),
    ("campaign-extends-to-as-many-steps", "bench/campaign.py", "main", 'steps <= old.get("steps", steps)',
     'steps < old.get("steps", steps)', ids("test_campaign.py", "test_more_steps_extend_a_recorded_run")),
    ("campaign-extends-without-its-checkpoint", "bench/campaign.py", "main", 'old["steps"] in checkpoint_steps(d) and',
     "", ids("test_campaign.py", "test_more_steps_extend_a_recorded_run")),
    ("campaign-extension-unnamed", "bench/campaign.py", "main", '"extended_from": old and old["steps"]',
     '"extended_from": None', ids("test_campaign.py", "test_more_steps_extend_a_recorded_run")),
]


class MutantError(Exception):
    """A mutant that cannot be applied (its pattern no longer fits the code)."""


def find_function(tree, qualname):
    """The FunctionDef node named `qualname` ("f" or "Class.method"), searched through the whole file, or the
    module-level assignment of that name (code kept in a string: rewards.py's sandbox harness, sympy helper)."""
    def walk(node, prefix):
        if node is tree:
            yield from (n for n in node.body if isinstance(n, ast.Assign) and
                        [getattr(t, "id", None) for t in n.targets] == [qualname])
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if name == qualname and not isinstance(child, ast.ClassDef):
                    yield child
                yield from walk(child, name + ".")
    found = list(walk(tree, ""))
    return found[0] if len(found) == 1 else (None if not found else "many")


def mutate(source, name, file, function, pattern, replacement):
    """`source` with `pattern` replaced inside `function`; MutantError when it does not fit exactly once."""
    node = find_function(ast.parse(source), function)
    if node is None or node == "many":
        raise MutantError(f"{name}: function {function} {'not found' if node is None else 'defined twice'} in {file}")
    lines = source.splitlines(keepends=True)
    start = sum(len(line) for line in lines[:node.lineno - 1])
    end = sum(len(line) for line in lines[:node.end_lineno])
    body = source[start:end]
    count = body.count(pattern)
    if count != 1:
        raise MutantError(f"{name}: pattern {pattern!r} found {count} times in {file}:{function} (need exactly 1); "
                          f"update it in tests/mutants.py")
    mutated = source[:start] + body.replace(pattern, replacement) + source[end:]
    try:
        ast.parse(mutated)
    except SyntaxError as e:
        raise MutantError(f"{name}: the replacement makes {file} invalid Python ({e})") from None
    return mutated


def copy_repo(dest):
    """The top-level *.py files, tests/ and bench/ (no data, runs or caches): what the tests import and read."""
    for f in os.listdir(ROOT):
        if f.endswith(".py"):
            shutil.copy2(os.path.join(ROOT, f), dest)
    for folder in ("tests", "bench"):
        shutil.copytree(os.path.join(ROOT, folder), os.path.join(dest, folder),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))


def run_tests(dest, tests, timeout):
    """(passed, first failing test or None, seconds). Bytecode caching is off: a mutated file may keep
    its size and modification second, so a cached .pyc could silently stand in for it."""
    # one thread: on a shared 2-core machine two-thread OpenMP runs slow down several-fold as soon as
    # another process competes (test_train.py: 50 s with 2 threads vs 21 s with 1, measured under load)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *tests]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timeout after {timeout} s", time.monotonic() - t0
    seconds = time.monotonic() - t0
    if p.returncode == 0:
        return True, None, seconds
    failed = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", p.stdout, re.M)  # a node id may hold spaces
    tail = (p.stdout.strip() + "\n" + p.stderr.strip()).strip().replace("\n", " | ")[-300:]
    return False, failed.group(1) if failed else f"pytest exit {p.returncode}: {tail}", seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", default=[], help="comma list of mutant names (repeatable)")
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    p.add_argument("--timeout", type=int, default=300, help="seconds per pytest run")
    p.add_argument("--no-baseline", action="store_true", help="skip checking that the tests pass unmutated")
    args = p.parse_args(argv)
    names = [n for item in args.only for n in item.split(",") if n]
    if unknown := [n for n in names if n not in {m[0] for m in MUTANTS}]:
        p.error(f"unknown mutant(s) {unknown}; see --list")
    chosen = [m for m in MUTANTS if not names or m[0] in names]
    sources = {}
    if args.list:  # also checks that every pattern still fits its function
        for name, file, function, pattern, replacement, tests in chosen:
            if file not in sources:
                with open(os.path.join(ROOT, file)) as f:
                    sources[file] = f.read()
            try:
                mutate(sources[file], name, file, function, pattern, replacement)
                fits = ""
            except MutantError as e:
                fits = f"\n    ERROR {e}"
            print(f"{name:<38} {file}:{function}\n    {pattern!r} -> {replacement!r}\n    tests: {' '.join(tests)}{fits}")
        return 0
    if not args.no_baseline:
        tests = list(dict.fromkeys(t for m in chosen for t in m[5]))
        with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
            copy_repo(tmp)
            ok, failed, seconds = run_tests(tmp, tests, args.timeout * 2)
        if not ok:
            print(f"baseline: the tests fail WITHOUT any mutation ({failed}); fix that first")
            return 2
        print(f"baseline: {len(tests)} test files/ids pass unmutated ({seconds:.0f} s)", flush=True)
    killed, t_start = 0, time.monotonic()
    for k, (name, file, function, pattern, replacement, tests) in enumerate(chosen, 1):
        head = f"[{k:>2}/{len(chosen)}] {name:<38}"
        if file not in sources:
            with open(os.path.join(ROOT, file)) as f:
                sources[file] = f.read()
        try:
            mutated = mutate(sources[file], name, file, function, pattern, replacement)
        except MutantError as e:
            print(f"{head} ERROR {e}", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
            copy_repo(tmp)
            with open(os.path.join(tmp, file), "w") as f:
                f.write(mutated)
            ok, failed, seconds = run_tests(tmp, tests, args.timeout)
        if ok:
            print(f"{head} SURVIVED ({file}:{function}; {seconds:.0f} s)", flush=True)
        else:
            killed += 1
            print(f"{head} killed by {failed} ({seconds:.0f} s)", flush=True)
    print(f"({time.monotonic() - t_start:.0f} s for the mutants)")
    print(f"killed {killed} of {len(chosen)} mutants")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
