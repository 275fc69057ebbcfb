"""Check the engine on a GPU: `python -m bench.gpu_check` (or `make bench-gpu`).

    python -m bench.gpu_check [--device cuda|cpu] [--no-bench] [--sections abcdefg]

1. Logits: our model against transformers' `LlamaForCausalLM` holding the same weights
   (`bench.engine.hf_twin`), in each dtype the device runs (cuda: fp32, bf16, fp16; cpu:
   fp32, bf16), twice: whole sequences (no cache) and token by token through a KV cache
   (the speculative decoder's forward pass). Prints the max abs difference against a
   tolerance per dtype and whether the greedy argmax agrees.
2. The engine bench, `python -m bench.engine --quick --device <device>` (sections a-g).

Exit status: 0 all passed; 1 a logits mismatch or a failed bench section; 2 no CUDA device
(pass `--device cpu` to run the same checks on the CPU). `--perturb STD` adds noise to our
copy of the weights only: a self-test that the check does fail. Meant to finish within
5 minutes on one GPU.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from dataclasses import dataclass

import torch

from lab.engine.attention import DenseAttention
from lab.engine.model import LlamaModel
from lab.labs.common import WEIGHTS, bundled_model, heldout_ids, random_model

NO_CUDA_EXIT = 2
DTYPES = {"cuda": ("float32", "bfloat16", "float16"), "cpu": ("float32", "bfloat16")}
# Max abs logit difference allowed vs transformers: the two compute the same function with
# other kernels and summation orders, so the gap scales with the dtype's precision (the
# bundled target's logits reach ~20; bf16 measured 0.22 on CPU, fp32 2e-5). fp32 is the
# sharp check of the arithmetic; bf16/fp16 catch casts, overflow and dtype-specific kernels.
TOLERANCE = {"float32": 1e-3, "bfloat16": 0.5, "float16": 0.1}
SEQ_LENS = (48, 17, 33)
DECODE_STEPS = 8  # tokens fed one at a time through the KV cache, at the end of each sequence


@dataclass
class LogitsCheck:
    """One dtype x path comparison. argmax_agree: fraction of positions with HF's argmax;
    decisive_disagree: positions where they differ although HF's top-2 margin exceeds the
    tolerance (a real error, not a near-tie)."""

    dtype: str
    path: str
    max_abs_diff: float
    tolerance: float
    argmax_agree: float
    decisive_disagree: int

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance and self.decisive_disagree == 0


def load_target(dtype: torch.dtype, device: str) -> tuple[LlamaModel, str]:
    """The bundled target (a private copy) or a random model of its shape, and which."""
    if (WEIGHTS / "target" / "model.safetensors").exists():
        return copy.deepcopy(bundled_model("target", dtype, device)), "bundled target"
    from lab.engine.training.models import target_config  # the bundled target's shape

    shape = target_config(3072).to_dict()
    return random_model(shape, device, dtype), "random model of the target's shape"


def check_sequences(vocab: int, device: str) -> list[torch.Tensor]:
    """Held-out text when this machine has it (realistic margins), else seeded random ids."""
    text = heldout_ids()
    if text is not None and len(text) >= sum(SEQ_LENS):
        starts = [sum(SEQ_LENS[:i]) for i in range(len(SEQ_LENS))]
        return [text[s : s + n].to(device) for s, n in zip(starts, SEQ_LENS, strict=True)]
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, vocab, (n,), generator=g).to(device) for n in SEQ_LENS]


def ours_dense(model: LlamaModel, seqs: list[torch.Tensor]) -> torch.Tensor:
    """Logits of every position, all sequences in one flattened no-cache pass."""
    ids = torch.cat(seqs)
    positions = torch.cat([torch.arange(len(s), device=ids.device) for s in seqs])
    hidden = model(ids, positions, DenseAttention([len(s) for s in seqs]))
    return model.logits(hidden)


def ours_cached(model: LlamaModel, seqs: list[torch.Tensor]) -> torch.Tensor:
    """Logits of each sequence's last DECODE_STEPS positions: prefill the rest, then one token
    per pass through the KV cache, all sequences batched."""
    from lab.engine.speculative import SpeculativeDecoder, forward_rows

    kv = SpeculativeDecoder(model, model, k=0, max_batch=len(seqs), max_model_len=128)
    kv = kv.target_pool.kv
    slots = list(range(len(seqs)))
    prefix = [s[:-DECODE_STEPS].tolist() for s in seqs]
    forward_rows(model, kv, slots, [0] * len(seqs), prefix, [1] * len(seqs))
    steps = []
    for j in range(DECODE_STEPS):
        cached = [len(p) + j for p in prefix]
        new = [[int(s[len(p) + j])] for s, p in zip(seqs, prefix, strict=True)]
        steps.append(forward_rows(model, kv, slots, cached, new, [1] * len(seqs)))
    return torch.stack(steps, dim=1).flatten(0, 1)  # [seq, step] order


def hf_logits(hf, seqs: list[torch.Tensor], last: int | None = None) -> torch.Tensor:
    rows = [hf(s[None]).logits[0] for s in seqs]
    return torch.cat([r[-last:] if last else r for r in rows])


def compare(dtype: str, path: str, ours: torch.Tensor, theirs: torch.Tensor) -> LogitsCheck:
    ours, theirs = ours.float(), theirs.float()
    tol = TOLERANCE[dtype]
    top2 = theirs.topk(2, dim=-1).values
    decisive = (top2[:, 0] - top2[:, 1]) > 2 * tol
    differ = ours.argmax(-1) != theirs.argmax(-1)
    return LogitsCheck(
        dtype,
        path,
        (ours - theirs).abs().max().item(),
        tol,
        1 - differ.float().mean().item(),
        int((differ & decisive).sum()),
    )


def perturb(model: LlamaModel, std: float) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_((torch.randn(p.shape, generator=g) * std).to(p.device, p.dtype))


def logits_checks(device: str, perturb_std: float = 0.0) -> tuple[list[LogitsCheck], str]:
    """Every dtype x path comparison on `device`, and which model was used."""
    from bench.engine import hf_twin

    checks, label = [], ""
    for name in DTYPES[torch.device(device).type]:
        model, label = load_target(getattr(torch, name), device)
        hf = hf_twin(model)  # before any perturbation: HF keeps the true weights
        if perturb_std:
            perturb(model, perturb_std)
        seqs = check_sequences(model.config.vocab_size, device)
        with torch.inference_mode():
            checks.append(compare(name, "whole sequences", ours_dense(model, seqs),
                                  hf_logits(hf, seqs)))  # fmt: skip
            checks.append(compare(name, "KV-cached decode", ours_cached(model, seqs),
                                  hf_logits(hf, seqs, DECODE_STEPS)))  # fmt: skip
        del model, hf
    return checks, label


def report(checks: list[LogitsCheck], label: str, device: str) -> str:
    from bench.engine import table

    head = ["dtype", "path", "max abs diff", "tolerance", "argmax agrees", "decisive flips",
            "result"]  # fmt: skip
    rows = [[c.dtype, c.path, f"{c.max_abs_diff:.2e}", f"{c.tolerance:g}",
             f"{100 * c.argmax_agree:.1f}%", c.decisive_disagree,
             "ok" if c.passed else "**MISMATCH**"] for c in checks]  # fmt: skip
    return (
        f"{table(head, rows)}\n\nOurs vs transformers LlamaForCausalLM with the same weights "
        f"({label}) on {device}: {len(SEQ_LENS)} sequences of {', '.join(map(str, SEQ_LENS))} "
        f"tokens; the cached path prefills all but the last {DECODE_STEPS} tokens and feeds "
        "those one per pass. 'decisive flips': argmax differs where HF's top-2 margin is more "
        "than twice the tolerance."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--no-bench", action="store_true", help="the logits check only")
    parser.add_argument("--sections", default="abcdefg", help="bench sections to run")
    parser.add_argument("--perturb", type=float, default=0.0, help="self-test: noise std")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print(
            f"No CUDA device here (torch {torch.__version__}, CUDA build: "
            f"{torch.version.cuda or 'none'}): nothing was checked. Run this on a GPU machine, "
            "or pass --device cpu to run the same checks on the CPU."
        )
        return NO_CUDA_EXIT
    started = time.perf_counter()
    from lab.labs.common import device_name

    print(
        f"# python -m bench.gpu_check on {device_name(args.device)}\n\n### logits vs transformers\n"
    )
    checks, label = logits_checks(args.device, args.perturb)
    print(report(checks, label, args.device), flush=True)
    failed_sections = 0
    if not args.no_bench:
        from bench.engine import main as engine_bench

        bench_args = ["--quick", "--device", args.device, "--sections", args.sections]
        failed_sections = engine_bench(bench_args) or 0
    mismatches = [c for c in checks if not c.passed]
    print(f"\ngpu_check: {len(checks) - len(mismatches)}/{len(checks)} logits checks passed; "
          f"{failed_sections} bench sections failed; {time.perf_counter() - started:.0f} s.")  # fmt: skip
    return 1 if mismatches or failed_sections else 0


if __name__ == "__main__":
    sys.exit(main())
