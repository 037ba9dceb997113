"""Issue 15: what PyTorch's cuDNN attention costs on shapes the process has not seen, and what whole steps do without it.

cuDNN's fused attention builds an execution plan for every shape it has not seen (public reports: ~0.4 s on an H20,
0.44 s forward and 0.55 s backward on a B200), and PyTorch may pick it first on Hopper. This project often meets
shapes a process has not seen: the sampler's decode attention is masked (`decode_case`: SDPA as the sampler called it
until the twenty-third session; now bench/sdpa.py's `sdpa_attention`), its batch size
after a compaction is whatever number of rows is still running, and its attended length follows each call's prompts;
the update's forwards (causal, no mask) have a padded length per micro-batch. Short-output calls costing seconds
(`docs/benchmarks.md`: an evaluator call writing 5 tokens per row took 2.5 s) would fit that. This script measures
it; it changes nothing in the project.

    python bench/sdpa.py probe [--dims 14,2,64]   # SDPA on new shapes, cuDNN allowed vs not: first call, repeat, kernel
    python bench/sdpa.py decode [--dims 14,2,64]  # a decode step's attention, SDPA vs the sampler's, in a graph
    python bench/sdpa.py on|off SCRIPT [ARGS...]  # run SCRIPT (train.py, bench/sampler.py, ...) as __main__ with
                                                  # cuDNN attention allowed (PyTorch's default, before issue 15) or
                                                  # disabled (the project's default since: models.load_model), also
                                                  # after SCRIPT loads a model; in this process only, not in
                                                  # processes SCRIPT starts

`probe` times, for each backend setting and on shapes new to the process: the masked decode attention the sampler
runs (B rows, the query heads folded per key/value head, a bool mask over L cached slots, L a multiple of 128 as the
sampler's buckets, keys and values as slices of a longer buffer) and the causal forward + backward of the update (B
rows of L tokens, key/value heads not repeated: transformers passes enable_gqa when there is no mask). Two rounds,
the settings in opposite orders, each setting of each round with the same lengths and batch sizes one row larger than
the last's (new shapes, nearly the same work). For each: the mean first call, the mean second call, and the kernel a
profiler saw at the first shape. The A/B of whole steps: `python bench/sdpa.py on train.py ...` and `... off train.py ...` one after the other, each alone
on the GPU, then `python bench/steps.py RUN_ON RUN_OFF`.
`decode` times the decode attention (one query per row) as SDPA (`sdpa_attention`, the sampler's until the
twenty-third session) and as the sampler's two matmuls (`sampler.gqa_attention`, written after the twenty-first
session saw long-prompt stages decode ~3 ms per step slower at the same row count): 24 calls (one per layer of the
0.5B model) captured in one CUDA graph and replayed, at 8 row counts (up to 768: an evaluation's voters or workers) x 5 attended lengths, with each one's largest
difference from the same attention in fp32. `python bench/breakdown.py --attention sdpa` and bench/sampler.py's
contender `ours, SDPA attention` run whole sampler calls with SDPA.
Left out: the CPU (no cuDNN there: `probe` and `decode` say so and stop), other attention libraries.
"""
import os
import runpy
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def attention_kernel(fn):
    """The name of the longest-running GPU kernel of one call whose name looks like attention (or the longest)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -(getattr(e, "device_time_total", 0) or e.cpu_time_total))
    pick = [e for e in events if any(w in e.key.lower() for w in ("attn", "attention", "fmha", "flash", "cudnn", "sdpa"))]
    return (pick or events)[0].key[:90] if pick or events else "no kernel seen"


def decode_case(B, L, H, Hkv, D):
    """SDPA's masked decode attention at B rows and L attended slots, as the sampler called it until the twenty-third
    session (sdpa_attention's call)."""
    g = H // Hkv
    q = torch.randn(B, Hkv, g, D, device="cuda", dtype=torch.bfloat16)
    buf = torch.randn(2, B, Hkv, L + 256, D, device="cuda", dtype=torch.bfloat16)  # the cache is longer than read
    k, v = buf[0][:, :, :L], buf[1][:, :, :L]
    mask = (torch.rand(B, 1, 1, L, device="cuda") > 0.1).expand(B, 1, g, L)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=D ** -0.5)


def train_case(B, L, H, Hkv, D):
    """The update's attention at B rows of L tokens: causal, no mask, forward and backward; the key/value heads are
    not repeated (with no mask transformers' SDPA attention passes enable_gqa)."""
    q = torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()


def sdpa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The contender for `sampler.gqa_attention` (same arguments and result), and the sampler's decode attention until
    the twenty-third session: the G = H / Hkv query heads of one key/value head folded into the query axis, (B, Hkv,
    G*q, D), against the mask repeated G times (a view when q = 1), so SDPA reads each cached head once and copies
    nothing. With cuDNN attention off it takes the memory-efficient kernel on the H200. Seen there (torch 2.11) in a
    process where vLLM's engine had started: SDPA with enable_gqa and a mask took the math path, which copies the cache
    per query head and computes in fp32 (45 ms per decode step at 512 rows, 7.3 ms folded)."""
    B, H, q, D = query.shape
    g = H // key.shape[1]
    mask = attention_mask[:, :, None].expand(B, 1, g, q, attention_mask.shape[-1]).reshape(B, 1, g * q, -1)
    out = F.scaled_dot_product_attention(query.reshape(B, H // g, g * q, D), key, value, attn_mask=mask, scale=scaling)
    return out.reshape(B, H, q, D).transpose(1, 2), None  # a view where SDPA's layout allows it


def decode_compare(H, Hkv, D, rows=(8, 32, 64, 128, 256, 336, 512, 768), lengths=(256, 512, 1024, 1536, 2048),
                   layers=24):
    """GPU time of a decode step's attention (`layers` calls, replayed as one CUDA graph), SDPA as the sampler calls
    it until the twenty-third session (sdpa_attention) against sampler.gqa_attention's two matmuls, at each row count
    and attended length; and their largest difference from fp32."""
    if not torch.cuda.is_available():
        print("decode: no CUDA device here; nothing measured")
        return
    import sampler
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)  # as in training (models.load_model); restored at the end
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, heads {H} / kv heads {Hkv} / head dim {D}, "
          f"cuDNN attention disabled as in training; ms per decode step's attention ({layers} calls)")
    print(f"{'rows':>5s} {'slots':>6s} {'SDPA':>8s} {'matmul':>8s} {'SDPA/matmul':>12s} {'max |diff| SDPA':>16s} "
          f"{'max |diff| matmul':>18s}")
    try:  # one small call first: a PyTorch without bmm's out_dtype says so here, in one line
        q = torch.randn(2, H, 1, D, device="cuda", dtype=torch.bfloat16)
        kv = torch.randn(2, Hkv, 16, D, device="cuda", dtype=torch.bfloat16)
        sampler.gqa_attention(None, q, kv, kv, torch.ones(2, 1, 1, 16, dtype=torch.bool, device="cuda"), D ** -0.5)
    except (RuntimeError, TypeError) as e:
        print(f"decode: sampler.gqa_attention cannot run here ({str(e).splitlines()[0]}); nothing measured")
        torch.backends.cuda.enable_cudnn_sdp(was)
        return
    for B in rows:
        for L in lengths:
            q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
            # a cache per layer, as in the model (one shared cache would be read from L2 at the small sizes)
            buf = torch.randn(layers, 2, B, Hkv, L + 128, D, device="cuda", dtype=torch.bfloat16)
            k, v = buf[:, 0, :, :, :L], buf[:, 1, :, :, :L]
            mask = torch.rand(B, 1, 1, L, device="cuda") > 0.2
            mask[:, :, :, 0] = True
            ref = sampler.gqa_attention(None, q.float(), k[0].float(), v[0].float(), mask, D ** -0.5)[0]
            times, diffs = [], []
            for fn in (sdpa_attention, sampler.gqa_attention):
                call = lambda: [fn(None, q, k[i], v[i], mask, D ** -0.5)[0] for i in range(layers)]
                diffs.append((call()[0].float() - ref).abs().max().item())
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    call()  # warm-up off the default stream, as before a capture
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    call()
                graph.replay()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(20):
                    graph.replay()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 20)
            print(f"{B:5d} {L:6d} {times[0]:8.3f} {times[1]:8.3f} {times[0] / times[1]:11.2f}x {diffs[0]:16.2e} "
                  f"{diffs[1]:18.2e}", flush=True)
            del buf, graph
    torch.backends.cuda.enable_cudnn_sdp(was)


def probe(H, Hkv, D):
    if not torch.cuda.is_available():
        print("probe: no CUDA device here (cuDNN attention is a GPU backend); nothing measured")
        return
    was = torch.backends.cuda.cudnn_sdp_enabled()  # restored at the end (load_model turns it off)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}, "
          f"heads {H} / kv heads {Hkv} / head dim {D}")
    decode_shapes = [(128, 640), (97, 768), (61, 896), (45, 1024), (23, 1152), (12, 640), (5, 768), (3, 896), (1, 1024)]
    train_shapes = [(4, 1999), (6, 1501), (9, 1203), (13, 877), (17, 701), (24, 509), (33, 397), (48, 263)]
    for name, case, shapes in (("decode (masked)", decode_case, decode_shapes),
                               ("update (causal, fwd + bwd)", train_case, train_shapes)):
        for more, allowed in enumerate((True, False, False, True)):  # B + more: shapes no earlier setting met
            torch.backends.cuda.enable_cudnn_sdp(allowed)
            timed(case(2 + more, 100, H, Hkv, D))  # lazy initialisation stays out of the timings
            first, second, fns = [], [], [case(B + more, L, H, Hkv, D) for B, L in shapes]
            for fn in fns:
                first.append(timed(fn))
                second.append(timed(fn))
            print(f"{name:28s} cuDNN {'allowed ' if allowed else 'disabled'}: first call {statistics.mean(first):8.2f} ms, "
                  f"repeat {statistics.mean(second):7.3f} ms (means over {len(shapes)} new shapes; first calls "
                  f"{min(first):.1f}-{max(first):.1f} ms); kernel at the first shape: {attention_kernel(fns[0])}")
    torch.backends.cuda.enable_cudnn_sdp(was)
    # set on the first SDPA call: recent PyTorch puts cuDNN first on sm90 / sm100 (unless TORCH_CUDNN_SDPA_DEPRIORITIZED)
    print(f"SDPA priority order after these calls: {torch._C._get_sdp_priority_order()} (0 math, 1 flash, "
          "2 efficient, 3 cuDNN)")


def main(argv):
    if argv[:1] in (["decode"], ["probe"]):
        dims = argv[argv.index("--dims") + 1] if "--dims" in argv else "14,2,64"  # Qwen2.5-0.5B; 1.5B: 12,2,128
        (decode_compare if argv[0] == "decode" else probe)(*map(int, dims.split(",")))
    elif len(argv) >= 2 and argv[0] in ("on", "off"):
        import models  # load_model turns cuDNN attention off (issue 15): set it again after every load
        load, flag = models.load_model, argv[0] == "on"
        models.load_model = lambda *a, **kw: (load(*a, **kw), torch.backends.cuda.enable_cudnn_sdp(flag))[0]
        torch.backends.cuda.enable_cudnn_sdp(flag)
        print(f"bench/sdpa.py: cuDNN attention {'allowed' if argv[0] == 'on' else 'disabled'} for {argv[1]}", flush=True)
        sys.argv = argv[1:]
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[1])))
        runpy.run_path(argv[1], run_name="__main__")
    else:
        sys.exit("usage: python bench/sdpa.py probe|decode [--dims H,HKV,D] | on|off SCRIPT [ARGS...]")


if __name__ == "__main__":
    main(sys.argv[1:])
