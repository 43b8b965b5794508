"""Weights in huge pages against 4 KiB pages (``loom.runtime.host_memory``): batch-1 decode, A/B in fresh processes.

``python -m benchmarks.huge_pages [MODEL] [METHOD] [ROUNDS]`` (default Qwen2.5-Coder-1.5B, int4, 4 rounds):
each round starts one process with ``LOOM_HUGE_PAGES=0`` and one with it on, in alternating order (the
setting is read at load, so a process holds one); each process decodes four 128-token greedy requests
after a 32-token random prompt at 2 threads and reports the median of the last three (tokens/s from the
first token to the last), its ``AnonHugePages`` and its peak RSS.  Prints every process, the medians, their
ratio and the load average.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, random, re, statistics, sys, torch
torch.set_num_threads(2)
from loom.runtime import LLM, SamplingParams
llm = LLM(sys.argv[1], quantization=sys.argv[2], max_model_len=2048, max_num_seqs=1, enable_prefix_caching=False)
rng, rates = random.Random(0), []
params = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
for _ in range(4):
    out = llm.generate(prompt_token_ids=[[rng.randrange(100, 20000) for _ in range(32)]], sampling_params=params,
                       use_tqdm=False)[0]
    rates.append((len(out.token_times) - 1) / (out.token_times[-1] - out.token_times[0]))
smaps, status = open("/proc/self/smaps_rollup").read(), open("/proc/self/status").read()
print(json.dumps({"tok_s": statistics.median(rates[1:]),
                  "huge_mib": int(re.search(r"AnonHugePages:\s+(\d+)", smaps).group(1)) // 1024,
                  "peak_mib": int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) // 1024}))
"""


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b-instruct"
    method = sys.argv[2] if len(sys.argv) > 2 else "int4"
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    results: dict[str, list[dict]] = {"4 KiB pages": [], "huge pages": []}
    for r in range(rounds):
        order = ["0", "1"] if r % 2 == 0 else ["1", "0"]
        for flag in order:
            env = {**os.environ, "LOOM_HUGE_PAGES": flag, "OMP_NUM_THREADS": "2"}
            out = subprocess.run([sys.executable, "-c", CHILD, model, method], env=env, check=True,
                                 capture_output=True, text=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            side = "huge pages" if flag == "1" else "4 KiB pages"
            results[side].append(res)
            print(f"round {r + 1} {side:>11}: {res['tok_s']:.1f} tok/s, AnonHugePages {res['huge_mib']} MiB, "
                  f"peak RSS {res['peak_mib']} MiB", flush=True)
    med = {side: statistics.median(x["tok_s"] for x in rs) for side, rs in results.items()}
    print(f"{model} {method}, batch 1, 2 threads, medians of {rounds}: 4 KiB pages {med['4 KiB pages']:.1f} tok/s, "
          f"huge pages {med['huge pages']:.1f} tok/s, ratio {med['huge pages'] / med['4 KiB pages']:.2f}; "
          f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
